"""Time one training step of the learned layer, kmtlib vs the straightforward reference (a thin
wrapper around :func:`benchmarks.training_bench.time_steps`; the full benchmark with loss
agreement and both allocator settings is ``python -m benchmarks --only training``).

    python scripts/bench_learned_step.py [--n 512 --d 32 --k 10 --batch 32] [--threads 1] [--repeats 10]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.training_bench import time_steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--d", type=int, default=32)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--embedding", default="onehot", choices=("onehot", "data", "none"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument(
        "--tune-malloc", action="store_true", help="apply kmtlib.training.tune_malloc() first (process-wide)"
    )
    args = p.parse_args()
    if args.tune_malloc:
        from kmtlib.training import tune_malloc

        tune_malloc()
    r = time_steps(
        args.n, args.d, args.k, args.batch, embedding=args.embedding, threads=args.threads, repeats=args.repeats
    )
    print(f"kmtlib     {r['kmtlib']['median_s'] * 1e3:8.1f} ms/step (min {r['kmtlib']['min_s'] * 1e3:.1f})")
    print(f"reference  {r['reference']['median_s'] * 1e3:8.1f} ms/step (min {r['reference']['min_s'] * 1e3:.1f})")
    print(f"speed-up {r['speedup']:.2f}x (of minima {r['speedup_of_minima']:.2f}x), threads={args.threads}")


if __name__ == "__main__":
    main()
