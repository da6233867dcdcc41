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
"""

from __future__ import annotations

import argparse
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
from collections.abc import Sequence
from pathlib import Path

VERSION = re.compile(r"v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")
"""A release's name: ``v`` and the package version (``vX.Y.Z``)."""

DEV = "dev"
"""The build of the main branch: listed in the switcher, never a release."""

ARCHIVE_PREFIX = "kmt-book-html-"
BANNER_START = "<!-- kmt-version-banner -->"
BANNER_END = "<!-- /kmt-version-banner -->"


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


def versions_in(site: Path) -> tuple[list[str], bool]:
    """The releases in ``site``, newest first, and whether it holds ``dev``."""
    names = [p.name for p in site.iterdir() if p.is_dir()] if site.is_dir() else []
    releases = sorted((n for n in names if VERSION.fullmatch(n)), key=release_key, reverse=True)
    return releases, DEV in names


# --------------------------------------------------------------------------- adding a version


def add_version(site: Path, build_html: Path, version: str) -> Path:
    """Copy the built HTML ``build_html`` into ``site/<version>/``, replacing that version only."""
    check_version(version)
    build_html = Path(build_html)
    if not (build_html / "index.html").is_file():
        raise PublishError(f"--html {build_html}: no index.html there; give the HTML folder of a book build "
                           "(e.g. _build/cpu/_build/html)")
    site.mkdir(parents=True, exist_ok=True)
    target = site / version
    staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=site))
    try:
        shutil.copytree(build_html, staging / "html", symlinks=False)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging / "html", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


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
    ``.sha256`` (``sha256sum`` format) into ``out``; return the archive's path."""
    if not (Path(build_html) / "index.html").is_file():
        raise PublishError(f"--pack {build_html}: no index.html there; give the HTML folder of a book build")
    out.mkdir(parents=True, exist_ok=True)
    archive = out / archive_name(version)
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(build_html, arcname=version)
    Path(f"{archive}.sha256").write_text(f"{sha256_of(archive)}  {archive.name}\n")
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


def add_archive(site: Path, archive: Path) -> str:
    """Verify a release archive and publish it as its version; return the version."""
    version = verify_archive(archive)
    site.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".archive-", dir=site) as tmp:
        try:
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError, EOFError) as err:
            raise PublishError(f"--archive {archive}: cannot be unpacked ({err})") from err
        add_version(site, Path(tmp) / version, version)
    return version


# --------------------------------------------------------------------------- what the site says about its versions


def switcher_entries(site: Path, address: str | None) -> list[dict]:
    """The pydata-sphinx-theme version list: releases newest first (the newest is "preferred"), then dev.

    With ``address`` (the site's root) the URLs are absolute; without one they are paths from the
    server's root (right when ``site`` is served at the root of a host, as by ``python -m http.server``)."""
    releases, has_dev = versions_in(site)
    root = address.rstrip("/") + "/" if address else "/"
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


def set_banner(page: Path, text: str | None) -> None:
    """Put ``text`` right after ``<body>`` of ``page``, in place of an earlier banner (none: remove it)."""
    source = page.read_text(encoding="utf-8", errors="surrogateescape")
    plain = _OLD_BANNER.sub("", source)
    if text is not None:
        body = _BODY.search(plain)
        if body is None:
            return  # not a page (a fragment or a file of a tool): nothing to show it in
        plain = plain[:body.end()] + text + plain[body.end():]
    if plain != source:
        page.write_text(plain, encoding="utf-8", errors="surrogateescape")


def mark_versions(site: Path) -> None:
    """A banner on every page of each release older than the newest, linking to the same page in the
    newest release (to its first page where the page is not there); no banner elsewhere."""
    releases, has_dev = versions_in(site)
    newest = releases[0] if releases else None
    for version in releases + ([DEV] if has_dev else []):
        for page in sorted((site / version).rglob("*.html")):
            text = None
            if newest is not None and version != DEV and release_key(version) < release_key(newest):
                inside = page.relative_to(site / version)
                up = "../" * (len(inside.parts) - 1)
                there = inside.as_posix() if (site / newest / inside).is_file() else "index.html"
                text = banner(version, newest, f"{up}../{newest}/{there}")
            set_banner(page, text)


def refresh(site: Path, address: str | None) -> None:
    """Write the switcher list (at the root and in each version), the root redirect and the banners."""
    releases, has_dev = versions_in(site)
    if not releases and not has_dev:
        raise PublishError(f"{site}: holds no version of the book")
    listing = json.dumps(switcher_entries(site, address), indent=2) + "\n"
    (site / "switcher.json").write_text(listing)
    for version in releases + ([DEV] if has_dev else []):
        # The theme of a build without an address reads the list beside its own pages.
        (site / version / "switcher.json").write_text(listing)
    (site / "index.html").write_text(redirect_page(f"{releases[0] if releases else DEV}/"))
    (site / ".nojekyll").write_text("")
    mark_versions(site)


def publish(site: Path, build_html: Path, version: str, address: str | None = None) -> Path:
    """Add (or replace) ``version`` of ``site`` from ``build_html``, then refresh what lists the versions."""
    check_version(version)
    target = add_version(Path(site), Path(build_html), version)
    refresh(Path(site), address)
    return target


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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kmtbook.publish", description=__doc__.split("\n\n")[0])
    parser.add_argument("site", nargs="?", type=Path, help="the site folder (made if missing)")
    parser.add_argument("--html", type=Path, help="the HTML folder of a book build to add as --version")
    parser.add_argument("--version", help="vX.Y.Z (a release) or dev (the main branch)")
    parser.add_argument("--archive", type=Path, action="append", default=[],
                        help="a release archive to add (checked against its .sha256); may be repeated")
    parser.add_argument("--address", help="the site's web address (its root), for the switcher list")
    parser.add_argument("--pack", type=Path, metavar="BUILD_HTML", help="write the release archive of BUILD_HTML")
    parser.add_argument("--out", type=Path, default=Path("."), help="where --pack writes (default: here)")
    parser.add_argument("--check-tag", metavar="TAG", help="fail unless TAG is v + the package version")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.check_tag is not None:
            print(check_tag(args.check_tag, Path(__file__).resolve().parent.parent))
            return 0
        if args.pack is not None:
            if args.version is None:
                parser.error("--pack needs --version")
            print(pack(args.pack, check_version(args.version), args.out))
            return 0
        if args.site is None or (args.html is None and not args.archive):
            parser.error("give SITE and --html BUILD_HTML --version V, or --archive FILE")
        if (args.html is None) != (args.version is None):
            parser.error("--html and --version go together")
        if args.version is not None:
            check_version(args.version)
        for archive in args.archive:
            print(f"{args.site}/{add_archive(args.site, archive)}/ from {archive}")
        if args.html is not None:
            print(f"{add_version(args.site, args.html, args.version)}/ from {args.html}")
        refresh(args.site, args.address)
    except PublishError as err:
        print(f"publish: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
