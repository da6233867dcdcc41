"""Resume planning: how a run folder is continued, every file checked against the checkpoint and
every repair planned before any is made (the contract of ``--resume``)."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..io.model_file import (
    ModelFileError,
    build_model,
    check_state_dict,
    load_model,
)
from .config import TrainConfig, config_differences
from .run_folder import (
    CHECKPOINT_WHAT,
    DAMAGED,
    LOG_HEADER,
    RunFolderError,
    atomic_write_text,
    parse_log,
    parse_row,
    read_checkpoint,
    read_log,
    run_paths,
)
from .state import TrainingState, new_training_state, set_rng_states


@dataclass
class ResumePoint:
    """A checked checkpoint to continue from, and the repairs to make before continuing."""

    state: TrainingState
    payload: dict[str, Any]
    log_text: str  # the log up to the checkpoint's step, as it must stand on disk
    notes: list[str] = field(default_factory=list)  # one line per repair, said when they are made
    repairs: list[Callable[[], None]] = field(default_factory=list)  # made once nothing can refuse


def _open_checkpoint(
    path: Path, config: TrainConfig, device: torch.device, seeds: dict[str, int]
) -> tuple[TrainingState, dict[str, Any], str | None]:
    """Read a checkpoint and load it into a fresh training state.

    Raises FileNotFoundError / ModelFileError where the file is missing or damaged (a previous
    checkpoint may do instead) and RunFolderError where it belongs to another run (nothing may
    do instead: the folder is not this run's).
    """
    payload = read_checkpoint(path)
    mismatched = config_differences(payload["config"], config)
    if mismatched:
        raise RunFolderError(
            f"{path}: the checkpoint of another run ({'; '.join(mismatched)}): resume it with its own options, "
            f"or start this run in another folder (or --overwrite)"
        )
    # The log as it stood at the checkpoint: carried in the checkpoint itself (older checkpoints
    # carry only its length; resume_point then takes it from log.csv).
    log_text = payload.get("log_text")
    if log_text is not None:
        try:
            rows = parse_log(log_text, f"{path} (its copy of the log)")
        except RunFolderError as exc:
            raise ModelFileError(f"{path}: damaged {CHECKPOINT_WHAT} ({exc})") from None
        if not rows or rows[-1]["step"] != payload["step"]:
            raise ModelFileError(
                f"{path}: damaged {CHECKPOINT_WHAT} (its copy of the log does not end at its step {payload['step']})"
            )
    state = new_training_state(config, device, seeds)
    try:
        check_state_dict(payload["model"], path, CHECKPOINT_WHAT, "model")
        state.model.load_state_dict(payload["model"])
        state.optimizer.load_state_dict(payload["optimizer"])
        state.scheduler.load_state_dict(payload["scheduler"])
        set_rng_states(payload["rng"], state.generators, device)
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
            f"{path}: damaged {CHECKPOINT_WHAT} (its training state does not load: {text[:200]})"
        ) from None
    return state, payload, log_text


def _problem(exc: BaseException, path: Path) -> str:
    """What an error says about ``path``, without the path it starts with."""
    text = str(exc)
    for prefix in (f"{path}: ", f"{path} "):
        if text.startswith(prefix):
            return text[len(prefix) :]
    return "missing" if isinstance(exc, FileNotFoundError) else text


def resume_point(config: TrainConfig, out: Path, device: torch.device, seeds: dict[str, int]) -> ResumePoint | None:
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
    notes: list[str] = []
    opened = _newest_checkpoint(config, out, device, seeds, notes)
    if opened is None:
        return None
    state, payload, log_text, used = opened
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
    point = ResumePoint(state, payload, "", notes)
    paths = run_paths(out)
    point.log_text = _plan_log(point, paths.log, used, log_text, step)
    _plan_best(point, paths.best, used)
    _plan_results(point, out, config)
    return point


def _newest_checkpoint(
    config: TrainConfig, out: Path, device: torch.device, seeds: dict[str, int], notes: list[str]
) -> tuple[TrainingState, dict[str, Any], str | None, Path] | None:
    """The newest usable checkpoint, opened: ``last.pt``, else ``previous.pt`` (said in ``notes``);
    None where the folder holds no run yet; a RunFolderError where neither can be resumed."""
    paths = run_paths(out)
    last, previous = paths.checkpoint, paths.previous
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
    return state, payload, log_text, used


def _fresh_start_loses(out: Path) -> str | None:
    """None where a folder without a checkpoint holds nothing a fresh start would lose (no files,
    or what a run killed during its first evaluation leaves: a log of step 0 and best.pt);
    else what it holds."""
    paths = run_paths(out)
    finished = [path.name for path in (paths.model, paths.manifest) if path.exists()]
    if finished:
        return f"it holds {' and '.join(finished)} of a finished run but no checkpoint to continue from"
    log = paths.log
    if not log.exists():
        return None
    try:
        rows = read_log(log)
    except (RunFolderError, OSError) as exc:
        if log.stat().st_size <= len(LOG_HEADER) + 1 and LOG_HEADER.startswith(
            log.read_text(errors="replace").rstrip("\n")
        ):
            return None  # (a header cut short: killed while creating the log)
        return f"{log}: {_problem(exc, log)}"
    if any(row["step"] != 0 for row in rows):
        return f"{log} records training up to step {rows[-1]['step']}"
    return None


def _plan_log(point: ResumePoint, log: Path, used: Path, log_text: str | None, step: int) -> str:
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
            f"the damaged file is kept as {log.name}{DAMAGED}"
        )
        point.repairs.append(lambda: os.replace(log, log.with_name(log.name + DAMAGED)))
    point.repairs.append(lambda: atomic_write_text(log, log_text))
    return log_text


def _later_rows(text: str, step: int) -> list[int] | None:
    """The steps of ``text`` when it is nothing but complete log rows after ``step``, else None."""
    if not text.endswith("\n"):
        return None
    steps: list[int] = []
    for line in text[:-1].split("\n"):
        row = parse_row(line)
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


def _plan_best(point: ResumePoint, best_path: Path, used: Path) -> None:
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
            point.payload["model_config"], best_state, used, CHECKPOINT_WHAT, "model_config", "best_model"
        )
    except ModelFileError:
        point.notes.append(f"{best_path}: {problem}; the checkpoint's copy is damaged too, so it is left as it is")
        return
    point.notes.append(f"{best_path}: {problem}; restored the best model so far (step {best_step}) from {used}")
    point.repairs.append(lambda: model.save(best_path))


def _plan_results(point: ResumePoint, out: Path, config: TrainConfig) -> None:
    """Check a finished run's manifest.json and model.pt (written again when the run finishes)."""
    manifest = run_paths(out).manifest
    if manifest.exists():
        try:
            saved = json.loads(manifest.read_text())
            if not isinstance(saved, dict) or not isinstance(saved.get("config"), dict):
                raise ValueError("JSON, but not an object with a 'config' object")
        except (ValueError, UnicodeDecodeError) as exc:
            point.notes.append(
                f"{manifest}: not a valid manifest ({str(exc)[:80]}); set aside "
                f"as {manifest.name}{DAMAGED}, written again when the run finishes"
            )
            point.repairs.append(lambda: os.replace(manifest, manifest.with_name(manifest.name + DAMAGED)))
        else:
            mismatched = config_differences(saved.get("config"), config)
            if mismatched:
                raise RunFolderError(
                    f"{manifest}: the manifest of another run ({'; '.join(mismatched[:4])}): this folder mixes runs; "
                    f"move that run's files away, or start again with --overwrite"
                )
    model_path = run_paths(out).model
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
                for k in ("d", "k", "embedding", "reembed", "trainable", "bias")
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
