"""The figure register and the citations (kmtbook.sphinx_ext.figures), and the provenance tables
(kmtbook.sphinx_ext.provenance): which files a figure publishes, the lines "Cite this figure" and
"Cite this page", the build's CITATION.cff, the chapter-runs and build-environment tables.
tests/test_sphinx_metrics.py builds small projects with the whole extension."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import yaml
from docutils import nodes
from PIL import Image

from kmtbook.citation import read_citation
from kmtbook.sphinx_ext import figures, provenance
from kmtbook.sphinx_ext import gallery as gallery_page

ROOT = Path(__file__).resolve().parent.parent
RUN = "20260101T000000Z-1-000001"
LABEL = "fig-lloyd-trajectory"


def _app(tmp_path: Path, run: str = RUN, url: str | None = None) -> SimpleNamespace:
    """A built book of an index and one chapter whose run wrote ``fig-lloyd-trajectory`` (PNG and PDF)."""
    results, src, out = tmp_path / "results", tmp_path / "src", tmp_path / "html"
    for folder in (results, src, out):
        folder.mkdir(parents=True, exist_ok=True)
    (results / "metrics.json").write_text(json.dumps({"run_id": RUN}))
    Image.new("RGB", (900, 300), "white").save(results / f"{LABEL}.png")
    Image.new("RGB", (900, 300), "white").save(results / f"{LABEL}.pdf")  # a one-page PDF
    (src / "shown.png").write_bytes(b"shown")
    (tmp_path / "CITATION.cff").write_text("title: A book\nauthors:\n  - name: Someone\n")
    figure = {"label": LABEL, "caption": "Lloyd's trajectory. Two lines.", "image": str(src / "shown.png")}
    chapter = {"title": "Demo", "figures": [figure], "shipped": ["data/weights"], "chapter": True,
               "run": {"profile": "quick", "device": "cpu", "seed": "3", "sizes": "n=4, k=2",
                       "output_dir": str(results), "run": run}}
    env = SimpleNamespace(
        kmt_pages={"index": {"title": "Index", "figures": [], "chapter": False, "run": None},
                   "01_kmeans_and_lloyd": chapter},
        toctree_includes={"index": ["01_kmeans_and_lloyd", "cite"]},
        found_docs={"index", "01_kmeans_and_lloyd", "cite"},
        toc_secnumbers={"01_kmeans_and_lloyd": {"": (1,)}},
        toc_fignumbers={"01_kmeans_and_lloyd": {"figure": {LABEL: (1, 2)}}},
        nb_metadata={"01_kmeans_and_lloyd": {"exec_data": {"method": "cache", "runtime": 12.345}}})
    builder = SimpleNamespace(format="html", get_target_uri=lambda doc: f"{doc}.html",
                              get_relative_uri=lambda fromdoc, doc: f"{doc}.html")
    config = SimpleNamespace(kmt_figures_dir="figures", root_doc="index", html_baseurl=url)
    app = SimpleNamespace(env=env, builder=builder, config=config, srcdir=str(src), outdir=str(out))
    app.kmt_citation = read_citation(tmp_path, "9.9.9", url, {})
    return app


def test_a_figure_publishes_the_files_of_the_run_its_page_shows(tmp_path):
    app = _app(tmp_path)
    figure = app.env.kmt_pages["01_kmeans_and_lloyd"]["figures"][0]
    png, pdf = figures.figure_files(app, "01_kmeans_and_lloyd", figure)
    assert (png, pdf) == (tmp_path / "results" / f"{LABEL}.png", tmp_path / "results" / f"{LABEL}.pdf")
    figures.copy_figures(app)
    # the published copies carry the figure's credit line (kmtbook.figure_files; tests/test_figure_files.py)
    with Image.open(tmp_path / "html" / "figures" / f"{LABEL}.png") as published:
        assert published.size[0] == 900 and published.size[1] > 300
        assert published.text["Credit"].startswith("Fig. 1.2, A book v9.9.9, CC BY 4.0, ")  # type: ignore[attr-defined]
    assert (tmp_path / "html" / "figures" / f"{LABEL}.pdf").read_bytes().startswith(b"%PDF")
    with Image.open(tmp_path / "html" / "figures" / "thumbnails" / f"{LABEL}.webp") as thumbnail:
        assert thumbnail.size == (figures.THUMBNAIL_WIDTH, round(figures.THUMBNAIL_WIDTH / 3))  # the aspect kept
        assert thumbnail.format == "WEBP"
    # files of another run: the image the page displays, and no PDF
    other = _app(tmp_path / "other", run="20260101T000000Z-2-000002")
    shown = other.env.kmt_pages["01_kmeans_and_lloyd"]["figures"][0]
    assert figures.figure_files(other, "01_kmeans_and_lloyd", shown) == (tmp_path / "other" / "src" / "shown.png", None)


def test_the_gallery_groups_the_figures_by_chapter_as_cards_with_their_files(tmp_path):
    app = _app(tmp_path)
    gallery = gallery_page.figures_table(app, "index")
    assert "kmt-gallery" in gallery["classes"]
    heading, grid = gallery.children
    assert heading.astext() == ("1. Demo (quick profile, seed 3) · for slides: its figures with their credit lines "
                                "and citations (zip)") and "kmt-gallery-grid" in grid["classes"]
    assert "figures/slides/01_kmeans_and_lloyd-figures.zip" in [r["refuri"] for r in heading.findall(nodes.reference)]
    (card,) = grid.children
    (thumbnail,) = card.findall(nodes.raw)
    assert f'src="figures/thumbnails/{LABEL}.webp"' in thumbnail.astext()
    # its place kept before it loads, and loaded only near the window (the page held 4.9 MB of thumbnails)
    size = f'width="{figures.THUMBNAIL_WIDTH}" height="{round(figures.THUMBNAIL_WIDTH / 3)}"'
    assert size in thumbnail.astext() and 'loading="lazy"' in thumbnail.astext()
    assert f'href="01_kmeans_and_lloyd.html#{LABEL}"' in thumbnail.astext()  # opens the figure in its chapter
    assert 'alt="Fig. 1.2: ' in thumbnail.astext()  # the caption, as the image's text
    number, files = (p.astext() for p in card.findall(nodes.paragraph))
    assert number == f"Fig. 1.2 {LABEL}" and files == "beyond the paper · PNG · PDF"
    refs = [ref["refuri"] for ref in gallery.findall(nodes.reference)]
    assert f"figures/{LABEL}.png" in refs and f"01_kmeans_and_lloyd.html#{LABEL}" in refs
    assert "interactive" not in gallery.astext()  # a still figure
    # an animation or a slider (its page of its own beside the PNG): its still, and a link to that page
    (tmp_path / "results" / f"{LABEL}.html").write_text("<html></html>")
    (card,) = gallery_page.figures_table(app, "index").children[1].children
    assert card.astext().endswith(" · interactive, on its own page (the thumbnail is one frame)")
    assert f"figures/{LABEL}.html" in [ref["refuri"] for ref in card.findall(nodes.reference)]
    assert card.next_node(nodes.raw) is not None  # (with its still thumbnail)
    app.env.kmt_pages["01_kmeans_and_lloyd"]["figures"] = []
    assert gallery_page.figures_table(app, "index").astext() == "No labelled figures in this build."


def test_every_figure_and_page_says_how_to_cite_it(tmp_path):
    app = _app(tmp_path, url="https://readers.invalid/book/")
    page = nodes.document(None, None)
    section = nodes.section()
    page += section
    figure = nodes.figure(ids=[LABEL])
    section += figure
    figures.add_citations(app, page, "01_kmeans_and_lloyd")
    figure_line, page_line = section[1], section[2]
    assert figure_line["classes"] == ["kmt-cite-figure"] and page_line["classes"] == ["kmt-cite-page"]
    assert "Chapter 1, Fig. 1.2 (fig-lloyd-trajectory)" in figure_line.astext()
    # the versioned address: the main branch's build lives at <site>/dev/
    assert "https://readers.invalid/book/dev/01_kmeans_and_lloyd.html#fig-lloyd-trajectory" in figure_line.astext()
    assert "https://readers.invalid/book/dev/figures/fig-lloyd-trajectory.pdf" in figure_line.astext()
    assert "Chapter 1, Demo. https://readers.invalid/book/dev/01_kmeans_and_lloyd.html" in page_line.astext()
    assert [r["refuri"] for r in page_line.findall(nodes.reference)][-1] == "cite.html"


def test_a_figure_citation_entry_is_titled_by_the_captions_first_clause():
    assert figures._caption_title("Lloyd's trajectory. Two lines.") == "Lloyd's trajectory"
    assert figures._caption_title("As in Fig. 3 of the paper: the loss") == "As in Fig. 3 of the paper"
    long = figures._caption_title("word " * 40)
    assert len(long) <= 120 and long.endswith(" ...")


def test_the_figure_citation_directive_names_a_figure_of_the_build(tmp_path):
    app = _app(tmp_path)
    quote, _, bibtex = figures.figure_citation_example(app, "cite", {"argument": LABEL})
    assert "Fig. 1.2 (fig-lloyd-trajectory)" in quote.astext() and "figures/fig-lloyd-trajectory.pdf" in bibtex.astext()
    missing = figures.figure_citation_example(app, "cite", nodes.Element(argument="fig-nowhere"))
    assert missing[0].astext() == "(The figure fig-nowhere is not in this build.)"


def test_the_builds_citation_file_and_address(tmp_path, monkeypatch):
    app = _app(tmp_path)
    figures.write_cff(app)
    text = (tmp_path / "html" / "CITATION.cff").read_text()
    assert text.startswith("# CITATION.cff of this build of the book (version 9.9.9")
    assert yaml.safe_load(text)["version"] == "9.9.9"
    config = SimpleNamespace(html_baseurl="")
    monkeypatch.setenv("KMT_BOOK_URL", " https://readers.invalid/kmt-book ")
    figures.set_book_url(app, config)
    assert config.html_baseurl == "https://readers.invalid/kmt-book/dev/"
    assert config.kmt_site_url == "https://readers.invalid/kmt-book/"
    import kmtlib

    monkeypatch.setenv("KMT_BOOK_VERSION", f"v{kmtlib.__version__}")
    config = SimpleNamespace(html_baseurl="https://readers.invalid/kmt-book/")
    figures.set_book_url(app, config)
    assert config.html_baseurl == f"https://readers.invalid/kmt-book/v{kmtlib.__version__}/"


def test_a_citation_outside_a_git_checkout_names_no_commit(tmp_path):
    (tmp_path / "CITATION.cff").write_text("title: A book\nauthors:\n  - name: Someone\n")
    citation = read_citation(tmp_path, "9.9.9", None, {})
    assert citation.commit is None and citation.url is None and citation.title == "A book"
    assert "no commit recorded" in citation.build_text()
    assert "url" not in citation.bibtex() and "9.9.9" in citation.bibtex()
    assert citation.where("figures/fig-x.png") == "figures/fig-x.png in the book's HTML"


def test_every_figure_says_what_it_reproduces():
    """kmtbook.paper_figures.REPRODUCES names every labelled figure of the chapters (but those that go
    beyond the paper as a whole), and no other."""
    from kmtbook.paper_figures import BEYOND_CHAPTERS, REPRODUCES

    labels = {label for path in (ROOT / "book").glob("[0-9]*.md") if path.stem not in BEYOND_CHAPTERS
              for label in re.findall(r"name:\s*(fig-[\w-]+)", path.read_text())}
    missing = sorted(labels - set(REPRODUCES))
    assert not missing, f"add these figures to kmtbook/paper_figures.py: {missing}"
    assert not set(REPRODUCES) - labels, f"no such figures in the book: {sorted(set(REPRODUCES) - labels)}"


# --------------------------------------------------------------------------- provenance


def test_the_runs_table_says_how_each_chapter_ran(tmp_path):
    app = _app(tmp_path)
    cells = [e.astext() for e in provenance.runs_table(app, "index").next_node(nodes.tbody).findall(nodes.entry)]
    assert cells == ["1. Demo", "quick, cpu, seed 3", "n=4 k=2", "cache, 12.3 s", "1 (1 with PDF)", "data/weights"]


def test_the_execution_column():
    assert provenance._execution({}, None) == "not executed by this build"
    failed = {"method": "cache", "runtime": 2.0, "succeeded": False}
    assert provenance._execution(failed, None) == "cache, 2.0 s, FAILED"
    ahead = {"seconds": 2.0, "chapters_at_once": 2, "threads": "1"}
    assert provenance._execution({"method": "cache", "runtime": 2.0}, ahead) == (
        "cache, 2.0 s; 1 thread, up to 2 chapters at a time")
    alone = {"seconds": 2.0, "chapters_at_once": 1, "threads": "default"}
    assert provenance._execution({"method": "cache", "runtime": 2.0}, alone) == (
        "cache, 2.0 s; alone, torch's default threads")
    assert provenance._execution({"method": "cache", "runtime": 3.0}, alone) == "cache, 3.0 s"  # another run


def test_the_environment_table_names_every_package_of_the_build():
    table = provenance.environment_table(None, "index")
    names = [row[0].astext() for row in table.next_node(nodes.tbody).children]
    assert table["classes"] == ["kmt-table", "kmt-environment"]
    assert names[:5] == ["Python", "platform", "CPU cores", "KMT_DEVICE", "CUDA"]
    assert names[5:] == list(provenance.BUILD_PACKAGES)


def _cited_page(app) -> tuple[str, str]:
    page = nodes.document(None, None)
    section = nodes.section()
    page += section
    section += nodes.figure(ids=[LABEL])
    figures.add_citations(app, page, "01_kmeans_and_lloyd")
    return section[1].astext(), section[2].astext()


def test_the_repository_and_address_are_settings_of_the_build(tmp_path):
    """Set (as the publishing workflow sets them), every citation names them; unset, none is made up."""
    from kmtbook.citation import REPOSITORY_URL_VARIABLE

    unset = _app(tmp_path / "unset")
    figure_line, page_line = _cited_page(unset)
    for text in (figure_line, page_line, unset.kmt_citation.bibtex()):
        assert "source code" not in text and "http" not in text
    said = figures.book_citation(unset, "cite", None)[0].astext()
    assert "does not know the repository it was built from" in said and "a published copy adds both" in said
    assert not re.search(r"html_baseurl|KMT_|\$\{\{|is not set", said), "the reader's words, not configuration names"

    published = _app(tmp_path / "set")
    environ = {"KMT_BOOK_URL": "https://readers.invalid/book", REPOSITORY_URL_VARIABLE: "https://git.invalid/me/kmt/ "}
    published.kmt_citation = read_citation(tmp_path / "set", "9.9.9", None, environ)
    figure_line, page_line = _cited_page(published)
    for text in (figure_line, page_line):
        assert "; source code https://git.invalid/me/kmt" in text and "https://readers.invalid/book/dev/" in text
    assert "source code \\url{https://git.invalid/me/kmt}" in published.kmt_citation.bibtex()
    assert "https://git.invalid/me/kmt" in published.kmt_citation.reference("Chapter 1", "01.html")
    figures.write_cff(published)
    cff = yaml.safe_load((tmp_path / "set" / "html" / "CITATION.cff").read_text())
    assert cff["repository-code"] == "https://git.invalid/me/kmt" and cff["url"] == "https://readers.invalid/book/dev/"
    # GitHub Actions' own variables name the repository where the setting is absent
    actions = read_citation(tmp_path / "set", "9.9.9", None, {"GITHUB_SERVER_URL": "https://github.com",
                                                              "GITHUB_REPOSITORY": "me/kmt"})
    assert actions.repository == "https://github.com/me/kmt"


def test_a_figure_page_of_its_own_is_published_beside_the_png_and_cited(tmp_path):
    """An animation or a figure under a slider that the run wrote as ``<label>.html`` goes to
    ``figures/<label>.html``, and the figure's citation line links it; a figure without one links none."""
    app = _app(tmp_path, url="https://readers.invalid/book/")
    figure = app.env.kmt_pages["01_kmeans_and_lloyd"]["figures"][0]
    assert figures.interactive_file(app, "01_kmeans_and_lloyd", figure) is None
    line = figures._figure_citation(app, "01_kmeans_and_lloyd", figure).astext()
    assert "interactive" not in line
    (tmp_path / "results" / f"{LABEL}.html").write_text("<!DOCTYPE html><p>moving</p>")
    figures.copy_figures(app)
    assert (tmp_path / "html" / "figures" / f"{LABEL}.html").read_text() == "<!DOCTYPE html><p>moving</p>"
    line = figures._figure_citation(app, "01_kmeans_and_lloyd", figure).astext()
    assert f"interactive, on a page of its own: https://readers.invalid/book/dev/figures/{LABEL}.html" in line


