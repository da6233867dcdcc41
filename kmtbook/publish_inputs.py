"""What the publisher (:mod:`kmtbook.publish`) takes in and refuses: version names, what a build says it
is (its ``CITATION.cff`` and ``switcher.json``), the files that may enter the site (plain files and
folders only: no link is followed, nothing from outside the build enters) and a site it may change.
Standard library only, as :mod:`kmtbook.publish` is."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

VERSION = re.compile(r"v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")
"""A release's name: ``v`` and the package version (``vX.Y.Z``)."""

DEV = "dev"
"""The build of the main branch: listed in the switcher, never a release."""

URL_SETTING = "KMT_BOOK_URL"
"""The build setting of the site's address (:data:`kmtbook.citation.BOOK_URL_VARIABLE`)."""

VERSION_SETTING = "KMT_BOOK_VERSION"
"""The build setting of the site's folder a build is for (:data:`kmtbook.citation.BOOK_VERSION_VARIABLE`)."""

ARCHIVE_PREFIX = "kmt-book-html-"
BANNER_START = "<!-- kmt-version-banner -->"
BANNER_END = "<!-- /kmt-version-banner -->"
SITE_FILES = ("index.html", "switcher.json", ".nojekyll")
"""The files at the root of a site besides its version folders (all written by :func:`publish`)."""

STAGING_PREFIX = ".publish-"
"""The hidden folder inside the site in which a change is prepared before it is put in place."""


class PublishError(ValueError):
    """A version name, folder or archive that cannot be published (the message names it)."""


def check_version(name: str) -> str:
    """``name`` if it names a version of the site (``vX.Y.Z`` or ``dev``); a :class:`PublishError` otherwise."""
    if name == DEV or VERSION.fullmatch(name):
        return name
    raise PublishError(f"--version {name!r} is not a version of the book: give vX.Y.Z (the package version "
                       f"with a leading v, e.g. v0.1.0) or {DEV!r}")


def release_key(name: str) -> tuple[int, int, int]:
    """The order of releases: by their numbers (v0.10.0 after v0.9.0)."""
    match = VERSION.fullmatch(name)
    if match is None:
        raise PublishError(f"{name!r} is not a release (vX.Y.Z)")
    return int(match[1]), int(match[2]), int(match[3])


def _is_version(name: str) -> bool:
    return name == DEV or VERSION.fullmatch(name) is not None


def versions_in(site: Path) -> tuple[list[str], bool]:
    """The releases in ``site``, newest first, and whether it holds ``dev``."""
    names = [p.name for p in site.iterdir() if p.is_dir() and not p.is_symlink()] if site.is_dir() else []
    return _ordered(names)


def _ordered(names: Sequence[str]) -> tuple[list[str], bool]:
    releases = sorted((n for n in names if VERSION.fullmatch(n)), key=release_key, reverse=True)
    return releases, DEV in names


# --------------------------------------------------------------------------- what a build is


@dataclass(frozen=True)
class BuildRecord:
    """What a build of the book says about itself (written by :mod:`kmtbook.sphinx_ext`)."""

    version: str | None  # the package version (CITATION.cff's version)
    slot: str | None  # the site's folder it was built for, vX.Y.Z or dev (switcher.json, KMT_BOOK_VERSION)
    url: str | None  # its address, <site>/<slot>/ (CITATION.cff's url; KMT_BOOK_URL), None when built without

    @property
    def site(self) -> str | None:
        """The site's address the build was made for (``KMT_BOOK_URL``), without the final "/"."""
        if self.url is None or self.slot is None:
            return None
        end = f"/{self.slot}/"
        return self.url[:-len(end)] if self.url.endswith(end) else self.url.rstrip("/")


def _yaml_scalar(text: str, key: str) -> str | None:
    """The value of a top-level ``key: value`` line of the YAML ``text`` (as yaml.safe_dump writes it)."""
    match = re.search(rf"^{re.escape(key)}:[ \t]*(\S.*?)[ \t]*$", text, re.M)
    if match is None:
        return None
    value = match[1]
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            return str(json.loads(value))
        except ValueError:
            return value[1:-1]
    return value


