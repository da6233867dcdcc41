"""Training a group of runs of one shape together, each exactly as if it were trained alone.

Command line: the single-run command with ``--seeds`` instead of ``--seed``::

    python -m kmtlib.train --d 32 --k 10 --embedding onehot --seeds 153476998,235510766 --out runs/main

writes one run folder per seed, ``runs/main/seed<S>/``, each with the files, the log, the
checkpoints and the resume contract of a single run (:mod:`kmtlib.training`): ``--resume`` continues
every run of the group from its own checkpoint, ``--overwrite`` starts them all again.

Python::

    from kmtlib.training import TrainConfig, train_group
    configs = [TrainConfig(d=8, k=4, n=128, steps=500, seed=s) for s in (1, 2, 3)]
    summaries = train_group(configs, ["runs/s1", "runs/s2", "runs/s3"])

How. Every run keeps its own model, Adam state, learning-rate schedule, data stream, dropout
stream and validation tasks, the objects :func:`kmtlib.training.train` would make for it; a training
step draws every run's batch from its own stream, applies all the runs' layers in one pass
(:class:`kmtlib.fast.run_stack.RunStack`, the weights stacked along a leading run axis), backpropagates
the sum of the runs' losses (run s's loss depends on run s's weights only, so each run receives its
own gradient) and steps each run's optimiser. Evaluation, checkpoints and logs are per run, on the
run's own schedule. The runs may differ in seed, loss temperature, dropout rate, learning-rate
settings, steps, task distribution and evaluation schedule; they must share what the stack shares
(:data:`SHARED`): d, k, n, embedding, batch, gamma, dtype and device.

A group stopped anywhere resumes: runs whose checkpoints lag the others (a kill between two runs'
checkpoints) train alone, in a smaller stack, until they have caught up, then the group trains as
one again. Whether a run trained in a group ends with the very weights it would have alone depends
only on whether the batched products round as the single ones do; on the CPUs tried they do, to
the last bit (``tests/test_train_group.py`` asserts float tolerance and reports which).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ..fast.run_stack import RunStack
from ..losses import smoothed_objective_unchecked
from ..transformer import KMeansTransformer
from .config import TrainConfig
from .loop import TrainingRun, prints_rows, progress_bar, tune_malloc
from .run_folder import check_run_options, checked_run_folder, run_lock

SHARED: tuple[str, ...] = ("d", "k", "n", "embedding", "code_width", "batch", "gamma", "dtype", "device")
"""The options every run of a group must share (they fix the shapes of the stacked pass)."""


def group_problem(configs: Sequence[TrainConfig]) -> str | None:
    """Why these runs cannot train as one group, or None when they can."""
    if not configs:
        return "no runs"
    for name in SHARED:
        values = {getattr(c, name) for c in configs}
        if len(values) > 1:
            shown = ", ".join(sorted(map(str, values)))
            return f"the runs differ in {name} ({shown}); a group shares {', '.join(SHARED)}"
    if any(c.mixed_k for c in configs):
        return "a run for any number of clusters draws its k per batch: train such runs one at a time"
    return None


def train_group(
    configs: Sequence[TrainConfig | dict[str, Any]],
    out_dirs: Sequence[str | os.PathLike],
    *,
    resume: bool = False,
    overwrite: bool = False,
    quiet: bool | None = None,
    threads: int | None = None,
    stop_at: int | None = None,
    callback: Callable[[int, dict[str, Any]], None] | None = None,
    tune_memory: bool = True,
    command: str | None = None,
    name: str = "group",
) -> list[dict[str, Any]]:
    """Train the runs ``configs`` together, run i into ``out_dirs[i]``; return their summaries.

    The arguments are those of :func:`kmtlib.training.train`, for every run of the group (``callback``
    receives the run's index and its log row; ``name`` labels the progress bar). Every folder is
    checked before any is changed: one that :func:`~kmtlib.training.train` would refuse refuses the
    group. A run whose loss stops being finite ends with ``status="diverged"`` (and an ``error``)
    and the others go on.
    """
    runs = [(TrainConfig.from_dict(c) if isinstance(c, dict) else c).validated() for c in configs]
    stop_at, threads = check_run_options(stop_at, threads, resume, overwrite)
    outs = [checked_run_folder(o) for o in out_dirs]  # (every folder checked before any is created)
    if len(outs) != len(runs):
        raise ValueError(f"{len(runs)} run configuration(s) but {len(outs)} run folder(s)")
    if any(run.starts != "random" for run in runs):
        raise ValueError("starts='estimator' trains one run at a time (kmtlib.training.train), not in a group")
    problem = group_problem(runs)
    if problem is not None:
        raise ValueError(f"these runs cannot train as one group: {problem}")
    resolved = [o.resolve() for o in outs]
    if len(set(resolved)) < len(resolved):
        raise ValueError("two runs of the group have the same run folder")
    for out in outs:
        out.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as locks:
        for out in outs:
            locks.enter_context(run_lock(out))
        return _train_group_locked(
            runs, outs, resume, overwrite, quiet, threads, stop_at, callback, tune_memory, command, name
        )


def _train_group_locked(
    configs, outs, resume, overwrite, quiet, threads, stop_at, callback, tune_memory, command, name
) -> list[dict[str, Any]]:
    if threads is not None:
        torch.set_num_threads(threads)
    runs = [TrainingRun.open(c, o, resume, overwrite, command) for c, o in zip(configs, outs)]  # all refusals first
    for run in runs:
        run.prepare()
    if tune_memory and runs[0].device.type == "cpu":
        tune_malloc()
    for i, run in enumerate(runs):
        run.start(prints_rows(quiet), None if callback is None else _for_run(callback, i))
        run.manifest_extra = {"group": {"runs": len(runs), "folders": [str(o) for o in outs]}}
    total = sum(c.steps for c in configs)
    bar = progress_bar(total, sum(min(r.step, r.config.steps) for r in runs), name, quiet)
    try:
        for run in runs:
            run.evaluate_first()
        errors = _step_until_done(runs, stop_at, bar)
    finally:
        bar.close()
    summaries = []
    for i, run in enumerate(runs):
        if i in errors:
            summary = run.finish("diverged")
            summary["error"] = errors[i]
        else:
            summary = run.finish("finished" if run.done else "stopped")
        summaries.append(summary)
    return summaries


def _step_until_done(runs: list[TrainingRun], stop_at: int | None, bar: Any) -> dict[int, str]:
    """Step the runs together until each is done or at ``stop_at`` (the runs furthest behind first);
    return the runs that diverged, with their errors."""
    errors: dict[int, str] = {}
    while True:
        pending = [
            i for i, r in enumerate(runs)
            if not r.done and i not in errors and (stop_at is None or r.step < stop_at)
        ]  # fmt: skip
        if not pending:
            return errors
        # The runs furthest behind step together (after a kill, the others wait for them).
        low = min(runs[i].step for i in pending)
        active = [i for i in pending if runs[i].step == low]
        batches = [runs[i].draw_batch() for i in active]
        losses = step_together(
            [runs[i].model for i in active], [runs[i].optimizer for i in active],
            [X for X, _, _ in batches], [C0 for _, C0, _ in batches],
            [runs[i].config.loss_inv_temp_at(k) for i, (_, _, k) in zip(active, batches)],
        )  # fmt: skip
        for i, loss in zip(active, losses):
            try:
                runs[i].advance(loss)
            except FloatingPointError as exc:
                errors[i] = str(exc)
        bar.update(len(active))


def step_together(
    models: Sequence[KMeansTransformer], optimizers: Sequence[torch.optim.Optimizer], X: Sequence[torch.Tensor],
    C0: Sequence[torch.Tensor], inv_temps: Sequence[float], products: str = "auto",
) -> list[torch.Tensor]:  # fmt: skip
    """One training step of S runs as one stacked pass: run s applies its layer to its batch
    ``(X[s], C0[s])``, its loss is the mean smoothed objective at ``inv_temps[s]``, and each
    optimiser makes its run's update; returns the S losses. What :func:`kmtlib.training.step_alone`
    does for each run, with the layers applied together (:class:`~kmtlib.fast.run_stack.RunStack`)."""
    C1 = RunStack(models, products=products).step(torch.stack(list(X)), torch.stack(list(C0)))
    losses = [smoothed_objective_unchecked(x, C1[s], t).mean() for s, (x, t) in enumerate(zip(X, inv_temps))]
    for optimizer in optimizers:
        optimizer.zero_grad(set_to_none=True)
    # Run s's loss depends on run s's weights only: the sum's gradient is every run's own.
    torch.stack(losses).sum().backward()
    for optimizer in optimizers:
        optimizer.step()
    return losses


def _for_run(callback: Callable[[int, dict[str, Any]], None], index: int) -> Callable[[dict[str, Any]], None]:
    return lambda row: callback(index, row)


def seed_folders(out: str | os.PathLike, seeds: Sequence[int]) -> list[Path]:
    """The run folders of a group of seeds under ``out``: ``out/seed<S>/``."""
    return [Path(out) / f"seed{int(s)}" for s in seeds]


def parse_seeds(text: str) -> list[int]:
    """``"1,2, 3"`` -> ``[1, 2, 3]`` (a ValueError names what is not a seed, or a repeated one)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        seeds = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"--seeds must list integers separated by commas, got {text!r}") from None
    if not seeds:
        raise ValueError("--seeds lists no seed")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ValueError(f"--seeds repeats {', '.join(map(str, repeated))}")
    if any(s < 0 for s in seeds):
        raise ValueError(f"seeds must be >= 0, got {text!r}")
    return seeds


def configs_for_seeds(config: TrainConfig, seeds: Sequence[int]) -> list[TrainConfig]:
    """One configuration per seed, the rest as ``config``."""
    return [dataclasses.replace(config, seed=int(s)) for s in seeds]
