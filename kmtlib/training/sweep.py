"""The sweep mechanism: a plan of training runs, cut into jobs and run, resumably.

A plan is a list of :class:`PlannedRun` (a part, a run folder name, a :class:`TrainConfig`), which
whoever plans makes (the book's plan of the paper's runs is in its own tooling). Runs that share a
shape (d, k, n and token embedding) form a **group**; a group is cut into jobs of at most
``runs_per_group`` runs (memory), and a job's unfinished runs train together as one stacked pass
(:func:`kmtlib.training.group.train_group`: each run exactly as if trained alone). The jobs are
independent: ``executor="serial"`` runs them one after another in this process; ``"local"`` and
``"slurm"`` hand them to `submitit <https://github.com/facebookincubator/submitit>`_ (local
subprocesses, or a Slurm job array), which this module does not reimplement. Whichever way a job
runs, every run lands in ``OUT/<part>/<run folder>/`` with the contract of ``python -m
kmtlib.train``: a finished run (manifest present) is skipped, an interrupted one resumes from its
checkpoint, so a killed sweep is continued by running the same command again.

:func:`describe` (a command's ``--plan``) says the plan and an estimate of its duration from the
measured seconds per run-step of runs already finished under ``OUT`` (and other folders of runs),
without training anything. :func:`add_options` and :func:`run_command` give a plan a command line.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import logging
import shlex
import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import TrainConfig
from .group import train_group
from .job_watch import QueueAnswerError
from .run_folder import RunInUseError

EXECUTORS: tuple[str, ...] = ("serial", "local", "slurm")
SLURM_COMMANDS: tuple[str, ...] = ("sbatch", "srun")
"""What submitit needs of Slurm on the machine that submits (the job watch asks ``squeue`` too, but
goes without it)."""
RUNS_PER_GROUP = 10
"""The default largest number of runs trained as one stacked pass (a run of the paper's main
configuration holds about 0.1 GB of activations in a step, on the CPU or the GPU)."""


@dataclass(frozen=True)
class PlannedRun:
    """One training run of the plan: its part, its folder name and its configuration."""

    part: str
    name: str
    config: TrainConfig

    @property
    def shape(self) -> tuple[int, int, int, str]:
        """What runs of one group share: (d, k, n, embedding)."""
        return (self.config.d, self.config.k, self.config.n, self.config.embedding)

    def folder(self, out: Path) -> Path:
        return out / self.part / self.name


def select(runs: Iterable[PlannedRun], only: Sequence[str] = ()) -> list[PlannedRun]:
    """The runs of the parts or folder-name patterns in ``only`` (all when empty): a part of the
    plan, or a pattern of run folder names such as ``"*_li1_*"``."""
    runs = list(runs)
    if not only:
        return runs
    parts = list(dict.fromkeys(r.part for r in runs))  # (in plan order)
    unknown = [o for o in only if o not in parts and not any(fnmatch.fnmatch(r.name, o) for r in runs)]
    if unknown:
        raise ValueError(f"--only {', '.join(unknown)}: neither a part ({', '.join(parts)}) nor a run of the plan")
    return [r for r in runs if r.part in only or any(fnmatch.fnmatch(r.name, o) for o in only)]


def check_plan(runs: Iterable[PlannedRun]) -> None:
    """Refuse a plan that puts two runs into one folder (a ValueError naming it): they would be
    one run trained twice over, or two runs writing one folder."""
    seen: set[tuple[str, str]] = set()
    for run in runs:
        if (run.part, run.name) in seen:
            raise ValueError(f"two runs of the plan in {run.part}/{run.name}: each run needs a folder of its own")
        seen.add((run.part, run.name))


def groups(runs: Iterable[PlannedRun], runs_per_group: int | None = None) -> list[list[PlannedRun]]:
    """The runs grouped by shape, groups and runs in plan order; with ``runs_per_group`` a shape's
    runs are cut into groups of at most that many (the jobs of a sweep)."""
    out: dict[tuple, list[PlannedRun]] = {}
    for run in runs:
        out.setdefault(run.shape, []).append(run)
    if runs_per_group is None:
        return list(out.values())
    if isinstance(runs_per_group, bool) or not isinstance(runs_per_group, int) or runs_per_group < 1:
        raise ValueError(f"runs_per_group must be an integer >= 1, got {runs_per_group!r}")
    return [g[i : i + runs_per_group] for g in out.values() for i in range(0, len(g), runs_per_group)]


def finished(run: PlannedRun, out: Path) -> bool:
    """The run's manifest is there with at least the planned steps."""
    manifest = run.folder(out) / "manifest.json"
    if not manifest.is_file():
        return False
    try:
        return int(json.loads(manifest.read_text()).get("steps", -1)) >= run.config.steps
    except (ValueError, OSError):
        return False


