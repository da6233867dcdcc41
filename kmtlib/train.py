"""Training the learned single layer as in the paper (notes/paper.md sections 7.1-7.4).

Command line (every option has the paper's value as its default)::

    python -m kmtlib.train --d 32 --k 10 --n 512 --embedding onehot --seed 153476998 \\
        --steps 10000 --out runs/onehot_seed153476998 [--resume]

Python::

    from kmtlib.train import TrainConfig, train
    summary = train(TrainConfig(d=8, k=6, n=128, steps=2000, seed=1), "runs/small")

The protocol: every step draws ``batch`` fresh tasks and random k-subset initial centres, applies
the layer once and minimises the mean over tasks of :func:`kmtlib.smoothed_objective` with Adam;
every ``eval_every`` steps (and at step 0 and at the end) the model is evaluated on fixed
validation tasks (``val_batches`` batches drawn from their own random stream), the metric being
the mean over tasks of objective(model, one step) / objective(one Lloyd step, same initial
centres; an empty cluster jumps to a random point, as in the authors' code), and the learning rate
follows ``ReduceLROnPlateau(factor=0.5, patience=5)`` on that metric.

What lands in the output folder:

* ``log.csv``: one row per evaluation: ``step, train_loss`` (mean training loss over the steps
  since the previous evaluation; empty at step 0), ``val_rel_objective``, ``val_log_objective``
  (mean log-objective after one model step), ``lr`` (the rate used in those steps), ``wall_s``.
* ``last.pt``: a full checkpoint at every evaluation (model, optimiser, scheduler, every random
  stream, step, log position); ``--resume`` continues from it and ends with exactly the weights of
  an uninterrupted run (same device and the same number of threads: float sums depend on how
  the work is split).
* ``best.pt``: the model with the best validation metric so far (a model file: ``kmtlib.load_model``).
* at the end: ``model.pt`` (the last weights, which the paper evaluates; ``kmtlib.load_model``) and
  ``manifest.json`` (command, configuration, versions, device, wall time, validation numbers).

All files are written atomically (temporary file + rename): a run killed at any moment leaves
valid files behind.

Randomness flows from explicit generators seeded from the run seed: initial weights, training
tasks, validation tasks, dropout masks and the Lloyd reference each have their own stream (derived
with ``numpy.random.SeedSequence``), so changing e.g. the number of validation batches does not
change the training tasks.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import dataclasses
import io
import json
import math
import os
import platform
import shlex
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ._checks import check_choice, check_int, check_positive_float
from .device import resolve_device
from .init import init_centers
from .learned import EMBEDDINGS
from .lloyd import lloyd
from .losses import _smoothed_objective
from .objective import _kmeans_objective
from .tasks import FAMILIES, sample_tasks
from .transformer import KMeansTransformer, atomic_torch_save

CHECKPOINT_FORMAT = "kmtlib.train-checkpoint/1"
LOG_COLUMNS = ("step", "train_loss", "val_rel_objective", "val_log_objective", "lr", "wall_s")
PAPER_SEEDS: tuple[int, ...] = (
    153476998, 235510766, 205084180, 129959864, 149896109,
    140439608, 145017219, 162518970, 245293503, 152674004,
)
"""The ten training seeds of the paper's runs (notes/paper.md section 7.4)."""

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass
class TrainConfig:
    """Everything that determines a training run (the defaults are the paper's main run)."""

    d: int = 32
    k: int = 10
    n: int = 512
    embedding: str = "onehot"
    seed: int = PAPER_SEEDS[0]
    steps: int = 10_000
    batch: int = 32
    lr: float = 0.01
    loss_inv_temp: float = 10.0
    gamma: float = 1.0
    dropout: float = 0.01
    family: str = "normal"
    scale: float = 0.1
    eval_every: int = 50
    val_batches: int = 10
    lr_factor: float = 0.5
    lr_patience: int = 5
    device: str = "cpu"
    dtype: str = "float32"

    def validated(self) -> TrainConfig:
        """Check every field; return self (raises ``ValueError``/``TypeError`` naming the field)."""
        for name in ("d", "k", "n", "steps", "batch", "eval_every", "val_batches"):
            check_int(name, getattr(self, name), minimum=0 if name == "steps" else 1)
        check_int("lr_patience", self.lr_patience, minimum=0)
        check_int("seed", self.seed, minimum=0)
        if self.k > self.n:
            raise ValueError(f"k={self.k} clusters exceed the n={self.n} points of each task")
        check_choice("embedding", self.embedding, EMBEDDINGS)
        check_choice("family", self.family, FAMILIES)
        check_choice("dtype", self.dtype, _DTYPES)
        for name in ("lr", "loss_inv_temp", "gamma", "scale"):
            check_positive_float(name, getattr(self, name))
        if not 0.0 < float(self.lr_factor) < 1.0:
            raise ValueError(f"lr_factor must be in (0, 1), got {self.lr_factor}")
        if not 0.0 <= float(self.dropout) < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        resolve_device(self.device)
        return self

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown training option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**values)


