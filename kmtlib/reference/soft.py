"""Soft k-means (Dunn 1973; MacKay 2003, ch. 20), written as the plain algorithm.

With stiffness ``gamma`` every point spreads a unit of responsibility over the centres,
``r_ij = exp(-gamma ||x_i - c_j||^2) / sum_j' exp(-gamma ||x_i - c_j'||^2)``, and every centre
moves to the responsibility-weighted mean ``c_j = sum_i r_ij x_i / sum_i r_ij``. ``gamma -> inf``
is Lloyd's algorithm. This is the reference for ``KMeansTransformer.from_variant("soft", ...)``:
distances from the differences themselves, responsibilities with :func:`torch.softmax` (which
subtracts the row maximum, so nothing overflows at any ``gamma``).
"""

from __future__ import annotations

import math

import torch

from .._checks import check_centers, check_int, check_points, check_positive_float
from ..lloyd import fill_empty
from ..objective import nearest_center
from ..results import ClusteringResult
from ._result import trajectory_result


def soft_responsibilities(X: torch.Tensor, C: torch.Tensor, gamma: float) -> torch.Tensor:
    """Responsibilities (B, n, k) of the centres C for the points X at stiffness ``gamma``;
    ``gamma = math.inf`` gives the nearest centre (one-hot, lowest index on exact ties)."""
    if gamma == math.inf:
        return torch.nn.functional.one_hot(nearest_center(X, C), C.shape[1]).to(X.dtype)
    diff = X.unsqueeze(2) - C.unsqueeze(1)  # (B, n, k, d)
    return torch.softmax(-gamma * (diff * diff).sum(-1), dim=-1)


def soft_kmeans(X: torch.Tensor, C0: torch.Tensor, steps: int, gamma: float = 1.0) -> ClusteringResult:
    """Run ``steps`` iterations of soft k-means with stiffness ``gamma`` from ``C0``.

    A centre whose responsibilities all underflow to 0 moves to the mean of all points (the
    limit transformer's empty-cluster rule, which the circuit shares). Returns a ClusteringResult whose
    ``assignments`` are the responsibilities of the last step and whose objective is the (hard)
    k-means objective of each centre set.
    """
    check_points(X)
    check_centers(C0, X)
    steps = check_int("steps", steps, minimum=0)
    gamma = check_positive_float("gamma", gamma, allow_inf=True)
    C, centers, r = C0, [C0], None
    for _ in range(steps):
        r = soft_responsibilities(X, C, gamma)  # (B, n, k)
        mass = r.sum(dim=1).unsqueeze(-1)  # (B, k, 1)
        sums = torch.einsum("bnk,bnd->bkd", r, X)
        has_mass = mass > 0
        C = fill_empty(sums / torch.where(has_mass, mass, torch.ones_like(mass)), ~has_mass.squeeze(-1), X, C, "mean")
        centers.append(C)
    return trajectory_result(X, centers, assignments=r)
