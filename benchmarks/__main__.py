"""Run the benchmarks: print a table and write JSON.

    python -m benchmarks [--quick] [--out results/benchmarks] [--only NAME] [--threads 1] [--repeats 5]

with NAME one of lloyd, training, memory, group, estimator (repeatable; default: all).

The timings come from one process with pinned thread counts (the training step's allocator
settings and the training run each in a child process); on a shared or 2-core machine, quote the
ratios printed at the end (measured in the same run) rather than absolute times. ``--threads``
pins the Lloyd rows and the training run; the training step is always timed at 1 and 2 threads
(where 2 CPUs are usable) and at ``--threads``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

from . import BENCHMARKS
from .common import MIN_REPEATS, load_average, machine_info


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="toy sizes: a smoke run of every code path, not a measurement")
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks"),
                        help="folder for <name>.json (default: %(default)s)")
    parser.add_argument("--only", choices=sorted(BENCHMARKS), action="append",
                        help="run only this benchmark (repeatable; default: all)")
    parser.add_argument("--threads", type=_positive_int, default=1,
                        help="threads for torch, BLAS/OpenMP (threadpoolctl) and faiss (default: %(default)s)")
    parser.add_argument("--repeats", type=_positive_int, default=MIN_REPEATS,
                        help=f"timed rounds after one warm-up call; the median is reported "
                        f"(>= {MIN_REPEATS}; default: %(default)s)")
    parser.add_argument("--seed", type=int, default=20250619,
                        help="seed of the task sampler and of the initial centres")
    args = parser.parse_args(argv)
    if args.repeats < MIN_REPEATS:
        parser.error(f"--repeats must be >= {MIN_REPEATS}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = args.only or sorted(BENCHMARKS)
    args.out.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    print(f"cpu: {info['cpu_model']} ({info['usable_cpus']} usable of {info['logical_cpus']} logical CPUs, "
          f"{info['torch_cpu_capability']}); load average {info['load_average_1_5_15min']}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v is not None)
          + ("" if info["versions"]["faiss"] else "  (faiss-cpu not installed: its rows are skipped)"))
    for name in names:
        module = BENCHMARKS[name]
        started = _dt.datetime.now(_dt.UTC)
        result = module.run(quick=args.quick, threads=args.threads, repeats=args.repeats, seed=args.seed)
        result["machine"] = info
        result["started_utc"] = started.isoformat(timespec="seconds")
        result["load_average_after"] = load_average()
        text = module.report(result)
        print(text)
        path = args.out / f"{name}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nwrote {path}  (load average after: {result['load_average_after']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
