"""The site's assembly (kmtbook.publish): every release at its own address, kept; dev beside them; the
theme's version list; the root going to the newest release; a banner on the pages of older releases;
release archives checked against their checksums. All on local folders, offline."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from kmtbook import publish, publish_inputs

ROOT = Path(__file__).resolve().parent.parent
ADDRESS = "https://example.org/kmt-book"


def _build(tmp: Path, name: str, text: str, slot: str = "v0.1.0", *, package: str | None = None,
           address: str | None = ADDRESS) -> Path:
    """A stand-in for a book build's HTML folder: a root page and a chapter page, and what the book's extension
    records of the build (its CITATION.cff and switcher.json, in the form kmtbook.sphinx_ext writes them;
    test_the_publisher_reads_what_the_build_writes holds the two to the same form): built for the site's
    folder ``slot`` (KMT_BOOK_VERSION) of package version ``package`` at ``address`` (KMT_BOOK_URL)."""
    html = tmp / "builds" / name
    (html / "book").mkdir(parents=True)
    (html / "index.html").write_text(f"<html><head></head><body class='x'><p>{text} root</p></body></html>")
    (html / "book" / "02_kmeans_transformer.html").write_text(f"<html><body>\n<p>{text} chapter</p></body></html>")
    (html / "_static").mkdir()
    (html / "_static" / "style.css").write_text("p {}")
    package = package or (slot[1:] if slot != "dev" else "0.1.0")
    url = f"{address.rstrip('/')}/{slot}/" if address else None
    cff = {"cff-version": "1.2.0", "title": "kmt-book", "version": package, **({"url": url} if url else {})}
    (html / "CITATION.cff").write_text("# CITATION.cff of this build\n" + yaml.safe_dump(cff, sort_keys=False))
    (html / "switcher.json").write_text(json.dumps([{"name": slot, "version": slot, "url": url or "/"}]))
    lock = html / publish.LOCK_FOLDER  # the lock the build was made with, as kmtbook.sphinx_ext.rebuild copies it
    lock.mkdir()
    for name in publish.LOCK_FILES:
        shutil.copyfile(ROOT / publish.LOCK_FOLDER / name, lock / name)
    return html


def _publish(site: Path, html: Path, version: str) -> None:
    assert publish.main([str(site), "--html", str(html), "--version", version, "--address", ADDRESS]) == 0


def test_two_versions_and_dev(tmp_path):
    site = tmp_path / "site"
    _publish(site, _build(tmp_path, "a", "first"), "v0.1.0")
    _publish(site, _build(tmp_path, "b", "dev build", "dev"), "dev")
    _publish(site, _build(tmp_path, "c", "second", "v0.2.0"), "v0.2.0")
    assert sorted(p.name for p in site.iterdir()) == [".nojekyll", "dev", "index.html", "switcher.json",
                                                      "v0.1.0", "v0.2.0"]
    # every version kept as built
    assert "first chapter" in (site / "v0.1.0" / "book" / "02_kmeans_transformer.html").read_text()
    assert (site / "v0.1.0" / "_static" / "style.css").is_file()
    # the switcher: releases newest first, the newest preferred, then dev; absolute addresses
    entries = json.loads((site / "switcher.json").read_text())
    assert [e["version"] for e in entries] == ["v0.2.0", "v0.1.0", "dev"]
    assert [e.get("preferred", False) for e in entries] == [True, False, False]
    assert entries[1]["url"] == f"{ADDRESS}/v0.1.0/"
    assert json.loads((site / "v0.1.0" / "switcher.json").read_text()) == entries
    # the root goes to the newest release, not to dev
    assert 'url=v0.2.0/"' in (site / "index.html").read_text()
    # the older release says so on every page, linking to the same page of the newest
    chapter = (site / "v0.1.0" / "book" / "02_kmeans_transformer.html").read_text()
    assert "A newer release exists" in chapter and 'href="../../v0.2.0/book/02_kmeans_transformer.html"' in chapter
    assert 'href="../v0.2.0/index.html"' in (site / "v0.1.0" / "index.html").read_text()
    for version in ("v0.2.0", "dev"):
        assert "kmt-version-banner" not in (site / version / "index.html").read_text()


def test_root_goes_to_dev_without_a_release_and_releases_sort_by_number(tmp_path):
    site = tmp_path / "site"
    _publish(site, _build(tmp_path, "d", "dev", "dev"), "dev")
    assert 'url=dev/"' in (site / "index.html").read_text()
    _publish(site, _build(tmp_path, "a", "nine", "v0.9.0"), "v0.9.0")
    _publish(site, _build(tmp_path, "b", "ten", "v0.10.0"), "v0.10.0")
    assert 'url=v0.10.0/"' in (site / "index.html").read_text()
    assert "kmt-version-banner" in (site / "v0.9.0" / "index.html").read_text()


def test_republishing_replaces_one_version_and_is_idempotent(tmp_path):
    site = tmp_path / "site"
    _publish(site, _build(tmp_path, "a", "first"), "v0.1.0")
    _publish(site, _build(tmp_path, "c", "second", "v0.2.0"), "v0.2.0")
    old_page = site / "v0.1.0" / "book" / "02_kmeans_transformer.html"
    once = old_page.read_text()
    _publish(site, _build(tmp_path, "d", "second again", "v0.2.0"), "v0.2.0")  # the assembly runs again at each deploy
    assert old_page.read_text() == once and once.count("kmt-version-banner\"") == 1
    assert "second again chapter" in (site / "v0.2.0" / "book" / "02_kmeans_transformer.html").read_text()
    assert "second chapter" not in (site / "v0.2.0" / "book" / "02_kmeans_transformer.html").read_text()
    _publish(site, _build(tmp_path, "e", "first rebuilt"), "v0.1.0")  # a version replaced: its banner comes back
    page = old_page.read_text()
    assert "first rebuilt chapter" in page and page.count("kmt-version-banner\"") == 1


@pytest.mark.parametrize("bad", ["0.1.0", "v1.2", "latest", "v01.2.3", "v1.2.3-rc1", "../v1.0.0", ""])
def test_a_bad_version_is_refused(tmp_path, bad, capsys):
    site = tmp_path / "site"
    assert publish.main([str(site), "--html", str(_build(tmp_path, "a", "x")), "--version", bad]) == 2
    assert "--version" in capsys.readouterr().err and not site.exists()


def test_a_folder_without_a_build_is_refused(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert publish.main([str(tmp_path / "site"), "--html", str(empty), "--version", "dev"]) == 2
    assert f"--html {empty}: no index.html" in capsys.readouterr().err and not (tmp_path / "site").exists()


def test_release_archives_round_trip(tmp_path):
    archive = publish.pack(_build(tmp_path, "a", "first"), "v0.1.0", tmp_path / "dist")
    assert archive.name == "kmt-book-html-v0.1.0.tar.gz"
    assert Path(f"{archive}.sha256").read_text().split() == [publish.sha256_of(archive), archive.name]
    site = tmp_path / "site"
    assert publish.main([str(site), "--archive", str(archive), "--html", str(_build(tmp_path, "b", "now", "dev")),
                         "--version", "dev", "--address", ADDRESS]) == 0
    assert "first chapter" in (site / "v0.1.0" / "book" / "02_kmeans_transformer.html").read_text()
    assert [e["version"] for e in json.loads((site / "switcher.json").read_text())] == ["v0.1.0", "dev"]


def test_a_release_archive_holds_the_lock_its_book_was_built_with(tmp_path, capsys):
    archive = publish.pack(_build(tmp_path, "a", "first"), "v0.1.0", tmp_path / "dist")
    with tarfile.open(archive) as tar:
        for name in publish.LOCK_FILES:
            member = tar.extractfile(f"v0.1.0/{publish.LOCK_FOLDER}/{name}")
            assert member is not None and member.read() == (ROOT / publish.LOCK_FOLDER / name).read_bytes(), name
    # a build without its lock (or with part of it) makes no release archive: one line naming what is missing
    for lost in ("book.txt", "constraints.txt"):
        build = _build(tmp_path / lost, "b", "second")
        (build / publish.LOCK_FOLDER / lost).unlink()
        assert publish.main(["--pack", str(build), "--version", "v0.1.0", "--out", str(tmp_path / lost / "dist")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("publish: ")
        assert f"holds no {publish.LOCK_FOLDER}/{lost}: a release archive carries the lock" in err
        assert not (tmp_path / lost / "dist").exists()


def _damage(archive: Path) -> None:
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))


def test_damaged_archives_are_named(tmp_path, capsys):
    archive = publish.pack(_build(tmp_path, "a", "first"), "v0.1.0", tmp_path / "dist")
    site = tmp_path / "site"
    _damage(archive)
    assert publish.main([str(site), "--archive", str(archive)]) == 2
    err = capsys.readouterr().err
    assert str(archive) in err and "damaged" in err
    # a truncated archive whose checksum file was written for it: unpacking fails, naming the file
    truncated = tmp_path / "dist" / "kmt-book-html-v0.2.0.tar.gz"
    truncated.write_bytes(archive.read_bytes()[:200])
    Path(f"{truncated}.sha256").write_text(f"{publish.sha256_of(truncated)}  {truncated.name}\n")
    assert publish.main([str(site), "--archive", str(truncated)]) == 2
    assert str(truncated) in capsys.readouterr().err
    # no checksum file at all
    Path(f"{archive}.sha256").unlink()
    assert publish.main([str(site), "--archive", str(archive)]) == 2
    assert "kmt-book-html-v0.1.0.tar.gz.sha256 is missing" in capsys.readouterr().err
    assert not (site / "v0.1.0").exists() and not (site / "v0.2.0").exists()


def test_an_archive_cannot_write_outside_its_folder(tmp_path, capsys):
    evil = tmp_path / "kmt-book-html-v0.3.0.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        outside = tmp_path / "outside.html"
        outside.write_text("<html><body>x</body></html>")
        tar.add(outside, arcname="../../escaped.html")
    Path(f"{evil}.sha256").write_text(f"{publish.sha256_of(evil)}  {evil.name}\n")
    assert publish.main([str(tmp_path / "site"), "--archive", str(evil)]) == 2
    assert str(evil) in capsys.readouterr().err and not (tmp_path.parent / "escaped.html").exists()


def test_the_tag_must_name_the_package_version():
    version = publish.package_version(ROOT)
    assert publish.check_tag(f"v{version}", ROOT) == f"v{version}"
    with pytest.raises(publish.PublishError, match="does not name the package version"):
        publish.check_tag("v99.0.0", ROOT)


def test_runs_as_a_script_without_the_project_installed(tmp_path):
    """The workflow runs it before installing anything: the module needs the standard library only."""
    proc = subprocess.run([sys.executable, "-I", str(ROOT / "kmtbook" / "publish.py"), "--check-tag", "v0.0.0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "does not name the package version" in proc.stderr


# --------------------------------------------------------------------------- hostile input: refused, the site as it was


def _state(site: Path) -> dict[str, tuple] | None:
    """Everything the site holds: each path with its kind, its bytes (or link target) and its mode."""
    if not os.path.lexists(site):
        return None
    state: dict[str, tuple] = {}
    for path in [site, *sorted(site.rglob("*"))]:
        info = path.lstat()
        if path.is_symlink():
            state[str(path.relative_to(site))] = ("link", os.readlink(path))
        elif path.is_dir():
            state[str(path.relative_to(site))] = ("dir", stat.S_IMODE(info.st_mode))
        else:
            state[str(path.relative_to(site))] = ("file", path.read_bytes(), stat.S_IMODE(info.st_mode))
    return state


@pytest.fixture
def site(tmp_path):
    """A site holding a release and dev, as the workflow makes it."""
    site = tmp_path / "site"
    _publish(site, _build(tmp_path, "first", "first"), "v0.1.0")
    _publish(site, _build(tmp_path, "main", "main", "dev"), "dev")
    return site


def _refused(capsys, argv: list[str], site: Path | None, *words: str) -> str:
    """Run the publisher, which must refuse ``argv`` in one line ``publish: ...`` holding ``words``, and leave
    ``site`` as it was; return that line."""
    before = _state(site) if site is not None else None
    assert publish.main([str(a) for a in argv]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("publish: "), lines
    for word in words:
        assert word in lines[0], (word, lines[0])
    if site is not None:
        assert _state(site) == before
    return lines[0]


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "token.txt"
    secret.write_text("TOKEN-0123456789")
    return secret


def _nothing_secret_in(site: Path) -> None:
    for path in site.rglob("*"):
        assert not path.is_symlink()
        if path.is_file():
            assert b"TOKEN-0123456789" not in path.read_bytes(), path


@pytest.mark.parametrize("link", ["_static/token.txt", "book/02_kmeans_transformer.html", "CITATION.cff"])
def test_a_link_to_a_file_outside_the_build_is_refused_by_name(tmp_path, capsys, site, link):
    """A build that links to a token file (even in the place of a page, or of the file the publisher reads the
    build's version from) never puts its content into the site, nor into the error."""
    build = _build(tmp_path, "second", "second", "v0.2.0")
    (build / link).unlink(missing_ok=True)
    (build / link).symlink_to(_secret(tmp_path))
    line = _refused(capsys, [site, "--html", build, "--version", "v0.2.0", "--address", ADDRESS], site,
                    str(build / link), "is a link")
    assert "TOKEN" not in line
    _nothing_secret_in(site)


def test_a_link_to_a_folder_outside_and_a_link_inside_are_refused(tmp_path, capsys, site):
    build = _build(tmp_path, "second", "second", "v0.2.0")
    (tmp_path / "private").mkdir()
    _secret(tmp_path / "private")
    (build / "book" / "private").symlink_to(tmp_path / "private")
    argv = [site, "--html", build, "--version", "v0.2.0", "--address", ADDRESS]
    _refused(capsys, argv, site, str(build / "book" / "private"))
    (build / "book" / "private").unlink()
    (build / "same.html").symlink_to("index.html")  # inside the build: still a link, never followed
    _refused(capsys, argv, site, str(build / "same.html"))
    (build / "same.html").unlink()
    (build / "two\nlines.html").symlink_to("index.html")  # still one line
    _refused(capsys, argv, site, "two\\nlines.html")
    _nothing_secret_in(site)


def test_a_hard_link_to_a_file_outside_the_build_is_refused(tmp_path, capsys, site):
    build = _build(tmp_path, "second", "second", "v0.2.0")
    os.link(_secret(tmp_path), build / "_static" / "copy.txt")
    _refused(capsys, [site, "--html", build, "--version", "v0.2.0", "--address", ADDRESS], site,
             str(build / "_static" / "copy.txt"), "hard link")
    _nothing_secret_in(site)


def test_a_pipe_in_the_build_is_refused_without_waiting_on_it(tmp_path, capsys, site):
    build = _build(tmp_path, "second", "second", "v0.2.0")
    os.mkfifo(build / "_static" / "pipe")
    _refused(capsys, [site, "--html", build, "--version", "v0.2.0", "--address", ADDRESS], site,
             str(build / "_static" / "pipe"), "not a plain file")


def test_the_site_as_its_own_build_is_refused(tmp_path, capsys, site):
    for html in (site, site / "v0.1.0", site / "dev" / "book"):
        _refused(capsys, [site, "--html", html, "--version", "v0.1.0", "--address", ADDRESS], site,
                 f"--html {html}", "the site")
    alias = tmp_path / "alias"
    alias.symlink_to(site)  # the site under another name
    _refused(capsys, [site, "--html", alias, "--version", "v0.1.0", "--address", ADDRESS], site, "is the site")


def test_a_site_inside_the_build_is_refused(tmp_path, capsys):
    build = _build(tmp_path, "first", "first")
    for inside in (build / "_site", build / "book" / "deeper" / "_site"):
        _refused(capsys, [inside, "--html", build, "--version", "v0.1.0", "--address", ADDRESS], None,
                 f"the site {inside} is inside the build")
        assert not (build / "_site").exists() and not (build / "book" / "deeper").exists()
    assert sorted(p.name for p in build.iterdir()) == ["CITATION.cff", "_static", "book", "index.html",
                                                       publish.LOCK_FOLDER, "switcher.json"]


def test_a_site_that_is_a_file_or_another_folder_is_refused(tmp_path, capsys):
    build = _build(tmp_path, "first", "first")
    argv = ["--html", build, "--version", "v0.1.0", "--address", ADDRESS]
    afile = tmp_path / "notes.txt"
    afile.write_text("not a site")
    _refused(capsys, [afile, *argv], afile, f"SITE {afile} is a file")
    other = tmp_path / "project"
    other.mkdir()
    (other / "README.md").write_text("another project")
    _refused(capsys, [other, *argv], other, "holds README.md", "new or empty folder")
    (other / "README.md").unlink()
    (other / "index.html").write_text("<html><body>another site's page</body></html>")
    _refused(capsys, [other, *argv], other, "index.html that is not the site's redirect")


def test_a_site_holding_a_link_is_refused(tmp_path, capsys, site):
    page = site / "v0.1.0" / "book" / "02_kmeans_transformer.html"
    page.unlink()
    page.symlink_to(_secret(tmp_path))  # its banner would be written from the token file
    _refused(capsys, [site, "--html", _build(tmp_path, "second", "second", "v0.2.0"), "--version", "v0.2.0",
                      "--address", ADDRESS], site, str(page), "is a link")
    assert _secret(tmp_path).read_text() == "TOKEN-0123456789"


def _failing_after(calls: int, error: int, real, once: bool = False):
    """``real``, raising OSError(``error``) from its ``calls``-th call on (at that call only, with ``once``)."""
    count = {"n": 0}

    def failing(*args, **kwargs):
        count["n"] += 1
        if count["n"] == calls or (count["n"] > calls and not once):
            raise OSError(error, os.strerror(error), str(args[1]) if len(args) > 1 else None)
        return real(*args, **kwargs)

    return failing


@pytest.mark.parametrize("calls", [1, 3])
def test_a_full_disk_while_copying_leaves_the_site_as_it_was(tmp_path, capsys, site, monkeypatch, calls):
    monkeypatch.setattr(publish_inputs, "_copy_file", _failing_after(calls, errno.ENOSPC, publish_inputs._copy_file))
    _refused(capsys, [site, "--html", _build(tmp_path, "second", "second", "v0.2.0"), "--version", "v0.2.0",
                      "--address", ADDRESS], site, "No space left on device", "the site is as it was")
    assert not list(site.glob(".publish-*"))


@pytest.mark.parametrize("calls", [1, 2, 4, 7])
def test_a_failure_while_putting_files_in_place_is_undone(tmp_path, capsys, site, monkeypatch, calls):
    """The change is put in place by renames; one that fails (the 1st, 2nd, ... of them) undoes the others."""
    real = os.replace
    failing = _failing_after(calls, errno.EIO, real, once=True)
    in_commit = {"on": False}
    commit = publish.SiteChange.commit

    def replace(src, dst):
        return failing(src, dst) if in_commit["on"] else real(src, dst)

    def tracked_commit(self):
        in_commit["on"] = True
        try:
            commit(self)
        finally:
            in_commit["on"] = False

    monkeypatch.setattr(publish.os, "replace", replace)
    monkeypatch.setattr(publish.SiteChange, "commit", tracked_commit)
    _refused(capsys, [site, "--html", _build(tmp_path, "second", "second", "v0.2.0"), "--version", "v0.2.0",
                      "--address", ADDRESS], site, "putting the new files in place", "the site is as it was")


def test_a_read_only_site_is_refused(tmp_path, capsys, site, monkeypatch):
    """As root a mode does not stop a write: the file system's answer (EROFS) is given where the site is first
    written (a real read-only mount: test_a_real_small_or_read_only_file_system)."""
    monkeypatch.setattr(publish.tempfile, "mkdtemp", _failing_after(1, errno.EROFS, tempfile.mkdtemp))
    _refused(capsys, [site, "--html", _build(tmp_path, "second", "second", "v0.2.0"), "--version", "v0.2.0",
                      "--address", ADDRESS], site, "Read-only file system", "the site is as it was")


def _mount(folder: Path, options: str) -> bool:
    folder.mkdir(exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                          capture_output=True).returncode == 0


def test_a_real_small_or_read_only_file_system(tmp_path, capsys):
    """The same on real file systems where this machine lets the test mount one (root): a 1 MiB tmpfs that
    a build does not fit in, then the same site mounted read-only."""
    disk = tmp_path / "disk"
    if not _mount(disk, "size=1m"):
        pytest.skip("mounting a tmpfs is not permitted here (test_a_full_disk_* and test_a_read_only_* inject it)")
    try:
        site = disk / "site"
        _publish(site, _build(tmp_path, "first", "first"), "v0.1.0")
        big = _build(tmp_path, "big", "big", "v0.2.0")
        (big / "_static" / "large.bin").write_bytes(os.urandom(2 << 20))
        argv = [site, "--html", big, "--version", "v0.2.0", "--address", ADDRESS]
        _refused(capsys, argv, site, "No space left on device", "the site is as it was")
        assert subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True).returncode == 0
        argv[2] = _build(tmp_path, "second", "second", "v0.2.0")
        _refused(capsys, argv, site, "Read-only file system", "the site is as it was")
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


