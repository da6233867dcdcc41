"""What a deliberate upgrade would change: run the chapters in an environment installed from a scratch lock
(the newest versions pyproject.toml's ranges allow) and report what moves.

``nox -s upgrade`` resolves the scratch lock (``scripts/lock_requirements.py --upgrade-into``), installs the
book's environment from it, and then runs::

    python -m kmtbook.upgrade_report --new _build/upgrade/lock --out _build/upgrade

which runs every chapter in the quick profile (the parameters and seed of tests/test_notebooks.py, whose
runs the quick profile's references record) and writes ``upgrade_report.md`` and ``upgrade_report.json``
into ``--out``, naming

* every package whose version changes between the committed lock (``requirements/constraints.txt``) and
  the scratch lock (old -> new; added and dropped packages too);
* every guarded number that moves beyond its tolerance, against the quick profile's references
  (``data/book_build/reference_metrics_quick.json``, compared by :mod:`kmtbook.reference_metrics`);
* every chapter that fails, with the last line of its error (a chapter that runs but breaks the
  property checks of tests/chapter_cases.py fails too).

The report is written whole whatever it finds, and printed. The command exits with status 1 when a
chapter fails (that lock would break the book), and otherwise 0, also when numbers move: a moved number
is for the maintainer to judge from the report (``--strict`` makes it fail too). A new lock then lands
with its report, and the references it moves with ``python -m kmtbook.reference_metrics update``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import platform
import re
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .reference_metrics import (
    REFERENCE_FILES,
    Comparison,
    chapter_stems,
    check_metrics,
    current_commit,
)

SEED = 11
"""The seed of the quick-profile runs of tests/test_notebooks.py, which the quick references record."""
CASES_FILE = "tests/chapter_cases.py"
"""Each chapter's quick-profile parameters and the property checks of its metrics.json."""
REPORT_MD = "upgrade_report.md"
REPORT_JSON = "upgrade_report.json"
CONSTRAINTS = "constraints.txt"


@dataclass(frozen=True)
class ChapterRun:
    chapter: str
    status: str  # "ran", "failed" (the notebook stopped on an error) or "check failed" (tests/chapter_cases.py)
    error: str | None  # the last line of the error
    seconds: float

    @property
    def failed(self) -> bool:
        return self.status != "ran"


# --- versions --------------------------------------------------------------------------------------------


def read_pins(path: Path) -> dict[str, str]:
    """The ``name==version`` lines of a constraints file, by normalised name (PEP 503)."""
    pins = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line and not line.startswith("-"):
            name, version = line.split("==", 1)
            pins[re.sub(r"[-_.]+", "-", name.split("[")[0].strip()).lower()] = version.strip()
    return pins


def version_changes(old: Mapping[str, str], new: Mapping[str, str]) -> list[dict[str, str | None]]:
    """Every package whose version differs between two locks, by name: ``old`` or ``new`` is None for a
    package the other lock lacks."""
    return [{"package": name, "old": old.get(name), "new": new.get(name)}
            for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)]  # fmt: skip


# --- running the chapters --------------------------------------------------------------------------------


