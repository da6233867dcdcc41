"""Lloyd's algorithm and the limit k-means transformer against scikit-learn and faiss.

Two regimes, the same data and the same initial centres C0 for every row:

* ``many_small``: 4096 tasks of n=100 points, d=2, k=4, T=10 steps (the paper's regime: many
  small tasks). kmtlib runs the whole batch at once; scikit-learn and faiss run a Python loop over
  the tasks, each fit on one thread (their OpenMP start-up per fit costs several times the fit
  itself otherwise).
* ``one_large``: one task of n=100000, d=16, k=16, T=20. Every library makes one call with the
  pinned thread count.

Rows: ``kmtlib.lloyd`` (batched, empty="mean"), the limit transformer
``KMeansTransformer.from_theorem(d, k)`` (its whole pass, ``kmtlib.whole_pass(model)``; it computes the same thing as
``lloyd(empty="mean")``), ``sklearn.cluster.KMeans(init=C0, n_init=1, max_iter=T, tol=0,
algorithm="lloyd")`` and ``faiss.Kmeans(niter=T, min_points_per_centroid=1,
max_points_per_centroid=10**9)`` (no subsampling; float32 only). kmtlib and the transformer run in
float32 and float64, scikit-learn in both, faiss in float32.

The work is the same T Lloyd steps from the same C0, checked: the final centres of every row are
compared with ``kmtlib.lloyd`` in the same precision on the tasks in which no cluster went empty
(scikit-learn relocates an empty cluster and faiss splits one, so they legitimately differ
there). Differences that remain are label flips at near-ties, which float32 rounding decides.
What differs in the work done: kmtlib and the transformer also return the whole centre trajectory,
the objective at all T+1 steps and the final labels; scikit-learn computes labels and inertia once
at the end and stops early at a fixed point (strict label convergence, even with tol=0); faiss
evaluates the objective at every step, stops early when it is unchanged (also a fixed point, so
the centres are those of T steps) and returns no labels. Early stops are recorded.

Timing: every row is built first (data converted, models constructed, outside the timing), then
all rows are called once as warm-up and timed in ``repeats`` interleaved rounds, so that they share
the load drift of a busy machine; the table gives medians and minima, and the ratios both.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

import kmtlib

from .common import faiss_module, format_table, pinned_threads, thread_counts, time_interleaved

F32, F64 = torch.float32, torch.float64
DTYPE_NAMES = {F32: "float32", F64: "float64"}
# A final centre differing from kmtlib's by more than this counts as a real disagreement (a label
# flip at a near-tie), not rounding.
ROUNDING_TOL = {"float32": 1e-4, "float64": 1e-9}


@dataclass(frozen=True)
class Regime:
    name: str
    batch: int
    n: int
    d: int
    k: int
    steps: int

    @property
    def label(self) -> str:
        tasks = f"{self.batch} tasks" if self.batch > 1 else "one task"
        return f"{self.name}: {tasks} of n={self.n}, d={self.d}, k={self.k}, T={self.steps}"


REGIMES = {
    "full": (Regime("many_small", 4096, 100, 2, 4, 10), Regime("one_large", 1, 100_000, 16, 16, 20)),
    # --quick: the same code paths at toy sizes (a smoke test, not a measurement)
    "quick": (Regime("many_small", 16, 40, 2, 4, 4), Regime("one_large", 1, 2_000, 8, 8, 5)),
}

# (regime, description, numerator (row, dtype), denominator (row, dtype), comparison, bound)
TARGETS = [
    ("many_small", "transformer / lloyd", ("transformer", "float32"), ("lloyd", "float32"), "<=", 2.0),
    ("many_small", "transformer / lloyd", ("transformer", "float64"), ("lloyd", "float64"), "<=", 2.0),
    ("many_small", "sklearn loop / transformer", ("sklearn", "float32"), ("transformer", "float32"), ">=", 10.0),
    ("many_small", "sklearn loop / transformer", ("sklearn", "float64"), ("transformer", "float64"), ">=", 10.0),
    ("one_large", "transformer / lloyd", ("transformer", "float32"), ("lloyd", "float32"), "<=", 2.0),
    ("one_large", "transformer / lloyd", ("transformer", "float64"), ("lloyd", "float64"), "<=", 2.0),
    ("one_large", "lloyd / sklearn", ("lloyd", "float32"), ("sklearn", "float32"), "<=", 2.0),
]
# reported without a target
INFO_RATIOS = [
    ("many_small", "sklearn loop / lloyd", ("sklearn", "float32"), ("lloyd", "float32")),
    ("many_small", "sklearn loop / lloyd", ("sklearn", "float64"), ("lloyd", "float64")),
    ("many_small", "faiss loop / lloyd", ("faiss", "float32"), ("lloyd", "float32")),
    ("one_large", "sklearn / lloyd", ("sklearn", "float64"), ("lloyd", "float64")),
    ("one_large", "faiss / lloyd", ("faiss", "float32"), ("lloyd", "float32")),
]


# ------------------------------------------------------------------------------------------------
# the rows: each returns (final centres (B, k, d) as float64 numpy, iteration record)
# ------------------------------------------------------------------------------------------------


def _kmtlib_lloyd(X: torch.Tensor, C0: torch.Tensor, steps: int) -> Callable[[], Any]:
    def run():
        with torch.inference_mode():
            return kmtlib.lloyd(X, C0, steps, empty="mean")

    return run


def _transformer(model: torch.nn.Module, X: torch.Tensor, C0: torch.Tensor, steps: int) -> Callable[[], Any]:
    import kmtlib

    whole = kmtlib.whole_pass(model)  # (the fixed-weight model's whole pass by one kernel, asked for by name)

    def run():
        with torch.inference_mode():
            return whole(X, C0, steps=steps)

    return run


def _sklearn(Xs: list[np.ndarray], C0s: list[np.ndarray], k: int, steps: int, loop_threads: int | None):
    """One KMeans fit per task; ``loop_threads`` pins the BLAS/OpenMP pools inside the loop."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    def run():
        out = []
        with warnings.catch_warnings(), threadpool_limits(limits=loop_threads):
            warnings.simplefilter("ignore")
            for x, c0 in zip(Xs, C0s):
                km = KMeans(n_clusters=k, init=c0, n_init=1, max_iter=steps, tol=0.0, algorithm="lloyd").fit(x)
                out.append((km.cluster_centers_, km.n_iter_))
        return out

    return run


