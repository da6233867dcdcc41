"""Trimmed k-means, written as plain algorithms: three trimming rules.

Every rule alternates Lloyd's assignment (nearest centre, lowest index on exact ties) with a
centre update that ignores some points; they differ in which points:

* ``rule="global"`` -- trimmed k-means of Cuesta-Albertos, Gordaliza and Matran (1997), as in R's
  ``trimcluster::trimkmeans`` and the Python port ``trimkmeans``: over the whole data set, drop
  the ``floor(alpha n)`` points farthest from their nearest centre; every centre is the mean of its
  remaining points.
* ``rule="quantile"`` -- the authors' baseline (``trimmed_iters`` in github.com/rithram/kmeans-trf): per cluster,
  drop the members whose squared distance to the current centre is not strictly below the ``q``-quantile
  (linear interpolation, as NumPy and torch compute it) of the members' squared distances. Where
  the strict rule keeps no member -- a one-point cluster (the quantile of one value is that
  value), or tied smallest distances -- the cluster keeps all its members (this book's
  convention; the authors' code would average an empty set).
* ``rule="topk"`` -- the rule the top-k circuit realises: per cluster, keep the
  ``max(1, ceil(q (m - 1)))`` members closest to the current centre (``m`` members; equal
  distances ranked by point index). For distinct distances this is exactly the quantile rule (the
  quantile's position is ``q (m - 1)``); they part only on ties, which the dynamics do create: a
  centre that averaged two points is equidistant from both.
* ``rule="normmax"`` -- the rule the norm-max circuit realises: per cluster, keep the ``s``
  closest members, ``s`` minimising ``(D_s + lam) / s`` with ``D_s`` the sum of the s smallest
  squared distances (first minimiser).

Empty clusters: ``empty="mean"`` moves the centre to the mean of all points (the circuit's rule,
that of the limit transformer), ``"keep"`` keeps it (trimkmeans, R trimcluster). The reference for
``KMeansTransformer.from_variant("trimmed", ...)``. Sorting is batched; no loop over points,
clusters or tasks.
"""

from __future__ import annotations

import math
import numbers

import torch

from .._checks import check_centers, check_choice, check_int, check_points
from ..lloyd import fill_empty
from ..objective import nearest_center
from ..results import ClusteringResult
from ._result import trajectory_result

RULES: tuple[str, ...] = ("global", "quantile", "topk", "normmax")
EMPTY_RULES: tuple[str, ...] = ("mean", "keep")


