"""Training the learned single layer as in the paper (the authors' ``train.py`` and
``expt-run.sh`` in github.com/rithram/kmeans-trf).

Command line (every option has the paper's value as its default)::

    python -m kmtlib.train --d 32 --k 10 --n 512 --embedding onehot --seed 153476998 \\
        --steps 10000 --out runs/onehot_seed153476998 [--resume | --overwrite]

A folder that already holds a run is refused unless ``--resume`` (continue it; ``--steps`` may
grow, never fall below the step reached) or ``--overwrite`` (delete it and start again) is given.
``--seeds S1,S2,...`` instead of ``--seed`` trains a group of runs together, one folder
``OUT/seed<S>/`` each, every run as if trained alone (:mod:`kmtlib.train_group`).

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
  stream, step, the log so far and the best model so far); ``--resume`` continues from it and
  ends with exactly the weights of an uninterrupted run (same device and the same number of
  threads: float sums depend on how the work is split). ``previous.pt``: the checkpoint before it.
* ``best.pt``: the model with the best validation metric so far (a model file: ``kmtlib.load_model``).
* at the end: ``model.pt`` (the last weights, which the paper evaluates; ``kmtlib.load_model``) and
  ``manifest.json`` (command, configuration, versions, device, wall time, validation numbers).

Nothing finished is lost. Every file but the log is written atomically (a temporary file flushed
to disk, then renamed; leftover temporaries of a killed save are removed when a run starts), and
the log, appended row by row, is also held in the checkpoint. So ``--resume`` repairs a damaged
folder from its checkpoints and says so in one line per file on stderr: a log cut short, padded
with rows after the checkpoint, with garbage or repeated rows, or missing, is rewritten from the
checkpoint's copy (a log that was not just ahead of the checkpoint is kept as
``log.csv.damaged``); a missing or damaged ``last.pt`` is replaced by ``previous.pt`` (one
evaluation earlier, trained again exactly); a missing or damaged ``best.pt`` is restored; a
damaged ``manifest.json`` is set aside and written again at the end. What cannot be repaired (no
usable checkpoint, a checkpoint, manifest or model of another configuration, a run already past
``--steps``) is refused with an ``error:`` line naming the file, before any training step and
without changing any file.

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
import hashlib
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ._checks import check_choice, check_int, check_positive_float
from .broad_tasks import sample_broad_tasks
from .device import resolve_device
from .embedding import CodeEmbedding
from .equivariant import BROADCASTS
from .init import init_centers
from .learned import EMBEDDINGS as _TRAINABLE_EMBEDDINGS
from .lloyd import lloyd
from .losses import _smoothed_objective
from .model_file import (
    CHECKPOINT_FORMAT,
    MODEL_FORMAT,
    OLD_MODEL_FORMATS,
    ModelFileError,
    build_model,
    check_state_dict,
    describe_contents,
    load_model,
    read_torch_file,
)
from .objective import _kmeans_objective
from .tasks import FAMILIES, sample_tasks
from .transformer import KMeansTransformer, atomic_torch_save, fsync_dir

EMBEDDINGS: tuple[str, ...] = (*_TRAINABLE_EMBEDDINGS, "none")
"""The --embedding choices ("none" is the old name of "data", as in the shipped runs' manifests)."""

LOG_COLUMNS = ("step", "train_loss", "val_rel_objective", "val_log_objective", "lr", "wall_s")
PAPER_SEEDS: tuple[int, ...] = (
    153476998, 235510766, 205084180, 129959864, 149896109,
    140439608, 145017219, 162518970, 245293503, 152674004,
)
"""The ten training seeds of the paper's runs (the authors' ``expt-run.sh``)."""

_DTYPES = {"float32": torch.float32, "float64": torch.float64}

TASK_FAMILIES: tuple[str, ...] = ("paper", "broad")
"""The training task distributions: the paper's (:func:`kmtlib.sample_tasks` with ``family`` and
``scale``) or the broad family of :func:`kmtlib.broad_tasks.sample_broad_tasks`."""

LOSS_TEMPERATURE_RULES: tuple[str, ...] = ("fixed", "log_k")
"""How the loss inverse temperature depends on a batch's k (:meth:`TrainConfig.loss_inv_temp_at`)."""


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
    k_min: int = 0
    k_max: int = 0
    k_held_out: str = ""
    cluster_broadcast: str = "ones"
    loss_temperature_rule: str = "fixed"
    code_width: int = 0
    tasks: str = "paper"
    init_from: str = ""

    @property
    def mixed_k(self) -> bool:
        """One layer for any number of clusters: every batch draws its own k (``k_max > 0``)."""
        return self.k_max > 0

    def loss_inv_temp_at(self, k: int) -> float:
        """The loss inverse temperature for a batch of ``k`` clusters: ``loss_inv_temp`` under the
        rule ``"fixed"``; under ``"log_k"`` it grows as ``loss_inv_temp * ln k / ln K`` (K = ``self.k``),
        which keeps the loosening of the soft bound, about ``ln k / t`` per point, the same at every k."""
        if self.loss_temperature_rule == "fixed":
            return self.loss_inv_temp
        return self.loss_inv_temp * math.log(k) / math.log(self.k)

    def training_ks(self) -> list[int]:
        """The numbers of clusters the training draws from: ``k_min..k_max`` without the held-out
        ones (``[k]`` for a run at one k)."""
        if not self.mixed_k:
            return [self.k]
        held = set(_parse_ks(self.k_held_out))
        return [k for k in range(self.k_min, self.k_max + 1) if k not in held]

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
        check_int("k_min", self.k_min, minimum=0)
        check_int("k_max", self.k_max, minimum=0)
        if not isinstance(self.k_held_out, str):
            raise TypeError(f"k_held_out must be a comma-separated string of integers, got {self.k_held_out!r}")
        held = _parse_ks(self.k_held_out)
        if self.mixed_k:
            if self.embedding not in ("onehot", "codes"):
                raise ValueError("a layer for any number of clusters needs embedding='onehot' or 'codes'")
            if not 1 <= self.k_min <= self.k_max <= self.n:
                raise ValueError(
                    f"need 1 <= k_min <= k_max <= n, got k_min={self.k_min}, k_max={self.k_max}, n={self.n}"
                )
            outside = [k for k in held if not self.k_min <= k <= self.k_max]
            if outside:
                raise ValueError(f"k_held_out {outside} lie outside k_min..k_max = {self.k_min}..{self.k_max}")
            if not self.training_ks():
                raise ValueError("k_held_out leaves no number of clusters to train at")
        elif self.k_min or held:
            raise ValueError("k_min and k_held_out need k_max > 0 (a run for any number of clusters)")
        check_choice("cluster_broadcast", self.cluster_broadcast, BROADCASTS)
        check_choice("loss_temperature_rule", self.loss_temperature_rule, LOSS_TEMPERATURE_RULES)
        check_int("code_width", self.code_width, minimum=0)
        check_choice("tasks", self.tasks, TASK_FAMILIES)
        if not isinstance(self.init_from, str):
            raise TypeError(f"init_from must be the path of a saved model or '', got {self.init_from!r}")
        if self.tasks == "broad" and self.family != "normal":
            raise ValueError("tasks='broad' draws its own noise: family must stay 'normal'")
        if (self.embedding == "codes") != (self.code_width > 0):
            raise ValueError(f"embedding={self.embedding!r} with code_width={self.code_width}: "
                             "'codes' needs a code width >= 1, the other embeddings none")  # fmt: skip
        if self.loss_temperature_rule != "fixed" and not (self.mixed_k and self.k >= 2 and self.k_min >= 2):
            raise ValueError(
                "loss_temperature_rule 'log_k' needs a run for any number of clusters with k >= 2 and k_min >= 2"
            )
        if self.cluster_broadcast != "ones" and not self.mixed_k:
            raise ValueError("cluster_broadcast needs k_max > 0 (a run for any number of clusters)")
        return self

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown training option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**values)


