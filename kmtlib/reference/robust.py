"""Robust k-means with sparse centre weights: the plain algorithm behind the ``"robust"`` variant.

One step, on every task of the batch::

    a(i)  = argmin_j ||x_i - c_j||^2                          (ties: lowest index)
    w_j   = entmax_alpha( -beta ||x_i - c_j||^2 : a(i) = j )  (over the members of cluster j only)
    c_j  <- sum_i w_ji x_i                                    (an empty cluster: the mean of all points)

This is the authors' baseline ``rkm_iters`` (sparsemax, ``beta = 0.01/sqrt(d)``) generalised to
alpha-entmax and to any ``beta``. The sparse maps are computed here from their definitions,
independently of the ``entmax`` package the variant model uses: sparsemax by the sort-and-threshold
algorithm of Martins and Astudillo (2016), alpha-entmax by bisection on the threshold with
``_BISECTION_STEPS`` halvings (far past float64 resolution). Distances come from explicit
differences.
"""

from __future__ import annotations

import torch

from .._checks import check_centers, check_int, check_points, check_robust_options
from ..attention import uniform_where_empty
from ..lloyd import fill_empty
from ..objective import nearest_center
from ..results import ClusteringResult
from ._result import trajectory_result

_BISECTION_STEPS = 200


def masked_sparsemax(z: torch.Tensor, member: torch.Tensor) -> torch.Tensor:
    """Sparsemax of ``z`` (..., r) over the keys where ``member`` is True (others get 0).

    Sort the member scores in decreasing order ``z_(1) >= z_(2) >= ...``; the support size is the
    largest ``m`` with ``1 + m z_(m) > z_(1) + ... + z_(m)``, the threshold
    ``t = (z_(1) + ... + z_(m) - 1) / m``, the weights ``max(z - t, 0)``. Every row needs a member.
    """
    neg = torch.finfo(z.dtype).min
    zs = torch.where(member, z, torch.full_like(z, neg)).sort(dim=-1, descending=True).values
    count = member.sum(dim=-1, keepdim=True)
    rank = torch.arange(1, z.shape[-1] + 1, device=z.device, dtype=z.dtype)
    valid = rank <= count
    csum = torch.where(valid, zs, torch.zeros_like(zs)).cumsum(dim=-1)
    support = valid & (1 + rank * torch.where(valid, zs, torch.zeros_like(zs)) > csum)
    m = support.sum(dim=-1, keepdim=True)  # >= 1: the largest member always qualifies
    t = (csum.gather(-1, m - 1) - 1) / m.to(z.dtype)
    return torch.where(member, (z - t).clamp_min(0), torch.zeros_like(z))


def masked_entmax(z: torch.Tensor, member: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha-entmax of ``z`` over the member keys: ``w = max((alpha-1) z - t, 0) ** (1/(alpha-1))``
    with ``t`` found by bisection so that the weights sum to 1 (then renormalised).

    The threshold lies in ``[(alpha-1) max z - 1, (alpha-1) max z - m^(1-alpha)]`` for ``m``
    members (at the left end the top key alone has weight 1; at the right end even a uniform
    support would sum to at least 1).
    """
    if alpha == 2.0:
        return masked_sparsemax(z, member)
    a1 = alpha - 1.0
    neg = torch.finfo(z.dtype).min
    zz = torch.where(member, z * a1, torch.full_like(z, neg))
    top = zz.amax(dim=-1, keepdim=True)
    count = member.sum(dim=-1, keepdim=True).to(z.dtype)
    lo, hi = top - 1.0, top - count.pow(-a1)

    def weights(t: torch.Tensor) -> torch.Tensor:
        return torch.where(member, (zz - t).clamp_min(0).pow(1.0 / a1), torch.zeros_like(zz))

    for _ in range(_BISECTION_STEPS):
        mid = (lo + hi) / 2
        over = weights(mid).sum(dim=-1, keepdim=True) >= 1  # the root is at or right of mid
        lo, hi = torch.where(over, mid, lo), torch.where(over, hi, mid)
    w = weights(lo)
    return w / w.sum(dim=-1, keepdim=True)


def robust_kmeans(
    X: torch.Tensor,
    C0: torch.Tensor,
    steps: int,
    inv_temperature: float | None = None,
    map: str = "sparsemax",
    alpha: float | None = None,
) -> ClusteringResult:
    """Run ``steps`` steps of sparse-weight robust k-means (module documentation) on every task.

    Args:
        X: points (B, n, d); C0: initial centres (B, k, d).
        steps: number of steps T >= 0.
        inv_temperature: ``beta``; None is the authors' ``0.01 / sqrt(d)``.
        map: ``"sparsemax"``, ``"entmax15"`` or ``"entmax"`` (with ``alpha`` in (1, 2], default 1.5).

    Returns:
        A :class:`~kmtlib.results.ClusteringResult` (trajectory, final labels, objective per step,
        number of empty clusters per step).
    """
    check_points(X)
    check_centers(C0, X)
    steps = check_int("steps", steps, minimum=0)
    B, _n, d = X.shape
    k = C0.shape[1]
    beta, options = check_robust_options(d, inv_temperature, map, alpha)
    a = {"sparsemax": 2.0, "entmax15": 1.5}.get(map) or options["alpha"]
    overall_mean = X.mean(dim=1, keepdim=True)
    ids = torch.arange(k, device=X.device).view(1, k, 1)
    C = C0
    centers, n_empty = [C0], []
    for _ in range(steps):
        labels = nearest_center(X, C)
        member = labels.unsqueeze(1) == ids  # (B, k, n)
        empty = ~member.any(dim=-1, keepdim=True)  # (B, k, 1)
        sq = ((X.unsqueeze(1) - C.unsqueeze(2)) ** 2).sum(-1)  # (B, k, n) from differences
        z = -beta * sq
        # (an empty cluster's row gets every key as a dummy member; its result is replaced below)
        w = masked_entmax(z, member | empty, a)
        C = fill_empty(torch.bmm(w, X), empty.view(B, k), X, C, "mean", overall_mean=overall_mean)
        centers.append(C)
        n_empty.append(empty.view(B, k).sum(dim=1))
    return trajectory_result(X, centers, n_empty)


def robust_support(X: torch.Tensor, C: torch.Tensor, inv_temperature: float | None = None,
                   map: str = "sparsemax", alpha: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The weights (B, k, n) one robust step gives from centres C, and the members (B, k, n).

    For plots and the chapter's counts of dropped points: a member with weight exactly 0 is a
    point of the cluster that does not pull its centre.
    """
    check_points(X)
    check_centers(C, X, name="C")
    beta, options = check_robust_options(X.shape[-1], inv_temperature, map, alpha)
    a = {"sparsemax": 2.0, "entmax15": 1.5}.get(map) or options["alpha"]
    k = C.shape[1]
    member = nearest_center(X, C).unsqueeze(1) == torch.arange(k, device=X.device).view(1, k, 1)
    empty = ~member.any(dim=-1, keepdim=True)
    sq = ((X.unsqueeze(1) - C.unsqueeze(2)) ** 2).sum(-1)
    w = masked_entmax(-beta * sq, member | empty, a)
    return uniform_where_empty(w, empty), member


__all__ = ["masked_entmax", "masked_sparsemax", "robust_kmeans", "robust_support"]
