"""The k-means objective and the squared-distance kernels everything else uses.

Every distance here is taken in a *distance frame* of the task (:class:`DistanceFrame`): the
points and centres shifted by a centre of the data where the data lie far from the origin against
their spread (:func:`data_shift`), then multiplied by a power of two where the squares would leave
the dtype's range (:func:`range_exponents`). Nearest centres do not depend on the frame (a
translation and a scaling change no comparison of distances); the expansion
``||x||^2 - 2 x.c + ||c||^2`` does: about the origin it loses every digit of data near 1.7e12
(timestamps) or 1e9, about the data's centre it keeps them. Means are always taken of the
original points.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._checks import check_centers, check_points, magnitudes, square_range
from ._numerics import (
    lowest_true_,
    power_of_two_exponents,
    tie_equal_keys,
    times_power_of_two,
)
from .kernels.layout import copy_transposed_
from .kernels.scratch import Scratch, needs_autograd

SHIFT_RATIO = 16.0
"""A task's points are shifted by their centre where their largest coordinate is more than this
many times their largest centred coordinate (see :func:`data_shift`)."""


def range_exponents(X: torch.Tensor, C: torch.Tensor | None = None, terms: int = 1) -> torch.Tensor | None:
    """Per task (B,), the exponent e of the power of two 2^e by which points X and centres C are
    divided so that their squared distances (summed over up to ``terms`` of them) neither
    overflow nor lose precision to underflow; None when every task is in range (the usual case:
    nothing to do). Nearest centres, means and D^2 draws are unchanged by this exact rescaling."""
    low, high = square_range(X.dtype, X.shape[-1], terms)
    return power_of_two_exponents(magnitudes(X) if C is None else magnitudes(X, C), low, high)


def data_shift(X: torch.Tensor) -> torch.Tensor | None:
    """Per task, the point (B, 1, d) about which the distances of the points X (B, n, d) are
    taken, or None when no task needs one (the usual case).

    The centre is the midpoint of every coordinate's range, ``min/2 + max/2`` (a centre of the
    data, as scikit-learn's mean is; it cannot overflow, and it makes the largest centred
    coordinate as small as it can be, which is what the precision of the expanded square
    depends on). A task is shifted only where its largest coordinate exceeds
    :data:`SHIFT_RATIO` times its largest centred coordinate; the other tasks get the shift 0,
    which leaves them bitwise as they are (``x - 0`` is ``x``).

    What the shift preserves. By Sterbenz's lemma ``x - s`` is exact whenever x and s are within
    a factor 2 of each other, which is exactly the far-from-origin case the shift is for
    (timestamps near 1.7e12 a few seconds apart, clusters at an offset of 1e9): the centred
    coordinates are the true differences, and the expanded square on them has an error about
    ``eps`` times the squared *spread*, not ``eps`` times the squared offset. Elsewhere (a
    coordinate of another sign or magnitude than the centre) the difference rounds once, at the
    scale of the centred coordinate. Nearest centres are invariant under translation, so the
    shift changes no label in exact arithmetic; means are still taken of the original points.

    Why conditional (measured on the book's kinds of tasks, values in [0, 1]^d, with
    seeded runs: 2 000 :func:`~kmtlib.sample_tasks` tasks of every family in float32
    and float64, 1 000 :func:`~kmtlib.domain.broad_tasks.sample_broad_tasks` tasks): there the largest
    coordinate is at most 2 times the largest centred one (min-max rescaled coordinates give
    exactly 2), so no book task is shifted and every book number stays bitwise. Shifting always
    would change them: from the same starts, 10 Lloyd steps gave other labels in 4 of 200
    float32 Cauchy tasks (near-ties decided by the last bit) and objectives that differ in their
    last bits in most tasks, and would cost a copy of the points on every call. Far from the
    origin (ratio 1e3 and more) the shift is what makes the labels right; at the threshold
    (ratio 16) the expansion about the origin loses at most ``2 log2 16 = 8`` of the dtype's bits.
    """
    lo, hi = torch.aminmax(X.detach(), dim=1, keepdim=True)  # (one pass; the same numbers as amin and amax)
    centre = lo * 0.5 + hi * 0.5  # (no overflow; halving is exact for normal numbers)
    spread = (hi - centre).amax(dim=(1, 2))  # the largest |x - centre| of every task
    size = torch.maximum(hi.abs(), lo.abs()).amax(dim=(1, 2))
    far = size > SHIFT_RATIO * spread
    if not bool(far.any()):
        return None
    return torch.where(far.view(-1, 1, 1), centre, torch.zeros_like(centre))


@dataclass
class DistanceFrame:
    """Where the distances of a task are computed: ``(t - shift) * 2^-exponent`` for points and
    centres t (shift (B, 1, d) from :func:`data_shift`, exponent (B,) from
    :func:`range_exponents` on the shifted data; either None where no task needs it). Shift,
    then scale: the scaling is exact (a power of two), the shift is exact where it matters
    (see :func:`data_shift`); squared distances in the frame are ``2^(-2 exponent)`` times the
    true ones."""

    shift: torch.Tensor | None
    exponent: torch.Tensor | None

    @classmethod
    def of(cls, X: torch.Tensor, C: torch.Tensor | None = None, terms: int = 1) -> DistanceFrame:
        """The frame of points X (B, n, d) with centres C (B, k, d) (the range also covers C)."""
        shift = data_shift(X)
        if shift is None:
            return cls(None, range_exponents(X, C, terms))
        Xs = X - shift
        return cls(shift, range_exponents(Xs, None if C is None else C - shift, terms))

    @property
    def identity(self) -> bool:
        return self.shift is None and self.exponent is None

    def to_frame(self, t: torch.Tensor) -> torch.Tensor:
        """Points or centres (B, m, d) into the frame (``t`` itself where nothing is to do)."""
        if self.shift is not None:
            t = t - self.shift
        if self.exponent is not None:
            t = times_power_of_two(t, -self.exponent)
        return t

    def squares_back(self, v: torch.Tensor) -> torch.Tensor:
        """Squared distances (or their sums) per task (B, ...) from the frame's scale back."""
        return v if self.exponent is None else times_power_of_two(v, 2 * self.exponent)


