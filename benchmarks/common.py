"""Timing helpers shared by the benchmarks: thread pinning, warm-up plus median of repeats,
machine information, and plain-text tables.

Every benchmark runs in one process with the thread counts of torch, of the BLAS/OpenMP pools
(through threadpoolctl, which covers scikit-learn and NumPy) and of faiss fixed explicitly, and
records them. On a 2-core machine shared with other work the medians move by tens of percent
from run to run; quote ratios measured in the same run, not absolute times.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

MIN_REPEATS = 5


def faiss_module():
    """The ``faiss`` module, or None where faiss-cpu is not installed (``pip install -e .[bench]``)."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


@contextlib.contextmanager
def pinned_threads(n: int) -> Iterator[dict[str, int]]:
    """Fix the thread count of torch, of every BLAS/OpenMP pool threadpoolctl finds, and of faiss,
    to ``n`` inside the block; restore torch's and faiss's counts afterwards."""
    from threadpoolctl import threadpool_limits

    if n < 1:
        raise ValueError(f"threads must be >= 1, got {n}")
    torch_before = torch.get_num_threads()
    faiss = faiss_module()
    faiss_before = faiss.omp_get_max_threads() if faiss is not None else None
    torch.set_num_threads(n)
    if faiss is not None:
        faiss.omp_set_num_threads(n)
    try:
        with threadpool_limits(limits=n):
            yield thread_counts()
    finally:
        torch.set_num_threads(torch_before)
        if faiss is not None:
            faiss.omp_set_num_threads(faiss_before)


def thread_counts() -> dict[str, int]:
    """The thread counts now in force: torch, each threadpoolctl pool (by API), faiss."""
    from threadpoolctl import threadpool_info

    counts: dict[str, int] = {"torch": torch.get_num_threads()}
    for pool in threadpool_info():
        key = f"{pool.get('internal_api', '?')}:{os.path.basename(pool.get('filepath', '?'))}"
        counts[key] = int(pool.get("num_threads", -1))
    faiss = faiss_module()
    if faiss is not None:
        counts["faiss"] = int(faiss.omp_get_max_threads())
    return counts


@dataclass
class Timing:
    """Wall-clock times of the repeats (seconds) after ``warmup`` untimed calls."""

    times_s: list[float]
    warmup: int
    last_result: Any = field(default=None, repr=False)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def min_s(self) -> float:
        return min(self.times_s)

    def as_dict(self) -> dict[str, Any]:
        return {
            "median_s": self.median_s,
            "min_s": self.min_s,
            "max_s": max(self.times_s),
            "times_s": list(self.times_s),
            "repeats": len(self.times_s),
            "warmup": self.warmup,
        }


def time_call(fn: Callable[[], Any], repeats: int = MIN_REPEATS, warmup: int = 1) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then ``repeats`` times timed with ``time.perf_counter``.

    Keeps the result of the last call (to check what was computed) in ``last_result``.
    """
    if repeats < MIN_REPEATS:
        raise ValueError(f"repeats must be >= {MIN_REPEATS} (a median of fewer runs is too noisy), got {repeats}")
    result = None
    for _ in range(warmup):
        result = fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return Timing(times_s=times, warmup=warmup, last_result=result)


def time_interleaved(
    fns: dict[Any, Callable[[], Any]], repeats: int = MIN_REPEATS, warmup: int = 1
) -> dict[Any, Timing | Exception]:
    """Time several calls in rounds: each round calls every function once, in order.

    On a machine shared with other work the load drifts over a run; interleaving makes every
    function see the same drift, so the ratios between them stay meaningful. Each function is
    first called ``warmup`` times. A function that raises gets the exception as its result and
    is left out of the later rounds.
    """
    if repeats < MIN_REPEATS:
        raise ValueError(f"repeats must be >= {MIN_REPEATS} (a median of fewer runs is too noisy), got {repeats}")
    out: dict[Any, Timing | Exception] = {}
    last: dict[Any, Any] = {}
    for key, fn in fns.items():
        try:
            for _ in range(warmup):
                last[key] = fn()
            out[key] = Timing(times_s=[], warmup=warmup)
        except Exception as exc:  # reported by the caller as "not available"
            out[key] = exc
    for _ in range(repeats):
        _timed_round(fns, out, last)
    for key, timing in out.items():
        if isinstance(timing, Timing):
            timing.last_result = last.get(key)
    return out


def _timed_round(fns: dict[Any, Callable[[], Any]], out: dict[Any, Timing | Exception], last: dict[Any, Any]) -> None:
    """One round of :func:`time_interleaved`: each function that has not failed, called once and timed."""
    for key, fn in fns.items():
        timing = out[key]
        if isinstance(timing, Exception):
            continue
        start = time.perf_counter()
        try:
            last[key] = fn()
        except Exception as exc:
            out[key] = exc
            continue
        timing.times_s.append(time.perf_counter() - start)


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def calibration_s(rounds: int = 3, size: int = 200_000) -> float:
    """Seconds of a fixed one-thread loop (the fastest of ``rounds``): the machine's speed now.

    Timed before and after a measurement, it says whether other work took the core meanwhile;
    the same loop on the same machine takes the same time when nothing else runs."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        acc = 0
        for i in range(size):
            acc += i * i % 7
        best = min(best, time.perf_counter() - t0)
    return best