# ------------------------------------------------------------------------------------ helpers
def _parse_ks(text: str) -> list[int]:
    """``"5,9, 13"`` -> ``[5, 9, 13]``; ``""`` -> ``[]`` (a ValueError names a part that is not an integer)."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    try:
        return [int(part) for part in parts]
    except ValueError:
        raise ValueError(f"k_held_out must list integers separated by commas, got {text!r}") from None


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
        X = _sample(config, g, device, dtype)
        xs.append(X)
        cs.append(init_centers(X, config.k, "random", generator=g))
    X, C0 = torch.cat(xs), torch.cat(cs)
    reference = lloyd(X, C0, 1, empty="random", generator=_generator(seeds["lloyd"], device)).objective[:, 1]
    return X, C0, reference


def make_validation_batches(
    config: TrainConfig, device: str | torch.device | None = None
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The run's validation tasks as ``(X, C0, reference)`` groups: one group of all
    :func:`make_validation_set` tasks at one k; for a run of any k one batch per group, the
    training numbers of clusters in turn (held-out ones never: checkpoints are chosen at the
    training k only), each with its own Lloyd reference."""
    config = config.validated()
    if not config.mixed_k:
        return [make_validation_set(config, device)]
    device = resolve_device(config.device if device is None else device)
    dtype = _DTYPES[config.dtype]
    seeds = derive_seeds(config.seed)
    g, g_lloyd = _generator(seeds["validation"], device), _generator(seeds["lloyd"], device)
    ks, groups = config.training_ks(), []
    for i in range(config.val_batches):
        k = ks[i % len(ks)]
        X = _sample(config, g, device, dtype, k)
        C0 = init_centers(X, k, "random", generator=g)
        groups.append((X, C0, lloyd(X, C0, 1, empty="random", generator=g_lloyd).objective[:, 1]))
    return groups


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
            [
                _kmeans_objective(X[i : i + batch], model.step(X[i : i + batch], C0[i : i + batch]))
                for i in range(0, X.shape[0], batch)
            ]
        )
    finally:
        model.train(was_training)
    return float((objective / reference).mean()), float(objective.log().mean())


def _validate(
    model: KMeansTransformer, groups: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], batch: int
) -> tuple[float, float]:
    """:func:`validation_metrics` over the tasks of all groups (means over every task)."""
    if len(groups) == 1:
        return validation_metrics(model, *groups[0], batch)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            rel, logs = [], []
            for X, C0, reference in groups:
                objective = torch.cat(
                    [_kmeans_objective(X[i : i + batch], model.step(X[i : i + batch], C0[i : i + batch]))
                     for i in range(0, X.shape[0], batch)]
                )  # fmt: skip
                rel.append(objective / reference)
                logs.append(objective.log())
    finally:
        model.train(was_training)
    return float(torch.cat(rel).mean()), float(torch.cat(logs).mean())


def _rng_states(generators: dict[str, torch.Generator], device: torch.device) -> dict[str, torch.Tensor]:
    states = {name: g.get_state() for name, g in generators.items()}
    states["torch_global"] = torch.get_rng_state()
    if device.type == "cuda":
        states["cuda_global"] = torch.cuda.get_rng_state(device)
    return states


def _sample(
    config: TrainConfig, g: torch.Generator | None, device: torch.device, dtype: torch.dtype, k: int | None = None
) -> torch.Tensor:
    """One batch of training or validation tasks (B, n, d) of the run's distribution (mixtures of
    ``k`` components; default the run's k)."""
    k = config.k if k is None else k
    X: torch.Tensor | tuple[torch.Tensor, Any]
    if config.tasks == "broad":
        X = sample_broad_tasks(config.batch, config.n, config.d, k, g, device=device, dtype=dtype)
    else:
        X = sample_tasks(
            config.batch, config.n, config.d, k, config.family, config.scale, g, device=device, dtype=dtype
        )
    assert isinstance(X, torch.Tensor)  # (without return_mixture: the points alone)
    return X


def _set_rng_states(
    states: dict[str, torch.Tensor], generators: dict[str, torch.Generator], device: torch.device
) -> None:
    for name, g in generators.items():
        g.set_state(states[name])
    torch.set_rng_state(states["torch_global"])
    if device.type == "cuda" and "cuda_global" in states:
        torch.cuda.set_rng_state(states["cuda_global"], device)


