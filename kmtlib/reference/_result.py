"""Assemble a :class:`~kmtlib.results.ClusteringResult` from a reference algorithm's trajectory."""

from __future__ import annotations

import torch

from ..objective import kmeans_objective_unchecked, nearest_center
from ..results import ClusteringResult


def trajectory_result(
    X: torch.Tensor,
    centers: list[torch.Tensor],
    n_empty: list[torch.Tensor] | None = None,
    assignments: torch.Tensor | None = None,
) -> ClusteringResult:
    """Centres after every step (entry 0 = the initial ones), the k-means objective of each (a
    measurement, so no gradient), final nearest-centre labels, the empty-cluster counts (None: an
    algorithm that does not count them) and the assignment weights of the last step, if any."""
    B = X.shape[0]
    with torch.no_grad():
        objective = torch.stack([kmeans_objective_unchecked(X, c) for c in centers], dim=1)
    counts = None
    if n_empty is not None:
        counts = torch.stack(n_empty, dim=1) if n_empty else torch.zeros(B, 0, dtype=torch.long, device=X.device)
    return ClusteringResult(
        centers=torch.stack(centers, dim=1),
        labels=nearest_center(X, centers[-1]),
        objective=objective,
        n_empty=counts,
        assignments=assignments,
    )