# --------------------------------------------------------------------------- a build is published as what it is


def test_the_publisher_reads_what_the_build_writes(tmp_path, monkeypatch):
    """The records the publisher reads are the ones kmtbook.sphinx_ext writes, in both kinds of build."""
    import kmtlib
    from kmtbook import citation
    from kmtbook.sphinx_ext import figures, versions

    assert (publish_inputs.URL_SETTING, publish_inputs.VERSION_SETTING) == (citation.BOOK_URL_VARIABLE,
                                                             citation.BOOK_VERSION_VARIABLE)
    release = f"v{kmtlib.__version__}"
    for environ, record in [({"KMT_BOOK_URL": ADDRESS, "KMT_BOOK_VERSION": release},
                             publish_inputs.BuildRecord(kmtlib.__version__, release, f"{ADDRESS}/{release}/")),
                            ({}, publish_inputs.BuildRecord(kmtlib.__version__, "dev", None))]:
        for name in ("KMT_BOOK_URL", "KMT_BOOK_VERSION"):
            monkeypatch.delenv(name, raising=False)
        for name, value in environ.items():
            monkeypatch.setenv(name, value)
        out = tmp_path / record.slot
        out.mkdir()
        config = SimpleNamespace(html_baseurl="", html_theme="other")
        figures.set_book_url(None, config)
        app = SimpleNamespace(config=config, srcdir=str(ROOT / "book"), outdir=str(out))
        figures.write_cff(app)
        versions.write_switcher(app)
        assert publish.read_build(out) == record
        assert record.site == (ADDRESS if environ else None)