# ------------------------------------------------------------------------------------ helpers
def tune_malloc(threshold: int = 1 << 30) -> bool:
    """Keep large buffers on glibc's heap instead of fresh ``mmap`` pages (Linux/glibc only).

    The n x n attention matrices (32 MiB at the paper's size) are above glibc's default mmap
    threshold, so every step would map, page-fault and unmap them again; on a 2-core CPU that
    costs a third of the step time or more. Raising the mmap and trim thresholds makes freed
    buffers reusable. Process-wide, affects speed only, never results. Returns whether it applied.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        ok = libc.mallopt(m_mmap_threshold, int(threshold)) == 1
        ok = libc.mallopt(m_trim_threshold, min(2 * int(threshold), 2**31 - 1)) == 1 and ok
        return ok
    except (OSError, AttributeError):
        return False


def derive_seeds(seed: int) -> dict[str, int]:
    """Independent seeds for the run's random streams, derived from the run seed."""
    names = ("init", "train", "validation", "dropout", "lloyd", "torch")
    states = np.random.SeedSequence(int(seed)).spawn(len(names))
    return {name: int(s.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)) for name, s in zip(names, states)}


def _generator(seed: int, device: torch.device) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def make_validation_set(
    config: TrainConfig, device: str | torch.device | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The run's fixed validation tasks: points X (V, n, d), initial centres C0 (V, k, d) (random
    k-subsets) and the objective after one Lloyd step from C0 (V,), V = val_batches * batch.

    Regenerated from the run seed, so an evaluation can rebuild the exact tasks a model was
    validated on (the paper's multi-step evaluation uses these tasks).
    """
    config = config.validated()
    device = resolve_device(config.device if device is None else device)
    dtype = _DTYPES[config.dtype]
    seeds = derive_seeds(config.seed)
    g = _generator(seeds["validation"], device)
    xs, cs = [], []
    for _ in range(config.val_batches):
        X = sample_tasks(config.batch, config.n, config.d, config.k, config.family, config.scale, g, device=device, dtype=dtype)
        xs.append(X)
        cs.append(init_centers(X, config.k, "random", generator=g))
    X, C0 = torch.cat(xs), torch.cat(cs)
    reference = lloyd(X, C0, 1, empty="random", generator=_generator(seeds["lloyd"], device)).objective[:, 1]
    return X, C0, reference


@torch.no_grad()
def validation_metrics(
    model: KMeansTransformer, X: torch.Tensor, C0: torch.Tensor, reference: torch.Tensor, batch: int = 32
) -> tuple[float, float]:
    """(mean relative objective vs one Lloyd step, mean log-objective) after one model step, in
    eval mode (no dropout); the model's train/eval mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        objective = torch.cat(
            [_kmeans_objective(X[i : i + batch], model.step(X[i : i + batch], C0[i : i + batch])) for i in range(0, X.shape[0], batch)]
        )
    finally:
        model.train(was_training)
    return float((objective / reference).mean()), float(objective.log().mean())