def _faiss(Xs: list[np.ndarray], C0s: list[np.ndarray], k: int, steps: int, loop_threads: int | None):
    faiss = faiss_module()

    def run():
        before = faiss.omp_get_max_threads()
        if loop_threads is not None:
            faiss.omp_set_num_threads(loop_threads)
        try:
            out = []
            for x, c0 in zip(Xs, C0s):
                km = faiss.Kmeans(
                    x.shape[1], k, niter=steps, min_points_per_centroid=1, max_points_per_centroid=10**9, verbose=False
                )
                km.train(x, init_centroids=c0)
                nsplit = sum(int(s["nsplit"]) for s in km.iteration_stats)
                out.append((km.centroids.copy(), len(km.iteration_stats), nsplit))
            return out
        finally:
            faiss.omp_set_num_threads(before)

    return run


def _iterations_of_loop(counts: list[int], steps: int) -> dict[str, Any]:
    arr = np.asarray(counts)
    return {
        "requested": steps,
        "min": int(arr.min()),
        "median": float(np.median(arr)),
        "max": int(arr.max()),
        "tasks_stopped_early": int((arr < steps).sum()),
    }


def _iterations_text(it: dict[str, Any], batch: int) -> str:
    if it.get("tasks_stopped_early", 0) == 0:
        return f"{it['requested']}"
    if batch == 1:
        return f"{it['max']} (early stop)"
    return f"{it['min']}-{it['max']}, {it['tasks_stopped_early']}/{batch} early"


# ------------------------------------------------------------------------------------------------
# one regime
# ------------------------------------------------------------------------------------------------


