"""One training step of the learned layer: kmtlib against a straightforward reference.

A step is what ``python -m kmtlib.train`` does ``steps`` times: draw ``batch`` fresh tasks and
random k-subset initial centres, apply the layer once, compute the smoothed k-means loss, run the
backward pass and one Adam update. Two implementations of that step run in one process, on the
same machine state, timed in interleaved rounds (see :func:`benchmarks.common.time_interleaved`):

* ``kmtlib``: :func:`kmtlib.sample_tasks`, :func:`kmtlib.init_centers`,
  ``KMeansTransformer.trainable(...).step`` (the fast Euclidean attention kernel with its
  hand-written backward and sparse dropout), the smoothed objective of :mod:`kmtlib.losses`;
* ``reference``: :mod:`benchmarks.reference_model` (``torch.cdist`` squared distances, an explicit
  soft-max over the full score matrices, ``F.dropout``, autograd, ``torch.distributions`` task
  sampling).

Both start from the same weights (copied), each with its own ``torch.optim.Adam(lr=0.01)``.

Correctness, on the same inputs and weights: one batch of tasks, both models in eval mode (no
dropout: the two draw different dropout masks), the loss values and the gradients of every
weight are compared (relative difference).

glibc's allocator matters on the CPU: the n x n attention matrices are above its default mmap
threshold, so every step maps and page-faults them afresh. ``kmtlib.train`` therefore calls
:func:`kmtlib.training.tune_malloc` (process-wide). The benchmark measures both settings, each in a
fresh child process: ``default`` (what any script that imports kmtlib gets) and ``tuned`` (what
the training command runs with; it speeds up the reference as well, since it is process-wide).

Sweeps for the book: :func:`time_steps` takes any (n, d, k, batch, threads).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import torch

from .common import MIN_REPEATS, format_table, pinned_threads, thread_counts, time_interleaved

PAPER = {"n": 512, "d": 32, "k": 10, "batch": 32, "embedding": "onehot"}
QUICK = {"n": 48, "d": 4, "k": 3, "batch": 4, "embedding": "onehot"}
LOSS_INV_TEMP = 10.0
LR = 0.01
TARGET_SPEEDUP = 3.0
TARGET_LOSS_RTOL = 1e-4


def _models(n: int, d: int, k: int, embedding: str, seed: int, dropout: float = 0.01, device: str = "cpu"):
    from kmtlib.transformer import KMeansTransformer

    from .reference_model import ReferenceLayer

    fast = KMeansTransformer.trainable(d, k, embedding=embedding, dropout=dropout, generator=seed)
    ref = ReferenceLayer(d, k, embedding=embedding, dropout=dropout).load_kmtlib(fast)
    return fast.to(device), ref.to(device)


def loss_agreement(n: int, d: int, k: int, batch: int, embedding: str = "onehot", seed: int = 0) -> dict[str, Any]:
    """Loss and gradients of both implementations on the same tasks and weights (eval mode)."""
    import kmtlib
    from kmtlib.losses import smoothed_objective_unchecked

    from .reference_model import reference_loss

    fast, ref = _models(n, d, k, embedding, seed)
    fast.eval()
    ref.eval()
    g = torch.Generator().manual_seed(seed + 1)
    X = kmtlib.sample_tasks(batch, n, d, k, generator=g)
    C0 = kmtlib.init_centers(X, k, generator=g)
    C_fast, C_ref = fast.step(X, C0), ref(X, C0)
    loss_fast = smoothed_objective_unchecked(X, C_fast, LOSS_INV_TEMP).mean()
    loss_ref = reference_loss(X, C_ref, LOSS_INV_TEMP)
    loss_fast.backward()
    loss_ref.backward()
    worst = 0.0
    for name in ("cax", "sax", "cac", "sac"):
        for part in ("query", "key", "value"):
            for kind in ("weight", "bias"):
                a = getattr(getattr(getattr(fast.layer, name.upper()), part), kind).grad
                b = getattr(getattr(ref.blocks[name], part), kind).grad
                worst = max(worst, float((a - b).norm() / b.norm().clamp_min(1e-30)))
    loss_fast, loss_ref = loss_fast.detach(), loss_ref.detach()
    rel = abs(float(loss_fast) - float(loss_ref)) / abs(float(loss_ref))
    return {
        "loss_kmtlib": float(loss_fast),
        "loss_reference": float(loss_ref),
        "loss_rel_diff": rel,
        "grad_max_rel_diff": worst,
        "centres_max_abs_diff": float((C_fast - C_ref).detach().abs().max()),
        "loss_target_rtol": TARGET_LOSS_RTOL,
        "loss_target_met": rel <= TARGET_LOSS_RTOL,
    }


def _step_functions(
    n: int, d: int, k: int, batch: int, embedding: str, seed: int, device: str = "cpu"
) -> dict[str, Callable[[], float]]:
    import kmtlib
    from kmtlib.losses import smoothed_objective_unchecked

    from .reference_model import reference_loss, reference_tasks

    fast, ref = _models(n, d, k, embedding, seed, device=device)
    fast.train()
    ref.train()
    fast.layer.generator = torch.Generator(device=device).manual_seed(seed + 2)
    opt_fast = torch.optim.Adam(fast.parameters(), lr=LR)
    opt_ref = torch.optim.Adam(ref.parameters(), lr=LR)
    g_fast = torch.Generator(device=device).manual_seed(seed + 3)
    g_ref = torch.Generator().manual_seed(seed + 4)

    def kmtlib_step() -> float:
        X = kmtlib.sample_tasks(batch, n, d, k, generator=g_fast)
        C0 = kmtlib.init_centers(X, k, generator=g_fast)
        loss = smoothed_objective_unchecked(X, fast.step(X, C0), LOSS_INV_TEMP).mean()
        opt_fast.zero_grad(set_to_none=True)
        loss.backward()
        opt_fast.step()
        return float(loss.detach())

    def reference_step() -> float:
        X, C0 = reference_tasks(batch, n, d, k, generator=g_ref, device=device)
        loss = reference_loss(X, ref(X, C0), LOSS_INV_TEMP)
        opt_ref.zero_grad(set_to_none=True)
        loss.backward()
        opt_ref.step()
        return float(loss.detach())

    return {"kmtlib": kmtlib_step, "reference": reference_step}


def time_steps(
    n: int, d: int, k: int, batch: int, *, embedding: str = "onehot", threads: int = 1,
    repeats: int = MIN_REPEATS, warmup: int = 2, seed: int = 0, which: tuple[str, ...] = ("kmtlib", "reference"),
    device: str = "cpu",
) -> dict[str, Any]:
    """Median seconds per training step of each implementation, timed in interleaved rounds
    (every step ends by reading the loss, which waits for the device)."""
    with pinned_threads(threads):
        fns = _step_functions(n, d, k, batch, embedding, seed, device=str(device))
        timings = time_interleaved({name: fns[name] for name in which}, repeats=repeats, warmup=warmup)
    out: dict[str, Any] = {"n": n, "d": d, "k": k, "batch": batch, "embedding": embedding, "threads": threads,
                           "device": str(device)}
    for name, t in timings.items():
        if isinstance(t, Exception):
            raise t
        out[name] = t.as_dict()
    if "kmtlib" in out and "reference" in out:
        out["speedup"] = out["reference"]["median_s"] / out["kmtlib"]["median_s"]
        out["speedup_of_minima"] = out["reference"]["min_s"] / out["kmtlib"]["min_s"]
    return out


# ------------------------------------------------------------------------------------ children
def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run in a fresh process: set the allocator mode, then time every thread count."""
    from kmtlib.training import tune_malloc

    tuned = tune_malloc() if spec["malloc"] == "tuned" else False
    cfg = spec["config"]
    rows = [
        time_steps(cfg["n"], cfg["d"], cfg["k"], cfg["batch"], embedding=cfg["embedding"], threads=t,
                   repeats=spec["repeats"], seed=spec["seed"])
        for t in spec["threads"]
    ]
    return {"malloc": spec["malloc"], "malloc_tuned": tuned, "rows": rows}


