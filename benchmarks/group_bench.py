"""Training a group of runs as one stacked pass against training them one after another.

Both sides make the same training steps of S runs of one shape (the runs' own weights, Adam
states, data and dropout streams, as :mod:`kmtlib.training` and :mod:`kmtlib.training.group` make
them): ``alone`` is one :func:`kmtlib.training.step_alone` per run, one run after another (what
the sweep did before the group trainer); ``together`` is one
:func:`kmtlib.training.step_together` for all S (:class:`kmtlib.fast.run_stack.RunStack`). Each
round times one step of every run on each side, in interleaved rounds on the same machine state
(:func:`benchmarks.common.time_interleaved`), after three warm-up rounds (the group's larger
buffers take a few steps to settle in the allocator's heap); the throughput is runs x steps per
second. Evaluation
is not timed: it is per run on both sides (every ``eval_every`` steps, about a twentieth of the
training work at the paper's settings).

The shapes: the paper configuration (d = 32, k = 10, tokens of width 42) and the d = 4 runs of
chapter 08's sweeps (k = 6, width 10), at n points per task and the paper's batch of 32. The
timing runs in a child process with the training command's allocator setting
(:func:`kmtlib.training.tune_malloc`: without it, the group's larger n x n buffers are mapped afresh
at every step, which costs the stacked pass a third of its speed on a 2-core CPU), so the
process that asks keeps its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import torch

from .common import MIN_REPEATS, format_table, pinned_threads, time_interleaved

SHAPES: tuple[tuple[int, int], ...] = ((32, 10), (4, 6))
"""(d, k) of the timed groups: the paper's main configuration and chapter 08's d = 4 sweep."""
PAPER = {"n": 512, "batch": 32, "runs": (4,)}
QUICK = {"n": 48, "batch": 4, "runs": (2,)}


def _runs(S: int, n: int, d: int, k: int, batch: int, seed: int, device: str):
    """S training states of the shape, as the trainer builds them (own weights, Adam, streams)."""
    from kmtlib.training import TrainConfig, derive_seeds
    from kmtlib.training.state import new_training_state

    configs = [TrainConfig(d=d, k=k, n=n, batch=batch, seed=seed + s, device=device) for s in range(S)]
    return configs, [new_training_state(c, torch.device(device), derive_seeds(c.seed)) for c in configs]


def _draw(config, state, device: str):
    from kmtlib.init import init_centers
    from kmtlib.training.tasks import sample_batch

    X = sample_batch(config, state.generators["train"], torch.device(device), torch.float32)
    return X, init_centers(X, config.k, "random", generator=state.generators["train"])


def time_group(
    S: int, n: int, d: int, k: int, batch: int, *, threads: int = 1, repeats: int = MIN_REPEATS, warmup: int = 3,
    seed: int = 0, device: str = "cpu",
) -> dict[str, Any]:  # fmt: skip
    """Median seconds for one step of S runs, alone (one after another) and together, and the
    throughputs in runs x steps per second."""
    from kmtlib.training import step_alone, step_together

    with pinned_threads(threads):
        configs_a, alone = _runs(S, n, d, k, batch, seed, device)
        configs_t, together = _runs(S, n, d, k, batch, seed, device)

        def one_after_another() -> float:
            total = 0.0
            for config, state in zip(configs_a, alone):
                X, C0 = _draw(config, state, device)
                total += float(step_alone(state.model, state.optimizer, X, C0, config.loss_inv_temp).detach())
            return total

        def as_one_pass() -> float:
            batches = [_draw(c, s, device) for c, s in zip(configs_t, together)]
            losses = step_together([s.model for s in together], [s.optimizer for s in together],
                                   [X for X, _ in batches], [C0 for _, C0 in batches],
                                   [c.loss_inv_temp for c in configs_t])  # fmt: skip
            return float(torch.stack(losses).sum().detach())

        timings = time_interleaved({"alone": one_after_another, "together": as_one_pass}, repeats, warmup)
    out: dict[str, Any] = {"runs": S, "n": n, "d": d, "k": k, "batch": batch, "threads": threads, "device": device}
    for name, t in timings.items():
        if isinstance(t, Exception):
            raise t
        out[name] = t.as_dict()
        out[f"{name}_run_steps_per_s"] = S / t.median_s
    out["gain"] = out["alone"]["median_s"] / out["together"]["median_s"]
    return out


def run(
    quick: bool = False, threads: int = 1, repeats: int = MIN_REPEATS, seed: int = 0, device: str = "cpu",
    n: int | None = None, batch: int | None = None, runs: tuple[int, ...] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Every shape of :data:`SHAPES` at every group size ``runs`` (defaults: the profile's), in a
    child process with the training command's allocator setting."""
    sizes = QUICK if quick else PAPER
    spec = {
        "n": sizes["n"] if n is None else n, "batch": sizes["batch"] if batch is None else batch,
        "runs": list(sizes["runs"] if runs is None else runs), "threads": threads, "repeats": repeats,
        "seed": seed % 2**31, "device": str(device),
    }  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.group_bench", json.dumps(spec)], capture_output=True, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"group benchmark child failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"benchmark": "group", "quick": quick, **result}


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    from kmtlib.training import tune_malloc

    tuned = tune_malloc() if spec["device"] == "cpu" else False
    rows = [
        time_group(S, spec["n"], d, k, spec["batch"], threads=spec["threads"], repeats=spec["repeats"],
                   seed=spec["seed"], device=spec["device"])
        for d, k in SHAPES for S in spec["runs"]
    ]  # fmt: skip
    return {"malloc_tuned": tuned, "rows": rows}


def report(result: dict[str, Any]) -> str:
    header = ["d", "k", "n", "batch", "runs", "threads", "alone run-steps/s", "together run-steps/s", "gain"]
    rows = [[r["d"], r["k"], r["n"], r["batch"], r["runs"], r["threads"], f"{r['alone_run_steps_per_s']:.3f}",
             f"{r['together_run_steps_per_s']:.3f}", f"{r['gain']:.2f}x"] for r in result["rows"]]  # fmt: skip
    return "group training: S runs as one stacked pass vs one after another\n" + format_table(header, rows)


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
