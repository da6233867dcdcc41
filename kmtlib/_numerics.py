"""Floating-point care shared by the distance computations: ties between equal keys, and the
range of the squares.

Ties. The limit attention and Lloyd's assignment decide by exact comparison of scores, so where
two keys are equal (duplicate points, or two centres an empty-cluster rule sent to the same
place) their scores must be bitwise equal, or the tie is broken by the last bit of a rounding
error. A matrix product does not promise that: BLAS kernels add the terms of a dot product in an
order that can depend on the position of the key in the kernel's tile, and differs from one CPU
to another. :func:`tie_equal_keys` makes equal keys score equally whatever the product did: it
finds the equal keys by exact comparison and copies the scores of the first copy to the others.
Where several entries tie, the lowest index wins (Lloyd's rule): :func:`lowest_true_`, the label
search of Lloyd's assignment, of the hard attention and of the kernels, is the fast form of the
plain formula :func:`lowest_true_plain` (``argmax`` of the mask, whose first-index rule torch
documents); the tests pin one to the other.

Range. The expanded square ``||x||^2 - 2 x.c + ||c||^2`` overflows when the coordinates pass
about ``sqrt(max)`` of the dtype (1.8e19 in float32, 1.3e154 in float64) and loses the dtype's
precision when the squares fall into the subnormal range (coordinates below about
``sqrt(tiny / eps)``: 3e-16 in float32, 1e-146 in float64). Nearest centres, Lloyd's steps and
k-means++ draws do not change when points and centres are multiplied by one power of two, and
that multiplication is exact, so :func:`power_of_two_exponents` finds, per task, the exponent
that brings out-of-range data to magnitude about 1, and :func:`times_power_of_two` applies it
(and takes it back). In-range tasks are not touched (exponent 0). The range itself and the size
of a task are :func:`kmtlib._checks.square_range` and :func:`kmtlib._checks.magnitudes`, beside the
check that refuses data outside it.

Offset. The expanded square also loses every digit of data far from the origin against their
spread (timestamps near 1.7e12 a few seconds apart): its error is ``eps ||x||^2``, not
``eps ||x - c||^2``. :class:`kmtlib.objective.DistanceFrame` therefore shifts such tasks by a
centre of the data before the power of two above is chosen (shift, then scale).

Scores and their size. :func:`euclidean_scores` (the paper's Euclidean attention, by the expansion
or from the differences), :func:`times_gamma` (an inverse temperature above the dtype's range),
:func:`by_query_chunks` and :data:`MAX_SCORE_ELEMENTS` (the one size cap of a score block): shared
by the attention maps of :mod:`kmtlib.attention` and the kernels of :mod:`kmtlib.kernels`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .chunks import chunk_size, in_chunks


# ------------------------------------------------------------------------------------ ties
def lowest_true_plain(mask: torch.Tensor, dim: int) -> torch.Tensor:
    """The lowest index along ``dim`` at which ``mask`` is True; ``mask.shape[dim]`` where it is
    True nowhere (the plain formula)."""
    index = torch.argmax(mask.to(torch.uint8), dim=dim)
    return torch.where(mask.any(dim=dim), index, mask.shape[dim])


def lowest_true_(mask: torch.Tensor, dim: int) -> torch.Tensor:
    """The lowest index along ``dim`` at which the boolean ``mask`` is True (int64, ``dim``
    removed); ``mask.shape[dim]`` where it is True nowhere. ``mask`` is overwritten (pass a
    temporary).

    The label search of Lloyd's assignment and of the limit model: weight ``r - j`` on the True
    entries ``j``, so that the largest weight marks the lowest index. This is ``argmax`` with its
    first-index tie rule made explicit instead of left to the backend; a reduction across
    ``dim`` (for example k rows of length n) vectorises along the other dimensions, and with at
    most 255 entries the weights fit in a byte, written in place into the mask's own memory.
    """
    r = mask.shape[dim]
    shape = [1] * mask.dim()
    shape[dim] = r
    if r <= 255:
        weights = torch.arange(r, 0, -1, dtype=torch.uint8, device=mask.device).view(shape)
        top = mask.view(torch.uint8).mul_(weights).amax(dim=dim).long()
    else:
        top = (mask * torch.arange(r, 0, -1, device=mask.device).view(shape)).amax(dim=dim)
    return top.neg_().add_(r)


PAIRWISE_LIMIT = 1 << 16
"""Up to this many key pairs per batch, equal keys are found by comparing all pairs directly."""


def _bit_sums(keys: torch.Tensor) -> torch.Tensor:
    """(B, r) sums of the bit patterns of each key's coordinates, in int64: equal keys have equal
    sums whatever order the sum is taken in (integer addition is exact; ``+ 0.0`` turns -0.0 into
    +0.0). Different keys may have equal sums too; those are told apart by exact comparison."""
    bits = (keys + 0.0).contiguous().view(torch.int32)  # (float64: two halves per coordinate)
    return bits.sum(-1, dtype=torch.int64)


def first_equal_key(keys: torch.Tensor) -> torch.Tensor | None:
    """For keys (B, r, D), the index (B, r) of the first key equal to each key (its own index when
    no earlier key equals it), or None when all keys of every task are distinct."""
    B, r, _D = keys.shape
    if r < 2:
        return None
    if B * r * r > PAIRWISE_LIMIT:
        # necessary condition first: equal keys have equal bit sums (sorted: neighbours)
        sums = _bit_sums(keys).sort(dim=1).values
        if not bool((sums[:, 1:] == sums[:, :-1]).any()):
            return None
    equal = (keys.unsqueeze(2) == keys.unsqueeze(1)).all(-1)  # (B, r, r), True on the diagonal
    if int(equal.sum()) == B * r:
        return None
    return lowest_true_(equal, dim=2)


def tie_equal_keys(scores: torch.Tensor, keys: torch.Tensor, dim: int) -> torch.Tensor:
    """Scores with every key's scores replaced by those of the first key equal to it.

    ``scores`` is (B, r, m) with the keys along ``dim=1`` or (B, m, r) with them along ``dim=2``;
    ``keys`` (B, r, D). Returns ``scores`` itself when all keys of every task are distinct (the
    usual case: one comparison of the keys, no pass over the scores), else a new tensor. In exact
    arithmetic equal keys have equal scores; this makes it so in floating point on every CPU, so
    that exact-comparison maps see the tie (see the module documentation).
    """
    if keys.device.type != "cpu":
        # (no data-dependent branch on an accelerator, which would wait for the device: every
        # key is compared with every other, and the scores are always gathered)
        B, r, _ = keys.shape
        first = lowest_true_((keys.unsqueeze(2) == keys.unsqueeze(1)).all(-1), dim=2)
    else:
        found = first_equal_key(keys)
        if found is None:
            return scores
        first = found
        B, r = first.shape
    if dim == 1:
        index = first.unsqueeze(2).expand(B, r, scores.shape[2])
    else:
        index = first.unsqueeze(1).expand(B, scores.shape[1], r)
    return scores.gather(dim, index)


def power_of_two_exponents(size: torch.Tensor, low: float, high: float) -> torch.Tensor | None:
    """Per task (B,), the exponent e (int64) such that ``size * 2^-e`` lies in [0.5, 1), for the
    tasks whose ``size`` is above ``high`` or below ``low`` (but not 0); 0 for the others. None
    when no task needs it (the usual case, told by the smallest and largest size alone)."""
    smallest, largest = (float(v) for v in torch.aminmax(size))
    if low <= smallest and largest <= high:
        return None
    out = (size > high) | ((size < low) & (size > 0))
    if not bool(out.any()):
        return None
    exponent = torch.frexp(size).exponent.to(torch.int64)
    return torch.where(out, exponent, torch.zeros_like(exponent))


def _powers_of_two(exponent: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """2^exponent exactly, built from its bits (|exponent| within the normal range of dtype)."""
    if dtype == torch.float64:
        return ((exponent + 1023) << 52).view(torch.float64)
    return ((exponent + 127) << 23).to(torch.int32).view(torch.float32)


def times_power_of_two(t: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
    """``t * 2^exponent`` per task (exponent (B,) int64, t (B, ...)), as a new tensor: one correctly
    rounded result (exact whenever it is a normal number). Where 2^exponent itself is not
    representable the factor is applied in steps: the remainder first, then steps of the largest
    power, so that only the last step can round (into the subnormal range or to inf)."""
    limit = 1022 if t.dtype == torch.float64 else 126  # (2^limit is a normal number)
    shape = (-1,) + (1,) * (t.dim() - 1)
    full = exponent.abs() // limit
    sign = exponent.sign()
    t = t * _powers_of_two(exponent - sign * full * limit, t.dtype).view(shape)
    for i in range(int(full.max())):
        t = t * _powers_of_two(torch.where(full > i, sign * limit, 0), t.dtype).view(shape)
    return t


# ----------------------------------------------------------------------------------- scores
def euclidean_scores(
    q: torch.Tensor, k: torch.Tensor, *, query_norm: bool = True, exact: bool = False
) -> torch.Tensor:
    """Euclidean attention scores ``-||q_i - k_l||^2``, shape (B, m, r).

    Computed through the expansion ``-||q_i||^2 + 2 q_i.k_l - ||k_l||^2`` with one batched matrix
    product (``baddbmm``), the fast route.

    Args:
        q: queries (B, m, D).
        k: keys (B, r, D).
        query_norm: include the ``-||q_i||^2`` term. It is the same for every key of a row, so
            soft-max and hard attention do not depend on it and the attention blocks leave it out
            (``query_norm=False`` gives ``2 q_i.k_l - ||k_l||^2``); the full score (clamped at 0
            from above against rounding) is what plots of the score matrix want.
        exact: compute from the differences ``q_i - k_l`` themselves instead of the expansion:
            no cancellation error (identical tokens score exactly 0, the maximum), at the price
            of a (B, m, r, D) temporary. For small problems and verification.
    """
    if exact:
        diff = q.unsqueeze(2) - k.unsqueeze(1)
        scores = -(diff * diff).sum(-1)
        if not query_norm:
            scores = scores + (q * q).sum(-1, keepdim=True)
        return scores
    base = -(k * k).sum(-1).unsqueeze(1)  # (B, 1, r)
    if query_norm:
        base = base - (q * q).sum(-1, keepdim=True)  # (B, m, r)
    scores = torch.baddbmm(base, q, k.transpose(1, 2), alpha=2.0)
    return scores.clamp_max_(0.0) if query_norm else scores


def times_gamma(shifted: torch.Tensor, gamma: float, in_place: bool = False) -> torch.Tensor:
    """``gamma * shifted`` for scores shifted by their row maximum (<= 0). A ``gamma`` above the
    dtype's largest number (1e39 and more in float32) would become inf there, and the row
    maximum's ``inf * 0`` NaN: such a ``gamma`` is applied as several representable factors
    (0 stays 0, the rest runs to -inf: weight 0, the limit)."""
    largest = torch.finfo(shifted.dtype).max
    while gamma > largest:
        shifted = shifted.mul_(largest) if in_place else shifted * largest
        gamma /= largest
        in_place = True  # (a fresh tensor from here on)
    return shifted.mul_(gamma) if in_place else shifted * gamma


MAX_SCORE_ELEMENTS = 1 << 22
"""Largest score block (tasks x queries x keys) materialised at once, about 32 MB in float64: the
one size cap of kmtlib's attention (the layer's blocks, the full maps of
:func:`kmtlib.analysis.inspect_layer.layer_maps`)."""


def by_query_chunks(
    block: Callable[[torch.Tensor], torch.Tensor],
    q: torch.Tensor,
    elements_per_query: int,
    *,
    max_elements: int = MAX_SCORE_ELEMENTS,
    copy: bool = False,
) -> torch.Tensor:
    """``block(q)`` for queries ``q`` (B, m, D), evaluated on consecutive chunks of queries so that
    no chunk needs more than ``max_elements`` score elements (``elements_per_query`` for each
    query), the outputs concatenated along the queries. Exact: attention maps work row by row,
    so a chunk's rows are the rows of the whole. ``copy``: clone each chunk's output before the
    next chunk runs (for a block that returns scratch memory it reuses)."""
    return in_chunks(block, q, size=chunk_size(max_elements, elements_per_query), dim=1, copy=copy)
