"""The trained weights shipped with the book: ``data/weights/<embedding>_seed<S>/``.

Each run folder holds ``model.pt`` (the last weights, what the paper evaluates; read with
:func:`kmtlib.io.model_file.load_model`), ``log.csv`` (the training log of :mod:`kmtlib.training`) and
``manifest.json`` (command, configuration, versions, wall time). ``scripts/train_shipped.sh``
trains them and ``scripts/ship_weights.py`` copies them here. The chapters use whatever runs are
present and say how many seeds they used::

    from kmtbook.shipped import require_runs
    runs = require_runs("onehot")            # FileNotFoundError with instructions if none
    models = [run.load() for run in runs]
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kmtlib.embedding import embedding_name
from kmtlib.training import TrainConfig

from .repo_root import find_repo_root

TRAIN_COMMAND = "scripts/train_shipped.sh"
SHIP_COMMAND = "python scripts/ship_weights.py"

_TRAIN_DEFAULTS: dict[str, Any] = dataclasses.asdict(TrainConfig())
"""The training defaults, for the fields of a configuration that an older manifest lacks."""


def default_weights_dir() -> Path:
    """``data/weights`` under the book's root (found from the working directory)."""
    return find_repo_root() / "data" / "weights"


@dataclass
class ShippedRun:
    """One finished training run: its folder, embedding (by its current name: ``"data"`` for a run
    made as ``"none"``), seed and manifest."""

    folder: Path
    embedding: str
    seed: int
    manifest: dict[str, Any] = field(repr=False)

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def config(self) -> dict[str, Any]:
        """The training configuration (:class:`kmtlib.training.TrainConfig` fields)."""
        return dict(self.manifest.get("config", {}))

    @property
    def model_path(self) -> Path:
        return self.folder / "model.pt"

    @property
    def log_path(self) -> Path:
        return self.folder / "log.csv"

    def load(self, device: str | torch.device = "cpu"):
        """The trained :class:`~kmtlib.KMeansTransformer` (in eval mode) on ``device``."""
        from kmtlib.io.model_file import load_model

        return load_model(self.model_path, map_location=device).eval()

    def log(self) -> list[dict[str, float | None]]:
        """The rows of ``log.csv`` (see :func:`kmtlib.training.read_log`)."""
        from kmtlib.training import read_log

        return read_log(self.log_path)


def _read_manifest(path: Path) -> dict[str, Any]:
    """A run's manifest, checked: a damaged one is an error naming it (a run skipped without a
    word would leave a chapter averaging fewer seeds than it says)."""
    from kmtlib.training import RunFolderError

    try:
        manifest = json.loads(path.read_bytes().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:  # (json.JSONDecodeError is a ValueError)
        raise RunFolderError(f"{path}: not a valid manifest (not JSON: {str(exc)[:100]})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("config"), dict):
        raise RunFolderError(f"{path}: not a training run's manifest (expected a JSON object with a 'config' object)")
    seed = manifest.get("seed", manifest["config"].get("seed"))
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise RunFolderError(f"{path}: not a training run's manifest (its seed is {seed!r}, not an integer)")
    return manifest


def _seed_order(seed: int) -> tuple[int, int]:
    from .paper_sweep import PAPER_SEEDS

    return (PAPER_SEEDS.index(seed), seed) if seed in PAPER_SEEDS else (len(PAPER_SEEDS), seed)


def shipped_runs(
    embedding: str | None = None,
    weights_dir: str | os.PathLike | None = None,
    **config: Any,
) -> list[ShippedRun]:
    """The finished runs under ``weights_dir`` (default ``data/weights``), in the order of the
    paper's seed list.

    Args:
        embedding: keep only runs with this token embedding (``"onehot"`` or ``"data"``; an old
            name such as ``"none"`` is read too, :func:`kmtlib.embedding.embedding_name`).
        weights_dir: the folder holding ``<embedding>_seed<S>/`` run folders (named by the
            embedding the run was made with: ``none_seed<S>/`` for the width-d runs).
        config: keep only runs whose training configuration has these values (e.g. ``d=32``);
            runs for any number of clusters (``k_max > 0``) only when asked for with ``k_max=...``.

    A folder counts as a run when it holds ``model.pt``, ``log.csv`` and ``manifest.json``; a
    manifest that is not a training run's is an error naming it (:class:`kmtlib.training.RunFolderError`);
    a damaged ``model.pt`` or ``log.csv`` is one when :meth:`ShippedRun.load` or
    :meth:`ShippedRun.log` reads it (:class:`kmtlib.ModelFileError`, ``RunFolderError``).
    """
    root = Path(weights_dir) if weights_dir else default_weights_dir()
    # (a run of one k unless asked otherwise: a layer for any k is trained with k_max > 0; fields a
    # manifest predates take their training default)
    wanted = {"k_max": 0, **config}
    runs = []
    if root.is_dir():
        for folder in sorted(root.glob("*_seed*")):
            if not all((folder / f).is_file() for f in ("model.pt", "log.csv", "manifest.json")):
                continue
            manifest = _read_manifest(folder / "manifest.json")
            cfg = manifest["config"]
            seed = int(manifest.get("seed", cfg.get("seed")))
            run = ShippedRun(folder, embedding_name(str(cfg.get("embedding"))), seed, manifest)
            if embedding is not None and run.embedding != embedding_name(embedding):
                continue
            if any(cfg.get(key, _TRAIN_DEFAULTS.get(key)) != value for key, value in wanted.items()):
                continue
            runs.append(run)
    return sorted(runs, key=lambda r: (r.embedding, _seed_order(r.seed)))


def require_runs(
    embedding: str,
    weights_dir: str | os.PathLike | None = None,
    max_runs: int | None = None,
    **config: Any,
) -> list[ShippedRun]:
    """Like :func:`shipped_runs` for one embedding, at most ``max_runs`` of them (the first in
    the paper's seed order); raise ``FileNotFoundError`` with instructions when there is none."""
    runs = shipped_runs(embedding, weights_dir, **config)
    if not runs:
        root = Path(weights_dir) if weights_dir else default_weights_dir()
        wanted = ", ".join(f"{k}={v}" for k, v in config.items())
        raise FileNotFoundError(
            f"no finished training run with embedding {embedding!r}{' and ' + wanted if wanted else ''} under {root} "
            f"(expected run folders <embedding>_seed<S>/ holding model.pt, log.csv and manifest.json). "
            f"Train them with {TRAIN_COMMAND} and copy them there with {SHIP_COMMAND}, or point the "
            f"chapter parameter weights_dir at a folder of runs."
        )
    return runs[:max_runs] if max_runs else runs