def test_a_figures_numbers_are_published_beside_the_png_and_linked(tmp_path):
    """The CSV a run wrote beside its PNG (``Chapter.save_figure(..., data=...)``) goes to
    ``figures/<label>.csv``; the line under the figure and the figure's card in the gallery link it; a
    figure without one links none."""
    app = _app(tmp_path, url="https://readers.invalid/book/")
    figure = app.env.kmt_pages["01_kmeans_and_lloyd"]["figures"][0]
    assert figures.data_file(app, "01_kmeans_and_lloyd", figure) is None
    assert "CSV" not in gallery_page.figures_table(app, "index").astext()
    assert "numbers" not in figures._figure_citation(app, "01_kmeans_and_lloyd", figure).astext()
    table = "# Figure fig-lloyd-trajectory: Lloyd's trajectory\npanel,series,x,y\nobjective,line 1,0.0,2.5\n"
    (tmp_path / "results" / f"{LABEL}.csv").write_text(table)
    figures.copy_figures(app)
    published = (tmp_path / "html" / "figures" / f"{LABEL}.csv").read_text()
    # the numbers as the run wrote them, under the header of the build that publishes them (version 9.9.9)
    assert published.endswith("panel,series,x,y\nobjective,line 1,0.0,2.5\n")
    assert published.startswith("# Fig. 1.2 of Chapter 1") and "Version 9.9.9" in published
    line = figures._figure_citation(app, "01_kmeans_and_lloyd", figure).astext()
    assert f"the numbers it plots: https://readers.invalid/book/dev/figures/{LABEL}.csv" in line
    gallery = gallery_page.figures_table(app, "index")
    assert f"figures/{LABEL}.csv" in [ref["refuri"] for ref in gallery.findall(nodes.reference)]
    assert list(gallery.findall(nodes.paragraph))[-1].astext() == "beyond the paper · PNG · PDF · data (CSV)"
    # a CSV of another run than the page shows is not this page's: not published, not linked
    other = _app(tmp_path / "other", run="20260101T000000Z-2-000002")
    (tmp_path / "other" / "results" / f"{LABEL}.csv").write_text(table)
    assert figures.data_file(other, "01_kmeans_and_lloyd", other.env.kmt_pages["01_kmeans_and_lloyd"]["figures"][0]) \
        is None


def test_the_gallery_shows_a_figure_by_its_text_alternative(tmp_path):
    app = _app(tmp_path)
    app.env.kmt_pages["01_kmeans_and_lloyd"]["figures"][0]["alt"] = "Line chart of a falling objective."
    (thumbnail,) = gallery_page.figures_table(app, "index").findall(nodes.raw)
    assert 'alt="Line chart of a falling objective."' in thumbnail.astext()
