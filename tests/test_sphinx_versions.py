"""The theme's version switcher (kmtbook.sphinx_ext.versions): configured on every build, reading the
site's list of versions from the book's own server, and never from the network at build time."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import kmtlib
from kmtbook.sphinx_ext import figures, versions


def _configured(monkeypatch, baseurl: str, environ: dict[str, str]) -> SimpleNamespace:
    for name in ("KMT_BOOK_URL", "KMT_BOOK_VERSION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    config = SimpleNamespace(html_baseurl=baseurl, html_theme="sphinx_book_theme",
                             html_theme_options={}, html_sidebars={})
    figures.set_book_url(None, config)
    versions.configure_switcher(None, config)
    return config


def test_a_published_release_reads_the_sites_list(monkeypatch):
    release = f"v{kmtlib.__version__}"
    config = _configured(monkeypatch, "", {"KMT_BOOK_URL": "https://readers.invalid/kmt-book",
                                           "KMT_BOOK_VERSION": release})
    options = config.html_theme_options
    assert options["switcher"] == {"json_url": "https://readers.invalid/kmt-book/switcher.json",
                                   "version_match": release}
    assert options["check_switcher"] is False  # the build reads nothing from the network
    assert "version-switcher" in config.html_sidebars["**"]
    assert config.html_baseurl == f"https://readers.invalid/kmt-book/{release}/"


def test_a_local_build_reads_the_list_beside_its_pages(monkeypatch, tmp_path):
    config = _configured(monkeypatch, "", {})
    assert config.html_theme_options["switcher"] == {"json_url": "switcher.json", "version_match": "dev"}
    versions.configure_switcher(None, config)  # twice: one switcher still
    assert config.html_sidebars["**"].count("version-switcher") == 1
    app = SimpleNamespace(config=config, outdir=str(tmp_path))
    versions.write_switcher(app)
    assert json.loads((tmp_path / "switcher.json").read_text()) == [{"name": "dev", "version": "dev", "url": "/"}]


def test_a_release_folder_must_name_the_package_version(monkeypatch):
    with pytest.raises(ValueError, match=r"KMT_BOOK_VERSION='v99\.0\.0' but the package version is"):
        _configured(monkeypatch, "https://readers.invalid/", {"KMT_BOOK_VERSION": "v99.0.0"})
    with pytest.raises(ValueError, match="KMT_BOOK_VERSION='latest'"):
        _configured(monkeypatch, "https://readers.invalid/", {"KMT_BOOK_VERSION": "latest"})


def test_the_launch_button_opens_the_version_read(monkeypatch):
    release = f"v{kmtlib.__version__}"
    monkeypatch.setenv("KMT_REPOSITORY_URL", "https://git.invalid/owner/kmt-book/")
    monkeypatch.setenv("KMT_BOOK_VERSION", release)
    options = {"repository_url": "https://typed.invalid/x", "repository_branch": "main"}
    config = SimpleNamespace(html_theme_options=options)
    versions.configure_launch(None, config)
    assert config.html_theme_options == {"repository_url": "https://git.invalid/owner/kmt-book",
                                         "repository_branch": release}
    monkeypatch.setenv("KMT_BOOK_VERSION", "dev")
    config = SimpleNamespace(html_theme_options={"repository_branch": "main"})
    versions.configure_launch(None, config)
    assert config.html_theme_options["repository_branch"] == "main"


def test_every_chapter_has_a_binder_button():
    import yaml

    from kmtbook.repo_root import REPO_ROOT

    config = yaml.safe_load((REPO_ROOT / "_config.yml").read_text())
    assert config["launch_buttons"]["binderhub_url"] == "https://mybinder.org"
    assert config["repository"]["url"].startswith("https://github.com/")
    requirements = (REPO_ROOT / "binder" / "requirements.txt").read_text().split("\n")
    assert "-e .[nb]" in requirements and any(line.startswith("jupytext") for line in requirements)
    assert "set-default-viewer" in (REPO_ROOT / "binder" / "postBuild").read_text()


def test_a_theme_without_a_switcher_gets_no_switcher_options():
    """Only sphinx-book-theme (pydata-sphinx-theme) knows the switcher's options; another theme, as in a
    small test project, would fail the build (warnings as errors) on an unknown option."""
    config = SimpleNamespace(html_baseurl="", html_theme="alabaster", html_theme_options={}, html_sidebars={})
    versions.configure_switcher(None, config)
    assert config.html_theme_options == {} and config.html_sidebars == {}


def test_a_page_opened_from_disk_gets_this_builds_list_without_a_fetch(monkeypatch, tmp_path):
    """The browser fetches nothing for a file:// page: every page loads kmt-versions.js, deferred, which
    hands the theme this build's list as a data: address (the entry's address set in the browser to the
    book's own folder); over HTTP(S) it changes nothing."""
    config = _configured(monkeypatch, "", {})
    config.kmt_site_url = ""
    scripts = []
    app = SimpleNamespace(config=config, outdir=str(tmp_path), builder=SimpleNamespace(format="html"),
                          add_js_file=lambda name, **attributes: scripts.append((name, attributes)))
    versions.add_from_disk_script(app)
    assert scripts == [(versions.FROM_DISK_SCRIPT, {"defer": "defer"})]
    script = (tmp_path / "_static" / versions.FROM_DISK_SCRIPT).read_text()
    assert 'window.location.protocol !== "file:"' in script and "data:application/json" in script
    assert json.dumps([{"name": "dev", "version": "dev", "url": "/"}]) in script
    assert "@ENTRIES@" not in script and "fetch(" not in script
    other = SimpleNamespace(config=SimpleNamespace(html_theme="alabaster"), builder=SimpleNamespace(format="html"),
                            outdir=str(tmp_path / "other"), add_js_file=lambda *a, **k: scripts.append(a))
    versions.add_from_disk_script(other)
    assert len(scripts) == 1 and not (tmp_path / "other").exists()


