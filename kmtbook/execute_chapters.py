"""Execute the book's chapters before Sphinx reads them: several at once, one thread each.

Why not let the book build run them? myst-nb executes one notebook after another, each with torch's
default of one thread per core. Two threads on two cores wait for each other at every parallel
region, so when any other process takes a core for a moment, the chapter stalls (on a 2-core machine
with one busy neighbour, chapter 07 went from 130 s to 736 s). One thread per chapter and as many
chapters at a time as there are usable cores keeps every core busy on a quiet machine and, on a busy
one, loses only the share of the machine that the neighbour takes.

The executed notebooks go into the jupyter-cache that the build reads (``execute_notebooks: cache``
in ``_config.yml``), stored the way myst-nb stores them: the notebook is read by myst-nb's own
reader and keyed on its code cells and kernel, so the build that follows finds every chapter
executed and only renders it. A chapter already in the cache is not run again; a chapter whose
shipped data changed is (:mod:`kmtbook.execution_cache`).

A chapter that times code declares it in its front matter and then runs after the others, alone,
with the thread counts of the environment; a chapter that takes much longer than the others asks
to start first, so that it does not start last when no earlier build has timed the chapters::

    kmt:
      run_alone: true
      start_first: true

Usage (what ``nox -s "book(device='cpu')"`` runs before ``jupyter-book build``)::

    python -m kmtbook.execute_chapters --cache _build/cpu/_build/.jupyter_cache [--jobs N]

Progress goes to stdout, one line per chapter; a chapter that fails is reported with its traceback
once all chapters have run, and the command then exits with status 1. When every chapter ran (or
was in the cache), the published numbers of their ``metrics.json`` files are compared with the
reference build (:mod:`kmtbook.reference_metrics`); one that moved beyond its tolerance fails the
command too, naming the chapter, the metric, both values and the tolerance.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

READER = {"type": "plugin", "name": "myst_nb_md"}
"""The reader myst-nb registers with jupyter-cache for MyST-Markdown notebooks (the same one it uses
when it executes a chapter itself), so that both key a chapter the same way."""

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""Read by torch, the BLAS libraries and faiss when a kernel starts."""

TIMES_FILE = "kmt_execution_times.json"
"""Written next to the cache: the seconds each chapter took at its last execution, and how it ran.
The next build starts the longest chapters first."""


@dataclass(frozen=True)
class Chapter:
    docname: str  # as Sphinx names it, e.g. "book/05_training"
    path: Path
    run_alone: bool
    start_first: bool


