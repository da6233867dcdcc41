"""The paper's whole set of training runs as one command: ``python -m kmtbook.paper_sweep``.

The paper's learning results are medians over its ten training seeds, and its training-dynamics
figures (9 and 10) are sweeps of 10 000-step runs. :func:`paper_plan` lists them all:

* ``main``: the main configuration (d = 32, k = 10, n = 512, loss inverse temperature 10) at both
  widths, tokens of width d + k (``onehot``) and of width d (``none``), for the ten seeds: the runs
  that chapters 05 to 07 read through ``weights_dir`` (folders ``<embedding>_seed<S>/``);
* ``dynamics``: the loss-temperature, number-of-clusters and dimension sweeps of chapter 08 at both
  widths for the ten seeds (folders ``d<d>_k<k>_li<li>_<embedding>_seed<S>/``, what its ``logs_dir``
  reads; the k = 10 point of the k sweep is the main configuration).

The plan is the book's; running it is the library's sweep mechanism
(:mod:`kmtlib.training.sweep`): runs of one shape form a group, cut into jobs of at most
``--runs-per-group`` runs trained together as one stacked pass (each run exactly as if trained
alone); ``--executor serial`` runs the jobs one after another in this process, ``local`` and
``slurm`` hand them to submitit. Every run lands in ``OUT/<part>/<run folder>/`` with the contract
of ``python -m kmtlib.train``: a finished run is skipped, an interrupted one resumes, so a killed
sweep is continued by running the same command again. ``--plan`` prints the plan and an estimate
of its duration from the measured seconds per run-step of runs already finished under ``OUT``
(and ``--timings`` folders), without training anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from kmtlib.training import TrainConfig
from kmtlib.training.group import parse_seeds
from kmtlib.training.sweep import PlannedRun, add_options, run_command

PAPER_SEEDS: tuple[int, ...] = (
    153476998, 235510766, 205084180, 129959864, 149896109,
    140439608, 145017219, 162518970, 245293503, 152674004,
)  # fmt: skip
"""The ten training seeds of the paper's runs (the authors' ``expt-run.sh``)."""

PARTS: tuple[str, ...] = ("main", "dynamics")

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

PROGRAM = "python -m kmtbook.paper_sweep"
"""The command, as the runs' manifests record it."""


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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROGRAM, description=(__doc__ or "").splitlines()[0])
    p.add_argument("--profile", choices=("paper",), default="paper", help="the set of runs (the paper's)")
    p.add_argument(
        "--seeds", default=",".join(map(str, PAPER_SEEDS)), help="comma-separated seeds (default the paper's ten)"
    )
    p.add_argument("--steps", type=int, default=10_000, help="training steps per run (default %(default)s)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default %(default)s)")
    p.add_argument(
        "--set", action="append", default=[], metavar="OPTION=VALUE", dest="overrides",
        help="another training option for every run (repeatable), e.g. --set n=32 --set batch=4 --set val_batches=1 "
        "for a small trial of the machinery; the paper's set leaves every option at its value",
    )
    add_options(p, out="runs/sweep")
    return p


PLANNED_OPTIONS: frozenset[str] = frozenset({"d", "k", "embedding", "seed", "steps", "loss_inv_temp", "device"})
"""The training options the plan itself sets per run (or --seeds, --steps, --device), which --set may not."""


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["n=32", "lr=0.02"]`` -> ``{"n": 32, "lr": 0.02}``: each value of the type of its
    :class:`TrainConfig` field; a ValueError naming ``--set`` and the item otherwise."""
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    out: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not eq or name not in fields:
            known = ", ".join(sorted(set(fields) - PLANNED_OPTIONS))
            raise ValueError(f"--set {item!r}: not OPTION=VALUE with a training option ({known})")
        if name in PLANNED_OPTIONS:
            raise ValueError(f"--set {item!r}: {name} is set by the plan (or --seeds, --steps, --device)")
        kind: Any = type(fields[name].default)
        try:
            out[name] = kind(text.strip())
        except ValueError:
            what = {int: "an integer", float: "a number"}.get(kind, kind.__name__)
            raise ValueError(f"--set {item!r}: {name} takes {what}") from None
    return out


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        plan = paper_plan(parse_seeds(args.seeds), args.steps, args.device, **parse_overrides(args.overrides))
    except (ValueError, TypeError, RuntimeError) as exc:
        raise SystemExit(f"error: {exc}") from None
    run_command(plan, args, PROGRAM, argv)


if __name__ == "__main__":
    main()