def steps_done(run: PlannedRun, out: Path) -> int:
    """The last step the run's log reached (0 when it has none): what the progress bar counts."""
    if finished(run, out):
        return run.config.steps
    log = run.folder(out) / "log.csv"
    try:
        lines = log.read_text().strip().splitlines()
    except OSError:
        return 0
    for line in reversed(lines[1:]):
        first = line.split(",", 1)[0]
        if first.isdigit():
            return min(int(first), run.config.steps)
    return 0


def seconds_per_step(folders: Iterable[Path]) -> dict[tuple[int, int, int, str], float]:
    """The measured wall seconds per run-step of the finished runs in ``folders`` (folders of run
    folders, or of parts holding them), by shape (the mean over runs; a run trained in a group of
    S counts its group's seconds per step over S)."""
    seen: dict[tuple, list[float]] = {}
    manifests = [m for folder in folders for pattern in ("*/manifest.json", "*/*/manifest.json")
                 for m in Path(folder).glob(pattern)]  # fmt: skip
    for manifest in manifests:
        try:
            record = json.loads(manifest.read_text())
            cfg = record["config"]
            shape = (cfg["d"], cfg["k"], cfg["n"], cfg["embedding"])
            together = int(record.get("group", {}).get("runs", 1))
            seen.setdefault(shape, []).append(float(record["wall_s_per_step"]) / together)
        except (ValueError, KeyError, OSError):
            continue
    return {shape: sum(v) / len(v) for shape, v in seen.items()}


def describe(
    runs: Sequence[PlannedRun], out: Path, timings: Sequence[Path] = (), runs_per_group: int = RUNS_PER_GROUP
) -> str:
    """The plan as text: groups, runs, steps left and the time they would take, from the seconds
    per run-step of runs finished under ``out`` or in ``timings`` (other folders of runs); the
    jobs are the groups cut to ``runs_per_group`` runs trained together."""
    measured = {**seconds_per_step(timings), **seconds_per_step([out])}
    lines, total_left, unknown = [], 0.0, 0
    for group in groups(runs):
        d, k, n, embedding = group[0].shape
        left = sum(r.config.steps - steps_done(r, out) for r in group)
        rate = measured.get(group[0].shape)
        if rate is None and left:
            unknown += 1
        total_left += left * (rate or 0.0)
        eta = f", about {left * rate / 3600:.1f} h left" if rate and left else ""
        lines.append(f"group d={d} k={k} n={n} {embedding}: {len(group)} run(s), {left} step(s) left{eta}")
    done = sum(finished(r, out) for r in runs)
    jobs = len(groups(runs, runs_per_group))
    head = (f"{len(runs)} run(s) in {len(groups(runs))} group(s) under {out}; {done} finished; "
            f"{jobs} job(s) of at most {runs_per_group} run(s) trained together")  # fmt: skip
    sources = ", ".join(str(p) for p in [out, *timings])
    tail = f"time left, one group after another at the seconds per run-step measured in {sources}: "
    tail += f"about {total_left / 3600:.1f} h"
    if unknown:
        tail += f" plus {unknown} group(s) with no finished run to measure"
    return "\n".join([head, *lines, tail])