def test_colab_opens_this_versions_notebook_from_the_notebooks_branch():
    address = versions.colab_address("https://github.com/owner/kmt-book", "v0.1.0", "book/05_training")
    assert address == ("https://colab.research.google.com/github/owner/kmt-book/blob/notebooks/v0.1.0/"
                       "book/05_training.ipynb")
    assert versions.colab_address("https://github.com/owner/kmt-book.git", "dev", "book/x") == (
        "https://colab.research.google.com/github/owner/kmt-book/blob/notebooks/dev/book/x.ipynb")
    # Colab opens notebooks from GitHub only: elsewhere, or unknown, no address is made up
    for repository in (None, "", "https://gitlab.com/owner/kmt-book", "https://github.com/owner",
                       "https://github.com.invalid/owner/kmt-book"):
        assert versions.colab_address(repository, "dev", "book/x") is None, repository


def _page_context(binder: bool = True) -> dict:
    launch = [{"type": "link", "text": "Binder", "url": "https://mybinder.org/x"}] if binder else []
    launch.append({"type": "javascript", "text": "Live Code"})
    return {"header_buttons": [{"type": "group", "label": "download-buttons", "buttons": []},
                               {"type": "group", "label": "launch-buttons", "buttons": launch}]}


def _app_with(repository: str | None) -> SimpleNamespace:
    from kmtbook.citation import BookCitation

    citation = BookCitation(title="t", authors="a", version=kmtlib.__version__, year="2026", repository=repository)
    env = SimpleNamespace(kmt_pages={"book/05_training": {"chapter": True}, "book/cite": {"chapter": False}})
    return SimpleNamespace(env=env, kmt_citation=citation)


def test_a_chapter_page_has_a_colab_button_beside_binders(monkeypatch):
    monkeypatch.setenv("KMT_BOOK_VERSION", "dev")
    app = _app_with("https://github.com/owner/kmt-book")
    context = _page_context()
    versions.add_colab_button(app, "book/05_training", "page.html", context, doctree=object())
    launch = context["header_buttons"][1]["buttons"]
    assert [b["text"] for b in launch] == ["Binder", "Colab", "Live Code"]
    assert launch[1]["url"] == versions.colab_address("https://github.com/owner/kmt-book", "dev", "book/05_training")
    assert launch[1]["icon"] == "_static/images/logo_colab.png"  # the theme's own logo
    # a page that is no chapter, or a build whose repository is unknown or not on GitHub: no Colab button
    for other, page in ((app, "book/cite"), (_app_with(None), "book/05_training"),
                        (_app_with("https://gitlab.com/owner/kmt-book"), "book/05_training")):
        context = _page_context()
        versions.add_colab_button(other, page, "page.html", context, doctree=object())
        assert [b["text"] for b in context["header_buttons"][1]["buttons"]] == ["Binder", "Live Code"]
