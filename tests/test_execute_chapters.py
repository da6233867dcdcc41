"""kmtbook.execute_chapters: chapters executed ahead of the book build land where the build finds them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kmtbook import execute_chapters as ec

ROOT = Path(__file__).resolve().parent.parent

FRONT = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  name: python3
  display_name: Python 3
  language: python
{extra}---

# {title}

Some text with $x^2$ maths.

```{{code-cell}} ipython3
:tags: [parameters]
seed: int = 0
```

```{{code-cell}} ipython3
import os
print("threads:", os.environ.get("OMP_NUM_THREADS", "unset"))
{body}
```
"""


def _tiny_book(tmp_path: Path, chapters: dict[str, tuple[str, str]]) -> Path:
    """A book with an index and the given chapters (stem -> (front-matter extra, code))."""
    root = tmp_path / "book_root"
    (root / "book").mkdir(parents=True)
    (root / "book" / "index.md").write_text("# Index\n\nThe start.\n")
    for stem, (extra, body) in chapters.items():
        (root / "book" / f"{stem}.md").write_text(FRONT.format(extra=extra, title=stem, body=body))
    toc = "format: jb-book\nroot: book/index\nchapters:\n" + "".join(f"  - file: book/{s}\n" for s in chapters)
    (root / "_toc.yml").write_text(toc)
    (root / "_config.yml").write_text(textwrap.dedent("""\
        title: tiny
        only_build_toc_files: true
        execute:
          execute_notebooks: cache
          timeout: 120
          raise_on_error: true
        """))
    return root


def _outputs(nb) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def test_the_book_reader_and_the_cache_reader_key_every_chapter_alike():
    """myst-nb reads a chapter with the book's Markdown settings; the ahead-of-time run reads it with
    the cache plugin's defaults. Both must give the same cache key, or the build runs it again."""
    import yaml
    from jupyter_cache.cache.main import JupyterCacheBase
    from myst_nb.core.read import read_myst_markdown_notebook
    from myst_parser.config.main import MdParserConfig

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    md_config = MdParserConfig(enable_extensions=set(config["parse"]["myst_enable_extensions"]))
    key = JupyterCacheBase.create_hashed_notebook
    chapters = [p for p in ec.book_pages(ROOT) if ec.is_notebook(p.read_text())]
    assert len(chapters) >= 11
    for path in chapters:
        text = path.read_text()
        as_built = read_myst_markdown_notebook(text, config=md_config, add_source_map=True, path=str(path))
        _, ahead = ec.read_chapter(path, ROOT)
        assert key(None, as_built)[1] == key(None, ahead)[1], path.name


def test_chapters_run_with_one_thread_in_their_order_and_timing_chapters_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # the environment's setting: kept for a chapter that runs alone
    root = _tiny_book(tmp_path, {
        "ch_a": ("", "print('a done')"),
        "ch_b": ("kmt:\n  start_first: true\n", "print('b done')"),
        "ch_timed": ("kmt:\n  run_alone: true\n", "print('timed done')"),
    })
    cache = tmp_path / "cache"
    lines: list[str] = []
    outcomes = ec.execute_chapters(root, cache, jobs=1, log=lines.append)
    by_name = {o.docname: o for o in outcomes}
    assert set(by_name) == {"book/ch_a", "book/ch_b", "book/ch_timed"}
    assert all(o.error is None for o in outcomes)
    # one at a time: the chapter that asks to start first does, the timing chapter runs last
    assert [o.docname for o in outcomes] == ["book/ch_b", "book/ch_a", "book/ch_timed"]
    assert "threads: 1" in _outputs(by_name["book/ch_a"].notebook)
    assert "threads: 7" in _outputs(by_name["book/ch_timed"].notebook)
    # a second call finds everything cached and runs nothing
    assert ec.execute_chapters(root, cache, jobs=2, log=lines.append) == []
    assert "nothing to run" in lines[-1]
    assert set(ec._read_times(cache)) == set(by_name)


def test_a_failing_chapter_fails_the_command_and_is_not_cached(tmp_path):
    root = _tiny_book(tmp_path, {"ch_ok": ("", "print('ok')"), "ch_bad": ("", "raise RuntimeError('planted failure')")})
    cache = tmp_path / "cache"
    result = subprocess.run(
        [sys.executable, "-m", "kmtbook.execute_chapters", "--root", str(root), "--cache", str(cache)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert "error: book/ch_bad failed" in result.stderr and "planted failure" in result.stderr
    assert "ch_ok done" in result.stdout
    outcomes = ec.execute_chapters(root, cache, jobs=1, log=lambda m: None)
    assert [o.docname for o in outcomes] == ["book/ch_bad"]  # the good one stayed cached


def test_the_build_renders_the_chapters_executed_ahead_without_running_them(tmp_path):
    pytest.importorskip("jupyter_book")
    root = _tiny_book(tmp_path, {"ch_a": ("", "print('a done')")})
    out = tmp_path / "out"
    ec.execute_chapters(root, out / "_build" / ".jupyter_cache", jobs=1, log=lambda m: None)
    jupyter_book = Path(sys.executable).with_name("jupyter-book")  # the one beside this Python
    result = subprocess.run(
        [str(jupyter_book), "build", str(root), "-W", "-n", "--path-output", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Using cached notebook" in result.stdout and "Executing notebook" not in result.stdout
    html = (out / "_build" / "html" / "book" / "ch_a.html").read_text()
    assert "a done" in html


def test_bad_arguments_are_refused(tmp_path):
    for args, message in [
        (["--root", str(tmp_path), "--cache", str(tmp_path / "c")], "no _toc.yml"),
        (["--root", str(ROOT), "--cache", str(tmp_path / "c"), "--jobs", "0"], "--jobs"),
    ]:
        result = subprocess.run(
            [sys.executable, "-m", "kmtbook.execute_chapters", *args], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 2 and message in result.stderr


def test_two_chapters_run_side_by_side(tmp_path):
    """With two jobs, two chapters that each wait for the other's file can only finish together."""
    wait_for = (
        "import pathlib, time\n"
        "pathlib.Path('{mine}').touch()\n"
        "deadline = time.time() + 60\n"
        "while not pathlib.Path('{other}').exists() and time.time() < deadline:\n"
        "    time.sleep(0.1)\n"
        "assert pathlib.Path('{other}').exists(), 'ran alone'\n"
    )
    a, b = tmp_path / "a.flag", tmp_path / "b.flag"
    root = _tiny_book(
        tmp_path, {"ch_a": ("", wait_for.format(mine=a, other=b)), "ch_b": ("", wait_for.format(mine=b, other=a))}
    )
    outcomes = ec.execute_chapters(root, tmp_path / "cache", jobs=2, log=lambda m: None)
    assert [o.error for o in outcomes] == [None, None]
