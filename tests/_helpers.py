"""Shared oracles for the kmtlib core tests (imported as ``_helpers``; pytest puts tests/ on sys.path).

Everything here is written independently of kmtlib's kernels: distances from explicit differences,
a per-task, per-cluster NumPy Lloyd loop, plain chi-square tests.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def exact_sq_distances(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """(..., n, k) squared distances from explicit differences (no ||x||^2 - 2x.c + ||c||^2 cancellation)."""
    diff = X.unsqueeze(-2) - C.unsqueeze(-3)
    return (diff * diff).sum(-1)


def min_assignment_margin(X: torch.Tensor, centers: torch.Tensor, merge_duplicates: bool = False) -> torch.Tensor:
    """Per task (B,): the smallest gap between the second-smallest and the smallest squared distance,
    over all points and over every centre set of the trajectory ``centers`` (B, T+1, k, d).

    A task with a small margin can be assigned differently by two correct float64 codes (sklearn
    centres the data internally, the expansion formula rounds differently), so exact-match tests
    skip it. With k == 1 there is nothing to decide and the margin is +inf.

    ``merge_duplicates``: ignore a centre that is bitwise equal to a lower-index one. Such a tie is
    exact in every code (identical columns give identical distances) and goes to the lowest index;
    it arises when several empty clusters are sent to the same point (the "mean" rule).
    """
    B, _, k, _ = centers.shape
    if k == 1:
        return torch.full((B,), float("inf"), dtype=X.dtype, device=X.device)
    D = exact_sq_distances(X.unsqueeze(1), centers)  # (B, T+1, n, k)
    if merge_duplicates:
        same = (centers.unsqueeze(-2) == centers.unsqueeze(-3)).all(-1)  # (B, T+1, k, k)
        lower = torch.ones(k, k, dtype=torch.bool, device=X.device).tril(-1)
        duplicate = (same & lower).any(-1)  # (B, T+1, k): equals some lower-index centre
        D = D.masked_fill(duplicate.unsqueeze(-2), float("inf"))
    top2 = D.topk(2, dim=-1, largest=False).values
    return (top2[..., 1] - top2[..., 0]).amin(dim=(1, 2))


def numpy_lloyd(X: np.ndarray, C0: np.ndarray, steps: int, empty: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Textbook Lloyd on one task (n, d), (k, d): a loop over clusters, ties to the lowest index.

    ``empty``: "mean" (empty centre -> mean of all points) or "keep" (it stays). Returns the
    trajectory (steps+1, k, d), the final labels (n,) and the number of empty clusters per step.
    """
    C = C0.copy()
    traj = [C.copy()]
    n_empty = []
    for _ in range(steps):
        labels = ((X[:, None, :] - C[None, :, :]) ** 2).sum(-1).argmin(1)
        new = C.copy()
        empties = 0
        for j in range(C.shape[0]):
            members = X[labels == j]
            if len(members):
                new[j] = members.mean(0)
            else:
                empties += 1
                new[j] = X.mean(0) if empty == "mean" else C[j]
        C = new
        traj.append(C.copy())
        n_empty.append(empties)
    labels = ((X[:, None, :] - C[None, :, :]) ** 2).sum(-1).argmin(1)
    return np.stack(traj), labels, np.array(n_empty, dtype=np.int64)


def chisquare_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """p-value of Pearson's chi-square test of ``counts`` against the distribution ``probs``.

    Cells with probability 0 must have count 0 (checked by the caller) and are dropped.
    """
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    keep = probs > 0
    expected = probs[keep] / probs[keep].sum() * counts[keep].sum()
    return float(stats.chisquare(counts[keep], expected).pvalue)


def row_indices(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """For every centre of C (B, k, d), the index (B, k) of the point of X (B, n, d) it equals
    bitwise; -1 where it equals no point. With distinct points the index is unique."""
    eq = (C.unsqueeze(2) == X.unsqueeze(1)).all(-1)  # (B, k, n)
    found = eq.any(-1)
    idx = eq.to(torch.int64).argmax(-1)
    return torch.where(found, idx, torch.full_like(idx, -1))


def log_without_wall(folder) -> list[dict]:
    """A run folder's log rows without the wall time (the one column two equal runs differ in)."""
    from kmtlib.training import read_log

    return [{k: v for k, v in row.items() if k != "wall_s"} for row in read_log(folder / "log.csv")]


@pytest.fixture
def one_thread():
    """One torch thread for the test (float sums depend on how the work is split, so every run
    of a comparison, and the command-line subprocesses, use the same count)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def kill_training_command(args: list[str], ready, timeout_s: float = 60.0) -> None:
    """Start ``python -m kmtlib.train ARGS`` (one thread) and kill it with SIGKILL once ``ready()``
    is true (a check that may meet files half-written: ValueError and OSError mean "not yet")."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "kmtlib.train", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            try:
                if ready():
                    break
            except (ValueError, OSError):
                pass
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()


def identity_block(score: str, map_name: str, gamma: float, width: int):
    """The layer's cross-attention block CAX with identity query, key and value maps: its
    ``weights(q, k)`` and ``forward(q, k)`` are the attention of the scores and map on q and k."""
    from kmtlib.layer import AttentionBlock, BlockConfig, LayerConfig

    block = BlockConfig(score=score, map=map_name, gamma=gamma)
    config = LayerConfig(d=width, k=1, embedding="data", CAX=block, SAX=block, CAC=block, SAC=block)
    cax = AttentionBlock("CAX", block, config).to(torch.float64)
    with torch.no_grad():
        for linear in (cax.query, cax.key, cax.value):
            linear.weight.copy_(torch.eye(width, dtype=torch.float64))
    return cax
