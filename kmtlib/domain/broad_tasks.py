"""A broader family of synthetic clustering tasks, presented as the estimator presents real data.

The paper's tasks (:func:`kmtlib.sample_tasks`) are equal-weight mixtures of isotropic components
of one scale in all d coordinates. Real data sets are not: their clusters differ in size and in
spread, are elongated, have heavier tails and stray points, and fill fewer coordinates than a
trained layer's D. Each task of :func:`sample_broad_tasks` draws, independently:

* the number of coordinates it fills, ``d_task``, log-uniformly in 1..d (the rest are zeros, as
  :class:`kmtlib.domain.domain_map.DomainMap` pads data of fewer features);
* k locations uniformly in [0, 1]^d_task, and mixture weights ``w_j ∝ exp(b z_j)`` (b uniform in
  [0, 1.2]: from equal sizes to a largest cluster several times the smallest);
* a base scale ``s`` log-uniform in [0.02, 0.25] (the paper's is 0.1: from overlapping to well
  separated clusters), a spread per cluster ``s exp(0.4 z_j)``, and an elongation per cluster
  ``L_j = I + a G_j / sqrt(d_task)`` (G_j standard normal, a uniform in [0, 1.5]);
* heavy tails by a scale per point ``exp(t z_i)`` (t uniform in [0, 0.6]: a log-normal scale
  mixture of normals) and, for half of the tasks, a fraction up to 5 % of stray points uniform in
  [-0.25, 1.25]^d_task;

and is then mapped by :func:`spread_normalise`, the same map as ``DomainMap`` applies to a
user's data, so a layer trained on these tasks sees exactly the kind of input it meets there.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ..tasks import CENTRE, TARGET_TOTAL_VARIANCE, check_task_arguments


class BroadMixture(NamedTuple):
    """What lies behind a batch of broad tasks: ``components`` (B, n), the component of every
    point (-1 for a stray point), and ``filled`` (B,), the number of coordinates each task fills."""

    components: torch.Tensor
    filled: torch.Tensor


def spread_normalise(X: torch.Tensor, filled: torch.Tensor) -> torch.Tensor:
    """Map every task of X (B, n, D) by one shift and one scale: the mean of its first
    ``filled[b]`` coordinates to :data:`CENTRE`, its total variance to :data:`TARGET_TOTAL_VARIANCE`;
    the other coordinates become 0. One scale per task: distances within a task keep their ratios.
    A task of identical points is only shifted."""
    D = X.shape[-1]
    mask = (torch.arange(D, device=X.device) < filled.unsqueeze(-1)).to(X.dtype).unsqueeze(1)  # (B, 1, D)
    mean = X.mean(dim=1, keepdim=True)
    total = ((X - mean) ** 2 * mask).sum(dim=-1).mean(dim=1, keepdim=True).unsqueeze(-1)  # (B, 1, 1)
    scale = torch.where(total > 0, (total / TARGET_TOTAL_VARIANCE).sqrt(), torch.ones_like(total))
    return (CENTRE + (X - mean) / scale) * mask


def _log_uniform(shape: tuple[int, ...], low: float, high: float, g, device, dtype) -> torch.Tensor:
    u = torch.rand(shape, generator=g, device=device, dtype=dtype)
    return torch.exp(math.log(low) + u * (math.log(high) - math.log(low)))


def sample_broad_tasks(
    batch: int,
    n: int,
    d: int,
    k: int,
    generator: torch.Generator | int | None = None,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    return_mixture: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, BroadMixture]:
    """Draw ``batch`` tasks of ``n`` points in ``d`` coordinates from the broad family (module
    docstring), each with ``k`` components, mapped by :func:`spread_normalise`.

    Returns ``X`` (batch, n, d), or ``(X, BroadMixture)`` when ``return_mixture``.
    """
    (batch, n, d, k), device, g = check_task_arguments(batch, n, d, k, dtype, generator, device)

    def uniform(*shape: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        return low + (high - low) * torch.rand(shape, generator=g, device=device, dtype=dtype)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=g, device=device, dtype=dtype)

    # coordinates filled: log-uniform in 1..d
    filled = _log_uniform((batch,), 1.0, d + 1.0, g, device, dtype).floor().long().clamp(1, d)
    mask = (torch.arange(d, device=device) < filled.unsqueeze(-1)).to(dtype)  # (B, d)

    # unequal cluster sizes
    log_weights = uniform(batch, 1, high=1.2) * normal(batch, k)
    components = torch.multinomial(log_weights.softmax(dim=-1), n, replacement=True, generator=g)  # (B, n)

    # locations, spreads and elongations per cluster
    locations = uniform(batch, k, d)
    base = _log_uniform((batch, 1), 0.02, 0.25, g, device, dtype)
    spread = base * torch.exp(0.4 * normal(batch, k))  # (B, k)
    # elongation: stretch by exp(a) along a random direction u_j (a uniform in [0, 1.5] per task)
    directions = normal(batch, k, d) * mask.unsqueeze(1)
    directions = directions / directions.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    stretch = torch.exp(uniform(batch, 1, high=1.5)) - 1.0  # (B, 1)

    # each point: its cluster's location + spread * heavy-tailed scale * (I + stretch u u^T) z
    index = components.unsqueeze(-1)
    tail = uniform(batch, 1, high=0.6) * normal(batch, n)
    z = normal(batch, n, d) * mask.unsqueeze(1)
    u = torch.gather(directions, 1, index.expand(batch, n, d))
    noise = z + (stretch.unsqueeze(-1) * (u * z).sum(dim=-1, keepdim=True)) * u
    scale = torch.gather(spread, 1, components) * torch.exp(tail)
    X = torch.gather(locations, 1, index.expand(batch, n, d)) + scale.unsqueeze(-1) * noise

    # stray points for half of the tasks
    stray_share = uniform(batch, 1, high=0.05) * (uniform(batch, 1) < 0.5)
    stray = uniform(batch, n) < stray_share
    X = torch.where(stray.unsqueeze(-1), uniform(batch, n, d, low=-0.25, high=1.25), X) * mask.unsqueeze(1)
    X = spread_normalise(X, filled)
    if return_mixture:
        return X, BroadMixture(components=torch.where(stray, -1, components), filled=filled)
    return X