def _agreement(final: np.ndarray, reference: np.ndarray, clean: np.ndarray, dtype: str, X64: torch.Tensor):
    """Compare final centres with kmtlib.lloyd's in the same precision on the clean tasks."""
    diff = np.abs(final - reference).reshape(final.shape[0], -1).max(axis=1)  # per task
    rec: dict[str, Any] = {
        "tasks_compared": int(clean.sum()),
        "tasks_excluded_empty_cluster": int((~clean).sum()),
        "max_abs_dC_clean": float(diff[clean].max()) if clean.any() else None,
        "max_abs_dC_all": float(diff.max()),
        "tasks_beyond_rounding_clean": int((diff[clean] > ROUNDING_TOL[dtype]).sum()),
        "rounding_tol": ROUNDING_TOL[dtype],
    }
    if clean.any():
        idx = torch.from_numpy(np.flatnonzero(clean))
        obj = kmtlib.kmeans_objective(X64[idx], torch.from_numpy(final[clean]).to(F64))
        ref = kmtlib.kmeans_objective(X64[idx], torch.from_numpy(reference[clean]).to(F64))
        rec["max_rel_dobjective_clean"] = float(((obj - ref).abs() / ref.clamp_min(1e-300)).max())
    return rec


def run_regime(
    regime: Regime, *, threads: int, repeats: int, seed: int, log: Callable[[str], None] = print
) -> dict[str, Any]:
    B, n, d, k = regime.batch, regime.n, regime.d, regime.k
    log(f"\n== {regime.label}")
    X64 = kmtlib.sample_tasks(B, n, d, k, generator=seed, dtype=F64)
    C064 = kmtlib.init_centers(X64, k, method="random", generator=seed + 1)
    data = {F64: (X64, C064), F32: (X64.float(), C064.float())}
    loop_threads = 1 if B > 1 else threads
    specs = _regime_rows(regime, data, threads, loop_threads, log)
    # all rows timed in rounds (see common.time_interleaved), so they share the machine's load drift
    fns = {i: fn for i, (_, fn, _) in enumerate(specs) if fn is not None}
    log(f"  timing {len(fns)} rows: 1 warm-up + {repeats} rounds ...")
    timings = time_interleaved(fns, repeats=repeats, warmup=1)
    rows = _measured_rows(specs, timings, B, X64, log)
    _add_ratios_to_lloyd(rows)
    return {"config": asdict(regime), "label": regime.label, "loop_threads": loop_threads, "rows": rows}


RowSpec = tuple[dict[str, Any], Callable[[], Any] | None, Callable]
"""A row of a regime: its record, the function to time (None: not available here), and the function
that reads the final centres, the iterations and extra fields from that function's result."""


def _regime_rows(
    regime: Regime, data: dict, threads: int, loop_threads: int, log: Callable[[str], None]
) -> list[RowSpec]:
    """The rows of one regime, kmtlib's Lloyd first (the reference of every comparison): the limit
    transformer, scikit-learn and faiss (a loop over the tasks when the batch holds more than one)."""
    B, d, k, T = regime.batch, regime.d, regime.k, regime.steps
    loop = B > 1
    specs: list[RowSpec] = []

    def add_row(row_id: str, label: str, dtype: torch.dtype, row_threads: int, build, extract) -> None:
        name = DTYPE_NAMES[dtype]
        row: dict[str, Any] = {"row": row_id, "label": label, "dtype": name, "threads": row_threads, "available": True}
        try:
            fn = build()
        except Exception as exc:  # a missing optional piece: report the row as not available
            row.update(available=False, note=f"not available: {type(exc).__name__}: {exc}")
            log(f"  {label} [{name}]: {row['note']}")
            fn = None
        specs.append((row, fn, extract))

    kmtlib_extract = functools.partial(_kmtlib_extract, T)
    # kmtlib lloyd first: it is the reference of every comparison
    for dtype in (F32, F64):
        X, C0 = data[dtype]
        build = lambda X=X, C0=C0: _kmtlib_lloyd(X, C0, T)  # noqa: E731
        add_row("lloyd", "kmtlib lloyd (batched)", dtype, threads, build, kmtlib_extract)

    for dtype in (F32, F64):
        X, C0 = data[dtype]

        def build_model(X=X, C0=C0, dtype=dtype):
            from kmtlib.transformer import KMeansTransformer

            model = KMeansTransformer.from_theorem(d, k).to(dtype).eval()
            return _transformer(model, X, C0, T)

        add_row("transformer", "limit transformer from_theorem(d, k)", dtype, threads, build_model, kmtlib_extract)

    for dtype in (F32, F64):
        X, C0 = data[dtype]
        Xs = [np.ascontiguousarray(X[b].numpy()) for b in range(B)]
        C0s = [np.ascontiguousarray(C0[b].numpy()) for b in range(B)]

        label = "scikit-learn KMeans lloyd" + (" (loop over tasks)" if loop else "")
        build = lambda Xs=Xs, C0s=C0s: _sklearn(Xs, C0s, k, T, loop_threads)  # noqa: E731
        add_row("sklearn", label, dtype, loop_threads, build, functools.partial(_sklearn_extract, T))

    X, C0 = data[F32]
    Xs = [np.ascontiguousarray(X[b].numpy()) for b in range(B)]
    C0s = [np.ascontiguousarray(C0[b].numpy()) for b in range(B)]

    def build_faiss():
        if faiss_module() is None:
            raise ImportError("faiss-cpu is not installed (pip install -e '.[bench]')")
        return _faiss(Xs, C0s, k, T, loop_threads)

    label = "faiss Kmeans" + (" (loop over tasks)" if loop else "")
    add_row("faiss", label, F32, loop_threads, build_faiss, functools.partial(_faiss_extract, T))
    return specs


