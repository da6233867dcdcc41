"""Training dynamics: the logs of many training runs as one tidy table, summarised over seeds.

The paper's appendix figures (Figs. 9 and 10, drawn by the authors' ``plot_train_id_gen.py``) show, for each
hyper-parameter value, the training loss (a running mean over windows of 50 steps) and the
relative validation objective against one Lloyd step, as the median and inter-quartile range over
training seeds. This module turns a folder of runs made by ``python -m kmtlib.train`` (or shipped
by ``scripts/ship_dynamics.py``) into those curves::

    from kmtbook.dynamics import run_table, read_logs, seed_bands
    runs = run_table("data/training_dynamics")          # one row per finished run
    logs = read_logs(runs, window=50)                   # one row per run and evaluation
    bands = seed_bands(logs, "val_rel_objective")       # median / q25 / q75 / seeds per config and step

A run's configuration is read from its manifest (or from the folder's ``index.json``), never
parsed from the folder name, so runs of any layout can be mixed. Everything here is small host-side
bookkeeping (pandas/numpy); the heavy lifting happened during training.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from kmtlib.embedding import embedding_name

from .arguments import check_flag
from .repo_root import find_repo_root

INDEX_FILE = "index.json"
LOG_FILE = "log.csv"
MANIFEST_FILE = "manifest.json"
CONFIG_COLUMNS: tuple[str, ...] = ("embedding", "d", "k", "n", "loss_inv_temp")
"""The configuration fields that tell the runs of the sweeps apart (the seed is what varies within one)."""
TRAIN_COMMAND = "scripts/train_dynamics.sh"
SHIP_COMMAND = "python scripts/ship_dynamics.py"


def _count(name: str, value: object, minimum: int) -> int:
    """``value`` as an int of at least ``minimum``; a bool, a float or a smaller value raises naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def default_logs_dir() -> Path:
    """``data/training_dynamics`` under the book's root (found from the working directory)."""
    return find_repo_root() / "data" / "training_dynamics"


def resolve_dir(folder: str | os.PathLike | None, default: Path | None = None) -> Path:
    """A folder given by a reader: empty means ``default``; a relative path that does not exist from
    the working directory is taken relative to the book root (chapters run with cwd ``book/``)."""
    if not folder:
        return default if default is not None else default_logs_dir()
    path = Path(folder)
    if not path.is_absolute() and not path.exists():
        candidate = find_repo_root() / path
        if candidate.exists():
            return candidate
    return path


def _row(name: str, folder: Path, record: dict) -> dict:
    cfg = record.get("config") or {}
    row = {"run": name, "folder": folder, "seed": int(record.get("seed", cfg.get("seed", -1)))}
    for key in CONFIG_COLUMNS:
        row[key] = cfg.get(key)
    if isinstance(row["embedding"], str):  # (its current name: "data" for a run made as "none")
        row["embedding"] = embedding_name(row["embedding"])
    row["eval_every"] = cfg.get("eval_every")
    row["steps"] = int(record.get("steps", cfg.get("steps", 0)))
    row["wall_s"] = record.get("wall_s")
    row["final_val_rel_objective"] = record.get("final_val_rel_objective")
    row["status"] = record.get("status", "finished")
    return row


