"""The site's assembly (kmtbook.publish): every release at its own address, kept; dev beside them; the
theme's version list; the root going to the newest release; a banner on the pages of older releases;
release archives checked against their checksums. All on local folders, offline."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kmtbook import publish

ROOT = Path(__file__).resolve().parent.parent
ADDRESS = "https://example.org/kmt-book"


def _build(tmp: Path, name: str, text: str) -> Path:
    """A stand-in for a book build's HTML folder: a root page and a chapter page."""
    html = tmp / "builds" / name
    (html / "book").mkdir(parents=True)
    (html / "index.html").write_text(f"<html><head></head><body class='x'><p>{text} root</p></body></html>")
    (html / "book" / "02_kmeans_transformer.html").write_text(f"<html><body>\n<p>{text} chapter</p></body></html>")
    (html / "_static").mkdir()
    (html / "_static" / "style.css").write_text("p {}")
    return html


def _publish(site: Path, html: Path, version: str) -> None:
    assert publish.main([str(site), "--html", str(html), "--version", version, "--address", ADDRESS]) == 0


def test_two_versions_and_dev(tmp_path):
    site = tmp_path / "site"
    _publish(site, _build(tmp_path, "a", "first"), "v0.1.0")
    _publish(site, _build(tmp_path, "b", "dev build"), "dev")
    _publish(site, _build(tmp_path, "c", "second"), "v0.2.0")
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
    _publish(site, _build(tmp_path, "d", "dev"), "dev")
    assert 'url=dev/"' in (site / "index.html").read_text()
    _publish(site, _build(tmp_path, "a", "nine"), "v0.9.0")
    _publish(site, _build(tmp_path, "b", "ten"), "v0.10.0")
    assert 'url=v0.10.0/"' in (site / "index.html").read_text()
    assert "kmt-version-banner" in (site / "v0.9.0" / "index.html").read_text()


def test_republishing_replaces_one_version_and_is_idempotent(tmp_path):
    site = tmp_path / "site"
    _publish(site, _build(tmp_path, "a", "first"), "v0.1.0")
    _publish(site, _build(tmp_path, "c", "second"), "v0.2.0")
    old_page = site / "v0.1.0" / "book" / "02_kmeans_transformer.html"
    once = old_page.read_text()
    _publish(site, _build(tmp_path, "d", "second again"), "v0.2.0")  # the assembly runs again at each deploy
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
    assert publish.main([str(tmp_path / "site"), "--html", str(tmp_path), "--version", "dev"]) == 2
    assert f"--html {tmp_path}" in capsys.readouterr().err


def test_release_archives_round_trip(tmp_path):
    archive = publish.pack(_build(tmp_path, "a", "first"), "v0.1.0", tmp_path / "dist")
    assert archive.name == "kmt-book-html-v0.1.0.tar.gz"
    assert Path(f"{archive}.sha256").read_text().split() == [publish.sha256_of(archive), archive.name]
    site = tmp_path / "site"
    assert publish.main([str(site), "--archive", str(archive), "--html", str(_build(tmp_path, "b", "now")),
                         "--version", "dev"]) == 0
    assert "first chapter" in (site / "v0.1.0" / "book" / "02_kmeans_transformer.html").read_text()
    assert [e["version"] for e in json.loads((site / "switcher.json").read_text())] == ["v0.1.0", "dev"]


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