def run_group(
    group: Sequence[PlannedRun], out: str, threads: int | None = None, program: str = "kmtlib.training.sweep"
) -> list[str]:
    """Train the runs of a group that are not finished, together (resuming interrupted ones);
    return the folders trained. What a submitit job runs (it must be importable and picklable);
    ``program`` names the sweep's command in the runs' manifests."""
    root = Path(out)
    todo = [run for run in group if not finished(run, root)]
    if not todo:
        return []
    folders = [run.folder(root) for run in todo]
    command = f"{program} (group {todo[0].shape}: {', '.join(r.part + '/' + r.name for r in todo)})"
    summaries = train_group([r.config for r in todo], folders, resume=True, quiet=True, threads=threads,
                            command=command, name=f"group {todo[0].shape}")  # fmt: skip
    diverged = [s for s in summaries if s["status"] == "diverged"]
    if diverged:
        raise FloatingPointError("; ".join(f"{s['out_dir']}: {s['error']}" for s in diverged))
    return [str(f) for f in folders]


def _progress(runs: Sequence[PlannedRun], out: Path):
    from tqdm.auto import tqdm

    total = sum(r.config.steps for r in runs)
    bar = tqdm(total=total, unit="step", desc="sweep", smoothing=0.05, dynamic_ncols=True)
    bar.update(sum(steps_done(r, out) for r in runs))
    return bar


