"""Assemble the published site from every version of the book: each release at its own address.

The site that GitHub Pages serves is one folder holding one folder per version::

    SITE/
      index.html        the root: a redirect to the newest release (to dev while there is none)
      switcher.json     the theme's version list (pydata-sphinx-theme "switcher" format)
      v0.1.0/           a release, kept as it was built (plus a banner once a newer release exists)
      v0.2.0/
      dev/              the build of the main branch

Pages replaces the whole site at each deploy, so the publishing workflow keeps each release's HTML
as an archive beside the release (``kmt-book-html-vX.Y.Z.tar.gz`` and its ``.sha256``) and, at each
deploy, rebuilds the site from every archive plus the current build. This module is that assembly;
it works on local folders and uses the standard library only, so the workflow runs it as a script
before (or without) installing the project::

    python -m kmtbook.publish SITE --html BUILD_HTML --version V [--address URL]
    python -m kmtbook.publish SITE --archive kmt-book-html-v0.1.0.tar.gz [--archive ...] [--address URL]
    python -m kmtbook.publish --pack BUILD_HTML --version vX.Y.Z --out DIR   # the release archive
    python -m kmtbook.publish --check-tag vX.Y.Z                             # the tag names the package version

Adding a version replaces that version's folder and keeps every other one; the switcher list, the
root redirect and the banners ("a newer release exists") are written again from the versions the
site then holds, so that publishing the same thing twice gives the same site.

It refuses rather than guesses; each refusal is one line ``publish: ...`` and leaves the site as it was:

* **Nothing from outside the build enters the site.** A link in the build (symbolic, or a hard link
  whose other name is outside the build), a device, a pipe or a socket is refused, named; no link is
  ever followed. A site that holds a link, or anything a site of the book does not hold, is refused.
* **The site and the build apart:** the build that is the site or lies inside it, and the site
  inside the build, are refused; so is a SITE that is a file.
* **The site as it was after any failure** (a full disk, a read-only site, an interrupted run):
  every change is written into a hidden folder inside the site first and put in place by renames
  alone, which are undone if one of them fails.
* **The build says what it is.** Every build records its package version and its address in its
  ``CITATION.cff`` and the site's folder it was built for in its ``switcher.json``
  (:mod:`kmtbook.sphinx_ext`). ``--version vX.Y.Z`` must be that folder and that package version,
  ``--version dev`` a build for ``dev``; ``--address`` must be the address the build was made with
  (``KMT_BOOK_URL``), and a build made with an address needs ``--address``. Each refusal names the
  build setting that makes the build publishable (``KMT_BOOK_VERSION``, ``KMT_BOOK_URL``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import html
import json
import os
import re
import shutil
import stat
import sys
import tarfile
import tempfile
import tomllib
import zlib
from collections.abc import Callable, Mapping, Sequence
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


# --------------------------------------------------------------------------- archives


def archive_name(version: str) -> str:
    return f"{ARCHIVE_PREFIX}{check_version(version)}.tar.gz"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pack(build_html: Path, version: str, out: Path) -> Path:
    """Write the release archive of ``build_html`` (``kmt-book-html-<version>.tar.gz``) and its
    ``.sha256`` (``sha256sum`` format) into ``out``; return the archive's path. The build must be a build of
    ``version`` and hold plain files and folders only, as :func:`publish` requires."""
    build_html = Path(build_html)
    where = f"--pack {build_html}"
    if not (build_html / "index.html").is_file():
        raise PublishError(f"{where}: no index.html there; give the HTML folder of a book build")
    if Path(out).resolve().is_relative_to(build_html.resolve()):
        raise PublishError(f"--out {out} is inside the build {build_html}: the archive would hold itself; write "
                           "it outside the build")
    check_tree(build_html, where)
    check_build(read_build(build_html), where, check_version(version), None, check_address=False)
    out.mkdir(parents=True, exist_ok=True)
    archive = out / archive_name(version)
    checksum = Path(f"{archive}.sha256")
    with tempfile.TemporaryDirectory(prefix=".pack-", dir=out) as tmp:
        staged = Path(tmp) / archive.name
        with tarfile.open(staged, "w:gz") as tar:
            tar.add(build_html, arcname=version)
        Path(tmp, checksum.name).write_text(f"{sha256_of(staged)}  {archive.name}\n")
        os.replace(staged, archive)
        os.replace(Path(tmp, checksum.name), checksum)
    return archive


def _version_of_archive(archive: Path) -> str:
    name = archive.name
    if not (name.startswith(ARCHIVE_PREFIX) and name.endswith(".tar.gz")):
        raise PublishError(f"--archive {archive}: not a release archive of the book "
                           f"({ARCHIVE_PREFIX}vX.Y.Z.tar.gz)")
    version = name[len(ARCHIVE_PREFIX):-len(".tar.gz")]
    if not VERSION.fullmatch(version):
        raise PublishError(f"--archive {archive}: {version!r} is not a release (vX.Y.Z)")
    return version


def verify_archive(archive: Path) -> str:
    """Check ``archive`` against its ``.sha256`` file; return the release it holds."""
    version = _version_of_archive(archive)
    checksum = Path(f"{archive}.sha256")
    if not archive.is_file():
        raise PublishError(f"--archive {archive}: no such file")
    if not checksum.is_file():
        raise PublishError(f"--archive {archive}: its checksum file {checksum.name} is missing")
    fields = checksum.read_text().split()
    if not fields or not re.fullmatch(r"[0-9a-f]{64}", fields[0]):
        raise PublishError(f"{checksum}: not a sha256 checksum file")
    if fields[0] != sha256_of(archive):
        raise PublishError(f"--archive {archive}: damaged, its sha256 differs from the one in {checksum.name}")
    return version


# --------------------------------------------------------------------------- what the site says about its versions


def switcher_entries(names: Sequence[str], address: str | None) -> list[dict]:
    """The pydata-sphinx-theme version list of a site holding the versions ``names``: releases newest first
    (the newest is "preferred"), then dev.

    With ``address`` (the site's root) the URLs are absolute; without one they are paths from the
    server's root (right when the site is served at the root of a host, as by ``python -m http.server``)."""
    releases, has_dev = _ordered(names)
    address = _address(address)
    root = address + "/" if address else "/"
    entries = [{"name": f"{name} (latest)" if i == 0 else name, "version": name, "url": f"{root}{name}/",
                **({"preferred": True} if i == 0 else {})} for i, name in enumerate(releases)]
    if has_dev:
        entries.append({"name": "dev (main branch)", "version": DEV, "url": f"{root}{DEV}/"})
    return entries


def redirect_page(target: str) -> str:
    """The site's root page: it sends the reader to ``target`` (a folder of the site)."""
    href = html.escape(target, quote=True)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>kmt-book</title>\n<meta http-equiv=\"refresh\" content=\"0; url={href}\">\n"
            f"<link rel=\"canonical\" href=\"{href}\">\n</head>\n<body>\n"
            f"<p>The book is at <a href=\"{href}\">{html.escape(target)}</a>.</p>\n</body>\n</html>\n")