def _rng_states(generators: dict[str, torch.Generator], device: torch.device) -> dict[str, torch.Tensor]:
    states = {name: g.get_state() for name, g in generators.items()}
    states["torch_global"] = torch.get_rng_state()
    if device.type == "cuda":
        states["cuda_global"] = torch.cuda.get_rng_state(device)
    return states


def _set_rng_states(states: dict[str, torch.Tensor], generators: dict[str, torch.Generator], device: torch.device) -> None:
    for name, g in generators.items():
        g.set_state(states[name])
    torch.set_rng_state(states["torch_global"])
    if device.type == "cuda" and "cuda_global" in states:
        torch.cuda.set_rng_state(states["cuda_global"], device)


def _format_row(row: dict[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["" if row[c] is None else (repr(float(row[c])) if isinstance(row[c], float) else row[c]) for c in LOG_COLUMNS])
    return buf.getvalue()


def read_log(path: str | os.PathLike) -> list[dict[str, float | None]]:
    """The rows of a run's ``log.csv`` as dicts of numbers (None where empty)."""
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            rows.append({k: (None if v == "" else (int(v) if k == "step" else float(v))) for k, v in row.items()})
    return rows


def load_checkpoint_model(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> KMeansTransformer:
    """The model held in a training checkpoint (``last.pt``)."""
    payload = torch.load(Path(path), map_location=map_location, weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a kmtlib training checkpoint (expected format {CHECKPOINT_FORMAT!r})")
    cfg = payload["model_config"]
    model = getattr(KMeansTransformer, cfg["builder"])(**cfg["kwargs"])
    model = model.to(next(iter(payload["model"].values())).dtype)
    model.load_state_dict(payload["model"])
    return model.to(map_location)


# ------------------------------------------------------------------------------------- training
def train(
    config: TrainConfig | dict[str, Any],
    out_dir: str | os.PathLike,
    *,
    resume: bool = False,
    quiet: bool | None = None,
    threads: int | None = None,
    stop_at: int | None = None,
    callback: Callable[[dict[str, Any]], None] | None = None,
    tune_memory: bool = True,
    command: str | None = None,
) -> dict[str, Any]:
    """Train the learned layer with the paper's protocol; return a summary dict.

    Args:
        config: a :class:`TrainConfig` or a dict of its fields (missing fields: paper defaults).
        out_dir: the run folder (created). It must not hold a checkpoint unless ``resume``.
        resume: continue from ``out_dir/last.pt`` (start afresh if there is none). ``steps`` may
            be raised to extend a finished run; every other option must match the checkpoint.
        quiet: True: no output. None (default): a progress bar when stderr is a terminal, else a
            line per evaluation on stderr (for log files). False: lines per evaluation even on a
            terminal (with the bar).
        threads: ``torch.set_num_threads`` for the run (default: leave as is).
        stop_at: stop after this step (counted from 0 across resumes) without finishing the run,
            as if interrupted; ``last.pt`` holds the state at the last evaluation before it.
        callback: called with every log row (a dict) after it is written and checkpointed.
        tune_memory: call :func:`tune_malloc` on the CPU (speed only).
        command: the command line recorded in the manifest.

    Returns:
        ``{"status": "finished" | "stopped", "step", "final_val_rel_objective",
        "best_val_rel_objective", "best_step", "wall_s", "out_dir", ...}``.
    """
    if isinstance(config, dict):
        config = TrainConfig.from_dict(config)
    config = config.validated()
    if stop_at is not None:
        stop_at = check_int("stop_at", stop_at, minimum=0)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with _run_lock(out):
        return _train_locked(config, out, resume, quiet, threads, stop_at, callback, tune_memory, command)


class RunInUseError(RuntimeError):
    """Another process is training into the same run folder."""


@contextlib.contextmanager
def _run_lock(out: Path):
    # An advisory lock on OUT/.lock for the whole run: two processes writing one run folder
    # would interleave checkpoints and log rows. The OS drops the lock when the process dies.
    try:
        import fcntl
    except ImportError:  # not on POSIX: no locking
        yield
        return
    handle = open(out / ".lock", "a")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunInUseError(f"{out} is in use by another training process") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()


def _train_locked(config, out, resume, quiet, threads, stop_at, callback, tune_memory, command) -> dict[str, Any]:
    last_path, best_path, log_path = out / "last.pt", out / "best.pt", out / "log.csv"
    if last_path.exists() and not resume:
        raise FileExistsError(f"{out} already holds a training checkpoint; pass resume=True (--resume) or choose another folder")
    if threads is not None:
        torch.set_num_threads(check_int("threads", threads, minimum=1))
    device = resolve_device(config.device)
    dtype = _DTYPES[config.dtype]
    if tune_memory and device.type == "cpu":
        tune_malloc()
    seeds = derive_seeds(config.seed)
    source = source_fingerprint()

    model = KMeansTransformer.trainable(
        config.d, config.k, embedding=config.embedding, gamma=config.gamma, dropout=config.dropout,
        generator=seeds["init"], dtype=dtype, device=device,
    )
    model.train()
    generators = {"train": _generator(seeds["train"], device), "dropout": _generator(seeds["dropout"], device)}
    model.layer.dropout_generator = generators["dropout"]
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="min", factor=config.lr_factor, patience=config.lr_patience
    )
    X_val, C_val, ref_val = make_validation_set(config, device)

    step, wall_before, best = 0, 0.0, {"step": None, "val_rel_objective": math.inf}
    # Load on the CPU: random-generator states must stay CPU tensors; load_state_dict moves the rest.
    payload = torch.load(last_path, map_location="cpu", weights_only=True) if last_path.exists() else None
    if payload is not None:
        if payload.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{last_path} is not a kmtlib training checkpoint")
        saved = dict(payload["config"])
        mismatched = [f"{k}: checkpoint {saved.get(k)!r} vs now {v!r}" for k, v in dataclasses.asdict(config).items() if k != "steps" and saved.get(k) != v]
        if mismatched:
            raise ValueError(f"cannot resume {last_path} with different options ({'; '.join(mismatched)})")
        model.load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
        scheduler.load_state_dict(payload["scheduler"])
        _set_rng_states(payload["rng"], generators, device)
        step, wall_before, best = int(payload["step"]), float(payload["wall_s"]), dict(payload["best"])
        if payload.get("threads") not in (None, torch.get_num_threads()):
            warnings.warn(
                f"resuming with {torch.get_num_threads()} threads but the checkpoint was written with "
                f"{payload['threads']}; the result will not be bit-identical to an uninterrupted run",
                stacklevel=2,
            )
        with open(log_path, "r+b") as f:  # drop rows written after the checkpoint
            f.truncate(int(payload["log_bytes"]))
    else:
        torch.manual_seed(seeds["torch"])  # only the "explicit" kernel draws from the global RNG
        with open(log_path, "w", newline="") as f:
            f.write(",".join(LOG_COLUMNS) + "\n")

    t_start = time.perf_counter()

    def wall() -> float:
        return wall_before + time.perf_counter() - t_start

    def evaluate_and_checkpoint(window_loss: float | None, lr_used: float) -> dict[str, Any]:
        nonlocal best
        rel, logobj = validation_metrics(model, X_val, C_val, ref_val, config.batch)
        if step > 0:
            scheduler.step(rel)
        row = {"step": step, "train_loss": window_loss, "val_rel_objective": rel, "val_log_objective": logobj, "lr": lr_used, "wall_s": wall()}
        with open(log_path, "a", newline="") as f:
            f.write(_format_row(row))
            f.flush()
            log_bytes = f.tell()
        if rel < best["val_rel_objective"]:
            best = {"step": step, "val_rel_objective": rel}
            model.save(best_path)
        atomic_torch_save(
            {
                "format": CHECKPOINT_FORMAT,
                "config": dataclasses.asdict(config),
                "model_config": model.config,
                "step": step,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": _rng_states(generators, device),
                "log_bytes": log_bytes,
                "best": best,
                "wall_s": row["wall_s"],
                "threads": torch.get_num_threads(),
            },
            last_path,
        )
        if print_rows:
            loss_text = "" if window_loss is None else f" train_loss={window_loss:.4f}"
            print(
                f"[{out.name}] step {step}/{config.steps}{loss_text} val_rel_objective={rel:.4f} "
                f"lr={lr_used:.3g} wall={row['wall_s']:.0f}s",
                file=sys.stderr, flush=True,
            )
        if callback is not None:
            callback(row)
        return row

    interactive = sys.stderr.isatty()
    from tqdm.auto import tqdm

    bar = tqdm(
        total=config.steps, initial=min(step, config.steps), disable=bool(quiet) or not interactive,
        desc=out.name, unit="step", dynamic_ncols=True,
    )
    print_rows = quiet is False or (quiet is None and not interactive)  # a plain line per evaluation in logs
    last_row: dict[str, Any] | None = None
    if payload is None:
        last_row = evaluate_and_checkpoint(None, optimizer.param_groups[0]["lr"])
        bar.set_postfix(val=f"{last_row['val_rel_objective']:.4f}")
    del payload
    window = torch.zeros((), dtype=torch.float64, device=device)
    window_steps = 0
    status = "finished"
    try:
        while step < config.steps:
            if stop_at is not None and step >= stop_at:
                status = "stopped"
                break
            g = generators["train"]
            X = sample_tasks(config.batch, config.n, config.d, config.k, config.family, config.scale, g, device=device, dtype=dtype)
            C0 = init_centers(X, config.k, "random", generator=g)
            loss = _smoothed_objective(X, model.step(X, C0), config.loss_inv_temp).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            window += loss.detach()
            window_steps += 1
            bar.update(1)
            if step % config.eval_every == 0 or step == config.steps:
                window_loss = float(window) / window_steps
                if not math.isfinite(window_loss):
                    raise FloatingPointError(
                        f"training diverged: non-finite loss between steps {step - window_steps} and {step}; "
                        f"{last_path} holds the last finite state"
                    )
                last_row = evaluate_and_checkpoint(window_loss, optimizer.param_groups[0]["lr"])
                window.zero_()
                window_steps = 0
                bar.set_postfix(loss=f"{window_loss:.3f}", val=f"{last_row['val_rel_objective']:.4f}", lr=f"{last_row['lr']:.2g}")
    finally:
        bar.close()

    rows = read_log(log_path)
    final = rows[-1] if rows else None
    summary: dict[str, Any] = {
        "status": status,
        "step": step,
        "out_dir": str(out),
        "final_val_rel_objective": final["val_rel_objective"] if final else None,
        "final_val_log_objective": final["val_log_objective"] if final else None,
        "best_val_rel_objective": best["val_rel_objective"],
        "best_step": best["step"],
        "wall_s": wall(),
    }
    if status == "finished":
        model_path = model.save(out / "model.pt")
        from . import __version__

        manifest = {
            "command": command,
            "config": dataclasses.asdict(config),
            "seed": config.seed,
            "derived_seeds": seeds,
            "steps": step,
            "kmtlib_version": __version__,
            **source,
            "torch_version": torch.__version__,
            "python_version": platform.python_version(),
            "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(),
            "wall_s": summary["wall_s"],
            "wall_s_per_step": summary["wall_s"] / max(step, 1),
            "final_val_rel_objective": summary["final_val_rel_objective"],
            "final_val_log_objective": summary["final_val_log_objective"],
            "best_val_rel_objective": summary["best_val_rel_objective"],
            "best_step": summary["best_step"],
            "files": {"model": "model.pt", "best": "best.pt", "checkpoint": "last.pt", "log": "log.csv"},
        }
        _atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=2) + "\n")
        summary["model_path"] = str(model_path)
    return summary