def test_a_build_is_published_as_its_own_version_only(tmp_path, capsys, site):
    """A 0.1.0 build is not filed under v0.2.0 (its pages cite 0.1.0), nor a build made for dev under a
    release, nor a release's build under dev: each refusal names KMT_BOOK_VERSION."""
    old = _build(tmp_path, "old", "old")
    for version in ("v0.2.0", "v0.3.0"):
        _refused(capsys, [site, "--html", old, "--version", version, "--address", ADDRESS], site,
                 "is a build of version 0.1.0", "KMT_BOOK_VERSION=v0.1.0")
    _refused(capsys, [site, "--html", old, "--version", "dev", "--address", ADDRESS], site,
             "built for the folder v0.1.0 (KMT_BOOK_VERSION=v0.1.0)", "KMT_BOOK_VERSION unset")
    main = _build(tmp_path, "main2", "main", "dev")
    _refused(capsys, [site, "--html", main, "--version", "v0.1.0", "--address", ADDRESS], site,
             "built for the folder dev (KMT_BOOK_VERSION unset)", "build it again with KMT_BOOK_VERSION=v0.1.0")
    bare = _build(tmp_path, "bare", "bare")
    (bare / "CITATION.cff").unlink()
    _refused(capsys, [site, "--html", bare, "--version", "v0.1.0", "--address", ADDRESS], site,
             "records no version")
    # the same for a release's archive, and for --pack
    _refused(capsys, ["--pack", old, "--version", "v0.2.0", "--out", tmp_path / "dist"], None,
             "is a build of version 0.1.0")
    _refused(capsys, ["--pack", main, "--version", "v0.1.0", "--out", tmp_path / "dist"], None,
             "KMT_BOOK_VERSION unset")
    assert not (tmp_path / "dist").exists()
    mislabelled = tmp_path / "dist" / "kmt-book-html-v0.2.0.tar.gz"
    mislabelled.parent.mkdir()
    with tarfile.open(mislabelled, "w:gz") as tar:
        tar.add(old, arcname="v0.2.0")
    Path(f"{mislabelled}.sha256").write_text(f"{publish.sha256_of(mislabelled)}  {mislabelled.name}\n")
    _refused(capsys, [site, "--archive", mislabelled, "--address", ADDRESS], site,
             f"--archive {mislabelled} is a build of version 0.1.0")


