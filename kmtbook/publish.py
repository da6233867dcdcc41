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
import sys
import tarfile
import tempfile
import tomllib
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

# Run as a script (``python kmtbook/publish.py``, before the project is installed), the sibling module is
# imported from this file's folder; run as ``python -m kmtbook.publish``, from the package.
if __package__:
    from .publish_inputs import (
        ARCHIVE_PREFIX,
        BANNER_END,
        BANNER_START,
        DEV,
        STAGING_PREFIX,
        VERSION,
        PublishError,
        _address,
        _check_apart,
        _is_version,
        _ordered,
        check_build,
        check_site,
        check_tree,
        check_version,
        copy_build,
        read_build,
        redirect_page,
        release_key,
    )
else:  # (loaded from its file, not imported by name: the file is the project's, not an installed module)
    import importlib.util

    _spec = importlib.util.spec_from_file_location("publish_inputs", Path(__file__).with_name("publish_inputs.py"))
    assert _spec is not None and _spec.loader is not None
    _inputs = importlib.util.module_from_spec(_spec)
    sys.modules["publish_inputs"] = _inputs  # (its dataclass reads its own module)
    _spec.loader.exec_module(_inputs)
    globals().update({name: value for name, value in vars(_inputs).items() if not name.startswith("__")})

# --------------------------------------------------------------------------- archives


def archive_name(version: str) -> str:
    return f"{ARCHIVE_PREFIX}{check_version(version)}.tar.gz"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


LOCK_FOLDER = "requirements"
LOCK_FILES = ("book.txt", "tests.txt", "lint.txt", "launch.txt", "constraints.txt")
"""The lock a build was made with, which the build publishes beside its pages (``requirements/*.txt`` at the root
of the HTML, copied there by :mod:`kmtbook.sphinx_ext.rebuild`): a release archive carries its environment."""


def pack(build_html: Path, version: str, out: Path) -> Path:
    """Write the release archive of ``build_html`` (``kmt-book-html-<version>.tar.gz``) and its
    ``.sha256`` (``sha256sum`` format) into ``out``; return the archive's path. The build must be a build of
    ``version``, hold the lock it was built with (:data:`LOCK_FILES`) and hold plain files and folders only, as
    :func:`publish` requires."""
    build_html = Path(build_html)
    where = f"--pack {build_html}"
    if not (build_html / "index.html").is_file():
        raise PublishError(f"{where}: no index.html there; give the HTML folder of a book build")
    missing = [f"{LOCK_FOLDER}/{name}" for name in LOCK_FILES if not (build_html / LOCK_FOLDER / name).is_file()]
    if missing:
        raise PublishError(f"{where} holds no {', '.join(missing)}: a release archive carries the lock its book was "
                           "built with; build it with the book command, which publishes the repository's "
                           f"{LOCK_FOLDER}/ beside the pages")
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