def banner(version: str, newest: str, href: str) -> str:
    """The note at the top of every page of an older release."""
    return (f'{BANNER_START}<div class="kmt-version-banner" role="note" style="background:#fff3cd;color:#4d3b00;'
            f'padding:0.5em 1em;text-align:center;border-bottom:1px solid #e0c36b;font-size:0.95em;">'
            f'This is version {html.escape(version)} of the book. A newer release exists: '
            f'<a href="{html.escape(href, quote=True)}" style="color:#4d3b00;font-weight:bold;">'
            f'read this page in {html.escape(newest)}</a>.</div>{BANNER_END}')


_OLD_BANNER = re.compile(re.escape(BANNER_START) + ".*?" + re.escape(BANNER_END), re.S)
_BODY = re.compile(r"<body\b[^>]*>", re.I)


def with_banner(source: str, text: str | None) -> str:
    """``source`` (a page) with ``text`` right after ``<body>``, in place of an earlier banner (none: removed)."""
    plain = _OLD_BANNER.sub("", source)
    if text is not None:
        body = _BODY.search(plain)
        if body is None:
            return source  # not a page (a fragment or a file of a tool): nothing to show it in
        plain = plain[:body.end()] + text + plain[body.end():]
    return plain


def _banners(folders: Mapping[str, Path]) -> dict[Path, str | None]:
    """The banner of every page of every version (``folders``: version -> where its pages are now)."""
    releases, has_dev = _ordered(list(folders))
    newest = releases[0] if releases else None
    texts: dict[Path, str | None] = {}
    for version in releases + ([DEV] if has_dev else []):
        folder = folders[version]
        for page in sorted(folder.rglob("*.html")):
            text = None
            if newest is not None and version != DEV and release_key(version) < release_key(newest):
                inside = page.relative_to(folder)
                up = "../" * (len(inside.parts) - 1)
                there = inside.as_posix() if (folders[newest] / inside).is_file() else "index.html"
                text = banner(version, newest, f"{up}../{newest}/{there}")
            texts[page] = text
    return texts


# --------------------------------------------------------------------------- changing the site