def _run_child(spec: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.training_bench", json.dumps(spec)],
        capture_output=True, text=True, env=env, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"training benchmark child failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _thread_list(threads: int) -> list[int]:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    return sorted({1, min(2, usable), threads})


def run(
    *, quick: bool, threads: int, repeats: int, seed: int = 20250619, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Loss agreement at the configuration, then step timings (1 and 2 threads, and ``threads``)
    with glibc's default allocator and with the training command's tuned allocator."""
    cfg = dict(QUICK if quick else PAPER)
    thread_list = _thread_list(threads)
    log(f"\n== training step: n={cfg['n']}, d={cfg['d']}, k={cfg['k']}, batch={cfg['batch']}, "
        f"embedding={cfg['embedding']}; threads {thread_list}")
    with pinned_threads(1):
        agreement = loss_agreement(cfg["n"], cfg["d"], cfg["k"], cfg["batch"], cfg["embedding"], seed=seed % 2**31)
    log(f"  same inputs and weights: loss kmtlib {agreement['loss_kmtlib']:.6g}, reference "
        f"{agreement['loss_reference']:.6g}, relative difference {agreement['loss_rel_diff']:.1e}")
    modes = {}
    for malloc in ("default", "tuned"):
        log(
            f"  timing ({malloc} allocator, child process): 2 warm-up + {repeats} interleaved rounds "
            "per thread count ..."
        )
        modes[malloc] = _run_child(
            {"malloc": malloc, "config": cfg, "threads": thread_list, "repeats": repeats, "seed": seed % 2**31}
        )
    result: dict[str, Any] = {
        "benchmark": "training",
        "settings": {
            "quick": quick,
            "threads": thread_list,
            "repeats": repeats,
            "warmup": 2,
            "seed": seed,
            "thread_counts_during_run": thread_counts(),
        },
        "config": cfg,
        "agreement": agreement,
        "modes": modes,
    }
    result["targets"] = _targets(result)
    return result


def _targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for malloc, mode in result["modes"].items():
        for row in mode["rows"]:
            rec = {
                "target": f"training step >= {TARGET_SPEEDUP:g}x faster than the reference",
                "malloc": malloc,
                "threads": row["threads"],
                "value": row["speedup"],
            }
            rec["status"] = (
                "not judged (--quick sizes)"
                if result["settings"]["quick"]
                else "met"
                if row["speedup"] >= TARGET_SPEEDUP
                else "missed"
            )
            out.append(rec)
    agree = result["agreement"]
    out.append(
        {
            "target": f"same loss to {TARGET_LOSS_RTOL:g} relative",
            "value": agree["loss_rel_diff"],
            "status": "met" if agree["loss_target_met"] else "missed",
        }
    )
    return out


def report(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        f"\ntraining step at n={cfg['n']}, d={cfg['d']}, k={cfg['k']}, batch={cfg['batch']}, "
        f"{cfg['embedding']} (median of {result['settings']['repeats']} interleaved rounds)"
    ]
    header = ["allocator", "threads", "kmtlib ms", "reference ms", "speed-up", "speed-up (minima)"]
    table = []
    for malloc, mode in result["modes"].items():
        for row in mode["rows"]:
            table.append(
                [
                    malloc,
                    row["threads"],
                    row["kmtlib"]["median_s"] * 1e3,
                    row["reference"]["median_s"] * 1e3,
                    row["speedup"],
                    row["speedup_of_minima"],
                ]
            )
    lines.append(format_table(header, table))
    a = result["agreement"]
    lines.append(
        f"same inputs and weights (eval mode): loss {a['loss_kmtlib']:.7g} vs {a['loss_reference']:.7g}, "
        f"relative difference {a['loss_rel_diff']:.1e}; gradients max relative difference {a['grad_max_rel_diff']:.1e}"
    )
    for t in result["targets"]:
        where = f" [{t['malloc']} allocator, {t['threads']} thread(s)]" if "malloc" in t else ""
        lines.append(f"  target: {t['target']}{where}: {t['value']:.3g} -> {t['status']}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