def squared_distances_in_frame(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """:func:`squared_distances` of points and centres already checked and in their frame (in
    range, no shift needed): the expansion alone, no checks, no rescaling."""
    x2 = (X * X).sum(-1, keepdim=True)
    c2 = (C * C).sum(-1).unsqueeze(1)
    return torch.baddbmm(x2 + c2, X, C.transpose(1, 2), alpha=-2.0).clamp_min_(0.0)


def squared_distances(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distances (B, n, k) between points (B, n, d) and centres (B, k, d).

    Computed through ||x||^2 - 2 x.c + ||c||^2 with one batched matrix product (the fast route
    scikit-learn and faiss take), clamped at zero against rounding; its error is about
    ``eps (||x||^2 + ||c||^2)`` in the task's :class:`DistanceFrame`: about a centre of the
    data where the data lie far from the origin (:func:`data_shift`), so that data near 1e12
    keep their digits. At any scale: tasks whose coordinates would overflow the
    squares (above about 1e19 in float32, 1e154 in float64) or fall into the subnormal range
    are computed on the data divided by a power of two and multiplied back (exact), so a
    distance is ``inf`` only where it exceeds the dtype's largest number itself.
    """
    check_points(X)
    check_centers(C, X, name="C", at_most_n=False)
    return squared_distances_unchecked(X, C)


def squared_distances_unchecked(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """:func:`squared_distances` of points and centres their caller has checked: the same numbers,
    no checks (for a caller that checks its data once at its entry, as the estimator does)."""
    frame = DistanceFrame.of(X, C)
    return frame.squares_back(squared_distances_in_frame(frame.to_frame(X), frame.to_frame(C)))


def nearest_center(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """Index (B, n) of the nearest centre of every point; exact ties go to the lowest index on
    every device.

    The ||x||^2 term is the same for all centres, so it is left out of the comparison. The scores
    ||c||^2 - 2 x.c are laid out (B, k, n), centres before points, so that the minimum over the
    centres is an elementwise reduction across k rows of length n, which vectorises over the points
    (``argmin`` over a short last dimension is several times slower on the CPU). The label is then
    the lowest index whose score equals that minimum, found with one more vectorised pass; this is
    ``argmin`` with its first-index tie rule made explicit instead of left to the backend. Equal
    centres get bitwise equal scores (:func:`~kmtlib._numerics.tie_equal_keys`), so the first
    of them wins on every CPU. The scores are computed in the task's :class:`DistanceFrame`
    (shifted by a centre of the data where it lies far from the origin, rescaled by a power of
    two where the squares would leave the dtype's range; see :func:`squared_distances`).
    """
    check_points(X)
    check_centers(C, X, name="C", at_most_n=False)
    return nearest_center_unchecked(X, C)


def nearest_center_unchecked(X: torch.Tensor, C: torch.Tensor, frame: DistanceFrame | None = None) -> torch.Tensor:
    """:func:`nearest_center` of points and centres their caller has checked: the same labels, no
    checks (for a caller that checks its data once at its entry and then assigns many times, as
    the estimator's polish does). ``frame``: the :class:`DistanceFrame` of X and centres whose
    range covers C, built once by a caller that assigns many times (default: built here)."""
    frame = DistanceFrame.of(X, C) if frame is None else frame
    return nearest_center_in_frame(frame.to_frame(X), frame.to_frame(C))


def nearest_center_in_frame(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """:func:`nearest_center` of points and centres already checked and in their frame (in range,
    no shift needed): no checks, no rescaling."""
    return nearest_center_coordinate_major(X.transpose(1, 2), C)


def coordinate_major(X: torch.Tensor) -> torch.Tensor:
    """The points (B, n, d) laid out coordinate by coordinate, (B, d, n) contiguous: the operand
    :func:`nearest_center_coordinate_major` reads fastest. Worth making once for a loop of many assignments
    (Lloyd's steps): the product then reads contiguous rows instead of a transposed view."""
    B, n, d = X.shape
    XT = torch.empty(B, d, n, dtype=X.dtype, device=X.device)
    if X.device.type != "cpu":
        return XT.copy_(X.transpose(1, 2))
    copy_transposed_(XT.transpose(1, 2), X)
    return XT


def nearest_center_coordinate_major(XT: torch.Tensor, C: torch.Tensor, scratch: Scratch | None = None) -> torch.Tensor:
    """:func:`nearest_center` of the points given transposed, ``XT`` (B, d, n) (any strides; a
    contiguous one from :func:`coordinate_major` is fastest). Same labels, same ties. ``scratch``
    (for loops) holds the (B, k, n) temporaries from one call to the next."""
    B, k, _ = C.shape
    n = XT.shape[2]
    if k == 1:
        return torch.zeros(B, n, dtype=torch.long, device=XT.device)
    bias = (C * C).sum(-1).unsqueeze(2)
    if scratch is None or needs_autograd(XT, C):
        scores = torch.baddbmm(bias, C, XT, alpha=-2.0)  # (B, k, n)
        is_min = torch.empty(B, k, n, dtype=torch.bool, device=XT.device)
    else:
        scores = torch.baddbmm(bias, C, XT, alpha=-2.0, out=scratch("scores", (B, k, n), XT.dtype, XT.device))
        is_min = scratch("is_min", (B, k, n), torch.bool, XT.device)
    scores = tie_equal_keys(scores, C, dim=1)  # (equal centres: equal scores, whatever BLAS did)
    # score <= min is score == min (nothing is below the minimum; NaN fails both), and the
    # ordered comparison is the faster kernel on the CPU
    torch.le(scores, scores.amin(dim=1, keepdim=True), out=is_min)  # at least one True per point
    # A NaN score (only from overflow: inf - inf) matches no row; keep such labels in range.
    return lowest_true_(is_min, dim=1).clamp_max_(k - 1)


def gather_centers(C: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The centre (B, n, d) each point is assigned to."""
    B, n = labels.shape
    return torch.gather(C, 1, labels.unsqueeze(-1).expand(B, n, C.shape[-1]))


def assignment_cost(X: torch.Tensor, C: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum over points of ||x_i - c_{labels_i}||^2, per task (B,); differences taken exactly."""
    return assignment_cost_rows(X, C, center_rows(labels, C.shape[1]))


def center_rows(labels: torch.Tensor, k: int) -> torch.Tensor:
    """Row ``b * k + labels[b, i]`` of the flattened (B * k, d) centres for every point, (B * n,):
    the index through which the centre of each point is gathered and each cluster summed."""
    B = labels.shape[0]
    return (labels + torch.arange(0, B * k, k, device=labels.device).unsqueeze(1)).view(-1)


def assignment_cost_rows(
    X: torch.Tensor, C: torch.Tensor, rows: torch.Tensor, scratch: Scratch | None = None
) -> torch.Tensor:
    """:func:`assignment_cost` with the labels given as :func:`center_rows`."""
    B, n, d = X.shape
    k = C.shape[1]
    flat = C.reshape(B * k, d)
    # the differences c - x, in place in the gathered centres
    if scratch is None or needs_autograd(X, C):
        diff = flat.index_select(0, rows)
    else:
        diff = torch.index_select(flat, 0, rows, out=scratch("gathered", (B * n, d), X.dtype, X.device))
    diff = diff.view(B, n * d).sub_(X.reshape(B, n * d))
    if X.dtype == torch.float64:
        # The squared norm of each task's difference vector as one batched dot product: faster
        # than squaring and summing elementwise in float64, and BLAS's blocked accumulation is
        # accurate to about 1e-15 relative here.
        return torch.bmm(diff.unsqueeze(1), diff.unsqueeze(2)).view(B)
    # float32: squares in place, then torch's cascade sum per task (more accurate than a float32
    # dot product over n * d terms; the same numbers as ((X - c) ** 2).sum((1, 2)))
    return diff.square_().sum(dim=1)


def kmeans_objective_unchecked(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """:func:`kmeans_objective` of points and centres their caller has checked: the same numbers,
    no checks."""
    frame = DistanceFrame.of(X, C, terms=X.shape[1])
    if frame.identity:
        return assignment_cost(X, C, nearest_center_in_frame(X, C))
    Xs, Cs = frame.to_frame(X), frame.to_frame(C)
    return frame.squares_back(assignment_cost(Xs, Cs, nearest_center_in_frame(Xs, Cs)))


def kmeans_objective(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """The k-means objective per task, shape (B,): the sum over points of the squared distance
    to the nearest centre (a sum, not a mean, as in the paper).

    The nearest centre is found with the fast expansion; the distance to it is then computed from
    the difference ``x - c`` itself, so the value carries no cancellation error. Both are taken
    in the task's :class:`DistanceFrame` (about a centre of data far from the origin). At any scale
    (tasks whose squares would leave the dtype's range are rescaled by a power of two and the
    value multiplied back): ``inf`` only where the objective exceeds the dtype's largest number.
    """
    check_points(X)
    check_centers(C, X, name="C")
    return kmeans_objective_unchecked(X, C)