def test_a_build_is_published_at_its_own_address_only(tmp_path, capsys, site):
    """A build made without the workflow's address (KMT_BOOK_URL unset) is refused under --address: its pages
    would cite no address and its version menu read a list of its own; and the other way round."""
    local = _build(tmp_path, "local", "local", "v0.2.0", address=None)
    _refused(capsys, [site, "--html", local, "--version", "v0.2.0", "--address", ADDRESS], site,
             "built without the site's address (KMT_BOOK_URL unset)", f"KMT_BOOK_URL={ADDRESS}")
    elsewhere = _build(tmp_path, "elsewhere", "elsewhere", "v0.2.0", address="https://other.invalid/book")
    _refused(capsys, [site, "--html", elsewhere, "--version", "v0.2.0", "--address", ADDRESS + "/"], site,
             "built for the address https://other.invalid/book", f"KMT_BOOK_URL={ADDRESS}")
    _refused(capsys, [site, "--html", _build(tmp_path, "second", "second", "v0.2.0"), "--version", "v0.2.0"],
             site, f"give --address {ADDRESS}")
    # a local build into a local site: no address on either side
    local_site = tmp_path / "local-site"
    assert publish.main([str(local_site), "--html", str(local), "--version", "v0.2.0"]) == 0
    assert json.loads((local_site / "switcher.json").read_text())[0]["url"] == "/v0.2.0/"


def test_wrong_arguments_are_one_line(tmp_path, capsys):
    build = _build(tmp_path, "first", "first")
    _refused(capsys, [tmp_path / "site", "--html", build], None, "--html and --version go together")
    _refused(capsys, [tmp_path / "site", "--frobnicate"], None, "unrecognized arguments")
    _refused(capsys, ["--pack", build, "--version", "v0.1.0", "--out", build / "dist"], None,
             "inside the build")
    assert not (build / "dist").exists() and not (tmp_path / "site").exists()