def read_build(build_html: Path) -> BuildRecord:
    """What the build in ``build_html`` records: the version and address of its ``CITATION.cff`` and the
    folder of its ``switcher.json`` (a list of one version, the one the build was made for)."""
    version = url = slot = None
    cff = build_html / "CITATION.cff"
    if cff.is_file():
        text = cff.read_text(encoding="utf-8", errors="replace")
        version, url = _yaml_scalar(text, "version"), _yaml_scalar(text, "url")
    switcher = build_html / "switcher.json"
    if switcher.is_file():
        try:
            entries = json.loads(switcher.read_text(encoding="utf-8"))
        except ValueError:
            entries = None
        if isinstance(entries, list) and len(entries) == 1 and isinstance(entries[0], dict):
            slot = str(entries[0].get("version")) if entries[0].get("version") else None
    return BuildRecord(version=version, slot=slot, url=url)


def _address(address: str | None) -> str | None:
    """``--address`` as compared: without spaces and the final "/"; empty is none."""
    address = (address or "").strip().rstrip("/")
    return address or None


def check_build(record: BuildRecord, where: str, version: str, address: str | None, *,
                check_address: bool = True) -> None:
    """Refuse to publish the build described by ``record`` (found at ``where``) as ``version`` of the site at
    ``address`` unless it was built for exactly that; the message names the build setting to use."""
    if record.version is None or record.slot is None:
        missing = "CITATION.cff with a version" if record.version is None else "switcher.json naming its version"
        raise PublishError(f"{where}: the build records no version (no {missing} at its root): give the HTML "
                           "folder of a book build (jupyter-book with kmtbook.sphinx_ext, as `nox -s book` runs it)")
    release = f"v{record.version}"
    if version != DEV and version != release:
        raise PublishError(f"{where} is a build of version {record.version}, not {version[1:]}: publish it as "
                           f"{release} or {DEV} (built with {VERSION_SETTING}={release} or unset), or build "
                           f"{version} from its tag")
    if record.slot != version:
        made = f"{VERSION_SETTING} unset" if record.slot == DEV else f"{VERSION_SETTING}={record.slot}"
        wanted = f"{VERSION_SETTING} unset (or {DEV})" if version == DEV else f"{VERSION_SETTING}={version}"
        raise PublishError(f"{where} was built for the folder {record.slot} ({made}): its pages cite that "
                           f"folder and its version menu marks it, so it is not published as {version}; "
                           f"build it again with {wanted}")
    if not check_address:
        return
    address = _address(address)
    if address is not None and record.site is None:
        raise PublishError(f"{where} was built without the site's address ({URL_SETTING} unset): its pages "
                           f"cite no address, so it is not published at --address {address}; build it again "
                           f"with {URL_SETTING}={address}")
    if address is None and record.site is not None:
        raise PublishError(f"{where} was built for the address {record.site} ({URL_SETTING}={record.site}): "
                           f"give --address {record.site}, which the site's version list needs, or build it "
                           f"again with {URL_SETTING} unset")
    if address is not None and record.site != address:
        raise PublishError(f"{where} was built for the address {record.site} ({URL_SETTING}={record.site}), not "
                           f"--address {address}: build it again with {URL_SETTING}={address}")


# --------------------------------------------------------------------------- what enters the site


def _raise(err: OSError) -> NoReturn:
    raise err


def _refuse_odd(path: Path, info: os.stat_result, where: str) -> None:
    """Refuse a link, device, pipe or socket: only plain files and folders are published."""
    if stat.S_ISLNK(info.st_mode):
        raise PublishError(f"{where}: {path} is a link (to {os.readlink(path)}); links are never published "
                           "or followed, so that nothing from outside the build enters the site: put the file "
                           "itself there, or remove it")
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        raise PublishError(f"{where}: {path} is not a plain file or folder (a device, pipe or socket): "
                           "remove it")


def _walk(root: Path, where: str, visit: Callable[[Path, Path, os.stat_result], None]) -> None:
    """Call ``visit(path, path relative to root, lstat)`` on everything under ``root``, parents first,
    refusing links (never followed), devices, pipes and sockets, and hard links to files outside ``root``."""
    names: dict[tuple[int, int], list] = {}  # a file with several names: [names in all, names seen, a path]
    for folder, dirs, files in os.walk(root, onerror=_raise):
        for name in sorted(dirs) + sorted(files):
            path = Path(folder, name)
            info = os.lstat(path)
            _refuse_odd(path, info, where)
            if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                names.setdefault((info.st_dev, info.st_ino), [info.st_nlink, 0, path])[1] += 1
            visit(path, path.relative_to(root), info)
    for total, seen, path in names.values():
        if seen < total:
            raise PublishError(f"{where}: {path} is a hard link to a file outside it ({total} names, {seen} of "
                               "them inside): put a copy of the file there instead")


