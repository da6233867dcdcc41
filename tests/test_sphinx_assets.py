"""What every page loads (kmtbook.sphinx_ext.assets: MathJax from the book's own files, the style
sheet, the theme's page context) and the executed notebook a chapter page offers for download
(kmtbook.sphinx_ext.downloads)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from kmtbook.citation import BookCitation
from kmtbook.install_cell import TAG
from kmtbook.repo_root import REPO_ROOT
from kmtbook.sphinx_ext import assets, downloads

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_mathjax_comes_from_the_installed_package():
    source = assets._mathjax_source()
    assert source is not None and (source / "tex-mml-chtml.js").is_file(), "install the book extra"


def test_the_book_serves_its_own_mathjax_unless_it_chose_another():
    config = SimpleNamespace(kmt_offline_mathjax=True, mathjax_path="")
    assets.use_local_mathjax(None, config)
    assert config.mathjax_path == "mathjax/tex-mml-chtml.js"
    config = SimpleNamespace(kmt_offline_mathjax=True, mathjax_path=f"{assets.MATHJAX_DEFAULT_PREFIX}/es5/tex.js")
    assets.use_local_mathjax(None, config)
    assert config.mathjax_path == "mathjax/tex-mml-chtml.js"
    for config in (SimpleNamespace(kmt_offline_mathjax=True, mathjax_path="https://elsewhere.invalid/mj.js"),
                   SimpleNamespace(kmt_offline_mathjax=False, mathjax_path="")):
        before = config.mathjax_path
        assets.use_local_mathjax(None, config)
        assert config.mathjax_path == before


def test_mathjax_is_copied_once(tmp_path, monkeypatch):
    source = tmp_path / "es5"
    (source / "output").mkdir(parents=True)
    (source / "tex-mml-chtml.js").write_text("mathjax")
    (source / "output" / "chtml.js").write_text("fonts")
    monkeypatch.setattr(assets, "_mathjax_source", lambda: source)
    config = SimpleNamespace(mathjax_path="mathjax/tex-mml-chtml.js")
    app = SimpleNamespace(outdir=str(tmp_path / "html"), config=config)
    assets.copy_mathjax(app)
    target = tmp_path / "html" / "_static" / "mathjax"
    assert (target / "output" / "chtml.js").read_text() == "fonts" and (target / ".source").read_text() == str(source)
    (target / "output" / "chtml.js").write_text("kept")
    assets.copy_mathjax(app)  # the same source: nothing copied again
    assert (target / "output" / "chtml.js").read_text() == "kept"
    app.config.mathjax_path = "https://elsewhere.invalid/mj.js"
    assets.copy_mathjax(SimpleNamespace(outdir=str(tmp_path / "other"), config=app.config))
    assert not (tmp_path / "other").exists()


def test_the_style_sheet_is_written_and_linked(tmp_path):
    linked = []
    app = SimpleNamespace(builder=SimpleNamespace(format="html"), outdir=str(tmp_path), add_css_file=linked.append)
    assets.write_css(app)
    assert (tmp_path / "_static" / "kmt-book.css").read_text() == assets.CSS and linked == ["kmt-book.css"]
    app = SimpleNamespace(builder=SimpleNamespace(format="latex"), outdir=str(tmp_path / "latex"))
    assets.write_css(app)
    assert not (tmp_path / "latex").exists()


def test_a_page_loads_each_inline_script_once_and_has_a_colour_mode():
    script = SimpleNamespace(filename=None, attributes={"body": "const THEBE_JS_URL = 1"})
    twin = SimpleNamespace(filename="", attributes={"body": "const THEBE_JS_URL = 1"})
    other = SimpleNamespace(filename="_static/x.js", attributes={})
    context = {"script_files": [script, other, twin], "default_mode": ""}
    assets.tidy_page(SimpleNamespace(config=SimpleNamespace(kmt_default_mode="auto")), "index", "page.html",
                     context, None)
    assert context == {"script_files": [script, other], "default_mode": "auto"}


# --------------------------------------------------------------------------- downloads


def _notebook(outputs: bool) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("print(1)")
    if outputs:
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
        cell.execution_count = 1
    return nbformat.v4.new_notebook(cells=[cell])


def _app(tmp_path: Path, config=None, repository: str | None = "https://github.com/owner/kmt-book") -> SimpleNamespace:
    out = tmp_path / "_build" / "html"
    out.mkdir(parents=True)
    executed = tmp_path / "_build" / "jupyter_execute" / "01_demo.ipynb"
    executed.parent.mkdir()
    nbformat.write(_notebook(outputs=False), executed)
    env = SimpleNamespace(kmt_pages={"01_demo": {"chapter": True}, "index": {"chapter": False}}, mystnb_config=config)
    citation = BookCitation(title="kmt-book", authors="A", version="0.1.0", year="2026", commit=COMMIT,
                            repository=repository)
    theme = {"repository_url": "https://github.com/typed/in-config", "repository_branch": "main"}
    return SimpleNamespace(env=env, outdir=str(out), srcdir=str(REPO_ROOT), kmt_citation=citation,
                           config=SimpleNamespace(html_theme_options=theme))


def _offered(app) -> nbformat.NotebookNode:
    return nbformat.read(Path(app.outdir) / "_sources" / "01_demo.ipynb", as_version=4)


def test_a_chapter_page_offers_its_executed_notebook(tmp_path):
    app = _app(tmp_path)
    context: dict = {}
    downloads.offer_notebook(app, "01_demo", "page.html", context, doctree=object())
    assert context == {"ipynb_source": "01_demo.ipynb"}
    for page in ("index", "02_not_executed"):
        context = {}
        downloads.offer_notebook(app, page, "page.html", context, doctree=object())
        assert context == {}
    downloads.write_downloads(app)
    executed = nbformat.read(Path(app.outdir).parent / "jupyter_execute" / "01_demo.ipynb", as_version=4)
    offered = _offered(app)
    assert offered.cells[1:] == executed.cells and offered.metadata == executed.metadata
    assert not (Path(app.outdir) / "_sources" / "index.ipynb").exists()


def test_the_offered_notebook_opens_with_the_install_cell_of_its_build(tmp_path, monkeypatch):
    """Its first cell installs this build: the repository the build names (its citation's, else _config.yml's),
    at the commit of a development build or the tag of a release, with the launch environment's pinned torch."""
    import kmtlib

    monkeypatch.setenv("KMT_BOOK_VERSION", "dev")
    app = _app(tmp_path / "dev")
    downloads.write_downloads(app)
    cell = _offered(app).cells[0]
    assert cell.cell_type == "code" and TAG in cell.metadata["tags"] and not cell.get("outputs")
    assert 'REPOSITORY = "https://github.com/owner/kmt-book"' in cell.source and f'REF = "{COMMIT}"' in cell.source
    torch = next(line for line in (REPO_ROOT / "binder" / "requirements.txt").read_text().splitlines()
                 if line.startswith("torch=="))
    assert f'TORCH = "{torch}"' in cell.source
    downloads.write_downloads(app)  # written again: one install cell still
    assert [TAG in c.metadata.get("tags", []) for c in _offered(app).cells] == [True, False]

    monkeypatch.setenv("KMT_BOOK_VERSION", f"v{kmtlib.__version__}")
    app = _app(tmp_path / "release", repository=None)
    downloads.write_downloads(app)
    source = _offered(app).cells[0].source
    assert 'REPOSITORY = "https://github.com/typed/in-config"' in source
    assert f'REF = "v{kmtlib.__version__}"' in source


