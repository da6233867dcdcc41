"""The test tasks of the variants chapter: ring mixtures, unit-length points, centre errors.

Chapter 10 compares each circuit variant with its reference algorithm and with Lloyd's on tasks
whose true cluster means are known; these helpers draw such tasks and score the centres found.
"""

from __future__ import annotations

import itertools
import math

import torch

F64 = torch.float64


def unit_rows(v: torch.Tensor) -> torch.Tensor:
    """``v`` with every row (last dimension) scaled to unit Euclidean length."""
    return v / v.norm(dim=-1, keepdim=True)


def centre_error(C: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """Root mean squared distance ``(B,)`` between centres ``C`` and true means ``M`` (both
    ``(B, k, d)``), under the best matching of centres to means (all ``k!`` of them tried)."""
    k = C.shape[1]
    perms = torch.tensor(list(itertools.permutations(range(k))), device=C.device)
    cost = ((C[:, perms] - M.unsqueeze(1)) ** 2).sum(-1).mean(-1)  # (B, k!)
    return cost.amin(-1).sqrt()


def ring_mixture(
    generator: torch.Generator,
    B: int,
    n: int,
    k: int,
    d: int,
    separation: float,
    *,
    rotate: bool = True,
    device: torch.device | str = "cpu",
):
    """``B`` tasks of ``n`` points from ``k`` isotropic unit-variance Gaussian clusters of equal size,
    whose means sit evenly on a ring of radius ``separation`` (a random rotation and offset per task).

    Drawn in float64 on the CPU from ``generator``, then moved to ``device``; returns the points
    ``X`` ``(B, n, d)``, the true means ``(B, k, d)`` and the labels ``(B, n)``."""
    angles = 2 * math.pi * torch.arange(k, dtype=F64) / k
    base = torch.zeros(k, d, dtype=F64)
    base[:, 0], base[:, 1] = torch.cos(angles), torch.sin(angles)
    means = separation * base.expand(B, k, d).clone()
    if rotate:
        Q, _ = torch.linalg.qr(torch.randn(B, d, d, generator=generator, dtype=F64))
        means = means @ Q
    means = means + 3 * torch.randn(B, 1, d, generator=generator, dtype=F64)
    labels = torch.arange(n) % k
    labels = labels[torch.randperm(n, generator=generator)].expand(B, n)
    X = torch.gather(means, 1, labels.unsqueeze(-1).expand(B, n, d))
    X = X + torch.randn(B, n, d, generator=generator, dtype=F64)
    return X.to(device), means.to(device), labels.to(device)
