"""The training loop: :func:`train` one run, the :class:`TrainingRun` that the single-run and the group
trainers drive, one training step (:func:`step_alone`) and the allocator tuning."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .._atomic_save import atomic_torch_save
from .._version import __version__
from ..device import resolve_device
from ..domain.trained import TrainingDomain
from ..init import init_centers
from ..io.model_file import (
    CHECKPOINT_FORMAT,
)
from ..losses import smoothed_objective_unchecked
from ..transformer import KMeansTransformer
from .config import DTYPES, TrainConfig, derive_seeds
from .estimator_use import (
    EstimatorBatch,
    estimator_batch,
    estimator_use_metrics,
    layer_final_centers,
    lloyd_gap_loss,
)
from .provenance import file_sha256, source_fingerprint
from .resume import ResumePoint, resume_point
from .run_folder import (
    LOG_HEADER,
    MANIFEST_FILES,
    PATHS_NOTE,
    RUN_FILES,
    RunFolderError,
    atomic_write_text,
    check_run_options,
    checked_run_folder,
    format_row,
    parse_log,
    remove_temporaries,
    run_lock,
    run_paths,
)
from .state import new_training_state, rng_states, set_rng_states
from .tasks import estimator_validation_batches, make_validation_batches, sample_batch, validate_groups


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
    with run_lock(out):
        return _train_locked(config, out, resume, overwrite, quiet, threads, stop_at, callback, tune_memory, command)


def _train_locked(
    config, out, resume, overwrite, quiet, threads, stop_at, callback, tune_memory, command
) -> dict[str, Any]:
    if threads is not None:
        torch.set_num_threads(threads)
    run = TrainingRun.open(config, out, resume, overwrite, command)  # every refusal happens here
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
            if config.loss == "lloyd_gap":
                loss = step_for_estimator(run.model, run.optimizer, run.draw_estimator_batch(), config.layer_steps)
            else:
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


def step_alone(
    model: KMeansTransformer, optimizer: torch.optim.Optimizer, X: torch.Tensor, C0: torch.Tensor, inv_temp: float
) -> torch.Tensor:
    """One training step of one run: apply the layer once from C0, take the mean smoothed
    objective of the new centres at inverse temperature ``inv_temp`` as the loss, and make one
    optimiser update; returns the loss. (:func:`kmtlib.training.group.step_together` is the step
    of a group.)"""
    loss = smoothed_objective_unchecked(X, model.step(X, C0), inv_temp).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss


def step_for_estimator(
    model: KMeansTransformer, optimizer: torch.optim.Optimizer, batch: EstimatorBatch, layer_steps: int
) -> torch.Tensor:
    """One training step for the estimator's use: ``layer_steps`` layer steps from the batch's
    k-means++ centres, the loss :func:`~kmtlib.training.estimator_use.lloyd_gap_loss` against
    Lloyd's fixed point from the same centres, and one optimiser update; returns the loss."""
    final = layer_final_centers(model, batch.X, batch.C0, batch.filled, layer_steps)
    loss = lloyd_gap_loss(batch.X, final, batch.reference)
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


def _say(notes: list[str], text: str) -> None:
    notes.append(text)
    print(text, file=sys.stderr, flush=True)