@dataclass(frozen=True)
class LoadSnapshot:
    """The 1-minute load average (None where the system has none) and the calibration loop's time."""

    load_1min: float | None
    calibration_s: float


def load_snapshot() -> LoadSnapshot:
    load = load_average()
    return LoadSnapshot(load[0] if load else None, calibration_s())


@dataclass(frozen=True)
class LoadCheck:
    """Whether the machine was loaded between two snapshots, and the sentence that says so.

    Loaded means: a 1-minute load average above the usable cores (more runnable threads than
    cores, this process included), or the calibration loop slower after than before by more than
    ``max_slowdown``. Timings taken while loaded measure the other work as much as the code."""

    before: LoadSnapshot
    after: LoadSnapshot
    usable_cpus: int
    max_slowdown: float = 1.5

    @property
    def peak_load(self) -> float | None:
        loads = [s.load_1min for s in (self.before, self.after) if s.load_1min is not None]
        return max(loads) if loads else None

    @property
    def slowdown(self) -> float:
        fastest = min(self.before.calibration_s, self.after.calibration_s)
        return max(self.before.calibration_s, self.after.calibration_s) / fastest

    @property
    def loaded(self) -> bool:
        peak = self.peak_load
        return (peak is not None and peak > self.usable_cpus) or self.slowdown > self.max_slowdown

    def note(self) -> str:
        load = "unknown" if self.peak_load is None else f"{self.peak_load:.1f}"
        said = (f"load average up to {load} on {self.usable_cpus} usable cores, calibration loop "
                f"{self.before.calibration_s * 1e3:.0f} ms before and {self.after.calibration_s * 1e3:.0f} ms after")
        if self.loaded:
            return (f"The machine was loaded while these timings were taken ({said}): they measure the other "
                    "work as much as the code, and no target is judged from them.")
        return f"The machine was quiet while these timings were taken ({said})."


def check_load(before: LoadSnapshot, after: LoadSnapshot | None = None, usable_cpus: int | None = None) -> LoadCheck:
    """The load check between ``before`` and ``after`` (taken now when not given)."""
    if usable_cpus is None:
        try:
            usable_cpus = len(os.sched_getaffinity(0))
        except AttributeError:
            usable_cpus = os.cpu_count() or 1
    return LoadCheck(before, after if after is not None else load_snapshot(), usable_cpus)


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on: CPU, cores, load, library versions, thread counts."""
    import numpy
    import sklearn
    import threadpoolctl

    faiss = faiss_module()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "load_average_1_5_15min": load_average(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "versions": {
            "torch": torch.__version__,
            "numpy": numpy.__version__,
            "scikit-learn": sklearn.__version__,
            "threadpoolctl": threadpoolctl.__version__,
            "faiss": faiss.__version__ if faiss is not None else None,
        },
        "threads": thread_counts(),
    }


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table, columns padded to width; numbers right-aligned."""
    cells = [[str(h) for h in header]] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    numeric = [all(_is_number(row[i]) for row in rows) and bool(rows) for i in range(len(header))]

    def line(r: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(r) for r in cells[1:]])


def _is_number(v: Any) -> bool:
    return v is None or isinstance(v, (int, float))


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 100:
            return f"{v:.0f}"
        if abs(v) >= 1e-2:
            return f"{v:.3g}"
        return f"{v:.1e}"
    return str(v)
