"""The paper's whole set of training runs as one command: ``python -m kmtlib.sweep``.

The paper's learning results are medians over its ten training seeds, and its training-dynamics
figures (9 and 10) are sweeps of 10 000-step runs. :func:`paper_plan` lists them all:

* ``main``: the main configuration (d = 32, k = 10, n = 512, loss inverse temperature 10) at both
  widths, tokens of width d + k (``onehot``) and of width d (``none``), for the ten seeds: the runs
  that chapters 05 to 07 read through ``weights_dir`` (folders ``<embedding>_seed<S>/``);
* ``dynamics``: the loss-temperature, number-of-clusters and dimension sweeps of chapter 08 at both
  widths for the ten seeds (folders ``d<d>_k<k>_li<li>_<embedding>_seed<S>/``, what its ``logs_dir``
  reads; the k = 10 point of the k sweep is the main configuration).

Runs that share a shape (d, k, n and token embedding) form a **group**; the groups, cut into jobs
(below), are independent. ``--executor serial`` runs the jobs one after another in this process;
``--executor local`` and ``--executor slurm`` hand them to
`submitit <https://github.com/facebookincubator/submitit>`_ (local subprocesses, or a Slurm job
array), which this module does not reimplement. Whichever way a job runs, every run lands in
``OUT/<part>/<run folder>/`` with the contract of ``python -m kmtlib.train``: a finished run
(manifest present) is skipped, an interrupted one resumes from its checkpoint, so a killed sweep
is continued by running the same command again.

A group is cut into jobs of at most ``--runs-per-group`` runs (memory); a job's unfinished runs
train together as one stacked pass with a leading run axis on the weights
(:func:`kmtlib.train_group.train_group`: each run exactly as if trained alone). ``--plan`` prints
the plan and an estimate of its duration from the measured seconds per run-step of runs already
finished under ``OUT`` (and ``--timings`` folders), without training anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import re
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .train import PAPER_SEEDS, TrainConfig
from .train_group import train_group

PARTS: tuple[str, ...] = ("main", "dynamics")
EXECUTORS: tuple[str, ...] = ("serial", "local", "slurm")
RUNS_PER_GROUP = 10
"""The default largest number of runs trained as one stacked pass (the paper's ten seeds; a run of
the main configuration holds about 0.1 GB of activations in a step, on the CPU or the GPU)."""

DYNAMICS_CONFIGS: tuple[tuple[int, int, float], ...] = (
    (32, 6, 10.0), (4, 6, 10.0),
    (32, 6, 1.0), (32, 6, 4.0), (32, 6, 7.0),
    (4, 6, 1.0), (4, 6, 4.0), (4, 6, 7.0),
    (32, 16, 10.0), (32, 25, 10.0),
    (8, 6, 10.0), (16, 6, 10.0),
)  # fmt: skip
"""(d, k, loss inverse temperature) of chapter 08's sweeps, each listed once (as
``scripts/train_dynamics.sh``); the k = 10 point is the main configuration."""

EMBEDDINGS: tuple[str, ...] = ("onehot", "none")
"""The two widths: tokens of width d + k, and of width d (``"none"``, the name of the shipped runs)."""


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


def _loss_temperature_name(value: float) -> str:
    return f"{value:g}"


def paper_plan(
    seeds: Sequence[int] = PAPER_SEEDS, steps: int = 10_000, device: str = "cpu", **overrides: Any
) -> list[PlannedRun]:
    """Every run of the paper's set for ``seeds`` (default its ten), ``steps`` each, in an order
    that finishes whole configurations seed by seed. ``overrides`` replace other training options
    of every run (a small test plan: ``n=32, batch=4, val_batches=1``)."""
    runs = []
    for seed in seeds:
        for embedding in EMBEDDINGS:
            config = TrainConfig(d=32, k=10, n=512, embedding=embedding, seed=seed, steps=steps, device=device)
            runs.append(PlannedRun("main", f"{embedding}_seed{seed}", dataclasses.replace(config, **overrides)))
    for seed in seeds:
        for d, k, li in DYNAMICS_CONFIGS:
            for embedding in EMBEDDINGS:
                config = TrainConfig(d=d, k=k, n=512, embedding=embedding, seed=seed, steps=steps,
                                     loss_inv_temp=li, device=device)  # fmt: skip
                name = f"d{d}_k{k}_li{_loss_temperature_name(li)}_{embedding}_seed{seed}"
                runs.append(PlannedRun("dynamics", name, dataclasses.replace(config, **overrides)))
    if not re.fullmatch(r"cpu|auto|cuda(:\d+)?", device):
        raise ValueError(f"device must be cpu, cuda, cuda:N or auto, got {device!r}")
    for run in runs:
        # (the device is checked where a run trains: a Slurm sweep is planned where there is no GPU)
        dataclasses.replace(run.config, device="cpu").validated()
    return runs


def select(runs: Iterable[PlannedRun], only: Sequence[str] = ()) -> list[PlannedRun]:
    """The runs of the parts or folder-name patterns in ``only`` (all when empty): ``main``,
    ``dynamics``, or a pattern such as ``"*_li1_*"`` or ``"onehot_seed153476998"``."""
    runs = list(runs)
    if not only:
        return runs
    unknown = [o for o in only if o not in PARTS and not any(fnmatch.fnmatch(r.name, o) for r in runs)]
    if unknown:
        raise ValueError(f"--only {', '.join(unknown)}: neither a part ({', '.join(PARTS)}) nor a run of the plan")
    return [r for r in runs if r.part in only or any(fnmatch.fnmatch(r.name, o) for o in only)]


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


def run_group(group: Sequence[PlannedRun], out: str, threads: int | None = None) -> list[str]:
    """Train the runs of a group that are not finished, together (resuming interrupted ones);
    return the folders trained. What a submitit job runs (it must be importable and picklable)."""
    root = Path(out)
    todo = [run for run in group if not finished(run, root)]
    if not todo:
        return []
    folders = [run.folder(root) for run in todo]
    command = f"python -m kmtlib.sweep (group {todo[0].shape}: {', '.join(r.part + '/' + r.name for r in todo)})"
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
) -> None:  # fmt: skip
    """Run the groups of ``runs`` (at most ``runs_per_group`` runs trained together): in this
    process (``serial``), or as submitit jobs (``local`` subprocesses, ``slurm``: a job array),
    with a progress bar over all their steps."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    out.mkdir(parents=True, exist_ok=True)
    todo = [g for g in groups(runs, runs_per_group) if not all(finished(r, out) for r in g)]
    bar = _progress(runs, out)
    try:
        if executor == "serial":
            for group in todo:
                run_group(group, str(out), threads)
                bar.update(sum(steps_done(r, out) for r in runs) - bar.n)
            return
        import submitit

        pool = submitit.AutoExecutor(folder=out / "_submitit", cluster="local" if executor == "local" else "slurm")
        parameters: dict[str, Any] = {"timeout_min": 24 * 60}
        if executor == "slurm":
            parameters.update(slurm or {})
        pool.update_parameters(**parameters)
        with pool.batch():
            jobs = [pool.submit(run_group, group, str(out), threads) for group in todo]
        while not all(job.done() for job in jobs):
            time.sleep(poll_s)
            bar.update(sum(steps_done(r, out) for r in runs) - bar.n)
        failures = []
        for job in jobs:
            try:
                job.result()
            except Exception as exc:  # (submitit raises the job's error with its log)
                failures.append(f"job {job.job_id}: {exc}")
        bar.update(sum(steps_done(r, out) for r in runs) - bar.n)
        if failures:
            raise RuntimeError("some groups failed (rerun the command to resume them):\n" + "\n".join(failures))
    finally:
        bar.close()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kmtlib.sweep", description=__doc__.splitlines()[0])
    p.add_argument("--profile", choices=("paper",), default="paper", help="the set of runs (the paper's)")
    p.add_argument("--out", default="runs/sweep", help="root folder: OUT/main/, OUT/dynamics/ (default %(default)s)")
    p.add_argument(
        "--only", action="append", default=[], help="a part (main, dynamics) or a run-name pattern; repeatable"
    )
    p.add_argument(
        "--seeds", default=",".join(map(str, PAPER_SEEDS)), help="comma-separated seeds (default the paper's ten)"
    )
    p.add_argument("--steps", type=int, default=10_000, help="training steps per run (default %(default)s)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default %(default)s)")
    p.add_argument("--executor", choices=EXECUTORS, default="serial", help="how the groups run (default %(default)s)")
    p.add_argument("--threads", type=int, default=None, help="torch threads per job")
    p.add_argument(
        "--runs-per-group", type=int, default=RUNS_PER_GROUP,
        help="the most runs of one shape trained together as one stacked pass, one job (default %(default)s)",
    )
    p.add_argument("--plan", action="store_true", help="print the plan and the time left, train nothing")
    p.add_argument(
        "--timings", action="append", default=[],
        help="a folder of finished runs whose seconds per step estimate the time left, besides OUT's own "
        "(repeatable; the book's shipped runs were measured on a 2-core CPU, one thread per run)",
    )
    p.add_argument(
        "--slurm", default="", help="submitit Slurm parameters as JSON, e.g. '{\"slurm_partition\": \"gpu\"}'"
    )
    return p


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"error: --seeds must be integers separated by commas, got {args.seeds!r}") from None
    try:
        runs = select(paper_plan(seeds, args.steps, args.device), args.only)
        slurm = json.loads(args.slurm) if args.slurm else None
    except (ValueError, TypeError, RuntimeError) as exc:
        raise SystemExit(f"error: {exc}") from None
    out = Path(args.out)
    timings = [Path(p) for p in args.timings]
    if args.runs_per_group < 1:
        raise SystemExit(f"error: --runs-per-group must be >= 1, got {args.runs_per_group}")
    print(describe(runs, out, timings, args.runs_per_group), file=sys.stderr)
    if args.plan:
        return
    execute(runs, out, args.executor, args.threads, slurm, runs_per_group=args.runs_per_group)
    print(describe(runs, out, timings, args.runs_per_group), file=sys.stderr)


if __name__ == "__main__":
    main()
