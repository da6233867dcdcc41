"""Spherical k-means (Dhillon and Modha 2001), written as the plain algorithm.

Points and centres live on the unit sphere; a point goes to the centre of largest cosine
similarity ``x.c`` and a centre moves to the mean of its points, renormalised to unit length.
The reference for ``KMeansTransformer.from_variant("spherical", ...)``; faiss'
``Kmeans(..., spherical=True)`` runs the same iteration in float32.
"""

from __future__ import annotations

import torch

from .._checks import check_centers, check_choice, check_int, check_points
from .._numerics import tie_equal_keys
from ..lloyd import fill_empty
from ..results import ClusteringResult

EMPTY_RULES = ("mean", "keep")


def _unit(v: torch.Tensor) -> torch.Tensor:
    norm = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
    return v / torch.where(norm > 0, norm, torch.ones_like(norm))


def spherical_objective(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """Per task (B,): the sum over points of the largest cosine similarity to a centre (to maximise)."""
    return torch.bmm(_unit(X), _unit(C).transpose(1, 2)).amax(-1).sum(-1)


def spherical_kmeans(X: torch.Tensor, C0: torch.Tensor, steps: int, empty: str = "mean") -> ClusteringResult:
    """Run ``steps`` iterations of spherical k-means from ``C0`` (both normalised first).

    Assignment: ``argmax_j x_i . c_j`` (lowest index on exact ties). Update: the mean of the
    cluster's unit vectors, renormalised (a zero mean stays zero). Empty cluster: ``"mean"``
    (the normalised mean of all points, the circuit's rule) or ``"keep"``.

    Returns a ClusteringResult with the unit-norm centre trajectory, the final labels and, as
    ``objective``, the Euclidean k-means objective of the unit data (``2 (n - sum cos)``).
    """
    check_points(X)
    check_centers(C0, X)
    steps = check_int("steps", steps, minimum=0)
    check_choice("empty-cluster rule", empty, EMPTY_RULES)
    U = _unit(X)
    C = _unit(C0)
    k = C.shape[1]
    centers = [C]

    def labels_of(C: torch.Tensor) -> torch.Tensor:
        # first maximum on ties; equal centres get bitwise equal cosines (whatever the product rounded)
        return tie_equal_keys(torch.bmm(U, C.transpose(1, 2)), C, dim=2).argmax(-1)

    n_empty = []
    for _ in range(steps):
        onehot = torch.nn.functional.one_hot(labels_of(C), k).to(X.dtype)  # (B, n, k)
        counts = onehot.sum(1).unsqueeze(-1)
        sums = torch.bmm(onehot.transpose(1, 2), U)
        is_empty = counts.squeeze(-1) == 0
        C = _unit(fill_empty(sums / counts.clamp_min(1), is_empty, U, C, empty))
        n_empty.append(is_empty.sum(-1))
        centers.append(C)
    traj = torch.stack(centers, 1)
    objective = torch.stack([2 * (X.shape[1] - spherical_objective(U, c)) for c in centers], 1)
    return ClusteringResult(
        centers=traj,
        labels=labels_of(C),
        objective=objective,
        n_empty=torch.stack(n_empty, 1) if n_empty else None,
    )
