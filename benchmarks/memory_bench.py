"""A training run at the paper configuration: peak memory and wall time per evaluation window.

The run is ``kmtlib.training.train`` (what ``python -m kmtlib.train`` calls) with the paper's
settings, ``steps`` steps and an evaluation (10 validation batches) plus a checkpoint every 50
steps, in a fresh child process with pinned threads. Measured:

* peak resident memory of the child (``ru_maxrss`` from ``os.wait4``: the high-water mark of the
  whole process, Python and torch included), and on CUDA ``torch.cuda.max_memory_allocated``;
* the wall time of every 50-step window (50 training steps + one evaluation + checkpoint, from
  the ``wall_s`` column of the run's ``log.csv``); the median window, times 200 windows plus the
  step-0 evaluation, extrapolates a full 10 000-step run. It is an extrapolation from a short
  run, on whatever load the machine had (recorded), not a measured full run;
* the CPU time of the child (user + system) after its start-up, evaluations and checkpoints
  included. With one thread (``--threads 1``, the default) it estimates the wall time on an
  otherwise idle core, which a busy shared machine cannot give (contention for caches and memory
  still inflates it somewhat); it is also extrapolated to 10 000 steps.

The thread count is ``--threads`` (default 1).

The memory of a training run does not grow with the number of steps (fresh tasks every step, the
log is on disk), so a few hundred steps give the peak of a full run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from .common import format_table, load_average

FULL_STEPS = 10_000
TARGET_FULL_RUN_S = 15 * 60
TARGET_PEAK_MB = 2048
AUTHORS_S_PER_STEP = 0.40


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    from kmtlib.training import TrainConfig, read_log, train

    config = TrainConfig(**spec["config"])
    startup_cpu_s = time.process_time()  # (the whole process: every thread)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        summary = train(config, tmp, quiet=True, threads=spec["threads"])
        wall = time.perf_counter() - t0
        rows = read_log(os.path.join(tmp, "log.csv"))
    out = {
        "wall_s": wall,
        "train_wall_s": summary["wall_s"],
        "log_wall_s": [r["wall_s"] for r in rows],
        "log_steps": [r["step"] for r in rows],
        "threads": torch.get_num_threads(),
        "final_val_rel_objective": summary["final_val_rel_objective"],
        "startup_cpu_s": startup_cpu_s,
    }
    if config.device.startswith("cuda") and torch.cuda.is_available():
        out["cuda_max_memory_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def measure_run(config: dict[str, Any], threads: int) -> dict[str, Any]:
    """Run a training run in a child process; return its report plus ``peak_rss_mb``."""
    spec = {"config": config, "threads": threads}
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryFile(mode="w+") as out, tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.memory_bench", json.dumps(spec)],
            stdout=out,
            stderr=err,
            env=env,
            cwd=root,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"training run child failed:\n{stdout[-2000:]}\n{stderr[-4000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    # ru_maxrss is in kilobytes on Linux, bytes on macOS
    result["peak_rss_mb"] = usage.ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)
    # CPU time of the child after its start-up (imports): with one thread, about what the run
    # would take on an otherwise idle core, whatever else the machine was doing
    result["cpu_s"] = usage.ru_utime + usage.ru_stime
    result["cpu_s_per_step"] = (result["cpu_s"] - result["startup_cpu_s"]) / config["steps"]
    walls, steps = result["log_wall_s"], result["log_steps"]
    windows = [
        (walls[i] - walls[i - 1]) / (steps[i] - steps[i - 1]) * config["eval_every"] for i in range(1, len(walls))
    ]
    result["window_s"] = windows
    result["median_window_s"] = statistics.median(windows)
    result["first_eval_s"] = walls[0]
    return result


def run(
    *, quick: bool, threads: int, repeats: int, seed: int = 20250619, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """A short training run at the paper configuration (300 steps; --quick: a toy run)."""
    from kmtlib.device import resolve_device

    device = str(resolve_device(os.environ.get("KMT_DEVICE", "auto")))
    if quick:
        config = {"d": 4, "k": 3, "n": 48, "batch": 4, "steps": 6 * 5, "eval_every": 5, "val_batches": 2}
    else:
        windows = max(repeats, 6)
        config = {"d": 32, "k": 10, "n": 512, "batch": 32, "steps": 50 * windows, "eval_every": 50, "val_batches": 10}
    config.update(seed=seed % 2**31, device=device)
    run_threads = threads
    log(
        f"\n== training run: {config['steps']} steps, evaluation every {config['eval_every']}, "
        f"{run_threads} thread(s), device {device} (child process) ..."
    )
    load_before = load_average()
    res = measure_run(config, run_threads)
    per_window = res["median_window_s"]
    windows_full = FULL_STEPS // config["eval_every"]
    extrapolated = None if quick else res["first_eval_s"] + windows_full * per_window
    result: dict[str, Any] = {
        "benchmark": "memory",
        "settings": {"quick": quick, "threads": run_threads, "device": device, "load_average_before": load_before},
        "config": config,
        "run": res,
        "seconds_per_step_incl_eval": per_window / config["eval_every"],
        "extrapolated_full_run_s": extrapolated,
        "authors_s_per_step_quoted": AUTHORS_S_PER_STEP,
    }
    if extrapolated is not None:
        result["speedup_vs_authors_quoted"] = AUTHORS_S_PER_STEP * FULL_STEPS / extrapolated
        if run_threads == 1:
            result["extrapolated_full_run_cpu_s"] = res["cpu_s_per_step"] * FULL_STEPS
    result["targets"] = _targets(result)
    return result


def _targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    quick = result["settings"]["quick"]
    judge = (lambda ok: "not judged (--quick sizes)") if quick else (lambda ok: "met" if ok else "missed")
    peak = result["run"]["peak_rss_mb"]
    out = [
        {
            "target": f"peak memory of a training run < {TARGET_PEAK_MB} MB",
            "value": peak,
            "status": judge(peak < TARGET_PEAK_MB),
        }
    ]
    ext = result["extrapolated_full_run_s"]
    cpu = result.get("extrapolated_full_run_cpu_s")
    if cpu is not None:
        out.append(
            {
                "target": f"10 000 steps with evaluation every 50 < {TARGET_FULL_RUN_S} s "
                "(CPU time of the 1-thread run, extrapolated)",
                "value": cpu,
                "status": judge(cpu < TARGET_FULL_RUN_S),
            }
        )
    if ext is not None:
        out.append(
            {
                "target": f"10 000 steps with evaluation every 50 < {TARGET_FULL_RUN_S} s (extrapolated)",
                "value": ext,
                "status": judge(ext < TARGET_FULL_RUN_S),
            }
        )
        out.append(
            {
                "target": "at least 5x faster than the authors' script (0.40 s/step, quoted, not measured)",
                "value": result["speedup_vs_authors_quoted"],
                "status": judge(result["speedup_vs_authors_quoted"] >= 5),
            }
        )
    return out


def report(result: dict[str, Any]) -> str:
    r, c = result["run"], result["config"]
    lines = [
        f"\ntraining run: n={c['n']}, d={c['d']}, k={c['k']}, batch={c['batch']}, {c['steps']} steps, "
        f"evaluation every {c['eval_every']} ({c['val_batches']} batches), {result['settings']['threads']} thread(s), "
        f"{result['settings']['device']}; load average before {result['settings']['load_average_before']}"
    ]
    rows = [
        ["peak RSS of the run (MB)", r["peak_rss_mb"]],
        ["wall time of the run (s)", r["wall_s"]],
        [f"median {c['eval_every']}-step window incl. evaluation (s)", r["median_window_s"]],
        ["seconds per step incl. evaluation", result["seconds_per_step_incl_eval"]],
        ["CPU seconds of the child (start-up included)", r["cpu_s"]],
        ["CPU seconds per step after start-up", r["cpu_s_per_step"]],
    ]
    if "cuda_max_memory_allocated_mb" in r:
        rows.append(["CUDA max memory allocated (MB)", r["cuda_max_memory_allocated_mb"]])
    if result["extrapolated_full_run_s"] is not None:
        rows.append(["10 000 steps, extrapolated from the wall time (s)", result["extrapolated_full_run_s"]])
        if result.get("extrapolated_full_run_cpu_s") is not None:
            rows.append(["10 000 steps, extrapolated from the CPU time (s)", result["extrapolated_full_run_cpu_s"]])
        rows.append(["vs the authors' 0.40 s/step (quoted)", result["speedup_vs_authors_quoted"]])
    lines.append(format_table(["quantity", "value"], rows))
    for t in result["targets"]:
        lines.append(f"  target: {t['target']}: {t['value']:.4g} -> {t['status']}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
