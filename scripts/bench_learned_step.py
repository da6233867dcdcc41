"""Time one training step of the learned layer at the paper configuration, fast vs straightforward.

    python scripts/bench_learned_step.py [--n 512 --d 32 --k 10 --batch 32] [--threads 2] [--steps 20]

"straightforward": cdist^2 + explicit soft-max + F.dropout attention, tasks drawn with
torch.distributions.MixtureSameFamily, loss through cdist, default glibc malloc.
"straightforward+malloc": the same with kmtlib.train.tune_malloc().
"fast-nomalloc": kmtlib's kernel, sampler and loss with glibc's default malloc.
"fast": kmtlib's kernel (kmtlib.learned), kmtlib.sample_tasks, kmtlib.losses, and
kmtlib.train.tune_malloc() (large buffers stay on the heap instead of fresh mmap pages).
Each variant runs in its own subprocess so the malloc setting of one cannot leak into the other.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def straightforward_tasks(batch, n, d, k):
    import torch
    from torch import distributions as dist

    locs = torch.rand(batch, k, d)
    mixture = dist.MixtureSameFamily(
        dist.Categorical(probs=torch.full((batch, k), 1.0 / k)),
        dist.Independent(dist.Normal(locs, 0.1), 1),
    )
    X = mixture.sample((n,)).transpose(0, 1)
    lo, hi = X.amin(1, keepdim=True), X.amax(1, keepdim=True)
    X = (X - lo) / (hi - lo)
    X = X[:, torch.randperm(n)]
    return X, X[:, :k].clone()


def run_variant(variant: str, args) -> dict:
    import torch

    import kmtlib
    from kmtlib.losses import _smoothed_objective
    from kmtlib.train import tune_malloc
    from kmtlib.transformer import KMeansTransformer

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    fast = variant.startswith("fast")
    if variant in ("fast", "straightforward+malloc"):
        tune_malloc()
    model = KMeansTransformer.trainable(args.d, args.k, embedding=args.embedding, impl="fast" if fast else "explicit")
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(0)

    def step():
        if fast:
            X = kmtlib.sample_tasks(args.batch, args.n, args.d, args.k, generator=g)
            C0 = kmtlib.init_centers(X, args.k, generator=g)
        else:
            X, C0 = straightforward_tasks(args.batch, args.n, args.d, args.k)
        C1 = model.step(X, C0)
        if fast:
            loss = _smoothed_objective(X, C1, 10.0).mean()
        else:
            D = torch.cdist(X, C1) ** 2
            loss = (torch.softmax(-10.0 * D, -1) * D).sum((1, 2)).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    times.sort()
    return {"variant": variant, "threads": args.threads, "median_s": times[len(times) // 2], "min_s": times[0]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--d", type=int, default=32)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--embedding", default="onehot")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--variants", default="straightforward,fast-nomalloc,fast")
    p.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._child:
        print(json.dumps(run_variant(args._child, args)))
        return
    results = []
    for variant in args.variants.split(","):
        cmd = [sys.executable, __file__, "--_child", variant] + [
            f"--{name}={getattr(args, name)}" for name in ("n", "d", "k", "batch", "embedding", "threads", "steps", "warmup")
        ]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        res = json.loads(out.strip().splitlines()[-1])
        results.append(res)
        print(f"{variant:16s} threads={args.threads}  median {res['median_s'] * 1e3:7.1f} ms/step  (min {res['min_s'] * 1e3:.1f})", flush=True)
    base = results[0]["median_s"]
    for r in results[1:]:
        print(f"speed-up of {r['variant']} over {results[0]['variant']}: {base / r['median_s']:.2f}x")


if __name__ == "__main__":
    main()
