"""The run folder: its files (log, checkpoints, models, manifest), reading them, writing them
atomically, and the lock that keeps two processes out of one folder."""

from __future__ import annotations

import contextlib
import csv
import io
import os
from pathlib import Path
from typing import Any, NamedTuple

import torch

from .._atomic_save import fsync_dir
from .._checks import check_int
from ..io.model_file import (
    CHECKPOINT_FORMAT,
    MODEL_FORMAT,
    OLD_MODEL_FORMATS,
    ModelFileError,
    build_model,
    describe_contents,
    read_torch_file,
)
from ..transformer import KMeansTransformer

LOG_COLUMNS = ("step", "train_loss", "val_rel_objective", "val_log_objective", "lr", "wall_s")


# ------------------------------------------------------------------------------------- training
# The files of a run folder. "previous.pt" is the checkpoint before "last.pt" (kept so that a
# damaged newest checkpoint costs one evaluation interval, not the run); the ".damaged" files are
# what a resume replaced, kept for the reader.
LOG_FILE, CHECKPOINT_FILE, PREVIOUS_FILE, BEST_FILE, MODEL_FILE, MANIFEST_FILE = (
    "log.csv", "last.pt", "previous.pt", "best.pt", "model.pt", "manifest.json",
)
DAMAGED = ".damaged"
RUN_FILES: tuple[str, ...] = (
    LOG_FILE, CHECKPOINT_FILE, PREVIOUS_FILE, BEST_FILE, MODEL_FILE, MANIFEST_FILE,
    LOG_FILE + DAMAGED, MANIFEST_FILE + DAMAGED,
)
MANIFEST_FILES = {
    "model": MODEL_FILE, "best": BEST_FILE, "checkpoint": CHECKPOINT_FILE, "previous_checkpoint": PREVIOUS_FILE,
    "log": LOG_FILE,
}
"""The run's files as its manifest lists them."""


class RunPaths(NamedTuple):
    """The paths of the files of one run folder (:func:`run_paths`)."""

    log: Path
    checkpoint: Path
    previous: Path
    best: Path
    model: Path
    manifest: Path


def run_paths(out: Path) -> RunPaths:
    """The paths of the files of the run folder ``out``."""
    names = (LOG_FILE, CHECKPOINT_FILE, PREVIOUS_FILE, BEST_FILE, MODEL_FILE, MANIFEST_FILE)
    return RunPaths(*(out / name for name in names))


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


LOG_HEADER = ",".join(LOG_COLUMNS)


def parse_log(text: str, path: str | os.PathLike = "log.csv") -> list[dict[str, float | None]]:
    """:func:`read_log` on the text of a log (``path`` names it in errors)."""
    if not text:
        raise RunFolderError(f"{path}: empty file (expected a training log starting with the header {LOG_HEADER!r})")
    lines = text.split("\n")
    if lines[-1] != "":
        raise RunFolderError(
            f"{path}: line {len(lines)}: cut short mid-line (no newline at the end: {lines[-1][:60]!r})"
        )
    lines.pop()
    if lines[0] != LOG_HEADER:
        raise RunFolderError(
            f"{path}: line 1: not the header of a training log ({lines[0][:60]!r}; expected {LOG_HEADER!r})"
        )
    rows: list[dict[str, float | None]] = []
    for number, line in enumerate(lines[1:], start=2):
        row = parse_row(line)
        if isinstance(row, str):
            raise RunFolderError(f"{path}: line {number}: {row} ({line[:60]!r})")
        if rows and row["step"] <= rows[-1]["step"]:
            raise RunFolderError(
                f"{path}: line {number}: step {row['step']} after step {rows[-1]['step']} "
                "(the steps of a log increase; a repeated or misplaced row)"
            )
        rows.append(row)
    return rows


def parse_row(line: str) -> dict[str, Any] | str:
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
    payload = read_checkpoint(path)
    return build_model(payload["model_config"], payload["model"], path, CHECKPOINT_WHAT, "model_config", "model").to(
        map_location
    )


CHECKPOINT_WHAT = "kmtlib training checkpoint"
# What every checkpoint holds, with the type it must have ("log_text" since the checkpoint also
# carries the log; older ones only its length "log_bytes").
_CHECKPOINT_ENTRIES: dict[str, type | tuple[type, ...]] = {
    "config": dict, "model_config": dict, "step": int, "model": dict, "optimizer": dict,
    "scheduler": dict, "rng": dict, "best": dict, "wall_s": (int, float),
}


def read_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint's payload with its entries checked (not yet loaded into a model)."""
    payload = read_torch_file(path, CHECKPOINT_WHAT)
    if not isinstance(payload, dict):
        raise ModelFileError(f"{path}: not a {CHECKPOINT_WHAT} (it holds {describe_contents(payload)})")
    fmt = payload.get("format")
    if fmt != CHECKPOINT_FORMAT:
        hint = (
            "; it is a model file (kmtlib.load_model), not a checkpoint"
            if fmt == MODEL_FORMAT or fmt in OLD_MODEL_FORMATS
            else ""
        )
        found = "no 'format' entry" if fmt is None else f"format {fmt!r}"
        raise ModelFileError(f"{path}: not a {CHECKPOINT_WHAT} ({found}; expected format {CHECKPOINT_FORMAT!r}{hint})")
    for key, kind in _CHECKPOINT_ENTRIES.items():
        if not isinstance(payload.get(key), kind) or isinstance(payload.get(key), bool):
            found = "missing" if key not in payload else f"a {type(payload[key]).__name__}"
            raise ModelFileError(f"{path}: damaged {CHECKPOINT_WHAT} (its {key!r} entry is {found})")
    if not isinstance(payload.get("log_text"), str) and not isinstance(payload.get("log_bytes"), int):
        raise ModelFileError(f"{path}: damaged {CHECKPOINT_WHAT} (it holds neither the log nor its length)")
    if payload["step"] < 0:
        raise ModelFileError(f"{path}: damaged {CHECKPOINT_WHAT} (step {payload['step']})")
    return payload


def format_row(row: dict[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(
        ["" if row[c] is None else (repr(float(row[c])) if isinstance(row[c], float) else row[c]) for c in LOG_COLUMNS]
    )
    return buf.getvalue()


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


PATHS_NOTE = "paths in command relative to the working directory it ran in, where they lie below it"


def portable_path(path: str | os.PathLike) -> str:
    """``path`` relative to the working directory where it lies below it, else as given.

    A manifest that records ``/home/me/repo/runs/x`` tells another reader nothing; ``runs/x``
    reruns from the same folder on any machine."""
    text = os.fspath(path)
    if not os.path.isabs(text):
        return text
    try:
        rel = Path(text).resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return text
    return rel.as_posix() or "."


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
def run_lock(out: Path):
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


def remove_temporaries(out: Path) -> list[str]:
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


def atomic_write_text(path: Path, text: str) -> None:
    """Write a text file atomically (temporary file flushed to disk, then renamed over it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
