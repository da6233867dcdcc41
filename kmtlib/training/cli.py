"""The training command line, ``python -m kmtlib.train``: one run (``--seed``) or a group of runs
(``--seeds``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from ..tasks import FAMILIES
from .config import DTYPES, EMBEDDINGS, LOSS_TEMPERATURE_RULES, LOSSES, STARTS, TASK_FAMILIES, TrainConfig
from .group import configs_for_seeds, parse_seeds, seed_folders, train_group
from .loop import train
from .run_folder import RUN_FILES, RunInUseError, portable_path


def _parser() -> argparse.ArgumentParser:
    d = TrainConfig()
    p = argparse.ArgumentParser(
        prog="python -m kmtlib.train",
        description=(
            "Train the learned k-means transformer layer with the paper's protocol (defaults: the paper's main run)."
        ),
    )
    p.add_argument("--out", required=True, help="run folder (log.csv, last.pt, best.pt, model.pt, manifest.json)")
    _add_task_options(p, d)
    _add_protocol_options(p, d)
    _add_run_options(p, d)
    _add_any_k_options(p, d)
    p.add_argument(
        "--tasks", choices=TASK_FAMILIES, default=d.tasks,
        help="training tasks: the paper's mixtures or the broad family of kmtlib.domain.broad_tasks "
        "(default %(default)s)",
    )
    p.add_argument(
        "--starts", choices=STARTS, default=d.starts,
        help="where a step starts the layer: random k-subsets (the paper's) or the estimator's k-means++ centres "
        "in its domain (needs --tasks broad and --loss lloyd_gap; default %(default)s)",
    )
    p.add_argument(
        "--loss", choices=LOSSES, default=d.loss,
        help="the smoothed objective after one step (the paper's) or the gap to Lloyd's fixed point from the same "
        "start after --layer-steps steps (default %(default)s)",
    )
    p.add_argument(
        "--layer-steps", type=int, default=d.layer_steps, dest="layer_steps",
        help="--loss lloyd_gap: the layer steps run before the loss (the estimator runs 20; default %(default)s)",
    )
    p.add_argument(
        "--init-from", default=d.init_from, dest="init_from",
        help="start from the weights of this saved model (same layer shape) instead of a random initialisation",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar and no per-evaluation lines")
    return p


def _add_task_options(p: argparse.ArgumentParser, d: TrainConfig) -> None:
    """The tasks and the model: d, k, n, the embedding, the seed or seeds."""
    p.add_argument("--d", type=int, default=d.d, help="data dimension (default %(default)s)")
    p.add_argument("--k", type=int, default=d.k, help="number of clusters (default %(default)s)")
    p.add_argument("--n", type=int, default=d.n, help="points per task (default %(default)s)")
    p.add_argument(
        "--embedding", choices=tuple(EMBEDDINGS), default=d.embedding, help="token embedding (default %(default)s)"
    )
    p.add_argument("--seed", type=int, default=None, help=f"run seed (default {d.seed})")
    p.add_argument(
        "--seeds", default=None,
        help="train a group of runs, one per seed (comma-separated), together in one batched pass "
        "(kmtlib.training.group): each lands in OUT/seed<S>/ exactly as if trained alone",
    )


def _add_protocol_options(p: argparse.ArgumentParser, d: TrainConfig) -> None:
    """The training protocol: steps, batch, optimiser, loss, task family, evaluation, schedule."""
    p.add_argument("--steps", type=int, default=d.steps, help="training steps (default %(default)s)")
    p.add_argument("--batch", type=int, default=d.batch, help="tasks per step (default %(default)s)")
    p.add_argument("--lr", type=float, default=d.lr, help="Adam learning rate (default %(default)s)")
    p.add_argument(
        "--loss-inv-temp", type=float, default=d.loss_inv_temp, help="loss inverse temperature (default %(default)s)"
    )
    p.add_argument("--gamma", type=float, default=d.gamma, help="attention inverse temperature (default %(default)s)")
    p.add_argument("--dropout", type=float, default=d.dropout, help="attention dropout (default %(default)s)")
    p.add_argument(
        "--family", choices=FAMILIES, default=d.family, help="task distribution family (default %(default)s)"
    )
    p.add_argument("--scale", type=float, default=d.scale, help="component scale (default %(default)s)")
    p.add_argument(
        "--eval-every", type=int, default=d.eval_every, help="steps between evaluations (default %(default)s)"
    )
    p.add_argument("--val-batches", type=int, default=d.val_batches, help="validation batches (default %(default)s)")
    p.add_argument(
        "--lr-factor", type=float, default=d.lr_factor, help="ReduceLROnPlateau factor (default %(default)s)"
    )
    p.add_argument(
        "--lr-patience", type=int, default=d.lr_patience, help="ReduceLROnPlateau patience (default %(default)s)"
    )


def _add_run_options(p: argparse.ArgumentParser, d: TrainConfig) -> None:
    """Where and how the run trains: device, dtype, threads, --resume or --overwrite."""
    p.add_argument("--device", default=d.device, help="cpu, cuda, cuda:N or auto (default %(default)s)")
    p.add_argument("--dtype", choices=tuple(DTYPES), default=d.dtype, help="weights and data (default %(default)s)")
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's choice / OMP_NUM_THREADS)"
    )
    p.add_argument(
        "--resume", action="store_true",
        help="continue the run in OUT from its checkpoint (OUT/last.pt, else OUT/previous.pt); a damaged log or "
        "best.pt is restored from the checkpoint, and what cannot be repaired is refused before any step. An OUT "
        "that holds no run (or does not exist: a misspelt name) gets a fresh run, and a line on stderr says so, "
        "even with --quiet",
    )
    p.add_argument(
        "--overwrite", action="store_true",
        help="delete the run already in OUT (log, checkpoints, models, manifest) and start again; without "
        "--resume or --overwrite an OUT that holds a run is refused",
    )


def _add_any_k_options(p: argparse.ArgumentParser, d: TrainConfig) -> None:
    """A layer for any number of clusters: the ks drawn, how the maps broadcast, codes."""
    p.add_argument(
        "--k-min", type=int, default=d.k_min, dest="k_min",
        help="a layer for any number of clusters: the smallest k a batch may draw (with --k-max)",
    )
    p.add_argument(
        "--k-max", type=int, default=d.k_max, dest="k_max",
        help="a layer for any number of clusters: the largest k a batch may draw (0: every task has --k clusters)",
    )
    p.add_argument(
        "--k-held-out", default=d.k_held_out, dest="k_held_out",
        help="numbers of clusters in k-min..k-max never trained at, e.g. 5,9,13 (default none)",
    )
    p.add_argument(
        "--cluster-broadcast", choices=("ones", "mean", "unit"), default=d.cluster_broadcast, dest="cluster_broadcast",
        help="a layer for any number of clusters: how its maps spread a number over the k cluster coordinates "
        "(times 1, 1/k or 1/sqrt(k); default %(default)s)",
    )
    p.add_argument(
        "--loss-temperature-rule", choices=LOSS_TEMPERATURE_RULES, default=d.loss_temperature_rule,
        dest="loss_temperature_rule",
        help="a layer for any number of clusters: 'log_k' scales the loss inverse temperature by ln k / ln K "
        "(K = --k) for a batch of k clusters (default %(default)s)",
    )
    p.add_argument(
        "--code-width", type=int, default=d.code_width, dest="code_width",
        help="--embedding codes: the width of the random cluster codes drawn per task (default %(default)s)",
    )




_PATH_OPTIONS = ("--out", "--init-from")


def _say_fresh_starts(resume: bool, folders: list[Path]) -> None:
    """``--resume`` on a folder that holds no run trains a fresh one there: one line on stderr per
    such folder, so that a misspelt ``--out`` does not pass for a resumed run."""
    for folder in folders if resume else []:
        if not any((folder / name).exists() for name in RUN_FILES):
            where = "does not exist" if not folder.exists() else "holds no run"
            print(f"--resume: {folder} {where}: starting a fresh run there", file=sys.stderr)


def _portable_argv(argv: list[str]) -> list[str]:
    """The arguments as the manifest records them: run folders and weights below the working
    directory relative to it (see :func:`portable_path`), everything else as typed."""
    out = list(argv)
    for i, a in enumerate(out):
        if i > 0 and out[i - 1] in _PATH_OPTIONS:
            out[i] = portable_path(a)
        elif "=" in a and a.split("=", 1)[0] in _PATH_OPTIONS:
            opt, value = a.split("=", 1)
            out[i] = f"{opt}={portable_path(value)}"
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _parser().parse_args(argv)
    if args.seeds is not None and args.seed is not None:
        raise SystemExit("error: --seed and --seeds exclude each other (one run, or a group of runs)")
    if args.seed is None:
        args.seed = TrainConfig.seed
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)}
    if values.get("init_from"):
        values["init_from"] = portable_path(values["init_from"])  # (the config is saved with the weights)
    typed = sys.argv[1:] if argv is None else argv
    command = "python -m kmtlib.train " + " ".join(shlex.quote(a) for a in _portable_argv(typed))
    # Bad options end in one "error: ..." line (as argparse's own), never a traceback and never
    # after a training step: train() checks everything before it starts.
    if not args.out.strip():
        raise SystemExit(f"error: --out must name a run folder, got {args.out!r}")
    if args.resume and args.overwrite:
        raise SystemExit("error: --resume and --overwrite exclude each other (continue the run in --out, or delete it)")
    if args.threads is not None and args.threads < 1:
        raise SystemExit(f"error: --threads must be >= 1, got {args.threads}")
    try:
        config = TrainConfig(**values).validated()
    except (ValueError, TypeError, RuntimeError) as exc:  # (RuntimeError: --device cuda without CUDA)
        raise SystemExit(f"error: {exc}") from None
    if args.seeds is not None:
        return _main_group(args, config, command)
    _say_fresh_starts(args.resume, [Path(args.out)])
    try:
        summary = train(
            config, args.out, resume=args.resume, overwrite=args.overwrite, quiet=True if args.quiet else None,
            threads=args.threads, command=command,
        )
    except (ValueError, TypeError, OSError, RunInUseError, FloatingPointError) as exc:
        # (OSError: FileExistsError for a folder that holds a run, a full disk, no permission)
        raise SystemExit(f"error: {exc}") from None
    print(json.dumps(summary, indent=2))
    return summary


def _main_group(args: argparse.Namespace, config: TrainConfig, command: str) -> dict[str, Any]:
    """``--seeds``: the group's runs in OUT/seed<S>/ (kmtlib.training.group)."""

    try:
        seeds = parse_seeds(args.seeds)
        _say_fresh_starts(args.resume, seed_folders(args.out, seeds))
        summaries = train_group(
            configs_for_seeds(config, seeds), seed_folders(args.out, seeds), resume=args.resume,
            overwrite=args.overwrite, quiet=True if args.quiet else None, threads=args.threads, command=command,
            name=Path(args.out).name,
        )
    except (ValueError, TypeError, OSError, RunInUseError) as exc:
        raise SystemExit(f"error: {exc}") from None
    result = {"runs": summaries}
    print(json.dumps(result, indent=2))
    diverged = [s["out_dir"] for s in summaries if s["status"] == "diverged"]
    if diverged:
        raise SystemExit(f"error: training diverged in {', '.join(diverged)} (the other runs finished)")
    return result