def run_table(folder: str | os.PathLike | None = None, *, include_diverged: bool = False) -> pd.DataFrame:
    """One row per training run under ``folder`` (default ``data/training_dynamics``).

    Reads ``folder/index.json`` when it describes every run with its configuration (what
    ``scripts/ship_dynamics.py`` writes); otherwise scans ``folder/*/manifest.json`` (a folder of
    runs straight from ``python -m kmtlib.train``, such as ``runs/dynamics``, or ``data/weights``).
    A run counts when its ``log.csv`` is present. Runs that diverged are listed in the index with
    status ``"diverged"`` and kept only if ``include_diverged``.

    Columns: run, folder, seed, embedding (by its current name), d, k, n, loss_inv_temp, eval_every, steps, wall_s,
    final_val_rel_objective, status. Sorted by configuration and seed.

    Raises:
        FileNotFoundError: the folder does not exist or holds no run (the message says how to make them).
    """
    include_diverged = check_flag("include_diverged", include_diverged)
    root = Path(folder) if folder else default_logs_dir()
    if not root.is_dir():
        raise FileNotFoundError(
            f"no folder of training runs at {root}; make the runs with {TRAIN_COMMAND} and copy their logs "
            f"with {SHIP_COMMAND}, or point logs_dir at a folder of runs of python -m kmtlib.train"
        )
    rows = []
    entries = _index_entries(root / INDEX_FILE)
    if entries is not None:
        for name, record in entries.items():
            if (root / name / LOG_FILE).is_file():
                rows.append(_row(name, root / name, record))
    else:
        for manifest in sorted(root.glob(f"*/{MANIFEST_FILE}")):
            if (manifest.parent / LOG_FILE).is_file():
                rows.append(_row(manifest.parent.name, manifest.parent, json.loads(manifest.read_text())))
    table = pd.DataFrame(rows, columns=list(_row("", root, {}).keys()))
    if not include_diverged:
        table = table[table.status == "finished"]
    if table.empty:
        raise FileNotFoundError(
            f"no finished training run under {root} (expected folders holding {LOG_FILE} and {MANIFEST_FILE}, "
            f"or an {INDEX_FILE} written by {SHIP_COMMAND}); make them with {TRAIN_COMMAND}"
        )
    return table.sort_values([*CONFIG_COLUMNS, "seed"], key=_sort_key).reset_index(drop=True)


def _index_entries(index: Path) -> dict[str, dict] | None:
    """The runs of an index file, name -> record, when it describes every run with its configuration;
    None when there is no such file or it does not."""
    if not index.is_file():
        return None
    payload = json.loads(index.read_text())
    candidate = payload.get("runs", payload) if isinstance(payload, dict) else None
    if (
        isinstance(candidate, dict)
        and candidate
        and all(isinstance(v, dict) and "config" in v for v in candidate.values())
    ):
        return candidate
    return None


def _sort_key(column: pd.Series) -> pd.Series:
    return column.astype(str) if column.dtype == object else column


def window_mean(step: Sequence[float], value: Sequence[float], window: int) -> np.ndarray:
    """Trailing running mean over ``window`` training steps, from log rows that are themselves means.

    Row ``i`` of a training log holds the mean loss over the steps ``(step[i-1], step[i]]``. The
    paper plots a running mean over windows of 50 steps; this returns, at every row, the mean over
    the steps ``(step[i] - window, step[i]]``, each row weighted by how many of its steps fall in
    that window (exact when ``window`` is a multiple of the spacing of the rows; otherwise the
    steps of a row are taken to share its mean). The first row (step 0, no training yet) and any
    row without a finite value give NaN; a window that reaches back before the first logged step
    uses the steps it has.

    Args:
        step: increasing step numbers of the log rows (the first is usually 0).
        value: the row means (NaN where empty).
        window: window length in steps (>= 1).
    """
    _count("window", window, 1)
    s = np.asarray(step, dtype=float)
    v = np.asarray(value, dtype=float)
    if s.ndim != 1 or s.shape != v.shape:
        raise ValueError(f"step and value must be 1-D of the same length, got shapes {s.shape} and {v.shape}")
    if s.size and np.any(np.diff(s) <= 0):
        raise ValueError("step must be strictly increasing")
    if s.size == 0:
        return v.copy()
    starts = np.concatenate([[s[0]], s[:-1]])  # row j covers (starts[j], s[j]]
    lo = np.maximum(starts[None, :], s[:, None] - window)  # (rows i, rows j)
    hi = np.minimum(s[None, :], s[:, None])
    overlap = np.clip(hi - lo, 0.0, None)
    ok = np.isfinite(v)
    overlap = overlap * ok[None, :]
    total = overlap.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (overlap * np.where(ok, v, 0.0)[None, :]).sum(1) / total
    out[(total == 0) | ~ok] = np.nan
    return out


