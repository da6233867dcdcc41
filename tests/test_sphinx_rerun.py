"""The rerun box of every chapter page (kmtbook.sphinx_ext.rerun): the parameters table read from the
parameters cell and the chapter's spec, the papermill command with the values that built the page,
and where the box goes. tests/test_printed_commands.py runs the commands themselves."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import jupytext
from _demo_chapter import demo_chapter
from docutils import nodes

from kmtbook.parameters import option, size
from kmtbook.sphinx_ext import rerun

BOOK = Path(__file__).resolve().parent.parent / "book"

NOTEBOOK = demo_chapter("Demo", parameters="n: int = 0  # points per task; 0 means take it from the profile.\n")


def test_rerun_values_are_the_cell_updated_by_what_papermill_injected():
    nb = jupytext.reads(NOTEBOOK, fmt="md:myst")
    assert rerun.rerun_values(nb) == {"device": "auto", "seed": 0, "profile": "book", "output_dir": "", "n": 0}
    nb.metadata["papermill"] = {"parameters": {"seed": 7, "profile": "quick", "not_declared": 1}}
    assert rerun.rerun_values(nb) == {"device": "auto", "seed": 7, "profile": "quick", "output_dir": "", "n": 0}


def test_the_rerun_command_names_the_source_and_every_value():
    values = {"device": "auto", "seed": 1, "profile": "book", "output_dir": "", "n": 0}
    assert rerun.rerun_command("book/05_training.md", values) == (
        "jupytext --to ipynb book/05_training.md \\\n"
        "  && papermill book/05_training.ipynb 05_training-out.ipynb --cwd book \\\n"
        "  -p device auto -p seed 1 -p profile book -p output_dir '' \\\n  -p n 0")
    assert rerun.rerun_command("05_training.ipynb", {"seed": 1}) == (
        "papermill 05_training.ipynb 05_training-out.ipynb --cwd . \\\n  -p seed 1")
    assert rerun.downloaded_notebook_command("05_training") == (
        "papermill 05_training.ipynb 05_training-out.ipynb -p profile quick -p seed 1")


def test_a_parameter_is_described_as_a_reader_writes_it():
    assert rerun._meaning("points per task; 0 means take it from the profile.") == "points per task"
    assert rerun._meaning("the seed") == "the seed"
    assert rerun._bounds_text(size(int, quick=1, book=2, paper=2, minimum=1, maximum="n")) == "≥\u00a01, ≤\u00a0n"
    assert rerun._bounds_text(size(float, quick=1, book=2, paper=2, minimum=0.5)) == "≥\u00a00.5"
    assert rerun._bounds_text(size(int, quick=4, book=4, paper=4, multiple_of="k")) == "a multiple of k"
    assert rerun._bounds_text(option(str, choices=("a", "b"))) == "one of a, b"
    assert (rerun._value_text(0.5), rerun._value_text(""), rerun._value_text(3)) == ("0.5", '""', "3")


def test_the_parameter_table_reads_the_cell_and_the_profiles():
    from kmtbook.chapter_specs import SPECS

    rows, paper_is_book = rerun.parameter_rows(jupytext.read(BOOK / "05_training.md"), "05_training")
    by_name = {row["name"]: row for row in rows}
    assert list(by_name)[:4] == ["device", "seed", "profile", "output_dir"]
    assert by_name["n_tasks"]["values"] == [SPECS["05_training"].parameters["n_tasks"].profiles[p]
                                            for p in ("quick", "book", "paper")]
    assert "take it from the profile" not in by_name["n_tasks"]["meaning"] and by_name["n_tasks"]["meaning"]
    assert by_name["device"]["values"] == ["auto"] * 3 and by_name["live_k"]["type"] == "int, ≥\u00a01, ≤\u00a0live_n"
    # the rerun box says "paper = book" exactly where every size of the spec has the same book and paper value
    for stem in ("05_training", "01_kmeans_and_lloyd"):
        _, paper_is_book = rerun.parameter_rows(jupytext.read(BOOK / f"{stem}.md"), stem)
        sizes = [spec for spec in SPECS[stem].parameters.values() if getattr(spec, "profiles", None)]
        assert paper_is_book is all(spec.profiles["book"] == spec.profiles["paper"] for spec in sizes), stem


def test_neighbouring_profiles_with_one_value_share_a_cell():
    rows = [{"name": "n", "type": "int", "meaning": "points", "values": [4, 100, 100]},
            {"name": "seed", "type": "int", "meaning": "the seed", "values": [0, 0, 0]},
            {"name": "profile", "type": "str", "meaning": "", "values": ["quick", "book", "paper"]}]
    table = rerun._parameter_table(rows, "book")
    assert [e.astext() for e in table.next_node(nodes.thead).findall(nodes.entry)][3:] == [
        "quick", "book (this page)", "paper"]
    n, seed, profile = (list(row.findall(nodes.entry))[3:] for row in table.next_node(nodes.tbody).children)
    assert [e.astext() for e in n] == ["4", "100 (book = paper)"] and n[1]["morecols"] == 1
    assert [e.astext() for e in seed] == ["0 (every profile)"] and seed[0]["morecols"] == 2
    assert [e.astext() for e in profile] == ["quick", "book", "paper"]


def _page(*admonition_titles: str) -> nodes.document:
    document = nodes.document(None, None)
    section = nodes.section()
    section += nodes.title(text="Chapter")
    for title in admonition_titles:
        admonition = nodes.admonition()
        admonition += nodes.title(text=title)
        section += admonition
    document += section
    return document


def test_the_box_goes_after_the_overview():
    box = nodes.admonition(classes=[rerun.RERUN_CLASS])
    page = _page("Note", "In this chapter", "Exercise")
    rerun._insert_after_overview(page, box)
    assert [child["classes"] == [rerun.RERUN_CLASS] for child in page[0].children[1:]] == [False, False, True, False]
    page = _page()  # no admonition: right after the title
    rerun._insert_after_overview(page, box)
    assert page[0][1] is box


def test_a_box_that_cannot_be_made_is_a_warning_not_a_failure(caplog):
    def no_source(docname):
        raise OSError("no such notebook")

    app = SimpleNamespace(env=SimpleNamespace(doc2path=no_source), srcdir="/nowhere",
                          config=SimpleNamespace(kmt_chapter_suffix=""))
    page = _page("In this chapter")
    rerun.add_rerun_box(app, page, "01_demo", None)
    assert len(page[0]) == 2
    assert "no rerun box for 01_demo: no such notebook" in caplog.text


def test_the_box_of_a_chapter(tmp_path):
    source = tmp_path / "book" / "01_demo.md"
    source.parent.mkdir()
    source.write_text(NOTEBOOK)
    app = SimpleNamespace(env=SimpleNamespace(doc2path=lambda docname: str(source)), srcdir=str(tmp_path),
                          config=SimpleNamespace(kmt_chapter_suffix=""))
    run = {"profile": "quick", "device": "cpu", "seed": "0"}
    box = rerun._rerun_box(app, "01_demo", run)
    text = box.astext()
    assert text.startswith("Rerun this chapter") and "computed with profile quick on device cpu with seed 0" in text
    commands = [block.astext() for block in box.findall(nodes.literal_block)]
    assert commands == [rerun.rerun_command("book/01_demo.md", rerun.rerun_values(jupytext.read(source))),
                        rerun.downloaded_notebook_command("01_demo")]
    app.config.kmt_chapter_suffix = ".ipynb"
    assert "papermill book/01_demo.ipynb" in rerun._rerun_box(app, "01_demo", None).astext()