class SiteChange:
    """One change of the site, prepared in a hidden folder inside it (the same file system) and put in
    place by renames alone; until then, and after a failure, the site is as it was."""

    def __init__(self, site: Path) -> None:
        self.site = Path(site)
        self.made: list[Path] = []  # folders made for the site: removed again if the change fails
        self.staging: Path | None = None
        self.folders: dict[str, Path] = {}  # version -> its new folder, in staging
        self.files: list[tuple[Path, Path]] = []  # (new file in staging, the file of the site it replaces)
        self.step = "preparing the site"
        self.count = 0

    def _staged(self, name: str) -> Path:
        """A new name in the staging folder."""
        assert self.staging is not None
        self.count += 1
        return self.staging / f"{name}-{self.count}"

    def open(self) -> None:
        check_site(self.site)
        self.step = f"making the site's folder {self.site}"
        missing = []
        folder = self.site
        while not os.path.lexists(folder):
            missing.append(folder)
            folder = folder.parent
        for folder in reversed(missing):
            folder.mkdir()
            self.made.append(folder)
        self.step = f"writing in the site {self.site}"
        self.staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=self.site))

    def add_build(self, build_html: Path, version: str, address: str | None) -> None:
        """Stage ``build_html`` as ``version`` (checked: plain files only, a build of that version)."""
        where = f"--html {build_html}"
        _check_apart(self.site, build_html, where)
        if not (build_html / "index.html").is_file():
            raise PublishError(f"{where}: no index.html there; give the HTML folder of a book build "
                               "(e.g. _build/cpu/_build/html)")
        check_tree(build_html, where)  # before anything of it is read
        check_build(read_build(build_html), where, version, address)
        self.step = f"copying {build_html} into the site"
        target = self._staged("html")
        copy_build(build_html, target, where)
        check_build(read_build(target), where, version, address)  # what was copied, not what was seen first
        self._use(version, target)

    def add_archive(self, archive: Path, address: str | None) -> str:
        """Stage a release archive (checked against its checksum) as its version; return the version."""
        version = verify_archive(archive)
        self.step = f"unpacking {archive} into the site"
        target = self._staged("archive")
        try:
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(target, filter="data")
        except (tarfile.TarError, EOFError, zlib.error) as err:
            raise PublishError(f"--archive {archive}: cannot be unpacked ({err})") from err
        except OSError as err:
            if err.errno is None:  # gzip's BadGzipFile and the like: a damaged archive
                raise PublishError(f"--archive {archive}: cannot be unpacked ({err})") from err
            raise
        where = f"--archive {archive}"
        folder = target / version
        if not (folder / "index.html").is_file():
            raise PublishError(f"{where}: holds no {version}/index.html; not a release archive of the book")
        check_tree(folder, where)
        check_build(read_build(folder), where, version, address)
        self._use(version, folder)
        return version

    def _use(self, version: str, folder: Path) -> None:
        self.folders[version] = folder  # a later source of the same version replaces an earlier one

    def _put(self, dest: Path, text: str) -> None:
        """Stage ``text`` as the file ``dest`` of the site (written in place when ``dest`` is staged already)."""
        assert self.staging is not None
        data = text.encode("utf-8", errors="surrogateescape")
        if dest.is_relative_to(self.staging):
            dest.write_bytes(data)
            return
        if dest.is_file() and dest.read_bytes() == data:
            return
        new = self._staged("file")
        new.write_bytes(data)
        if dest.is_file():
            shutil.copymode(dest, new)
        self.files.append((new, dest))

    def refresh(self, address: str | None) -> None:
        """Stage the switcher list (at the root and in each version), the root redirect and the banners."""
        self.step = f"writing the site's lists and banners in {self.site}"
        folders = {p.name: p for p in self.site.iterdir() if _is_version(p.name) and p.is_dir() and not p.is_symlink()}
        folders.update(self.folders)
        if not folders:
            raise PublishError(f"{self.site}: holds no version of the book")
        releases = _ordered(list(folders))[0]
        listing = json.dumps(switcher_entries(list(folders), address), indent=2) + "\n"
        self._put(self.site / "switcher.json", listing)
        for folder in folders.values():
            # The theme of a build without an address reads the list beside its own pages.
            self._put(folder / "switcher.json", listing)
        self._put(self.site / "index.html", redirect_page(f"{releases[0] if releases else DEV}/"))
        self._put(self.site / ".nojekyll", "")
        for page, text in _banners(folders).items():
            source = page.read_bytes().decode("utf-8", errors="surrogateescape")
            changed = with_banner(source, text)
            if changed != source:
                self._put(page, changed)

    def commit(self) -> None:
        """Put every staged folder and file in place, by renames; undo them all if one fails."""
        assert self.staging is not None
        self.step = f"putting the new files in place in {self.site}"
        done: list[tuple[Path, Path | None]] = []
        try:
            for version, folder in self.folders.items():
                self._replace(folder, self.site / version, done)
            for new, dest in self.files:
                self._replace(new, dest, done)
        except BaseException:
            for dest, old in reversed(done):
                try:
                    if os.path.lexists(dest):
                        os.replace(dest, self._staged("undone"))
                    if old is not None:
                        os.replace(old, dest)
                except OSError:
                    pass
            raise
        for stale in self.site.glob(f"{STAGING_PREFIX}*"):  # left by a run killed before it could clean up
            if stale != self.staging:
                shutil.rmtree(stale, ignore_errors=True)

    def _replace(self, new: Path, dest: Path, done: list[tuple[Path, Path | None]]) -> None:
        old = None
        if os.path.lexists(dest):
            old = self._staged("old")
            os.replace(dest, old)
        done.append((dest, old))
        os.replace(new, dest)

    def close(self, failed: bool) -> None:
        """Remove the staging folder (and, after a failure, the folders made for the site)."""
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
        if failed:
            for folder in reversed(self.made):
                with contextlib.suppress(OSError):
                    folder.rmdir()