def check_tree(root: Path, where: str) -> None:
    """Refuse ``root`` if it holds a link, a device, a pipe, a socket or a hard link to a file outside it."""
    _walk(root, where, lambda path, inside, info: None)


def _copy_file(source: Path, target: Path, info: os.stat_result, where: str) -> None:
    """Copy one plain file, opened without following a link (and checked to be the file first seen)."""
    fd = os.open(source, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as src:
        now = os.fstat(src.fileno())
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
            raise PublishError(f"{where}: {source} changed while it was copied: publish a build nobody writes to")
        with open(target, "xb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    os.chmod(target, stat.S_IMODE(info.st_mode) | stat.S_IRUSR)
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))


def copy_build(source: Path, target: Path, where: str) -> None:
    """Copy the build ``source`` to the new folder ``target``: plain files and folders only (see :func:`_walk`)."""
    target.mkdir()

    def visit(path: Path, inside: Path, info: os.stat_result) -> None:
        if stat.S_ISDIR(info.st_mode):
            (target / inside).mkdir()
        else:
            _copy_file(path, target / inside, info, where)

    _walk(source, where, visit)


def _check_apart(site: Path, build: Path, where: str) -> None:
    """Refuse a build that is the site or lies inside it, and a site inside the build."""
    site_at, build_at = site.resolve(), build.resolve()
    if site_at == build_at:
        raise PublishError(f"{where} is the site {site} itself: give the HTML folder of a book build, outside "
                           "the site")
    if build_at.is_relative_to(site_at):
        raise PublishError(f"{where} is inside the site {site}: give the HTML folder of a book build, outside "
                           "the site")
    if site_at.is_relative_to(build_at):
        raise PublishError(f"the site {site} is inside the build {where.split(' ', 1)[-1]}: the site would be "
                           "copied into itself; put the site outside the build")


def redirect_page(target: str) -> str:
    """The site's root page: it sends the reader to ``target`` (a folder of the site)."""
    href = html.escape(target, quote=True)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>kmt-book</title>\n<meta http-equiv=\"refresh\" content=\"0; url={href}\">\n"
            f"<link rel=\"canonical\" href=\"{href}\">\n</head>\n<body>\n"
            f"<p>The book is at <a href=\"{href}\">{html.escape(target)}</a>.</p>\n</body>\n</html>\n")



_REDIRECT = re.compile(r'url=((?:v\d+\.\d+\.\d+|dev)/)"')


def check_site(site: Path) -> None:
    """Refuse a SITE that is not a folder, or a folder that holds what no site of the book holds (another
    page at its root, a link anywhere), so that publishing never overwrites or follows anything else."""
    if os.path.lexists(site) and (site.is_symlink() or not site.is_dir()):
        kind = "a link" if site.is_symlink() else "a file"
        raise PublishError(f"SITE {site} is {kind}, not a folder: give the site's folder (made if missing)")
    if not site.is_dir():
        return
    foreign = "which no site of the book holds: give a new or empty folder, or a site this command made"
    for entry in sorted(site.iterdir()):
        where = f"SITE {site}"
        if entry.is_symlink():
            _refuse_odd(entry, os.lstat(entry), where)
        if entry.is_dir() and (_is_version(entry.name) or entry.name.startswith(STAGING_PREFIX)):
            check_tree(entry, where)
        elif not (entry.name in SITE_FILES and entry.is_file()):
            raise PublishError(f"{where} holds {entry.name}, {foreign}")
    index = site / "index.html"
    if index.is_file():
        text = index.read_text(encoding="utf-8", errors="replace")
        match = _REDIRECT.search(text)
        if match is None or text != redirect_page(match[1]):
            raise PublishError(f"SITE {site} holds an index.html that is not the site's redirect, {foreign}")