def test_an_install_cell_refuses_a_value_it_cannot_write():
    from kmtbook.install_cell import install_cell

    with pytest.raises(ValueError, match="ref="):
        install_cell("https://github.com/owner/kmt-book", 'v1"; import os', "torch==2.13.0", "https://x.invalid/")
    with pytest.raises(ValueError, match="repository="):
        install_cell("", "v0.1.0", "torch==2.13.0", "https://x.invalid/")


def test_a_chapter_from_the_cache_offers_the_outputs_of_its_run(tmp_path):
    """MyST-NB writes a cached chapter to jupyter_execute/ without outputs; the download has them."""
    from jupyter_cache import get_cache

    cache = tmp_path / "cache"
    ran = tmp_path / "ran.ipynb"
    nbformat.write(_notebook(outputs=True), ran)
    get_cache(cache).cache_notebook_file(ran, check_validity=False)
    app = _app(tmp_path, SimpleNamespace(execution_mode="cache", execution_cache_path=str(cache)))
    downloads.write_downloads(app)
    assert _offered(app).cells[1].outputs[0].text == "1\n"


def test_a_wide_figure_scrolls_in_a_named_box_a_keyboard_can_focus(tmp_path):
    # (on a phone, Figs. 5.2 and 5.3 showed at the width the notebook gave them, 1 081 and 933 px, in a
    # box that scrolled with nothing saying so and no way for a keyboard to reach it)

    from docutils import nodes
    from PIL import Image


    for name, size in (("wide.png", (1000, 300)), ("square.png", (400, 400))):
        Image.new("RGB", size, "white").save(tmp_path / name)
    doctree = nodes.document(None, None)
    for label, name in (("fig-wide", "wide.png"), ("fig-square", "square.png")):
        output = nodes.container()
        output += nodes.image(uri=name, candidates={"*": name}, width="1081px")
        doctree += nodes.figure("", output, ids=[label])
    env = SimpleNamespace(toc_fignumbers={"05_training": {"figure": {"fig-wide": (5, 2), "fig-square": (5, 3)}}})
    app = SimpleNamespace(env=env, srcdir=str(tmp_path))
    assets.mark_tables(app, doctree, "05_training")
    wide, square = doctree.findall(nodes.figure)
    assert "kmt-wide-figure" in wide["classes"] and "kmt-wide-figure" not in square["classes"]
    opening, image, closing = wide.children[0].children
    assert isinstance(image, nodes.image) and closing.astext() == "</div>"
    named = 'class="kmt-scroll" tabindex="0" role="region" aria-label="Fig. 5.2, in a box that scrolls'
    assert named in opening.astext()
    assert f">{assets.SCROLL_CUE}</p>" in opening.astext()
    assert not list(square.findall(nodes.raw))
    # the style sheet's 640 px wins over the width the notebook gave the image, on a phone only
    phone = assets.CSS[assets.CSS.index("@media (max-width: 640px) {\n  .bd-article figure.kmt-wide-figure"):]
    assert "width: 640px !important" in phone[: phone.index("}\n}")]


def test_every_formula_carries_its_mathml_for_screen_readers():
    """MathJax loads its assistive MathML with the page and keeps it on in its menu; MyST's setting of
    the classes MathJax reads is kept, and a second call adds nothing."""
    config = SimpleNamespace(mathjax3_config={"options": {"processHtmlClass": "math"}, "tex": {"tags": "ams"}})
    assets.use_assistive_mathml(None, config)
    assets.use_assistive_mathml(None, config)
    assert config.mathjax3_config == {
        "tex": {"tags": "ams"},
        "loader": {"load": ["a11y/assistive-mml"]},
        "options": {"processHtmlClass": "math", "menuOptions": {"settings": {"assistiveMml": True}}},
    }
    source = assets._mathjax_source()
    assert source is not None and (source / f"{assets.ASSISTIVE_MML}.js").is_file(), "the component ships offline"
    config = SimpleNamespace(mathjax3_config=None)
    assets.use_assistive_mathml(None, config)
    assert config.mathjax3_config["loader"]["load"] == ["a11y/assistive-mml"]