def load_cases(root: Path) -> dict[str, tuple[dict[str, Any], Callable[[dict[str, Any]], None]]]:
    """tests/chapter_cases.py's CASES by chapter stem: (the quick run's own parameters, its check)."""
    path = Path(root) / CASES_FILE
    spec = importlib.util.spec_from_file_location("kmt_chapter_cases", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {Path(name).stem: case for name, case in module.CASES.items()}


def last_line(error: BaseException) -> str:
    """The last line of an error as a reader would see it: for a notebook that stopped, its exception
    (``ModuleNotFoundError: No module named 'x'``), otherwise the exception's own last line."""
    ename, evalue = getattr(error, "ename", None), getattr(error, "evalue", None)
    if ename:
        text = f"{ename}: {evalue}" if evalue else str(ename)
    else:
        text = "".join(traceback.format_exception_only(type(error), error))
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def run_chapter(root: Path, stem: str, out: Path, parameters: Mapping[str, Any], timeout: int) -> dict[str, Any]:
    """Run ``book/<stem>.md`` under papermill into ``out/<stem>.ipynb`` (results in ``out/results``), in the
    quick profile on the CPU; returns its metrics.json. Raises what the run raises."""
    import jupytext
    import papermill as pm

    shutil.rmtree(out, ignore_errors=True)  # (no metrics.json of an earlier run is read as this one's)
    out.mkdir(parents=True)
    pm.execute_notebook(
        jupytext.read(Path(root) / "book" / f"{stem}.md"),
        str(out / f"{stem}.ipynb"),
        parameters={"device": "cpu", "profile": "quick", "seed": SEED, "output_dir": str(out / "results"),
                    **parameters},
        kernel_name="python3",
        cwd=str(Path(root) / "book"),
        progress_bar=False,
        execution_timeout=timeout,
    )  # fmt: skip
    metrics = json.loads((out / "results" / "metrics.json").read_text(encoding="utf-8"))
    if not isinstance(metrics, dict):
        raise ValueError("metrics.json is not a JSON object")
    return metrics


def run_chapters(root: Path, stems: Iterable[str], out: Path, timeout: int = 1800,
                 say: Callable[[str], None] = print) -> tuple[list[ChapterRun], dict[str, dict[str, Any]]]:  # fmt: skip
    """Run each chapter (one after another) and its property checks; the runs, and the metrics of those
    that ran and passed their checks."""
    cases = load_cases(root)
    runs: list[ChapterRun] = []
    metrics_by_chapter: dict[str, dict[str, Any]] = {}
    for stem in stems:
        parameters, check = cases[stem]
        start = time.monotonic()
        try:
            metrics = run_chapter(root, stem, Path(out) / stem, parameters, timeout)
        except Exception as err:  # any failure of the run is reported, and the next chapter runs
            run = ChapterRun(stem, "failed", last_line(err), round(time.monotonic() - start, 1))
        else:
            try:
                check(metrics)
            except Exception as err:
                run = ChapterRun(stem, "check failed", last_line(err), round(time.monotonic() - start, 1))
            else:
                run = ChapterRun(stem, "ran", None, round(time.monotonic() - start, 1))
            metrics_by_chapter[stem] = metrics
        runs.append(run)
        say(f"{stem}: {run.status} in {run.seconds:.0f} s" + (f": {run.error}" if run.error else ""))
    return runs, metrics_by_chapter


# --- the report ------------------------------------------------------------------------------------------


def moved_numbers(root: Path, metrics_by_chapter: Mapping[str, Mapping[str, Any]],
                  chapters: Iterable[str]) -> list[Comparison]:  # fmt: skip
    """The quick references of ``chapters`` that the runs moved beyond their tolerance (or lack)."""
    return [c for c in check_metrics(root, "quick", metrics_by_chapter, chapters=list(chapters)) if c.failed]


def build_report(root: Path, changes: list[dict[str, str | None]], runs: list[ChapterRun],
                 metrics_by_chapter: Mapping[str, Mapping[str, Any]], *, old_lock: str, new_lock: str,
                 environment: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """The report as a JSON object: the version changes, the guarded numbers that moved (of the chapters
    that ran; a failed chapter's numbers are not compared) and the chapters that failed."""
    compared = [run.chapter for run in runs if run.chapter in metrics_by_chapter]
    moved = moved_numbers(root, metrics_by_chapter, compared)
    return {
        "commit": current_commit(Path(root)),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "environment": dict(environment or {}),
        "old_lock": old_lock,
        "new_lock": new_lock,
        "references": REFERENCE_FILES["quick"],
        "chapters_run": len(runs),
        "version_changes": changes,
        "moved_numbers": [asdict(c) for c in moved],
        "numbers_compared": len([c for c in check_metrics(root, "quick", metrics_by_chapter, chapters=compared)
                                 if c.status != "not guarded"]),
        "failed_chapters": [asdict(run) for run in runs if run.failed],
        "runs": [asdict(run) for run in runs],
    }


def _cell(value: Any) -> str:
    return "–" if value is None else f"`{value}`".replace("|", "\\|")


def markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown, for a reader (and the job's log)."""
    changes, moved, failed = report["version_changes"], report["moved_numbers"], report["failed_chapters"]
    lines = ["# Upgrade report", "",
             f"Commit `{report['commit']}`, {report['date']}. The committed lock `{report['old_lock']}` against "
             f"the scratch lock `{report['new_lock']}` (the newest versions pyproject.toml's ranges allow); "
             f"{report['chapters_run']} chapter(s) run in the quick profile and compared with "
             f"`{report['references']}`.", ""]  # fmt: skip
    if report["environment"]:
        lines += ["Environment: " + ", ".join(f"{k} {v}" for k, v in report["environment"].items()) + ".", ""]
    lines += [f"**{len(changes)} package(s) change version, {len(moved)} guarded number(s) move beyond their "
              f"tolerance (of {report['numbers_compared']} compared), {len(failed)} chapter(s) fail.**", ""]
    lines += [f"## Versions that change ({len(changes)})", ""]
    if changes:
        lines += ["| package | committed lock | scratch lock |", "|---|---|---|"]
        lines += [f"| {c['package']} | {_cell(c['old'])} | {_cell(c['new'])} |" for c in changes]
    else:
        lines.append("None: the scratch lock holds the committed versions.")
    lines += ["", f"## Guarded numbers that move ({len(moved)})", ""]
    if moved:
        lines += ["| chapter | metric | reference | this run | tolerance |", "|---|---|---|---|---|"]
        for c in moved:
            chapter, metric = c["key"].split(":", 1)
            value = "not in this run" if c["status"] == "missing" else _cell(c["value"])
            lines.append(f"| {chapter} | {metric} | {_cell(c['reference'])} | {value} | "
                         f"{_cell(c['tolerance'])} ({c['kind']}) |")  # fmt: skip
    else:
        lines.append("None: every guarded number of the chapters that ran is within its tolerance.")
    lines += ["", f"## Chapters that fail ({len(failed)})", ""]
    if failed:
        lines += ["| chapter | how | last line of the error |", "|---|---|---|"]
        lines += [f"| {r['chapter']} | {r['status']} | {_cell(r['error'])} |" for r in failed]
    else:
        lines.append("None.")
    lines += ["", "## Every run", "", "| chapter | result | seconds |", "|---|---|---|"]
    lines += [f"| {r['chapter']} | {r['status']} | {r['seconds']:.0f} |" for r in report["runs"]]
    return "\n".join(lines) + "\n"


def write_report(report: Mapping[str, Any], folder: Path) -> tuple[Path, Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    md, js = folder / REPORT_MD, folder / REPORT_JSON
    md.write_text(markdown(report), encoding="utf-8")
    js.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return md, js


def exit_status(report: Mapping[str, Any], strict: bool = False) -> int:
    """1 when a chapter fails (or, with ``strict``, a number moves), else 0."""
    return 1 if report["failed_chapters"] or (strict and report["moved_numbers"]) else 0


def _environment() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    env = {"Python": platform.python_version()}
    with contextlib.suppress(PackageNotFoundError):
        env["torch"] = version("torch")
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kmtbook.upgrade_report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="the repository root")
    parser.add_argument("--old", default="requirements",
                        help="the folder of the committed lock (its constraints.txt), default requirements")
    parser.add_argument("--new", required=True, help="the folder of the scratch lock (its constraints.txt)")
    parser.add_argument("--out", required=True, help="where the report and the chapters' runs go")
    parser.add_argument("--chapters", nargs="*", default=None, help="chapter stems (default: every chapter)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds a cell may run")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a guarded number moves, too")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    try:
        changes = version_changes(read_pins(Path(args.old) / CONSTRAINTS), read_pins(Path(args.new) / CONSTRAINTS))
    except OSError as err:
        print(f"upgrade_report: error: {err}", file=sys.stderr)
        return 2
    stems = args.chapters or chapter_stems(root)
    runs, metrics = run_chapters(root, stems, Path(args.out) / "chapters", args.timeout)
    report = build_report(root, changes, runs, metrics, old_lock=f"{args.old}/{CONSTRAINTS}",
                          new_lock=f"{args.new}/{CONSTRAINTS}", environment=_environment())  # fmt: skip
    md, js = write_report(report, Path(args.out))
    print(md.read_text(encoding="utf-8"))
    print(f"report: {md} and {js}")
    return exit_status(report, args.strict)


if __name__ == "__main__":
    sys.exit(main())
