"""Lloyd's algorithm, batched over tasks, with explicit empty-cluster rules."""

from __future__ import annotations

import torch

from ._checks import check_centers, check_choice, check_generator, check_int, check_points
from ._numerics import times_power_of_two
from .kernels.scratch import Scratch
from .objective import (
    DistanceFrame,
    assignment_cost_rows,
    center_rows,
    coordinate_major,
    nearest_center_coordinate_major,
    nearest_center_unchecked,
    range_exponents,
)
from .results import ClusteringResult

EMPTY_RULES: tuple[str, ...] = ("mean", "keep", "random")
"""What happens to the centre of a cluster that receives no point:

* ``"mean"``: it moves to the mean of all points of the task. This is what the limit k-means
  transformer does (its centre attention has no preferred key and becomes uniform), so exact
  equivalence with the transformer holds with no exception under this rule.
* ``"keep"``: it stays where it was (trimkmeans and R trimcluster do this).
* ``"random"``: it jumps to a uniformly random point of the task (the authors' baselines).
"""


def cluster_means(
    X: torch.Tensor, labels: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sums divided by counts: (means (B, k, d) with NaN rows for empty clusters, counts (B, k)).

    On the CPU the sums are accumulated point by point with ``index_add_`` into the flattened
    (B*k, d) table (deterministic: one pass in point order). On other devices, where
    ``index_add_`` uses atomic additions and its rounding depends on the run, it is one batched
    product with the one-hot assignment matrix (multiplying by 0 and 1 is exact). In float64 either
    way matches a per-cluster loop up to summation order.
    """
    return _cluster_means(X, labels, center_rows(labels, k) if X.device.type == "cpu" else None, k)


def _cluster_means(
    X: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor | None, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`cluster_means`, given also the labels as :func:`~kmtlib.objective.center_rows` (CPU)."""
    B, n, d = X.shape
    if X.device.type == "cpu":
        if rows is None:
            rows = center_rows(labels, k)
        sums = torch.zeros(B * k, d, dtype=X.dtype, device=X.device)
        sums.index_add_(0, rows, X.reshape(B * n, d))
        counts = torch.bincount(rows, minlength=B * k).to(X.dtype)
        return (sums / counts.unsqueeze(-1)).view(B, k, d), counts.view(B, k)
    onehot = torch.nn.functional.one_hot(labels, k).to(X.dtype)  # (B, n, k)
    sums = torch.bmm(onehot.transpose(1, 2), X)  # (B, k, d)
    counts = onehot.sum(dim=1)  # (B, k)
    return sums / counts.unsqueeze(-1), counts


def fill_empty(
    means: torch.Tensor,
    empty: torch.Tensor,
    X: torch.Tensor,
    previous: torch.Tensor | None,
    rule: str,
    generator: torch.Generator | None = None,
    overall_mean: torch.Tensor | None = None,
) -> torch.Tensor:
    """The new centres (B, k, d): ``means`` where a cluster has points, and for the empty ones
    (``empty`` (B, k), True) the replacement of ``rule`` (see :data:`EMPTY_RULES`).

    The one place of the empty-cluster rule: Lloyd's algorithm and every reference algorithm
    (soft, spherical, trimmed, robust k-means) replace their empty clusters here. ``previous``
    (B, k, d) are the centres of the step before (for ``"keep"``); ``X`` (B, n, d) the points the
    ``"mean"`` and ``"random"`` rules draw on; ``overall_mean`` (B, 1, d) is
    ``X.mean(dim=1, keepdim=True)`` if the caller already has it. (The circuits apply the same
    rule as attention weights: an empty cluster's centre attention is uniform,
    :func:`kmtlib.attention.uniform_where_empty`.)
    """
    empty = empty.unsqueeze(-1)  # (B, k, 1)
    if rule == "mean":
        if overall_mean is None:
            overall_mean = X.mean(dim=1, keepdim=True)
        replacement = overall_mean.expand_as(means)
    elif rule == "keep":
        if previous is None:
            raise ValueError('fill_empty: the rule "keep" needs the previous centres')
        replacement = previous
    else:
        B, n, d = X.shape
        k = means.shape[1]
        # Draw for every cluster so the random stream does not depend on which clusters are empty.
        idx = torch.randint(0, n, (B, k), generator=generator, device=X.device)
        replacement = torch.gather(X, 1, idx.unsqueeze(-1).expand(B, k, d))
    return torch.where(empty, replacement, means)


def lloyd_step(
    X: torch.Tensor,
    C: torch.Tensor,
    empty: str = "mean",
    generator: torch.Generator | int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of Lloyd's algorithm from centres ``C`` (B, k, d): (new centres (B, k, d), the
    assignment to the old centres (B, n), cluster sizes (B, k) as floats).

    Every point goes to its nearest centre (:func:`~kmtlib.objective.nearest_center`, ties: lowest
    index), every centre to the mean of its points (:func:`cluster_means`), an empty cluster's by
    the rule ``empty`` (:data:`EMPTY_RULES`). :func:`lloyd` makes this step ``steps`` times (with
    the assignment laid out for a loop); the estimator's read-out ``readout="means"`` and the
    layer inspection make it once, with ``empty="keep"``.
    """
    check_choice("empty-cluster rule", empty, EMPTY_RULES)
    g = check_generator(generator, X.device)
    check_points(X)
    check_centers(C, X, name="C", at_most_n=False)
    return lloyd_step_unchecked(X, C, empty, g)


def lloyd_step_unchecked(
    X: torch.Tensor,
    C: torch.Tensor,
    empty: str = "mean",
    generator: torch.Generator | None = None,
    frame: DistanceFrame | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`lloyd_step` on inputs its caller has checked (``generator`` a Generator or None): the
    same step, no checks (for a caller that checks its data once and then steps many times, as
    the estimator's polish does; ``frame``, the points' :class:`~kmtlib.objective.DistanceFrame`
    built once for all its steps, as scikit-learn computes the points' squared norms once)."""
    labels = nearest_center_unchecked(X, C, frame)
    new, counts = _move_centers(X, labels, None, C, empty, generator)
    return new, labels, counts


def _move_centers(
    X: torch.Tensor,
    labels: torch.Tensor,
    rows: torch.Tensor | None,
    C: torch.Tensor,
    empty: str,
    g: torch.Generator | None,
    overall_mean: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The update half of a Lloyd step: every centre of ``C`` to the mean of the points ``labels``
    gives it, an empty cluster's by the rule ``empty``; (new centres (B, k, d), counts (B, k))."""
    means, counts = _cluster_means(X, labels, rows, C.shape[1])
    return fill_empty(means, counts == 0, X, C, empty, g, overall_mean), counts


def lloyd(
    X: torch.Tensor,
    C0: torch.Tensor,
    steps: int,
    empty: str = "mean",
    generator: torch.Generator | int | None = None,
) -> ClusteringResult:
    """Run ``steps`` iterations of Lloyd's algorithm on every task of the batch.

    One iteration assigns every point to its nearest centre (ties: lowest index) and moves every
    centre to the mean of its points; an empty cluster is handled by ``empty`` (see
    :data:`EMPTY_RULES`; the default ``"mean"`` is the rule of the limit transformer). There is
    no early stop: a converged task simply repeats its fixed point.

    At any scale: a task whose squared distances would overflow or underflow the dtype (points
    or centres above about 1e19 in float32, 1e154 in float64, or tiny ones) runs on its data
    divided by a power of two, which changes no assignment and no mean (the division is exact),
    and its centres and objective are multiplied back; an objective beyond the dtype's largest
    number is ``inf``. At any offset: the assignments and the objective are computed about a
    centre of the data where the data lie far from the origin against their spread
    (:class:`~kmtlib.objective.DistanceFrame`: millisecond timestamps or an offset of 1e9 get the
    labels they get near the origin), while every centre is a mean of the original points.

    Args:
        X: points (B, n, d), float32 or float64.
        C0: initial centres (B, k, d), same device and dtype.
        steps: number of iterations T >= 0.
        empty: empty-cluster rule, one of :data:`EMPTY_RULES`.
        generator: randomness for ``empty="random"`` (a Generator on X's device or a seed).

    Returns:
        A :class:`ClusteringResult` with the trajectory (B, T+1, k, d), the final labels (B, n),
        the objective (B, T+1) and the number of empty clusters per step (B, T).
    """
    check_points(X)
    check_centers(C0, X)
    steps = check_int("steps", steps, minimum=0)
    check_choice("empty-cluster rule", empty, EMPTY_RULES)
    g = check_generator(generator, X.device)
    # Two frames: this power of two keeps the sums and means of the original points in range
    # (exact: a mean of the scaled points is the scaled mean); the distances inside _lloyd are
    # then taken in the DistanceFrame of the (scaled) points, shifted about their centre where
    # they lie far from the origin and rescaled once more where the centred squares need it.
    e = range_exponents(X, C0, terms=X.shape[1])
    if e is not None:
        result = _lloyd(times_power_of_two(X, -e), times_power_of_two(C0, -e), steps, empty, g)
        result.centers = times_power_of_two(result.centers, e)
        result.centers[:, 0] = C0  # (exactly, also where a tiny coordinate did not survive the division)
        result.objective = times_power_of_two(result.objective, 2 * e)
        return result
    return _lloyd(X, C0, steps, empty, g)


def _lloyd(
    X: torch.Tensor, C0: torch.Tensor, steps: int, empty: str, g: torch.Generator | None
) -> ClusteringResult:
    """:func:`lloyd` on checked inputs whose sums are in range: the means are taken of X, the
    assignments and the objective in the distance frame of X (the identity on the book's tasks)."""
    k = C0.shape[1]
    frame = DistanceFrame.of(X, C0, terms=X.shape[1])
    if frame.identity:
        Y, to_frame = X, None
    else:
        Y, to_frame = frame.to_frame(X), frame.to_frame
    centers = [C0]
    objective = []
    n_empty = []
    C = C0
    # the "mean" rule's replacement is the same at every step: compute it once
    overall_mean = X.mean(dim=1, keepdim=True) if empty == "mean" else None
    # every assignment reads the points transposed: lay them out that way once; the large
    # temporaries of every step live in the same scratch memory
    YT = coordinate_major(Y)
    scratch = Scratch()
    D = C if to_frame is None else to_frame(C)  # the centres in the frame
    labels = nearest_center_coordinate_major(YT, D, scratch)
    for _ in range(steps):
        rows = center_rows(labels, k)
        objective.append(assignment_cost_rows(Y, D, rows, scratch))
        C, counts = _move_centers(X, labels, rows, C, empty, g, overall_mean)
        n_empty.append((counts == 0).sum(dim=1))
        centers.append(C)
        D = C if to_frame is None else to_frame(C)
        labels = nearest_center_coordinate_major(YT, D, scratch)
    objective.append(assignment_cost_rows(Y, D, center_rows(labels, k), scratch))
    B = X.shape[0]
    return ClusteringResult(
        centers=torch.stack(centers, dim=1),
        labels=labels,
        objective=frame.squares_back(torch.stack(objective, dim=1)),
        n_empty=torch.stack(n_empty, dim=1) if n_empty else torch.zeros(B, 0, dtype=torch.long, device=X.device),
    )