@dataclass(frozen=True)
class Outcome:
    docname: str
    seconds: float
    notebook: Any  # the executed nbformat notebook, or None when it failed
    error: str | None


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def book_pages(root: Path) -> list[Path]:
    """Every page of the table of contents (``_toc.yml``), as source paths."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    files = [toc["root"]]

    def collect(entries: list[dict]) -> None:  # parts hold chapters, chapters may hold sections
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            for key in ("parts", "chapters", "sections"):
                collect(entry.get(key, []))

    collect([{key: toc.get(key, []) for key in ("parts", "chapters")}])
    pages = []
    for name in files:
        candidates = [root / f"{name}{suffix}" for suffix in ("", ".md", ".ipynb")]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            raise FileNotFoundError(f"_toc.yml names {name!r}, but no such page exists under {root}")
        pages.append(path)
    return pages


def is_notebook(text: str) -> bool:
    from myst_nb.core.read import is_myst_markdown_notebook

    return is_myst_markdown_notebook(text)


def read_chapter(path: Path, root: Path):
    """The chapter as myst-nb reads it, with what its front matter asks of the schedule."""
    from myst_nb.core.read import myst_nb_reader_plugin

    nb = myst_nb_reader_plugin(str(path))
    asks = nb.metadata.get("kmt") or {}
    docname = path.relative_to(root).with_suffix("").as_posix()
    return Chapter(docname, path, bool(asks.get("run_alone", False)), bool(asks.get("start_first", False))), nb


def _execute(path: str, timeout: int, threads: int | None) -> tuple[float, Any, str | None]:
    """Run one chapter in this (worker) process; its kernel inherits the thread settings."""
    from jupyter_cache.executors.utils import single_nb_execution
    from myst_nb.core.read import myst_nb_reader_plugin

    if threads is not None:
        for name in THREAD_VARIABLES:
            os.environ[name] = str(threads)
    nb = myst_nb_reader_plugin(path)
    result = single_nb_execution(nb, cwd=str(Path(path).parent), timeout=timeout, allow_errors=False)
    if result.err is not None:
        return result.time, None, result.exc_string or repr(result.err)
    return result.time, nb, None


def _read_times(cache_path: Path) -> dict[str, float]:
    try:
        data = json.loads((cache_path / TIMES_FILE).read_text())
        return {k: float(v["seconds"]) for k, v in data.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _write_times(cache_path: Path, entries: dict[str, dict[str, Any]]) -> None:
    path = cache_path / TIMES_FILE
    try:
        previous = json.loads(path.read_text())
        previous = previous if isinstance(previous, dict) else {}
    except (OSError, ValueError):
        previous = {}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**previous, **entries}, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def _say(message: str) -> None:
    print(message, flush=True)


def execute_chapters(root: Path, cache_path: Path, *, jobs: int | None = None, timeout: int = 1800,
                     log=_say) -> list[Outcome]:
    """Execute every chapter of the book at ``root`` that ``cache_path`` does not hold yet.

    Chapters run ``jobs`` at a time (default: the usable cores), one thread each; chapters that
    ``run_alone`` run afterwards, one by one, with the environment's thread counts. Returns the
    outcome of every chapter that ran (those that failed have ``error`` set)."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    from .execution_cache import refresh

    root, cache_path = Path(root).resolve(), Path(cache_path).resolve()
    jobs = usable_cores() if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    pages = book_pages(root)
    texts = {p: p.read_text(encoding="utf-8") for p in pages}
    # The same data check the build makes: a chapter whose shipped data changed loses its record.
    refresh(cache_path, root, {p.relative_to(root).with_suffix("").as_posix(): (p, texts[p]) for p in pages})
    cache = get_cache(str(cache_path))

    pending = _pending_chapters(root, pages, texts, cache)
    if not pending:
        log("kmt: every chapter is in the execution cache; nothing to run")
        return []

    # Longest first (as timed by the last build), so that no long chapter starts last; chapters not
    # timed yet before all others, those that ask to start first at their head.
    last = _read_times(cache_path)
    shared = sorted((c for c in pending if not c.run_alone),
                    key=lambda c: (-last.get(c.docname, float("inf")), not c.start_first))
    alone = [c for c in pending if c.run_alone]
    log(f"kmt: executing {len(pending)} chapters: {len(shared)} at up to {min(jobs, len(shared) or 1)} at a "
        f"time with 1 thread each, then {len(alone)} alone")

    outcomes: list[Outcome] = []
    started_all = time.perf_counter()

    def finish(chapter: Chapter, seconds: float, nb: Any, error: str | None, threads: str, parallel: int) -> None:
        outcome = Outcome(chapter.docname, seconds, nb, error)
        outcomes.append(outcome)
        if error is None:
            project = cache.add_nb_to_project(str(chapter.path), read_data=READER)
            cache.cache_notebook_bundle(CacheBundleIn(nb, project.uri, data={"execution_seconds": seconds}),
                                        check_validity=False, overwrite=True)
            _write_times(cache_path, {chapter.docname: {"seconds": round(seconds, 2), "threads": threads,
                                                        "chapters_at_once": parallel}})
        status = "FAILED" if error else "done"
        log(f"kmt: [{len(outcomes)}/{len(pending)}] {chapter.docname} {status} in {seconds:.1f} s "
            f"({time.perf_counter() - started_all:.0f} s since start)")

    with _shared_results(cache_path / SHARED_FOLDER):
        if shared:
            _run_side_by_side(shared, min(jobs, len(shared)), timeout, finish)
        _run_alone(alone, timeout, finish)
    log(f"kmt: executed {len(outcomes)} chapters in {time.perf_counter() - started_all:.0f} s")
    return outcomes


SHARED_FOLDER = "kmt_shared_results"
"""Beside the cache: what the chapters of one run compute alike (:mod:`kmtbook.shared_results`)."""


@contextlib.contextmanager
def _shared_results(folder: Path):
    """The chapters this run executes share results in ``folder``, emptied first (a result of an
    earlier build may come from other code) and after (the executed notebooks hold what they read)."""
    from .shared_results import SHARED_VARIABLE

    shutil.rmtree(folder, ignore_errors=True)
    before = os.environ.get(SHARED_VARIABLE)
    os.environ[SHARED_VARIABLE] = str(folder)  # (the workers and their kernels inherit it)
    try:
        yield
    finally:
        if before is None:
            del os.environ[SHARED_VARIABLE]
        else:
            os.environ[SHARED_VARIABLE] = before
        shutil.rmtree(folder, ignore_errors=True)