def read_logs(runs: pd.DataFrame, *, window: int | None = None, max_step: int | None = None) -> pd.DataFrame:
    """The logs of ``runs`` (a :func:`run_table`) as one tidy table: one row per run and evaluation.

    Columns: the run's configuration and seed, then the ``log.csv`` columns (step, train_loss,
    val_rel_objective, val_log_objective, lr, wall_s); with ``window`` also ``train_loss_window``,
    the running mean of :func:`window_mean`. ``max_step`` drops rows after that step (to compare a
    long run with a sweep of shorter ones; nothing in the training protocol depends on the total
    number of steps, so the first S steps of a longer run are an S-step run).
    """
    if max_step is not None:
        _count("max_step", max_step, 0)
    frames = []
    keep = ["run", "seed", *CONFIG_COLUMNS]
    for record in runs.to_dict("records"):
        log = pd.read_csv(Path(record["folder"]) / LOG_FILE)
        if max_step is not None:
            log = log[log.step <= max_step]
        if window is not None:
            log["train_loss_window"] = window_mean(log.step.to_numpy(), log.train_loss.to_numpy(), window)
        for key in reversed(keep):
            log.insert(0, key, record[key])
        frames.append(log)
    if not frames:
        raise ValueError("runs is empty: no log to read")
    return pd.concat(frames, ignore_index=True)


def seed_bands(
    logs: pd.DataFrame, value: str, *, by: Iterable[str] = CONFIG_COLUMNS, drop_step0: bool = True
) -> pd.DataFrame:
    """Median and inter-quartile range over seeds of one log column, per configuration and step.

    Returns one row per (configuration, step) with columns ``median``, ``q25``, ``q75`` (linear
    interpolation between order statistics, as ``numpy.percentile``) and ``seeds`` (how many runs
    had a finite value at that step: a diverged or shorter run stops counting). ``drop_step0``
    drops step 0, as the paper's figures do (the untrained layer, and no training loss yet).
    """
    drop_step0 = check_flag("drop_step0", drop_step0)
    keys = [*by, "step"]
    missing = sorted(set([*keys, value]) - set(logs.columns))
    if missing:
        raise KeyError(f"logs has no column(s) {missing}")
    data = logs[logs.step > 0] if drop_step0 else logs
    data = data[np.isfinite(data[value].astype(float))]
    grouped = data.groupby(keys, sort=True)[value]
    out = pd.DataFrame(
        {
            "median": grouped.median(),
            "q25": grouped.quantile(0.25),
            "q75": grouped.quantile(0.75),
            "seeds": grouped.count(),
        }
    )
    return out.reset_index()


def final_values(logs: pd.DataFrame, value: str = "val_rel_objective") -> pd.DataFrame:
    """The last logged row of every run (one row per run: configuration, seed, step, ``value``)."""
    last = logs.sort_values("step").groupby("run", sort=False).tail(1)
    return last[["run", "seed", *CONFIG_COLUMNS, "step", value]].reset_index(drop=True)


def summarise_final(
    logs: pd.DataFrame, value: str = "val_rel_objective", by: Iterable[str] = CONFIG_COLUMNS
) -> pd.DataFrame:
    """Median, quartiles, min, max and seed count over seeds of each run's last ``value``, per configuration."""
    finals = final_values(logs, value)
    grouped = finals.groupby(list(by), sort=True)[value]
    return pd.DataFrame(
        {
            "median": grouped.median(),
            "q25": grouped.quantile(0.25),
            "q75": grouped.quantile(0.75),
            "min": grouped.min(),
            "max": grouped.max(),
            "seeds": grouped.count(),
            "last_step": finals.groupby(list(by), sort=True)["step"].max(),
        }
    ).reset_index()


def steps_to_reach(step: Sequence[float], curve: Sequence[float], level: float) -> float:
    """The first step at which ``curve`` is at or below ``level`` (``inf`` if never): a simple
    convergence-speed measure for a validation curve."""
    s = np.asarray(step, dtype=float)
    c = np.asarray(curve, dtype=float)
    hit = np.nonzero(c <= level)[0]
    return float(s[hit[0]]) if hit.size else math.inf


def most_common_steps(runs: pd.DataFrame) -> int:
    """The training length most of ``runs`` share (the length of a sweep)."""
    if runs.empty:
        raise ValueError("runs is empty")
    return int(runs.steps.mode().max())
