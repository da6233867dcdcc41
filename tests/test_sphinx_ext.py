"""kmtbook.sphinx_ext as a package: ``setup`` connects one module per part, the parts import one
another without a cycle, and the page register every part reads (kmtbook.sphinx_ext.pages).

The other parts have their own tests: test_sphinx_metrics.py, test_sphinx_rerun.py,
test_sphinx_figures.py (figures, citations, provenance) and test_sphinx_assets.py (assets, downloads).
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document

import kmtbook.sphinx_ext as ext
from kmtbook.sphinx_ext import accessibility, assets, downloads, figures, metrics, pages, rerun, versions

PACKAGE = Path(ext.__file__).parent
RUN = "20260101T000000Z-1-000001"


def _sibling_imports(path: Path) -> set[str]:
    """The modules of the package that ``path`` imports (``from .x import``, ``from . import x``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module} if node.module else {alias.name for alias in node.names}
            if not node.module:
                found.add("__init__")
    return found


def test_each_part_is_a_short_module_and_the_parts_import_no_cycle():
    parts = {p.stem: _sibling_imports(p) for p in sorted(PACKAGE.glob("*.py")) if p.stem != "__init__"}
    assert set(parts) == {"accessibility", "assets", "downloads", "figures", "gallery", "metrics", "pages",
                          "printed",
                          "provenance", "rebuild", "references", "rerun", "versions"}
    long = {p.name: n for p in PACKAGE.glob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"split these modules (over 400 lines): {long}"
    assert not any("__init__" in imported for imported in parts.values()), parts
    # Kahn's algorithm: every part can be imported after the parts it imports
    todo, done = dict(parts), set()
    while todo:
        ready = [name for name, imported in todo.items() if imported <= done]
        assert ready, f"import cycle among {sorted(todo)}"
        for name in ready:
            done.add(name)
            del todo[name]
    assert parts["pages"] == set(), "pages is the base every part reads: it imports no other part"


class _RecordingApp:
    """Records what ``setup`` registers."""

    def __init__(self):
        self.config_values, self.nodes, self.roles, self.directives, self.handlers = {}, [], {}, {}, []

    def add_config_value(self, name, default, rebuild):
        self.config_values[name] = default

    def add_node(self, node, **visitors):
        self.nodes.append(node)

    def add_role(self, name, role):
        self.roles[name] = role

    def add_directive(self, name, directive):
        self.directives[name] = directive

    def connect(self, event, handler, priority=500):
        self.handlers.append((event, handler, priority))


def test_setup_connects_every_part():
    app = _RecordingApp()
    meta = ext.setup(app)
    assert meta["parallel_read_safe"] and meta["parallel_write_safe"] and meta["env_version"] == 1
    assert app.config_values == {"kmt_offline_mathjax": True, "kmt_figures_dir": "figures",
                                 "kmt_default_mode": "auto", "kmt_chapter_suffix": "", "kmt_site_url": ""}
    assert app.nodes == [pages.kmt_placeholder, metrics.kmt_metric]
    assert app.roles == {"metric": metrics.metric_role}
    assert set(app.directives) == {"figure-list", "chapter-runs", "build-environment", "book-citation",
                                   "figure-citation", "reference-check", "book-rebuild"}
    handlers = {(event, handler, priority) for event, handler, priority in app.handlers}
    for expected in [("config-inited", figures.set_book_url, 500), ("config-inited", versions.configure_switcher, 600),
                     ("config-inited", versions.configure_launch, 500),
                     ("config-inited", assets.use_local_mathjax, 500),
                     ("config-inited", assets.use_assistive_mathml, 500),
                     ("config-inited", accessibility.use_book_templates, 500),
                     ("builder-inited", assets.write_css, 500),
                     ("builder-inited", versions.add_from_disk_script, 500),
                     ("html-page-context", accessibility.fix_page_body, 500), ("env-purge-doc", pages.forget_page, 500),
                     ("env-merge-info", pages.merge_pages, 500), ("env-get-outdated", pages.outdated_pages, 500),
                     ("html-page-context", downloads.offer_notebook, 450),
                     ("html-page-context", versions.add_colab_button, 520),  # after the theme's launch menu
                     ("html-page-context", assets.tidy_page, 900)]:
        assert expected in handlers, expected
    assert [event for event, _, _ in app.handlers].count("doctree-read") == 1


def test_the_old_names_still_import():
    """The names the tests and pickled doctrees of earlier builds use, from the package itself."""
    from kmtbook.sphinx_ext import (
        downloaded_notebook_command,
        format_metric,
        kmt_metric,
        kmt_placeholder,
        parameter_rows,
        rerun_command,
        rerun_values,
    )

    assert kmt_placeholder is pages.kmt_placeholder and kmt_metric is metrics.kmt_metric
    assert format_metric is metrics.format_metric and parameter_rows is rerun.parameter_rows
    assert (rerun_command, rerun_values, downloaded_notebook_command) == (
        rerun.rerun_command, rerun.rerun_values, rerun.downloaded_notebook_command)


# --------------------------------------------------------------------------- the page register


def _doctree(text: str) -> nodes.document:
    settings = get_default_settings(Parser)
    settings.report_level = 5
    document = new_document("page.rst", settings)
    Parser().parse(text, document)
    # as the book's build gives them: myst-nb's cell tag class, and Sphinx's figure that holds its label
    for container in document.findall(nodes.container):
        container["classes"] = [c.replace("tag-", "tag_") for c in container["classes"]]
    for figure in document.findall(nodes.figure):
        image = figure.next_node(nodes.image)
        figure["ids"], image["ids"] = image["ids"], []
    return document


def _reading_app(tmp_path: Path, docname: str) -> SimpleNamespace:
    title = nodes.title(text="Demo chapter")
    return SimpleNamespace(env=SimpleNamespace(docname=docname, titles={docname: title}), srcdir=str(tmp_path))


PAGE = f"""
Demo chapter
============

.. container:: cell tag_parameters

   parameters

::

   profile=quick, device=cpu, seed=3; n=4, k=2; output_dir=results/demo; run={RUN}

The weights come from data/weights_any_k, not from data/; see also data/weights.

.. figure:: pic.png
   :name: fig-lloyd-trajectory

   Lloyd's trajectory.

.. figure:: https://example.invalid/remote.png

   An unlabelled figure.
"""


def test_read_page_records_title_figures_run_and_shipped_data(tmp_path):
    app = _reading_app(tmp_path, "01_kmeans_and_lloyd")
    page = pages.read_page(app, _doctree(PAGE))
    assert page == {
        "title": "Demo chapter",
        "shipped": ["data/weights", "data/weights_any_k"],
        "figures": [{"label": "fig-lloyd-trajectory", "caption": "Lloyd's trajectory.",
                     "image": str(tmp_path / "pic.png"), "alt": ""}],
        "run": {"profile": "quick", "device": "cpu", "seed": "3", "sizes": "n=4, k=2",
                "output_dir": "results/demo", "run": RUN},
        "chapter": True,
    }
    assert pages.page_info(app.env)["01_kmeans_and_lloyd"] is page


def test_a_page_without_parameters_or_run_is_no_chapter(tmp_path):
    app = _reading_app(tmp_path, "index")
    page = pages.read_page(app, _doctree("Index\n=====\n\nNo chapter here.\n"))
    assert page["chapter"] is False and page["run"] is None and page["figures"] == [] and page["shipped"] == []


def test_forget_and_merge_pages():
    env = SimpleNamespace(kmt_pages={"a": {"title": "A"}, "b": {"title": "B"}}, kmt_aggregate_docs={"a", "index"})
    pages.forget_page(None, env, "a")
    assert env.kmt_pages == {"b": {"title": "B"}} and env.kmt_aggregate_docs == {"index"}
    other = SimpleNamespace(kmt_pages={"c": {"title": "C"}, "d": {"title": "D"}}, kmt_aggregate_docs={"c", "d"})
    pages.merge_pages(None, env, {"c"}, other)
    assert set(env.kmt_pages) == {"b", "c"} and env.kmt_aggregate_docs == {"index", "c"}


def test_pages_that_tabulate_others_are_rebuilt_when_any_page_changed():
    env = SimpleNamespace(kmt_aggregate_docs={"index", "figures"})  # no execution cache: no data check
    assert pages.outdated_pages(None, env, set(), set(), set()) == []
    assert pages.outdated_pages(None, env, set(), {"01_demo"}, set()) == ["figures", "index"]
    assert pages.outdated_pages(None, env, set(), set(), {"figures"}) == ["index"]


def test_pages_in_order_follow_the_table_of_contents():
    env = SimpleNamespace(kmt_pages={doc: {} for doc in ["a", "a1", "b", "index", "orphan"]},
                          toctree_includes={"index": ["b", "a"], "a": ["a1"]})
    app = SimpleNamespace(env=env, config=SimpleNamespace(root_doc="index"))
    assert pages.pages_in_order(app) == ["index", "b", "a", "a1", "orphan"]


def test_same_run_by_id_or_by_settings():
    run = {"profile": "quick", "device": "cpu", "seed": "3", "sizes": "n=4, k=2", "run": RUN}
    assert pages.same_run(run, {"run_id": RUN}) and not pages.same_run(run, {"run_id": "other"})
    old = {**run, "run": ""}  # a page executed before runs had an id
    settings = {"profile": "quick", "device": "cpu", "seed": 3, "param_n": 4, "param_k": 2}
    assert pages.same_run(old, settings)
    assert not pages.same_run(old, {**settings, "param_k": 3}) and not pages.same_run(old, {**settings, "seed": 4})


def test_output_folder_is_relative_to_the_repository_root(tmp_path):
    (tmp_path / "_config.yml").write_text("")
    (tmp_path / "pyproject.toml").write_text("")  # (a repository root: the book and the project)
    (tmp_path / "kmtlib").mkdir()
    (tmp_path / "book").mkdir()
    app = SimpleNamespace(srcdir=str(tmp_path / "book"))
    assert pages.output_folder(app, "01", {"output_dir": "results/01"}) == tmp_path / "results" / "01"
    assert pages.output_folder(app, "01", {"output_dir": "/abs/01"}) == Path("/abs/01")


def test_make_table_puts_a_paragraph_part_on_a_line_of_its_own():
    table = pages.make_table(["a", "b"], [[["x", nodes.paragraph(text="second line")], 7]], [60, 40],
                             classes=("kmt-demo",))
    assert table["classes"] == ["kmt-table", "kmt-demo"]
    assert [c["colwidth"] for c in table.findall(nodes.colspec)] == [60, 40]
    first, second = list(table.findall(nodes.entry))[2:]
    assert [p.astext() for p in first.findall(nodes.paragraph)] == ["x", "second line"]
    assert second.astext() == "7"