def _pending_chapters(root: Path, pages: list[Path], texts: dict[Path, str], cache: Any) -> list[Chapter]:
    """The chapters among ``pages`` whose execution ``cache`` does not hold (same code and data)."""
    pending: list[Chapter] = []
    for path in pages:
        if path.suffix != ".md" or not is_notebook(texts[path]):
            continue
        chapter, nb = read_chapter(path, root)
        try:
            cache.match_cache_notebook(nb)
        except KeyError:
            pending.append(chapter)
    return pending


Finish = Callable[[Chapter, float, Any, str | None, str, int], None]
"""What :func:`execute_chapters` does with a chapter that ran: (chapter, seconds, executed notebook,
error or None, threads, chapters at once)."""


def _run_side_by_side(chapters: list[Chapter], workers: int, timeout: int, finish: Finish) -> None:
    """Run ``chapters`` ``workers`` at a time with one thread each, finishing each as it ends."""
    with ProcessPoolExecutor(max_workers=workers) as pool:
        running = {pool.submit(_execute, str(c.path), timeout, 1): c for c in chapters}
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                chapter = running.pop(future)
                try:
                    seconds, nb, error = future.result()
                except Exception as err:  # the worker itself died
                    seconds, nb, error = 0.0, None, f"{type(err).__name__}: {err}"
                finish(chapter, seconds, nb, error, "1", workers)


def _run_alone(chapters: list[Chapter], timeout: int, finish: Finish) -> None:
    """Run ``chapters`` one by one with the environment's thread counts."""
    for chapter in chapters:
        threads = os.environ.get("OMP_NUM_THREADS", "default")
        with ProcessPoolExecutor(max_workers=1) as pool:
            try:
                seconds, nb, error = pool.submit(_execute, str(chapter.path), timeout, None).result()
            except Exception as err:
                seconds, nb, error = 0.0, None, f"{type(err).__name__}: {err}"
        finish(chapter, seconds, nb, error, threads, 1)


def _timeout_from_config(root: Path) -> int:
    import yaml

    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8")) or {}
    return int((config.get("execute") or {}).get("timeout", 1800))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kmtbook.execute_chapters", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="the book's root folder (with _config.yml and _toc.yml)")
    parser.add_argument("--cache", required=True,
                        help="the jupyter-cache the build reads: <path-output>/_build/.jupyter_cache")
    parser.add_argument("--jobs", type=int, default=None, help="chapters at a time (default: the usable cores)")
    parser.add_argument("--no-reference-check", action="store_true",
                        help="do not compare the published numbers with data/book_build/reference_metrics.json")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if not (root / "_toc.yml").is_file():
        parser.error(f"{root.resolve()} holds no _toc.yml: pass the book's root with --root")
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    outcomes = execute_chapters(root, Path(args.cache), jobs=args.jobs, timeout=_timeout_from_config(root))
    failed = [o for o in outcomes if o.error]
    for outcome in failed:
        print(f"\nerror: {outcome.docname} failed:\n{outcome.error}", file=sys.stderr)
    if failed:
        print(f"error: {len(failed)} of {len(outcomes)} chapters failed: "
              + ", ".join(o.docname for o in failed), file=sys.stderr)
        return 1
    if not args.no_reference_check:
        return _check_references(root)
    return 0


def _check_references(root: Path) -> int:
    """Compare every published number of the build with its reference (kmtbook.reference_metrics);
    a number that moved beyond its tolerance fails the build, with the command that updates it."""
    from .reference_metrics import check_build

    try:
        comparisons, report = check_build(root, "book")
    except (OSError, ValueError) as err:  # a damaged or foreign metrics.json, a damaged reference file
        print(f"error: the published numbers cannot be checked: {err}", file=sys.stderr)
        return 1
    guarded = [c for c in comparisons if c.status != "not guarded"]
    _say(f"kmt: {len(guarded) - sum(c.failed for c in guarded)} of {len(guarded)} published numbers within their "
         f"reference tolerance ({len(comparisons) - len(guarded)} timings not guarded)")
    if report:
        print(f"error: {report}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