def publish(site: Path, build_html: Path | None = None, version: str | None = None, address: str | None = None,
            archives: Sequence[Path] = ()) -> list[str]:
    """Add (or replace) the versions of ``archives`` and ``build_html`` (as ``version``) in ``site``, then
    write again what lists the versions; return the versions added. All or nothing: see :class:`SiteChange`."""
    if (build_html is None) != (version is None):
        raise PublishError("--html and --version go together")
    if version is not None:
        check_version(version)
    change = SiteChange(Path(site))
    added = []
    try:
        change.open()
        for archive in archives:
            added.append(change.add_archive(Path(archive), address))
        if build_html is not None and version is not None:
            change.add_build(Path(build_html), version, address)
            added.append(version)
        change.refresh(address)
        change.commit()
    except OSError as err:
        change.close(failed=True)
        where = f" ({err.filename})" if err.filename else ""
        raise PublishError(f"{change.step} failed: {err.strerror or err}{where}; the site is as it was") from err
    except BaseException:
        change.close(failed=True)
        raise
    change.close(failed=False)
    return added


# --------------------------------------------------------------------------- the tag of a release


def package_version(root: Path) -> str:
    """The package version, read from ``pyproject.toml`` and checked against ``kmtlib/_version.py``."""
    declared = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", (root / "kmtlib" / "_version.py").read_text())
    if match is None or match[1] != declared:
        raise PublishError(f"pyproject.toml says version {declared!r} but kmtlib/_version.py says "
                           f"{match[1] if match else 'nothing'!r}: make them agree before tagging")
    return declared


def check_tag(tag: str, root: Path) -> str:
    """``tag`` if it is ``v`` + the package version; a :class:`PublishError` naming both otherwise."""
    version = package_version(root)
    if tag != f"v{version}":
        raise PublishError(f"the tag {tag!r} does not name the package version {version!r} (pyproject.toml, "
                           f"kmtlib/_version.py): tag v{version}, or change the version first")
    return tag


# --------------------------------------------------------------------------- command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise PublishError(message)  # one line "publish: ...", as every other refusal


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m kmtbook.publish", description=__doc__.split("\n\n")[0])
    parser.add_argument("site", nargs="?", type=Path, help="the site folder (made if missing)")
    parser.add_argument("--html", type=Path, help="the HTML folder of a book build to add as --version")
    parser.add_argument("--version", help="vX.Y.Z (a release) or dev (the main branch): what the build was built "
                                          "for (KMT_BOOK_VERSION)")
    parser.add_argument("--archive", type=Path, action="append", default=[],
                        help="a release archive to add (checked against its .sha256); may be repeated")
    parser.add_argument("--address", help="the site's web address (its root): the KMT_BOOK_URL the builds were "
                                          "made with")
    parser.add_argument("--pack", type=Path, metavar="BUILD_HTML", help="write the release archive of BUILD_HTML")
    parser.add_argument("--out", type=Path, default=Path("."), help="where --pack writes (default: here)")
    parser.add_argument("--check-tag", metavar="TAG", help="fail unless TAG is v + the package version")
    return parser


def _run(argv: Sequence[str] | None) -> None:
    args = _parser().parse_args(argv)
    if args.check_tag is not None:
        print(check_tag(args.check_tag, Path(__file__).resolve().parent.parent))
        return
    if args.pack is not None:
        if args.version is None:
            raise PublishError("--pack needs --version")
        try:
            print(pack(args.pack, check_version(args.version), args.out))
        except OSError as err:
            raise PublishError(f"writing the archive of {args.pack} into {args.out} failed: "
                               f"{err.strerror or err} ({err.filename})") from err
        return
    if args.site is None or (args.html is None and not args.archive):
        raise PublishError("give SITE and --html BUILD_HTML --version V, or --archive FILE")
    if args.version is not None:
        check_version(args.version)
    for version in publish(args.site, args.html, args.version, args.address, args.archive):
        print(f"{args.site}/{version}/")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        _run(argv)
    except PublishError as err:
        # one line, whatever the names it quotes hold
        print("publish: " + str(err).replace("\r", "\\r").replace("\n", "\\n"), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