# What each row's result holds: final centres (float64), iterations, and extra fields of the row.


def _kmtlib_extract(T: int, result):
    final = result.centers[:, -1].double().numpy()
    tasks_with_empty = int((result.n_empty.sum(dim=1) > 0).sum()) if result.n_empty is not None else None
    return final, {"requested": T, "tasks_stopped_early": 0}, {"tasks_with_empty_cluster": tasks_with_empty}


def _sklearn_extract(T: int, out):
    final = np.stack([c for c, _ in out]).astype(np.float64)
    return final, _iterations_of_loop([it for _, it in out], T), {}


def _faiss_extract(T: int, out):
    final = np.stack([c for c, _, _ in out]).astype(np.float64)
    split = int(sum(s > 0 for _, _, s in out))
    return final, _iterations_of_loop([it for _, it, _ in out], T), {"tasks_with_split": split}


def _measured_rows(
    specs: list[RowSpec], timings: dict, B: int, X64: torch.Tensor, log: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Each row's record with its timing and, for a peer of kmtlib's Lloyd in the same precision, its
    agreement with it (lloyd rows come first: they are the references)."""
    references: dict[str, np.ndarray] = {}
    clean_masks: dict[str, np.ndarray] = {}
    rows = []
    for i, (row, _, extract) in enumerate(specs):
        rows.append(row)
        timing = timings.get(i)
        if isinstance(timing, Exception):
            row.update(available=False, note=f"not available: {type(timing).__name__}: {timing}")
        if not row["available"]:
            continue
        name = row["dtype"]
        log(f"  {row['label']} [{name}]: median {timing.median_s * 1e3:.1f} ms")
        final, iterations, extra = extract(timing.last_result)
        row.update(timing.as_dict())
        row["per_task_us"] = timing.median_s / B * 1e6
        row["iterations"] = iterations
        row.update(extra)
        if row["row"] == "lloyd":
            references[name] = final
            clean_masks[name] = (timing.last_result.n_empty.sum(dim=1) == 0).numpy()
        elif name in references:
            row["agreement_vs_kmtlib_lloyd"] = _agreement(final, references[name], clean_masks[name], name, X64)
    return rows


def _add_ratios_to_lloyd(rows: list[dict[str, Any]]) -> None:
    """Each available row's time over kmtlib's Lloyd's in the same precision (medians and minima)."""
    lloyd = {r["dtype"]: r for r in rows if r["row"] == "lloyd" and r["available"]}
    for r in rows:
        if r["available"] and r["dtype"] in lloyd:
            r["ratio_to_lloyd"] = r["median_s"] / lloyd[r["dtype"]]["median_s"]
            r["ratio_to_lloyd_of_minima"] = r["min_s"] / lloyd[r["dtype"]]["min_s"]


# ------------------------------------------------------------------------------------------------
# whole benchmark
# ------------------------------------------------------------------------------------------------


def _find(result: dict[str, Any], regime: str, key: tuple[str, str]) -> dict[str, Any] | None:
    for r in result["regimes"].get(regime, {}).get("rows", []):
        if (r["row"], r["dtype"]) == key and r["available"]:
            return r
    return None


def ratios(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The ratios of median times that the targets and the report name, from a result of the regimes
    (``{"settings": {"quick": ...}, "regimes": {name: run_regime(...)}}``), each judged against its
    target (``met``/``missed``; not judged at the quick sizes)."""
    out = []
    for regime, desc, num, den, *target in [*TARGETS, *INFO_RATIOS]:
        a, b = _find(result, regime, num), _find(result, regime, den)
        rec: dict[str, Any] = {
            "regime": regime,
            "ratio": desc,
            "numerator": "/".join(num),
            "denominator": "/".join(den),
            "value": a["median_s"] / b["median_s"] if a and b else None,
            "value_of_minima": a["min_s"] / b["min_s"] if a and b else None,
        }
        if target:
            op, bound = target
            rec["target"] = f"{op} {bound:g}"
            if result["settings"]["quick"]:
                rec["status"] = "not judged (--quick sizes)"
            elif rec["value"] is None:
                rec["status"] = "not measured"
            else:
                ok = rec["value"] <= bound if op == "<=" else rec["value"] >= bound
                rec["status"] = "met" if ok else "missed"
        out.append(rec)
    return out


def report(result: dict[str, Any]) -> str:
    lines = []
    for _name, reg in result["regimes"].items():
        lines.append(f"\n{reg['label']}  (kmtlib threads: {result['settings']['threads']}, "
                     f"loop rows: {reg['loop_threads']} thread(s); median of {result['settings']['repeats']})")
        header = ["row", "dtype", "thr", "median ms", "min ms", "us/task", "x lloyd", "iterations",
                  "max|dC| clean", "beyond tol", "note"]
        table = []
        for r in reg["rows"]:
            if not r["available"]:
                table.append([r["label"], r["dtype"], r["threads"], None, None, None, None, "", None, None, r["note"]])
                continue
            agree = r.get("agreement_vs_kmtlib_lloyd", {})
            note = ""
            if r["row"] == "lloyd":
                empty = r["tasks_with_empty_cluster"]
                note = f"reference; {empty} task(s) with an empty cluster (excluded from max|dC|)"
            elif r["row"] == "transformer" and agree:
                note = f"max|dC| all tasks {agree['max_abs_dC_all']:.1e}"
            elif r["row"] == "faiss" and r.get("tasks_with_split"):
                note = f"{r['tasks_with_split']} task(s) split an empty cluster"
            beyond = f"{agree['tasks_beyond_rounding_clean']}/{agree['tasks_compared']}" if agree else None
            table.append([
                r["label"], r["dtype"], r["threads"], r["median_s"] * 1e3, r["min_s"] * 1e3,
                r["per_task_us"] if reg["config"]["batch"] > 1 else None,
                r.get("ratio_to_lloyd"), _iterations_text(r["iterations"], reg["config"]["batch"]),
                agree.get("max_abs_dC_clean"), beyond, note,
            ])
        lines.append(format_table(header, table))
    lines.append("\nratios of medians (same run, rows timed in interleaved rounds; ratio of the minima in brackets):")
    for rec in result["ratios"]:
        value = "n/a" if rec["value"] is None else f"{rec['value']:.2f} (minima {rec['value_of_minima']:.2f})"
        target = f"   target {rec['target']}: {rec['status']}" if "target" in rec else ""
        pair = f"[{rec['numerator']} vs {rec['denominator']}]"
        lines.append(f"  {rec['regime']:<10}  {rec['ratio']:<27} {pair:<42} {value:>20}{target}")
    lines.append(
        "\n'beyond tol': clean tasks whose final centres differ from kmtlib lloyd (same dtype) by more than "
        + ", ".join(f"{v:g} ({k})" for k, v in ROUNDING_TOL.items())
        + ": label flips at near-ties."
    )
    return "\n".join(lines)


def run(
    *, quick: bool, threads: int, repeats: int, seed: int = 20250619, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run both regimes with pinned threads; return the JSON-able result (``report`` prints it)."""
    regimes = REGIMES["quick" if quick else "full"]
    with pinned_threads(threads):
        pinned = thread_counts()
        log("thread counts: " + ", ".join(f"{k}={v}" for k, v in pinned.items()))
        per_regime = {r.name: run_regime(r, threads=threads, repeats=repeats, seed=seed, log=log) for r in regimes}
    result: dict[str, Any] = {
        "benchmark": "lloyd",
        "settings": {"quick": quick, "threads": threads, "repeats": repeats, "warmup": 1, "seed": seed,
                     "thread_counts_during_run": pinned},
        "regimes": per_regime,
    }
    result["ratios"] = ratios(result)
    return result