def _format_row(row: dict[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(
        ["" if row[c] is None else (repr(float(row[c])) if isinstance(row[c], float) else row[c]) for c in LOG_COLUMNS]
    )
    return buf.getvalue()


class RunFolderError(ValueError):
    """A file of a training run folder is damaged, missing or belongs to another run, so the
    folder cannot be resumed as asked; the message names the file and what is wrong."""


def read_log(path: str | os.PathLike) -> list[dict[str, float | None]]:
    """The rows of a run's ``log.csv`` as dicts of numbers (None where empty).

    Raises ``FileNotFoundError`` for a missing file and :class:`RunFolderError` (a ``ValueError``)
    naming the file and line for anything that is not a complete log: another header, a row cut
    short (also a last line without its newline: a write caught halfway), a field that is not a
    number, steps that do not increase (a repeated row).
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RunFolderError(
            f"{path}: not a training log (not UTF-8 text: byte "
            f"{exc.start} is {exc.object[exc.start : exc.start + 1]!r})"
        ) from None
    return parse_log(text, path)


_LOG_HEADER = ",".join(LOG_COLUMNS)


def parse_log(text: str, path: str | os.PathLike = "log.csv") -> list[dict[str, float | None]]:
    """:func:`read_log` on the text of a log (``path`` names it in errors)."""
    if not text:
        raise RunFolderError(f"{path}: empty file (expected a training log starting with the header {_LOG_HEADER!r})")
    lines = text.split("\n")
    if lines[-1] != "":
        raise RunFolderError(
            f"{path}: line {len(lines)}: cut short mid-line (no newline at the end: {lines[-1][:60]!r})"
        )
    lines.pop()
    if lines[0] != _LOG_HEADER:
        raise RunFolderError(
            f"{path}: line 1: not the header of a training log ({lines[0][:60]!r}; expected {_LOG_HEADER!r})"
        )
    rows: list[dict[str, float | None]] = []
    for number, line in enumerate(lines[1:], start=2):
        row = _parse_row(line)
        if isinstance(row, str):
            raise RunFolderError(f"{path}: line {number}: {row} ({line[:60]!r})")
        if rows and row["step"] <= rows[-1]["step"]:
            raise RunFolderError(
                f"{path}: line {number}: step {row['step']} after step {rows[-1]['step']} "
                "(the steps of a log increase; a repeated or misplaced row)"
            )
        rows.append(row)
    return rows


def _parse_row(line: str) -> dict[str, Any] | str:
    """One log row as a dict, or a string saying what is wrong with it."""
    try:
        fields = next(csv.reader([line])) if line else []
    except csv.Error as exc:
        return f"not a row of numbers ({exc})"
    if len(fields) != len(LOG_COLUMNS):
        return f"{len(fields)} fields, expected {len(LOG_COLUMNS)} ({', '.join(LOG_COLUMNS)})"
    row: dict[str, Any] = {}  # (step: int; train_loss: float or None; the others: float)
    for name, value in zip(LOG_COLUMNS, fields):
        if value == "" and name == "train_loss":  # (no training steps before step 0)
            row[name] = None
            continue
        try:
            row[name] = int(value) if name == "step" else float(value)
        except ValueError:
            return f"{name} is {value!r}, not {'an integer' if name == 'step' else 'a number'}"
    if row["step"] < 0:
        return f"step {row['step']} is negative"
    return row


def load_checkpoint_model(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> KMeansTransformer:
    """The model held in a training checkpoint (``last.pt``).

    Raises ``FileNotFoundError`` for a missing file and :class:`~kmtlib.ModelFileError` naming
    the file and the problem for a damaged or foreign one (as :func:`kmtlib.load_model`).
    """
    path = Path(path)
    payload = _read_checkpoint(path)
    return build_model(payload["model_config"], payload["model"], path, _CHECKPOINT_WHAT, "model_config", "model").to(
        map_location
    )


_CHECKPOINT_WHAT = "kmtlib training checkpoint"
# What every checkpoint holds, with the type it must have ("log_text" since the checkpoint also
# carries the log; older ones only its length "log_bytes").
_CHECKPOINT_ENTRIES: dict[str, type | tuple[type, ...]] = {
    "config": dict, "model_config": dict, "step": int, "model": dict, "optimizer": dict,
    "scheduler": dict, "rng": dict, "best": dict, "wall_s": (int, float),
}


def _read_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint's payload with its entries checked (not yet loaded into a model)."""
    payload = read_torch_file(path, _CHECKPOINT_WHAT)
    if not isinstance(payload, dict):
        raise ModelFileError(f"{path}: not a {_CHECKPOINT_WHAT} (it holds {describe_contents(payload)})")
    fmt = payload.get("format")
    if fmt != CHECKPOINT_FORMAT:
        hint = (
            "; it is a model file (kmtlib.load_model), not a checkpoint"
            if fmt == MODEL_FORMAT or fmt in OLD_MODEL_FORMATS
            else ""
        )
        found = "no 'format' entry" if fmt is None else f"format {fmt!r}"
        raise ModelFileError(f"{path}: not a {_CHECKPOINT_WHAT} ({found}; expected format {CHECKPOINT_FORMAT!r}{hint})")
    for key, kind in _CHECKPOINT_ENTRIES.items():
        if not isinstance(payload.get(key), kind) or isinstance(payload.get(key), bool):
            found = "missing" if key not in payload else f"a {type(payload[key]).__name__}"
            raise ModelFileError(f"{path}: damaged {_CHECKPOINT_WHAT} (its {key!r} entry is {found})")
    if not isinstance(payload.get("log_text"), str) and not isinstance(payload.get("log_bytes"), int):
        raise ModelFileError(f"{path}: damaged {_CHECKPOINT_WHAT} (it holds neither the log nor its length)")
    if payload["step"] < 0:
        raise ModelFileError(f"{path}: damaged {_CHECKPOINT_WHAT} (step {payload['step']})")
    return payload


# ------------------------------------------------------------------------------------- training
# The files of a run folder. "previous.pt" is the checkpoint before "last.pt" (kept so that a
# damaged newest checkpoint costs one evaluation interval, not the run); the ".damaged" files are
# what a resume replaced, kept for the reader.
LOG_FILE, CHECKPOINT_FILE, PREVIOUS_FILE, BEST_FILE, MODEL_FILE, MANIFEST_FILE = (
    "log.csv", "last.pt", "previous.pt", "best.pt", "model.pt", "manifest.json",
)
_DAMAGED = ".damaged"
RUN_FILES: tuple[str, ...] = (
    LOG_FILE, CHECKPOINT_FILE, PREVIOUS_FILE, BEST_FILE, MODEL_FILE, MANIFEST_FILE,
    LOG_FILE + _DAMAGED, MANIFEST_FILE + _DAMAGED,
)


def train(
    config: TrainConfig | dict[str, Any],
    out_dir: str | os.PathLike,
    *,
    resume: bool = False,
    overwrite: bool = False,
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
        out_dir: the run folder (created). Without ``resume`` or ``overwrite`` it must not hold
            a run's files yet (``FileExistsError``).
        resume: continue from ``out_dir/last.pt`` (start afresh if the folder holds no run yet).
            ``steps`` may be raised to extend a finished run, not lowered below the step reached;
            every other option must match the checkpoint. A damaged folder is repaired where
            the checkpoints allow it (one line on stderr per repair) and refused with a
            :class:`RunFolderError` or :class:`~kmtlib.ModelFileError` naming the file where
            they do not, before any training step and any change (see the module docstring).
        overwrite: delete the run's files in ``out_dir`` (log, checkpoints, models, manifest)
            and start afresh.
        quiet: True: no progress output (repairs are still reported). None (default): a
            progress bar when stderr is a terminal, else a line per evaluation on stderr (for log
            files). False: lines per evaluation even on a terminal (with the bar).
        threads: ``torch.set_num_threads`` for the run (default: leave as is).
        stop_at: stop after this step (counted from 0 across resumes) without finishing the run,
            as if interrupted; ``last.pt`` holds the state at the last evaluation before it.
        callback: called with every log row (a dict) after it is written and checkpointed.
        tune_memory: call :func:`tune_malloc` on the CPU (speed only).
        command: the command line recorded in the manifest.

    Returns:
        ``{"status": "finished" | "stopped", "step", "final_val_rel_objective",
        "best_val_rel_objective", "best_step", "wall_s", "out_dir", "notes", ...}`` (``notes``:
        the repairs made when resuming, as printed).
    """
    if isinstance(config, dict):
        config = TrainConfig.from_dict(config)
    config = config.validated()
    # Every argument is checked before the folder is created or touched.
    stop_at, threads = check_run_options(stop_at, threads, resume, overwrite)
    out = checked_run_folder(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with _run_lock(out):
        return _train_locked(config, out, resume, overwrite, quiet, threads, stop_at, callback, tune_memory, command)


def check_run_options(
    stop_at: int | None, threads: int | None, resume: bool, overwrite: bool
) -> tuple[int | None, int | None]:
    """The checks of :func:`train`'s ``stop_at``, ``threads``, ``resume`` and ``overwrite``
    (shared with the group trainer); returns ``(stop_at, threads)``."""
    if stop_at is not None:
        stop_at = check_int("stop_at", stop_at, minimum=0)
    if threads is not None:
        threads = check_int("threads", threads, minimum=1)
    if resume and overwrite:
        raise ValueError(
            "resume and overwrite exclude each other: resume continues the run in the folder, overwrite deletes it"
        )
    return stop_at, threads


def checked_run_folder(out_dir: str | os.PathLike) -> Path:
    """``out_dir`` as a Path, refused where it cannot be a run folder (nothing is created)."""
    if not isinstance(out_dir, (str, os.PathLike)):
        raise TypeError(f"out_dir must be a path, got {type(out_dir).__name__}")
    if not os.fspath(out_dir).strip():
        # (Path("") is the working directory: a run would land among whatever is there)
        raise ValueError(f"the run folder (out_dir, --out) must be a non-empty path, got {os.fspath(out_dir)!r}")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a folder: choose another run folder (out_dir, --out)")
    return out


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
    handle = open(out / ".lock", "a")  # noqa: SIM115 (held across the yield below, closed in its finally)
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


@dataclass
class _TrainingState:
    """Everything a training step changes, freshly initialised from the run seed."""

    model: KMeansTransformer
    optimizer: torch.optim.Optimizer
    scheduler: Any
    generators: dict[str, torch.Generator]


def _new_training_state(config: TrainConfig, device: torch.device, seeds: dict[str, int]) -> _TrainingState:
    model = KMeansTransformer.trainable(
        config.d, config.k, embedding=config.embedding, gamma=config.gamma, dropout=config.dropout,
        any_k=config.mixed_k and config.embedding == "onehot", cluster_broadcast=config.cluster_broadcast,
        code_width=config.code_width, generator=seeds["init"], dtype=_DTYPES[config.dtype], device=device,
    )
    if config.init_from:
        _warm_start(model, config.init_from)
    model.train()
    generators = {"train": _generator(seeds["train"], device), "dropout": _generator(seeds["dropout"], device)}
    model.layer.generator = generators["dropout"]
    if isinstance(model.embedding, CodeEmbedding):  # (new codes every step, from the data stream)
        model.embedding.generator = generators["train"]
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="min", factor=config.lr_factor, patience=config.lr_patience
    )
    return _TrainingState(model, optimizer, scheduler, generators)


def _sha256(path: str) -> str | None:
    """The SHA-256 of a file (None when it is gone), for the manifest's record of a warm start."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _warm_start(model: KMeansTransformer, path: str) -> None:
    """Start from the weights of the model saved in ``path`` (same layer shape and embedding)."""
    try:
        source = load_model(path)
    except (OSError, ValueError, RuntimeError) as exc:
        raise ValueError(f"init_from {path!r}: cannot be read as a saved model: {exc}") from None
    ours, theirs = model.state_dict(), source.state_dict()
    if ours.keys() != theirs.keys() or any(ours[name].shape != theirs[name].shape for name in ours):
        raise ValueError(
            f"init_from {path!r}: its layer ({source.config.origin}, d={source.d}) does not have the shape of "
            f"this run's layer (d={model.d}, embedding and widths as configured)"
        )
    model.load_state_dict(theirs)


@dataclass
class _ResumePoint:
    """A checked checkpoint to continue from, and the repairs to make before continuing."""

    state: _TrainingState
    payload: dict[str, Any]
    log_text: str  # the log up to the checkpoint's step, as it must stand on disk
    notes: list[str] = field(default_factory=list)  # one line per repair, said when they are made
    repairs: list[Callable[[], None]] = field(default_factory=list)  # made once nothing can refuse


def _config_differences(saved: Any, config: TrainConfig) -> list[str]:
    saved = saved if isinstance(saved, dict) else {}
    # (an option added after a run was written is that run's default)
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.name in _OPTIONS_ADDED_LATER}
    return [
        f"{k}: {saved.get(k, defaults.get(k))!r} there vs {v!r} now"
        for k, v in dataclasses.asdict(config).items()
        if k != "steps" and saved.get(k, defaults.get(k)) != v
    ]


_OPTIONS_ADDED_LATER: frozenset[str] = frozenset(
    {"cluster_broadcast", "loss_temperature_rule", "code_width", "tasks", "init_from"}
)
"""Training options that runs written before them do not record (they ran with the default)."""


def _open_checkpoint(
    path: Path, config: TrainConfig, device: torch.device, seeds: dict[str, int]
) -> tuple[_TrainingState, dict[str, Any], str | None]:
    """Read a checkpoint and load it into a fresh training state.

    Raises FileNotFoundError / ModelFileError where the file is missing or damaged (a previous
    checkpoint may do instead) and RunFolderError where it belongs to another run (nothing may
    do instead: the folder is not this run's).
    """
    payload = _read_checkpoint(path)
    mismatched = _config_differences(payload["config"], config)
    if mismatched:
        raise RunFolderError(
            f"{path}: the checkpoint of another run ({'; '.join(mismatched)}): resume it with its own options, "
            f"or start this run in another folder (or --overwrite)"
        )
    # The log as it stood at the checkpoint: carried in the checkpoint itself (older checkpoints
    # carry only its length; _resume_point then takes it from log.csv).
    log_text = payload.get("log_text")
    if log_text is not None:
        try:
            rows = parse_log(log_text, f"{path} (its copy of the log)")
        except RunFolderError as exc:
            raise ModelFileError(f"{path}: damaged {_CHECKPOINT_WHAT} ({exc})") from None
        if not rows or rows[-1]["step"] != payload["step"]:
            raise ModelFileError(
                f"{path}: damaged {_CHECKPOINT_WHAT} (its copy of the log does not end at its step {payload['step']})"
            )
    state = _new_training_state(config, device, seeds)
    try:
        check_state_dict(payload["model"], path, _CHECKPOINT_WHAT, "model")
        state.model.load_state_dict(payload["model"])
        state.optimizer.load_state_dict(payload["optimizer"])
        state.scheduler.load_state_dict(payload["scheduler"])
        _set_rng_states(payload["rng"], state.generators, device)
        best = payload["best"]
        if not (best.get("step") is None or isinstance(best.get("step"), int)) or not isinstance(
            best.get("val_rel_objective"), float
        ):
            raise ValueError(f"its record of the best model is {best!r}")
    except ModelFileError:
        raise
    except Exception as exc:  # load_state_dict and the rng setters raise all kinds of errors
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelFileError(
            f"{path}: damaged {_CHECKPOINT_WHAT} (its training state does not load: {text[:200]})"
        ) from None
    return state, payload, log_text


def _problem(exc: BaseException, path: Path) -> str:
    """What an error says about ``path``, without the path it starts with."""
    text = str(exc)
    for prefix in (f"{path}: ", f"{path} "):
        if text.startswith(prefix):
            return text[len(prefix) :]
    return "missing" if isinstance(exc, FileNotFoundError) else text


def _resume_point(config: TrainConfig, out: Path, device: torch.device, seeds: dict[str, int]) -> _ResumePoint | None:
    """Decide how a run folder is resumed, checking every file first and changing none.

    Returns None where the folder holds no run yet (a fresh start loses nothing), else the
    checkpoint to continue from with the repairs it needs. The checkpoint is the authority: it
    holds the log up to its step and the best model so far, so

    * ``last.pt`` missing or damaged: continue from ``previous.pt`` (one evaluation earlier);
      refuse when there is none or it is damaged too;
    * ``log.csv`` cut short, padded, with garbage or repeated rows, or missing: rewrite it from
      the checkpoint's copy (rows written after the checkpoint are trained again; a log that
      was not merely ahead of the checkpoint is kept as ``log.csv.damaged``);
    * ``best.pt`` missing, damaged or from a later step: rewrite it from the checkpoint;
    * ``manifest.json`` or ``model.pt`` damaged: set aside / written again when the run
      finishes; of another configuration: refuse (they are another run's results);
    * a checkpoint of another configuration, or past ``steps``: refuse.

    Raises RunFolderError or ModelFileError (messages naming the file) where it refuses.
    """
    last, previous, log = out / CHECKPOINT_FILE, out / PREVIOUS_FILE, out / LOG_FILE
    notes: list[str] = []
    try:
        state, payload, log_text = _open_checkpoint(last, config, device, seeds)
        used = last
    except (FileNotFoundError, ModelFileError) as exc:
        if not previous.exists():
            if isinstance(exc, FileNotFoundError):
                leftovers = _fresh_start_loses(out)
                if leftovers is None:
                    return None
                raise RunFolderError(
                    f"{last}: missing, so {out} cannot be resumed ({leftovers}); start again with --overwrite "
                    f"(overwrite=True), which deletes the run's files, or choose another folder"
                ) from None
            raise RunFolderError(
                f"{exc}; there is no earlier checkpoint ({previous}) to "
                "resume from: start again with --overwrite (overwrite=True)"
            ) from None
        try:
            state, payload, log_text = _open_checkpoint(previous, config, device, seeds)
        except (FileNotFoundError, ModelFileError) as exc2:
            raise RunFolderError(
                f"{exc}; and the earlier checkpoint is no better: {exc2}; start again with --overwrite (overwrite=True)"
            ) from None
        used = previous
        notes.append(
            f"{last}: {_problem(exc, last)}; resuming from the earlier checkpoint {previous} (step {payload['step']})"
        )
    step = int(payload["step"])
    if step > config.steps:
        raise RunFolderError(
            f"{used}: the run is at step {step}, past the {config.steps} steps asked for: pass --steps {step} or more "
            f"to finish or extend it (a run cannot be shortened)"
        )
    threads = payload.get("threads")
    if threads not in (None, torch.get_num_threads()):
        warnings.warn(
            f"resuming with {torch.get_num_threads()} threads but the checkpoint was written with "
            f"{threads}; the result will not be bit-identical to an uninterrupted run",
            stacklevel=4,
        )
    point = _ResumePoint(state, payload, "", notes)
    point.log_text = _plan_log(point, log, used, log_text, step)
    _plan_best(point, out / BEST_FILE, used)
    _plan_results(point, out, config)
    return point


def _fresh_start_loses(out: Path) -> str | None:
    """None where a folder without a checkpoint holds nothing a fresh start would lose (no files,
    or what a run killed during its first evaluation leaves: a log of step 0 and best.pt);
    else what it holds."""
    finished = [name for name in (MODEL_FILE, MANIFEST_FILE) if (out / name).exists()]
    if finished:
        return f"it holds {' and '.join(finished)} of a finished run but no checkpoint to continue from"
    log = out / LOG_FILE
    if not log.exists():
        return None
    try:
        rows = read_log(log)
    except (RunFolderError, OSError) as exc:
        if log.stat().st_size <= len(_LOG_HEADER) + 1 and _LOG_HEADER.startswith(
            log.read_text(errors="replace").rstrip("\n")
        ):
            return None  # (a header cut short: killed while creating the log)
        return f"{log}: {_problem(exc, log)}"
    if any(row["step"] != 0 for row in rows):
        return f"{log} records training up to step {rows[-1]['step']}"
    return None


def _plan_log(point: _ResumePoint, log: Path, used: Path, log_text: str | None, step: int) -> str:
    """Compare log.csv with the checkpoint's copy; plan its repair; return the log as it must be."""
    try:
        disk = log.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        disk = None
    if log_text is None:
        # An older checkpoint: only the log's length at the checkpoint is known, so the log's
        # first log_bytes bytes must be a complete log that ends at the checkpoint's step.
        n = int(point.payload["log_bytes"])
        if disk is None:
            raise RunFolderError(
                f"{log}: missing, and the checkpoint {used} (an older format) holds no copy of it; cannot resume"
            )
        try:
            rows = parse_log(disk[:n], log)
            if rows[-1]["step"] != step:
                raise RunFolderError(
                    f"{log}: its first {n} bytes end at step {rows[-1]['step']}, not at the checkpoint's step {step}"
                )
        except (RunFolderError, IndexError) as exc:
            raise RunFolderError(
                f"{log}: does not match the checkpoint {used} ({_problem(exc, log)}), "
                "which (an older format) holds no copy of it; cannot resume"
            ) from None
        log_text = disk[:n]
    if disk == log_text:
        return log_text
    after = disk[len(log_text) :] if disk is not None and disk.startswith(log_text) else None
    later = _later_rows(after, step) if after is not None else None
    if disk is None:
        point.notes.append(f"{log}: missing; restored from the copy in {used} (up to step {step})")
    elif later is not None:
        # What a run killed between writing a log row and its checkpoint leaves (or a resume
        # from previous.pt): rows that training repeats exactly.
        steps = ", ".join(str(s) for s in later[:4]) + (", ..." if len(later) > 4 else "")
        point.notes.append(
            f"{log}: dropped {len(later)} row(s) after step {step} (step "
            f"{steps}), written after the checkpoint {used}; they are trained again"
        )
    else:
        point.notes.append(
            f"{log}: {_log_difference(disk, log_text)}; restored from the copy in {used} (up to step {step}); "
            f"the damaged file is kept as {log.name}{_DAMAGED}"
        )
        point.repairs.append(lambda: os.replace(log, log.with_name(log.name + _DAMAGED)))
    point.repairs.append(lambda: _atomic_write_text(log, log_text))
    return log_text


def _later_rows(text: str, step: int) -> list[int] | None:
    """The steps of ``text`` when it is nothing but complete log rows after ``step``, else None."""
    if not text.endswith("\n"):
        return None
    steps: list[int] = []
    for line in text[:-1].split("\n"):
        row = _parse_row(line)
        if isinstance(row, str) or row["step"] <= (steps[-1] if steps else step):
            return None
        steps.append(row["step"])
    return steps


def _log_difference(disk: str, expected: str) -> str:
    """What is wrong with a log, read against the checkpoint's copy, in a few words."""
    have, want = disk.split("\n"), expected.split("\n")
    if not disk:
        return "empty"
    if expected.startswith(disk):
        complete = disk.count("\n")  # lines that end in a newline, the header first
        mid_row = "" if disk.endswith("\n") else " mid-row"
        if complete == 0:
            return "cut short in its header"
        if complete == 1:
            return f"cut short{mid_row} after its header"
        return f"cut short{mid_row} after step {want[complete - 1].split(',', 1)[0]}"
    for number, (mine, theirs) in enumerate(zip(have, want), start=1):
        if mine != theirs:
            if number == len(want):  # past the checkpoint's rows
                return f"line {number}, after the checkpoint's last row, is not a later row ({_clip(mine)})"
            return f"line {number} differs from the checkpoint's copy (found {_clip(mine)}, expected {_clip(theirs)})"
    return "differs from the checkpoint's copy"


def _clip(text: str, limit: int = 50) -> str:
    """``repr(text)``, at most about ``limit`` characters (a line of binary junk is long)."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


def _plan_best(point: _ResumePoint, best_path: Path, used: Path) -> None:
    """Check best.pt against the best model the checkpoint holds; plan its repair."""
    best_state, best_step = point.payload.get("best_model"), point.payload["best"].get("step")
    if best_state is None or best_step is None:
        return  # (older checkpoints do not hold the best model: best.pt is left as it is)
    try:
        on_disk = load_model(best_path).state_dict()
        same = on_disk.keys() == best_state.keys() and all(
            torch.equal(on_disk[k], best_state[k].cpu()) for k in on_disk
        )
        problem = (
            None
            if same
            else f"holds other weights than the best model of {used} (step {best_step}), e.g. from a later step"
        )
    except (FileNotFoundError, ModelFileError) as exc:
        problem = _problem(exc, best_path)
    if problem is None:
        return
    try:
        model = build_model(
            point.payload["model_config"], best_state, used, _CHECKPOINT_WHAT, "model_config", "best_model"
        )
    except ModelFileError:
        point.notes.append(f"{best_path}: {problem}; the checkpoint's copy is damaged too, so it is left as it is")
        return
    point.notes.append(f"{best_path}: {problem}; restored the best model so far (step {best_step}) from {used}")
    point.repairs.append(lambda: model.save(best_path))


def _plan_results(point: _ResumePoint, out: Path, config: TrainConfig) -> None:
    """Check a finished run's manifest.json and model.pt (written again when the run finishes)."""
    manifest = out / MANIFEST_FILE
    if manifest.exists():
        try:
            saved = json.loads(manifest.read_text())
            if not isinstance(saved, dict) or not isinstance(saved.get("config"), dict):
                raise ValueError("JSON, but not an object with a 'config' object")
        except (ValueError, UnicodeDecodeError) as exc:
            point.notes.append(
                f"{manifest}: not a valid manifest ({str(exc)[:80]}); set aside "
                f"as {manifest.name}{_DAMAGED}, written again when the run finishes"
            )
            point.repairs.append(lambda: os.replace(manifest, manifest.with_name(manifest.name + _DAMAGED)))
        else:
            mismatched = _config_differences(saved.get("config"), config)
            if mismatched:
                raise RunFolderError(
                    f"{manifest}: the manifest of another run ({'; '.join(mismatched[:4])}): this folder mixes runs; "
                    f"move that run's files away, or start again with --overwrite"
                )
    model_path = out / MODEL_FILE
    if model_path.exists():
        try:
            model = load_model(model_path)
        except ModelFileError as exc:
            point.notes.append(f"{model_path}: {_problem(exc, model_path)}; written again when the run finishes")
            return
        ours = point.state.model.config
        if model.config != ours:
            # the fields that differ, blocks as a whole (a block's scale follows from d and k)
            diffs = [
                f"{k}: {getattr(model.config, k)!r} there vs {getattr(ours, k)!r} here"
                for k in ("d", "k", "tokens", "reembed", "trainable", "bias")
                if getattr(model.config, k) != getattr(ours, k)
            ]
            diffs += [
                f"block {name} differs"
                for name in ("CAX", "SAX", "CAC", "SAC")
                if not diffs and getattr(model.config, name) != getattr(ours, name)
            ]
            raise RunFolderError(
                f"{model_path}: a model of another configuration ({'; '.join(diffs[:4])}): this folder mixes runs; "
                f"move it away, or start again with --overwrite"
            )


def _remove_temporaries(out: Path) -> list[str]:
    """Delete the temporary files of saves that a killed process left (``.<run file>.*tmp``);
    they hold nothing the finished files do not (the lock is held: no save is running)."""
    removed = []
    for path in out.iterdir():
        name = path.name
        if (
            name.startswith(".")
            and name.endswith(".tmp")
            and any(name[1:].startswith(f + ".") for f in RUN_FILES)
            and path.is_file()
        ):
            path.unlink()
            removed.append(name)
    return sorted(removed)


def _say(notes: list[str], text: str) -> None:
    notes.append(text)
    print(text, file=sys.stderr, flush=True)


class _Run:
    """One run during training: its folder, its training state and its records (log, checkpoints,
    best model, manifest). The trainer of one run (:func:`train`) and of a group of runs
    (:func:`kmtlib.train_group.train_group`) drive the same object, so a run's folder holds the same
    files whichever trained it. Opening a run (:meth:`open`) checks its folder and changes nothing;
    :meth:`prepare` makes the repairs, :meth:`start` builds the state and writes the first row."""

    def __init__(self, config: TrainConfig, out: Path, command: str | None) -> None:
        self.config, self.out, self.command = config, out, command
        self.last_path, self.previous_path = out / CHECKPOINT_FILE, out / PREVIOUS_FILE
        self.best_path, self.log_path = out / BEST_FILE, out / LOG_FILE
        self.device = resolve_device(config.device)
        self.dtype = _DTYPES[config.dtype]
        self.seeds = derive_seeds(config.seed)
        self.training_ks = config.training_ks()
        self.notes: list[str] = []
        self.point: _ResumePoint | None = None
        self.existing: list[str] = []
        self.print_rows = False
        self.callback: Callable[[dict[str, Any]], None] | None = None
        self.step = 0
        self.window = torch.zeros((), dtype=torch.float64, device=self.device)
        self.window_steps = 0
        self.resume = self.overwrite = False
        self.manifest_extra: dict[str, Any] = {}  # (what a group trainer adds: the runs trained together)

    @classmethod
    def open(cls, config: TrainConfig, out: Path, resume: bool, overwrite: bool, command: str | None) -> _Run:
        """Check the folder for this run (every refusal happens here, before any change)."""
        run = cls(config, out, command)
        run.existing = [name for name in RUN_FILES if (out / name).exists()]
        for name in run.existing:
            if (out / name).is_dir():  # (no repair or overwrite could replace it by a file)
                raise RunFolderError(f"{out / name}: a folder where the run keeps its {name} file: move it away")
        if resume:
            run.point = _resume_point(config, out, run.device, run.seeds)
        elif run.existing and not overwrite:
            raise FileExistsError(
                f"{out} already holds a training run ({', '.join(run.existing)}): pass --resume (resume=True) to "
                f"continue it, --overwrite (overwrite=True) to delete it and start again, or choose another folder"
            )
        run.resume, run.overwrite = resume, overwrite
        return run

    def prepare(self) -> None:
        """Repair or clear the folder (nothing refuses from here on)."""
        out, notes = self.out, self.notes
        removed = _remove_temporaries(out)
        if removed:
            _say(notes, f"{out}: removed {len(removed)} temporary file(s) of a save that was killed "
                        f"({', '.join(removed)})")  # fmt: skip
        if self.overwrite and self.existing:
            for name in self.existing:
                (out / name).unlink()
            _say(notes, f"{out}: --overwrite: deleted the previous run's {', '.join(self.existing)}")
        if self.point is not None:
            for repair in self.point.repairs:
                repair()
            for note in self.point.notes:
                _say(notes, f"resume: {note}")
        elif self.resume and self.existing:
            _say(notes, f"resume: {out} holds no checkpoint yet (a run stopped in its first evaluation); "
                        "starting it afresh")  # fmt: skip

    def start(self, print_rows: bool, callback: Callable[[dict[str, Any]], None] | None) -> None:
        """Build the training state (fresh or from the checkpoint) and the validation tasks."""
        config, device = self.config, self.device
        self.source = source_fingerprint()
        self.print_rows, self.callback = print_rows, callback
        state = _new_training_state(config, device, self.seeds) if self.point is None else self.point.state
        self.model, self.optimizer, self.scheduler = state.model, state.optimizer, state.scheduler
        self.generators = state.generators
        self.validation = make_validation_batches(config, device)
        self.best: dict[str, Any] = {"step": None, "val_rel_objective": math.inf}
        self.wall_before = 0.0
        self.best_state: dict[str, torch.Tensor] | None = None
        self.final_row: dict[str, Any] | None = None
        if self.point is not None:
            payload = self.point.payload
            self.step, self.wall_before = int(payload["step"]), float(payload["wall_s"])
            self.best = dict(payload["best"])
            self.best_state = payload.get("best_model")
            self.log_text = self.point.log_text
            # Again, now: checking the folder built models (load_model, build_model), which draws
            # initial weights from the global random stream.
            _set_rng_states(payload["rng"], self.generators, device)
            self.final_row = parse_log(self.log_text, self.log_path)[-1]
            self.point = None
        else:
            torch.manual_seed(self.seeds["torch"])  # only the "explicit" kernel draws from the global RNG
            self.log_text = _LOG_HEADER + "\n"
            _atomic_write_text(self.log_path, self.log_text)
        self.t_start = time.perf_counter()

    @property
    def done(self) -> bool:
        return self.step >= self.config.steps

    def wall(self) -> float:
        return self.wall_before + time.perf_counter() - self.t_start

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def evaluate_first(self) -> dict[str, Any]:
        """The row of step 0 (a run resumed past it has it already); returns the run's last row."""
        if self.final_row is None:
            self.final_row = self.evaluate_and_checkpoint(None, self.lr)
        return self.final_row

    def draw_batch(self) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The next training batch from the run's data stream: points X, initial centres C0, and k."""
        config, g = self.config, self.generators["train"]
        k = config.k
        if config.mixed_k:  # (drawn from the training stream: a run of one k draws nothing here)
            k = self.training_ks[int(torch.randint(len(self.training_ks), (), generator=g, device=self.device))]
        X = _sample(config, g, self.device, self.dtype, k)
        return X, init_centers(X, k, "random", generator=g), k

    def advance(self, loss: torch.Tensor) -> dict[str, Any] | None:
        """Count a step whose optimiser update is made; evaluate and checkpoint when one is due
        (returns its row)."""
        self.step += 1
        self.window += loss.detach()
        self.window_steps += 1
        if self.step % self.config.eval_every and self.step != self.config.steps:
            return None
        window_loss = float(self.window) / self.window_steps
        if not math.isfinite(window_loss):
            raise FloatingPointError(
                f"training diverged: non-finite loss between steps {self.step - self.window_steps} and {self.step}; "
                f"{self.last_path} holds the last finite state"
            )
        self.final_row = self.evaluate_and_checkpoint(window_loss, self.lr)
        self.window.zero_()
        self.window_steps = 0
        return self.final_row

    def evaluate_and_checkpoint(self, window_loss: float | None, lr_used: float) -> dict[str, Any]:
        config, model, step = self.config, self.model, self.step
        rel, logobj = _validate(model, self.validation, config.batch)
        if step > 0:
            self.scheduler.step(rel)
        row = {
            "step": step,
            "train_loss": window_loss,
            "val_rel_objective": rel,
            "val_log_objective": logobj,
            "lr": lr_used,
            "wall_s": self.wall(),
        }
        # The row goes to log.csv first and into the checkpoint with the whole log: a kill
        # between the two leaves a row that the next resume drops and trains again.
        text = _format_row(row)
        with open(self.log_path, "a", newline="") as f:
            f.write(text)
        self.log_text += text
        if rel < self.best["val_rel_objective"]:
            self.best = {"step": step, "val_rel_objective": rel}
            self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            model.save(self.best_path)
        atomic_torch_save(
            {
                "format": CHECKPOINT_FORMAT,
                "config": dataclasses.asdict(config),
                "model_config": model.config.to_dict(),
                "step": step,
                "model": model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "rng": _rng_states(self.generators, self.device),
                "log_text": self.log_text,  # (the log is small: a few hundred rows)
                "log_bytes": len(self.log_text.encode()),
                "best": self.best,
                "best_model": self.best_state,
                "wall_s": row["wall_s"],
                "threads": torch.get_num_threads(),
            },
            self.last_path,
            keep_previous=self.previous_path,
        )
        if self.print_rows:
            loss_text = "" if window_loss is None else f" train_loss={window_loss:.4f}"
            print(
                f"[{self.out.name}] step {step}/{config.steps}{loss_text} val_rel_objective={rel:.4f} "
                f"lr={lr_used:.3g} wall={row['wall_s']:.0f}s",
                file=sys.stderr, flush=True,
            )
        if self.callback is not None:
            self.callback(row)
        return row

    def finish(self, status: str) -> dict[str, Any]:
        """The run's summary; a finished run also writes model.pt and manifest.json."""
        config, step, final_row = self.config, self.step, self.final_row
        assert final_row is not None
        summary: dict[str, Any] = {
            "status": status,
            "step": step,
            "out_dir": str(self.out),
            "final_val_rel_objective": final_row["val_rel_objective"],
            "final_val_log_objective": final_row["val_log_objective"],
            "best_val_rel_objective": self.best["val_rel_objective"],
            "best_step": self.best["step"],
            "wall_s": self.wall(),
            "notes": self.notes,
        }
        if status != "finished":
            return summary
        model_path = self.model.save(self.out / MODEL_FILE)
        from ._version import __version__

        device = self.device
        manifest = {
            "command": self.command,
            "config": dataclasses.asdict(config),
            "seed": config.seed,
            "derived_seeds": self.seeds,
            **({"init_from_sha256": _sha256(config.init_from)} if config.init_from else {}),
            "steps": step,
            "kmtlib_version": __version__,
            **self.source,
            "torch_version": torch.__version__,
            "python_version": platform.python_version(),
            "device": str(device),
            "device_name": torch.cuda.get_device_name(device)
            if device.type == "cuda"
            else platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(),
            **self.manifest_extra,
            "wall_s": summary["wall_s"],
            "wall_s_per_step": summary["wall_s"] / max(step, 1),
            "final_val_rel_objective": summary["final_val_rel_objective"],
            "final_val_log_objective": summary["final_val_log_objective"],
            "best_val_rel_objective": summary["best_val_rel_objective"],
            "best_step": summary["best_step"],
            "files": {
                "model": MODEL_FILE,
                "best": BEST_FILE,
                "checkpoint": CHECKPOINT_FILE,
                "previous_checkpoint": PREVIOUS_FILE,
                "log": LOG_FILE,
            },
        }
        _atomic_write_text(self.out / MANIFEST_FILE, json.dumps(manifest, indent=2) + "\n")
        summary["model_path"] = str(model_path)
        return summary


def step_alone(
    model: KMeansTransformer, optimizer: torch.optim.Optimizer, X: torch.Tensor, C0: torch.Tensor, inv_temp: float
) -> torch.Tensor:
    """One training step of one run: apply the layer once from C0, take the mean smoothed
    objective of the new centres at inverse temperature ``inv_temp`` as the loss, and make one
    optimiser update; returns the loss. (:func:`kmtlib.train_group.step_together` is the step
    of a group.)"""
    loss = _smoothed_objective(X, model.step(X, C0), inv_temp).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss


def progress_bar(total: int, initial: int, desc: str, quiet: bool | None) -> Any:
    """The training progress bar: for terminals only (off otherwise, and with ``quiet``). tqdm's text
    bar, not tqdm.auto, which in a Jupyter kernel without ipywidgets warns even when disabled."""
    from tqdm import tqdm

    return tqdm(
        total=total, initial=min(initial, total), disable=bool(quiet) or not sys.stderr.isatty(),
        desc=desc, unit="step", dynamic_ncols=True,
    )


def prints_rows(quiet: bool | None) -> bool:
    """Whether a line per evaluation goes to stderr: asked for, or by default where no bar shows (logs)."""
    return quiet is False or (quiet is None and not sys.stderr.isatty())


def _train_locked(
    config, out, resume, overwrite, quiet, threads, stop_at, callback, tune_memory, command
) -> dict[str, Any]:
    if threads is not None:
        torch.set_num_threads(threads)
    run = _Run.open(config, out, resume, overwrite, command)  # every refusal happens here
    run.prepare()
    if tune_memory and run.device.type == "cpu":
        tune_malloc()
    run.start(prints_rows(quiet), callback)
    bar = progress_bar(config.steps, run.step, out.name, quiet)
    status = "finished"
    try:
        bar.set_postfix(val=f"{run.evaluate_first()['val_rel_objective']:.4f}")
        while not run.done:
            if stop_at is not None and run.step >= stop_at:
                status = "stopped"
                break
            X, C0, k = run.draw_batch()
            loss = step_alone(run.model, run.optimizer, X, C0, config.loss_inv_temp_at(k))
            row = run.advance(loss)
            bar.update(1)
            if row is not None:
                bar.set_postfix(
                    loss=f"{row['train_loss']:.3f}", val=f"{row['val_rel_objective']:.4f}", lr=f"{row['lr']:.2g}"
                )
    finally:
        bar.close()
    return run.finish(status)


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
    """Write a text file atomically (temporary file flushed to disk, then renamed over it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


# ----------------------------------------------------------------------------------------- CLI
def _parser() -> argparse.ArgumentParser:
    d = TrainConfig()
    p = argparse.ArgumentParser(
        prog="python -m kmtlib.train",
        description=(
            "Train the learned k-means transformer layer with the paper's protocol (defaults: the paper's main run)."
        ),
    )
    p.add_argument("--out", required=True, help="run folder (log.csv, last.pt, best.pt, model.pt, manifest.json)")
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
        "(kmtlib.train_group): each lands in OUT/seed<S>/ exactly as if trained alone",
    )
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
    p.add_argument("--device", default=d.device, help="cpu, cuda, cuda:N or auto (default %(default)s)")
    p.add_argument("--dtype", choices=tuple(_DTYPES), default=d.dtype, help="weights and data (default %(default)s)")
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's choice / OMP_NUM_THREADS)"
    )
    p.add_argument(
        "--resume", action="store_true",
        help="continue the run in OUT from its checkpoint (OUT/last.pt, else OUT/previous.pt); a damaged log or "
        "best.pt is restored from the checkpoint, and what cannot be repaired is refused before any step",
    )
    p.add_argument(
        "--overwrite", action="store_true",
        help="delete the run already in OUT (log, checkpoints, models, manifest) and start again; without "
        "--resume or --overwrite an OUT that holds a run is refused",
    )
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
    p.add_argument(
        "--tasks", choices=TASK_FAMILIES, default=d.tasks,
        help="training tasks: the paper's mixtures or the broad family of kmtlib.broad_tasks (default %(default)s)",
    )
    p.add_argument(
        "--init-from", default=d.init_from, dest="init_from",
        help="start from the weights of this saved model (same layer shape) instead of a random initialisation",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar and no per-evaluation lines")
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _parser().parse_args(argv)
    if args.seeds is not None and args.seed is not None:
        raise SystemExit("error: --seed and --seeds exclude each other (one run, or a group of runs)")
    if args.seed is None:
        args.seed = TrainConfig.seed
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)}
    command = "python -m kmtlib.train " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
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
    """``--seeds``: the group's runs in OUT/seed<S>/ (kmtlib.train_group)."""
    from .train_group import configs_for_seeds, parse_seeds, seed_folders, train_group

    try:
        seeds = parse_seeds(args.seeds)
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


if __name__ == "__main__":
    main()