def _fraction(name: str, value: object, *, low_open: bool = True, high: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not (0 < value <= high if low_open else 0 <= value < high):
        interval = f"(0, {high:g}]" if low_open else f"[0, {high:g})"
        raise ValueError(f"{name} must be in {interval}, got {value}")
    return value


def _squared_distances_to(X: torch.Tensor, C: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """||x_i - c_{labels_i}||^2 (B, n), from the differences."""
    B, n, d = X.shape
    assigned = torch.gather(C, 1, labels.unsqueeze(-1).expand(B, n, d))
    return ((X - assigned) ** 2).sum(-1)


def trimmed_keep(
    X: torch.Tensor, C: torch.Tensor, rule: str, *, alpha: float = 0.1, q: float = 0.95, lam: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """One trimming decision: the nearest-centre labels (B, n) under C and the mask (B, n) of the
    points that take part in the centre update under ``rule``."""
    labels = nearest_center(X, C)
    dist = _squared_distances_to(X, C, labels)  # (B, n)
    B, n = dist.shape
    k = C.shape[1]
    if rule == "global":
        drop = math.floor(alpha * n)
        order = torch.sort(dist, dim=-1, descending=True, stable=True).indices
        rank = torch.empty_like(order).scatter_(-1, order, torch.arange(n, device=X.device).expand(B, n))
        return labels, rank >= drop
    member = torch.nn.functional.one_hot(labels, k).transpose(1, 2).bool()  # (B, k, n)
    per = torch.where(member, dist.unsqueeze(1), dist.new_full((), math.inf))  # (B, k, n)
    ordered, order = torch.sort(per, dim=-1, stable=True)
    m = member.sum(-1, keepdim=True)  # (B, k, 1)
    if rule == "quantile":
        pos = (m - 1).clamp_min(0).to(X.dtype) * q  # torch.quantile's position, per cluster
        below = pos.floor().long()
        above = pos.ceil().long()
        threshold = torch.lerp(ordered.gather(-1, below), ordered.gather(-1, above), pos - below.to(X.dtype))
        kept = member & (per < threshold)
        kept = kept | (member & ~kept.any(-1, keepdim=True))  # nothing kept: keep the members
    elif rule == "topk":
        count = torch.where(m > 0, torch.ceil((m - 1).to(X.dtype) * q).long().clamp_min(1), torch.zeros_like(m))
        rank = torch.empty_like(order).scatter_(-1, order, torch.arange(n, device=X.device).expand_as(order))
        kept = member & (rank < count)
    else:
        valid = torch.isfinite(ordered)
        sizes = torch.arange(1, n + 1, device=X.device, dtype=X.dtype)
        value = (torch.where(valid, ordered, torch.zeros_like(ordered)).cumsum(-1) + lam) / sizes
        value = torch.where(valid, value, value.new_full((), math.inf))
        s = value.argmin(-1, keepdim=True) + 1  # (B, k, 1)
        rank = torch.empty_like(order).scatter_(-1, order, torch.arange(n, device=X.device).expand_as(order))
        kept = member & (rank < s)
    return labels, kept.any(1)


def trimmed_kmeans(
    X: torch.Tensor,
    C0: torch.Tensor,
    steps: int,
    rule: str = "global",
    *,
    alpha: float = 0.1,
    q: float = 0.95,
    lam: float = 1.0,
    empty: str = "mean",
) -> ClusteringResult:
    """Run ``steps`` iterations of trimmed k-means under ``rule`` (module documentation).

    Args:
        X, C0: points (B, n, d) and initial centres (B, k, d).
        steps: number of iterations (no early stop: a converged run repeats its fixed point).
        rule: ``"global"`` (trim fraction ``alpha`` of all points), ``"quantile"`` (keep members
            strictly below the per-cluster ``q``-quantile), ``"topk"`` (keep the closest
            ``max(1, ceil(q (m - 1)))`` members) or ``"normmax"`` (adaptive, ``lam``).
        empty: ``"mean"`` or ``"keep"`` for a cluster left with no kept point.

    Returns:
        A ClusteringResult: centre trajectory, nearest-centre labels under the final centres,
        the (untrimmed) k-means objective per step, and as ``assignments`` the (B, n, k) one-hot
        assignment of the last step restricted to the kept points (a trimmed point has a zero row).
    """
    check_points(X)
    check_centers(C0, X)
    steps = check_int("steps", steps, minimum=0)
    check_choice("trimming rule", rule, RULES)
    check_choice("empty-cluster rule", empty, EMPTY_RULES)
    if rule == "global":
        alpha = _fraction("alpha (the share of points trimmed)", alpha, low_open=False)
        if X.shape[1] - math.floor(alpha * X.shape[1]) < C0.shape[1]:
            raise ValueError(f"trimming alpha={alpha} of n={X.shape[1]} points leaves fewer than k={C0.shape[1]}")
    elif rule in ("quantile", "topk"):
        q = _fraction("q (the per-cluster quantile)", q)
    elif isinstance(lam, bool) or not isinstance(lam, numbers.Real) or not lam > 0 or lam == math.inf:
        raise ValueError(f"lam (the norm-max trimming constant tau / gamma) must be positive and finite, got {lam!r}")
    k = C0.shape[1]
    C, centers, weights = C0, [C0], None
    overall = X.mean(1, keepdim=True)
    for _ in range(steps):
        labels, kept = trimmed_keep(X, C, rule, alpha=alpha, q=q, lam=lam)
        weights = torch.nn.functional.one_hot(labels, k).to(X.dtype) * kept.unsqueeze(-1).to(X.dtype)
        counts = weights.sum(1).unsqueeze(-1)
        sums = torch.bmm(weights.transpose(1, 2), X)
        C = fill_empty(sums / counts.clamp_min(1), counts.squeeze(-1) == 0, X, C, empty, overall_mean=overall)
        centers.append(C)
    return trajectory_result(X, centers, assignments=weights)


def trimmed_objective(X: torch.Tensor, C: torch.Tensor, alpha: float) -> torch.Tensor:
    """The trimmed k-means objective per task (B,): the sum of the ``n - floor(alpha n)``
    smallest squared distances to the nearest centre (the criterion global trimming minimises)."""
    check_points(X)
    check_centers(C, X, name="C")
    alpha = _fraction("alpha", alpha, low_open=False)
    dist = _squared_distances_to(X, C, nearest_center(X, C))
    keep = X.shape[1] - math.floor(alpha * X.shape[1])
    return torch.sort(dist, dim=-1).values[:, :keep].sum(-1)