class TrainingRun:
    """One run during training: its folder, its training state and its records (log, checkpoints,
    best model, manifest). The trainer of one run (:func:`train`) and of a group of runs
    (:func:`kmtlib.training.group.train_group`) drive the same object, so a run's folder holds the same
    files whichever trained it. Opening a run (:meth:`open`) checks its folder and changes nothing;
    :meth:`prepare` makes the repairs, :meth:`start` builds the state and writes the first row."""

    def __init__(self, config: TrainConfig, out: Path, command: str | None) -> None:
        self.config, self.out, self.command = config, out, command
        paths = run_paths(out)
        self.last_path, self.previous_path = paths.checkpoint, paths.previous
        self.best_path, self.log_path = paths.best, paths.log
        self.device = resolve_device(config.device)
        self.dtype = DTYPES[config.dtype]
        self.seeds = derive_seeds(config.seed)
        self.training_ks = config.training_ks()
        self.notes: list[str] = []
        self.point: ResumePoint | None = None
        self.existing: list[str] = []
        self.print_rows = False
        self.callback: Callable[[dict[str, Any]], None] | None = None
        self.step = 0
        self.window = torch.zeros((), dtype=torch.float64, device=self.device)
        self.window_steps = 0
        self.resume = self.overwrite = False
        self.manifest_extra: dict[str, Any] = {}  # (what a group trainer adds: the runs trained together)

    @classmethod
    def open(cls, config: TrainConfig, out: Path, resume: bool, overwrite: bool, command: str | None) -> TrainingRun:
        """Check the folder for this run (every refusal happens here, before any change)."""
        run = cls(config, out, command)
        run.existing = [name for name in RUN_FILES if (out / name).exists()]
        for name in run.existing:
            if (out / name).is_dir():  # (no repair or overwrite could replace it by a file)
                raise RunFolderError(f"{out / name}: a folder where the run keeps its {name} file: move it away")
        if resume:
            run.point = resume_point(config, out, run.device, run.seeds)
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
        removed = remove_temporaries(out)
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
        state = new_training_state(config, device, self.seeds) if self.point is None else self.point.state
        self.model, self.optimizer, self.scheduler = state.model, state.optimizer, state.scheduler
        self.generators = state.generators
        if config.loss == "lloyd_gap":
            self.estimator_validation = estimator_validation_batches(config)
            tasks = [batch.X for batch in self.estimator_validation]
        else:
            self.validation = make_validation_batches(config, device)
            tasks = [X for X, _, _ in self.validation]
        # the range of the tasks it learns on, saved with the model (the layer warns outside it)
        source = f"measured on the run's validation tasks: {config.tasks} tasks, {config.family} {config.scale:g}"
        self.model.training_domain = TrainingDomain.of_tasks(tasks, source)
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
            set_rng_states(payload["rng"], self.generators, device)
            self.final_row = parse_log(self.log_text, self.log_path)[-1]
            self.point = None
        else:
            torch.manual_seed(self.seeds["torch"])  # only the "explicit" kernel draws from the global RNG
            self.log_text = LOG_HEADER + "\n"
            atomic_write_text(self.log_path, self.log_text)
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
        X = sample_batch(config, g, self.device, self.dtype, k)
        return X, init_centers(X, k, "random", generator=g), k

    def draw_estimator_batch(self) -> EstimatorBatch:
        """The next training batch for the estimator's use (``starts="estimator"``): k drawn as in
        :meth:`draw_batch`, then :func:`~kmtlib.training.estimator_use.estimator_batch`."""
        config, g = self.config, self.generators["train"]
        k = self.training_ks[int(torch.randint(len(self.training_ks), (), generator=g))] if config.mixed_k else config.k
        return estimator_batch(config.batch, config.n, config.d, k, g, self.dtype)

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
        """Validate, step the schedule, append the log row, save best.pt when it is the best so far and
        the checkpoint; returns the row."""
        config, model, step = self.config, self.model, self.step
        if config.loss == "lloyd_gap":
            rel, logobj = estimator_use_metrics(model, self.estimator_validation, config.layer_steps)
        else:
            rel, logobj = validate_groups(model, self.validation, config.batch)
        if step > 0:
            self.scheduler.step(rel)
        wall_s = self.wall()
        row = {
            "step": step,
            "train_loss": window_loss,
            "val_rel_objective": rel,
            "val_log_objective": logobj,
            "lr": lr_used,
            "wall_s": wall_s,
        }
        # The row goes to log.csv first and into the checkpoint with the whole log: a kill
        # between the two leaves a row that the next resume drops and trains again.
        text = format_row(row)
        with open(self.log_path, "a", newline="") as f:
            f.write(text)
        self.log_text += text
        if rel < self.best["val_rel_objective"]:
            self.best = {"step": step, "val_rel_objective": rel}
            self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            model.save(self.best_path)
        self.save_checkpoint(wall_s)
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

    def save_checkpoint(self, wall_s: float) -> None:
        """Write last.pt (the one before it kept as previous.pt): everything a resume continues from."""
        config, model, step = self.config, self.model, self.step
        atomic_torch_save(
            {
                "format": CHECKPOINT_FORMAT,
                "config": dataclasses.asdict(config),
                "model_config": model.config.to_dict(),
                "step": step,
                "model": model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "rng": rng_states(self.generators, self.device),
                "log_text": self.log_text,  # (the log is small: a few hundred rows)
                "log_bytes": len(self.log_text.encode()),
                "best": self.best,
                "best_model": self.best_state,
                "wall_s": wall_s,
                "threads": torch.get_num_threads(),
            },
            self.last_path,
            keep_previous=self.previous_path,
        )

    def finish(self, status: str) -> dict[str, Any]:
        """The run's summary; a finished run also writes model.pt and manifest.json."""
        step, final_row = self.step, self.final_row
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
        model_path = self.model.save(run_paths(self.out).model)
        manifest = self.manifest(summary)
        atomic_write_text(run_paths(self.out).manifest, json.dumps(manifest, indent=2) + "\n")
        summary["model_path"] = str(model_path)
        return summary

    def manifest(self, summary: dict[str, Any]) -> dict[str, Any]:
        """What manifest.json records of a finished run: command, configuration, seeds, versions,
        provenance, device, wall time and the summary's numbers."""
        config, step = self.config, self.step
        device = self.device
        return {
            "command": self.command,
            "paths": PATHS_NOTE,
            "config": dataclasses.asdict(config),
            "seed": config.seed,
            "derived_seeds": self.seeds,
            **({"init_from_sha256": file_sha256(config.init_from)} if config.init_from else {}),
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
            "files": dict(MANIFEST_FILES),
        }


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