def source_fingerprint() -> dict[str, str | None]:
    """Provenance of the code that trains: a SHA-256 over kmtlib's source files and, when the
    package sits in a git checkout, the commit it is on (read from .git, no git command run)."""
    import hashlib

    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    commit = None
    try:
        git = package.parent / ".git"
        head = (git / "HEAD").read_text().strip()
        if head.startswith("ref: "):
            ref = head[5:]
            ref_file = git / ref
            if ref_file.exists():
                commit = ref_file.read_text().strip()
            elif (git / "packed-refs").exists():
                for line in (git / "packed-refs").read_text().splitlines():
                    if line.endswith(" " + ref):
                        commit = line.split()[0]
        else:
            commit = head
    except OSError:
        pass
    return {"kmtlib_source_sha256": digest.hexdigest(), "git_commit": commit}


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------- CLI
def _parser() -> argparse.ArgumentParser:
    d = TrainConfig()
    p = argparse.ArgumentParser(
        prog="python -m kmtlib.train",
        description="Train the learned k-means transformer layer with the paper's protocol (defaults: the paper's main run).",
    )
    p.add_argument("--out", required=True, help="run folder (log.csv, last.pt, best.pt, model.pt, manifest.json)")
    p.add_argument("--d", type=int, default=d.d, help="data dimension (default %(default)s)")
    p.add_argument("--k", type=int, default=d.k, help="number of clusters (default %(default)s)")
    p.add_argument("--n", type=int, default=d.n, help="points per task (default %(default)s)")
    p.add_argument("--embedding", choices=tuple(EMBEDDINGS), default=d.embedding, help="token embedding (default %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="run seed (default %(default)s)")
    p.add_argument("--steps", type=int, default=d.steps, help="training steps (default %(default)s)")
    p.add_argument("--batch", type=int, default=d.batch, help="tasks per step (default %(default)s)")
    p.add_argument("--lr", type=float, default=d.lr, help="Adam learning rate (default %(default)s)")
    p.add_argument("--loss-inv-temp", type=float, default=d.loss_inv_temp, help="loss inverse temperature (default %(default)s)")
    p.add_argument("--gamma", type=float, default=d.gamma, help="attention inverse temperature (default %(default)s)")
    p.add_argument("--dropout", type=float, default=d.dropout, help="attention dropout (default %(default)s)")
    p.add_argument("--family", choices=FAMILIES, default=d.family, help="task distribution family (default %(default)s)")
    p.add_argument("--scale", type=float, default=d.scale, help="component scale (default %(default)s)")
    p.add_argument("--eval-every", type=int, default=d.eval_every, help="steps between evaluations (default %(default)s)")
    p.add_argument("--val-batches", type=int, default=d.val_batches, help="validation batches (default %(default)s)")
    p.add_argument("--lr-factor", type=float, default=d.lr_factor, help="ReduceLROnPlateau factor (default %(default)s)")
    p.add_argument("--lr-patience", type=int, default=d.lr_patience, help="ReduceLROnPlateau patience (default %(default)s)")
    p.add_argument("--device", default=d.device, help="cpu, cuda, cuda:N or auto (default %(default)s)")
    p.add_argument("--dtype", choices=tuple(_DTYPES), default=d.dtype, help="weights and data (default %(default)s)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice / OMP_NUM_THREADS)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no per-evaluation lines")
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _parser().parse_args(argv)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)}
    command = "python -m kmtlib.train " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    try:
        summary = train(
            TrainConfig(**values), args.out, resume=args.resume, quiet=True if args.quiet else None,
            threads=args.threads, command=command,
        )
    except (ValueError, TypeError, FileExistsError, RunInUseError) as exc:
        raise SystemExit(f"error: {exc}") from None
    print(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