def execute(
    runs: Sequence[PlannedRun], out: Path, executor: str = "serial", threads: int | None = None,
    slurm: dict[str, Any] | None = None, poll_s: float = 5.0, runs_per_group: int = RUNS_PER_GROUP,
    program: str = "kmtlib.training.sweep", check_s: float = 15.0,
) -> None:  # fmt: skip
    """Run the groups of ``runs`` (at most ``runs_per_group`` runs trained together): in this
    process (``serial``), or as submitit jobs (``local`` subprocesses, ``slurm``: a job array),
    with a progress bar over all their steps (read from the runs' logs every ``poll_s`` seconds);
    ``program`` names the command in the manifests.

    Submitted jobs are watched (:class:`~kmtlib.training.job_watch.JobWatch`, every ``check_s``
    seconds, with ``squeue`` on Slurm whether or not the cluster keeps accounting): a job that
    ends without finishing its group (cancelled, preempted, its node lost) is said on the terminal
    about two checks after it ended, the other jobs are waited for, and then a
    :class:`JobsEndedError` names the jobs that are gone or failed. Their runs keep their
    checkpoints: the same command again resumes them. An answer of squeue that cannot be read
    ends the wait with a :class:`~kmtlib.training.job_watch.QueueAnswerError` naming the jobs left
    unwatched. submitit's own messages go to ``OUT/_submitit/submitit.log``, not the terminal."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    check_executor(executor, "executor")
    check_plan(runs)
    out.mkdir(parents=True, exist_ok=True)
    todo = [g for g in groups(runs, runs_per_group) if not all(finished(r, out) for r in g)]
    bar = _progress(runs, out)
    try:
        if executor == "serial":
            for group in todo:
                run_group(group, str(out), threads, program)
                bar.update(sum(steps_done(r, out) for r in runs) - bar.n)
            return
        with _submitit_log(out / "_submitit" / "submitit.log"):
            jobs = _submit(todo, out, executor, threads, slurm, program)
            try:
                gone = _wait(jobs, runs, out, bar, executor, poll_s, check_s)
            except QueueAnswerError as exc:
                ids = ", ".join(str(job.job_id) for job in jobs)
                raise QueueAnswerError(f"{exc}; job(s) {ids} were left unwatched and may still run") from None
            bar.update(sum(steps_done(r, out) for r in runs) - bar.n)
            failed = [_failure(job) for job in jobs if str(job.job_id) not in gone]
        problems = [f"job {line}" for line in [*gone.values(), *filter(None, failed)]]
        if problems:
            raise JobsEndedError(f"{len(problems)} of {len(jobs)} job(s) ended without finishing their runs: "
                                 + "; ".join(problems))  # fmt: skip
    finally:
        bar.close()


def check_executor(executor: str, option: str = "--executor") -> None:
    """A ValueError, before submitit is asked, when ``executor`` cannot run on this machine: submitit
    is not installed (``local``, ``slurm``), or Slurm's commands (:data:`SLURM_COMMANDS`) are not on
    ``PATH`` (``slurm``); the message says how to run instead (``option``: how the caller names the
    executor)."""
    if executor == "serial":
        return
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise ValueError(f"{option} {executor} needs submitit, which is not installed (pip install "
                         f"'kmtlib[sweep]'); or run in this process with {option} serial") from None
    missing = [name for name in SLURM_COMMANDS if shutil.which(name) is None]
    if executor == "slurm" and missing:
        raise ValueError(f"{option} slurm: no Slurm commands found ({', '.join(missing)} not on PATH); to run on "
                         f"this machine instead, use {option} local (or {option} serial)")


class JobsEndedError(RuntimeError):
    """Jobs of a sweep ended without finishing their runs (gone from the scheduler, or their
    training failed); the message is one line naming each job and what happened to it."""


def _submit(
    todo: Sequence[Sequence[PlannedRun]], out: Path, executor: str, threads: int | None,
    slurm: dict[str, Any] | None, program: str,
) -> list[Any]:  # fmt: skip
    """Hand every group to submitit (one job each; on Slurm one job array)."""
    import submitit

    pool = submitit.AutoExecutor(folder=out / "_submitit", cluster="local" if executor == "local" else "slurm")
    parameters: dict[str, Any] = {"timeout_min": 24 * 60}
    if executor == "slurm":
        parameters.update(slurm or {})
    pool.update_parameters(**parameters)
    try:
        with pool.batch():
            jobs = [pool.submit(run_group, group, str(out), threads, program) for group in todo]
    except submitit.core.utils.FailedJobError as exc:  # (sbatch refused them: a partition that is not there, ...)
        said = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise ValueError(f"the scheduler refused the jobs (see --slurm): {said}") from None
    return jobs


def _wait(
    jobs: Sequence[Any], runs: Sequence[PlannedRun], out: Path, bar: Any, executor: str, poll_s: float,
    check_s: float,
) -> dict[str, str]:  # fmt: skip
    """Wait until every job has a result or is gone; keep the bar at the steps the logs reached.
    Returns the ids of the gone jobs, each with its line for the error."""
    from .job_watch import JobWatch, queue_states

    watch = JobWatch(jobs, queue_states if executor == "slurm" else None, check_s=check_s)
    said: dict[str, str] = {}
    while True:
        bar.update(sum(steps_done(r, out) for r in runs) - bar.n)
        waiting = [job for job in jobs if not job.paths.result_pickle.exists()]
        gone = watch.check()
        for job in gone:
            if str(job.job_id) not in said:
                line = said[str(job.job_id)] = f"{watch.describe([job])} is gone from the scheduler"
                others = len(waiting) - len(gone)
                bar.write(f"sweep: job {line}" + (f"; waiting for the {others} other job(s)" if others else ""),
                          file=sys.stderr)
        if len(gone) == len(waiting):
            return said
        time.sleep(poll_s)


def _failure(job: Any) -> str | None:
    """None for a job whose group finished, else ``"<id> failed: <the error's last line> (log: ...)"``."""
    try:
        job.result()
    except Exception as exc:  # (submitit raises the job's error with its trace and log paths)
        lines = [line.strip() for line in str(exc).splitlines() if line.strip() and not line.startswith("---")]
        trace_end = [line for line in lines if not line.startswith(("You can check", "or at paths", "- /"))]
        return f"{job.job_id} failed: {trace_end[-1] if trace_end else type(exc).__name__} (log: {job.paths.stderr})"
    return None


@contextlib.contextmanager
def _submitit_log(path: Path) -> Iterator[None]:
    """Send the ``submitit`` logger's messages (such as its warnings when sacct cannot answer, on
    a cluster without accounting) to ``path`` instead of the terminal, for the duration."""
    logger = logging.getLogger("submitit")
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    saved = logger.handlers[:], logger.propagate
    logger.handlers[:] = [handler]
    logger.propagate = False
    try:
        yield
    finally:
        logger.handlers[:], logger.propagate = saved
        handler.close()


def add_options(p: argparse.ArgumentParser, out: str) -> None:
    """The options of a sweep command that concern running a plan (``out``: the default root)."""
    p.add_argument("--out", default=out, help="root folder: OUT/<part>/<run folder>/ (default %(default)s)")
    p.add_argument("--only", action="append", default=[], help="a part or a run-name pattern; repeatable")
    p.add_argument("--executor", choices=EXECUTORS, default="serial", help="how the groups run (default %(default)s)")
    p.add_argument("--threads", type=int, default=None, help="torch threads per job")
    p.add_argument(
        "--runs-per-group", type=int, default=RUNS_PER_GROUP,
        help="the most runs of one shape trained together as one stacked pass, one job (default %(default)s)",
    )
    p.add_argument("--plan", action="store_true", help="print the plan and the time left, train nothing")
    p.add_argument(
        "--timings", action="append", default=[],
        help="a folder of finished runs whose seconds per step estimate the time left, besides OUT's own (repeatable)",
    )
    p.add_argument(
        "--slurm", default="",
        help="with --executor slurm: submitit Slurm parameters as a JSON object, e.g. '{\"slurm_partition\": \"gpu\"}'",
    )


def run_command(
    plan: Sequence[PlannedRun], args: argparse.Namespace, program: str, argv: Sequence[str] | None = None
) -> None:
    """What a sweep command does with its plan and the options of :func:`add_options`: select
    ``--only``, print the plan, and (unless ``--plan``) run it and print it again. Bad options, and
    a run folder that cannot be trained into (in use by another process, holding another run), end
    in one ``error:`` line (SystemExit) naming what is wrong, before anything is written. Jobs that
    ended without finishing their runs (cancelled, preempted, failed) end in one ``error:`` line
    naming them and the command that resumes them: ``program`` with the arguments ``argv``
    (default ``sys.argv[1:]``)."""
    try:
        check_plan(plan)
        runs = select(plan, args.only)
        slurm = slurm_parameters(args.slurm, args.executor)
        if not args.plan:
            check_executor(args.executor, "--executor")
    except (ValueError, TypeError) as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.threads is not None and args.threads < 1:
        raise SystemExit(f"error: --threads must be >= 1, got {args.threads}")
    if args.runs_per_group < 1:
        raise SystemExit(f"error: --runs-per-group must be >= 1, got {args.runs_per_group}")
    out = Path(args.out)
    timings = [Path(p) for p in args.timings]
    print(describe(runs, out, timings, args.runs_per_group), file=sys.stderr)
    if args.plan:
        return
    try:
        execute(runs, out, args.executor, args.threads, slurm, runs_per_group=args.runs_per_group, program=program)
    except (ValueError, TypeError, OSError, RunInUseError, FloatingPointError) as exc:
        # (as python -m kmtlib.train: a folder in use or holding another run, a full disk, divergence)
        raise SystemExit(f"error: {exc}") from None
    except JobsEndedError as exc:
        again = " ".join([program, *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
        raise SystemExit(f"error: {exc}. Their runs keep their checkpoints: `{again}` resumes them") from None
    print(describe(runs, out, timings, args.runs_per_group), file=sys.stderr)


def slurm_parameters(text: str, executor: str) -> dict[str, Any] | None:
    """``--slurm``'s JSON object of submitit Slurm parameters (None when empty); a ValueError
    naming ``--slurm`` for text that is not a JSON object, or with an executor other than slurm."""
    if not text:
        return None
    if executor != "slurm":
        raise ValueError(f"--slurm applies to --executor slurm only, not to --executor {executor}")
    try:
        parameters = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"--slurm is not JSON ({exc}): {text!r}") from None
    if not isinstance(parameters, dict):
        raise ValueError(f"--slurm must be a JSON object of submitit Slurm parameters, got {text!r}")
    return parameters
