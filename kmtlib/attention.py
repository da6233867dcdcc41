"""Attention scores and attention maps of the k-means transformer.

Everything is batched with rows as tokens: queries ``q`` are (B, m, D), keys ``k`` are (B, r, D);
scores and attention weights are (B, m, r), one row per query, each row of weights a distribution
over the keys.

* Scores: :func:`euclidean_scores` (``-||q_i - k_l||^2``, the paper's Euclidean attention) and
  :func:`dot_scores` (``q_i . k_l``, standard dot-product attention).
* Maps from scores to weights: :func:`softmax_attention` (inverse temperature ``gamma``; computed
  stably; ``gamma = math.inf`` is the limit), :func:`hard_attention` (that limit: averaging hard
  attention), and the normalised linear attention of the authors' centre update
  (:func:`linear_attention_weights`, or :func:`normalized_linear_attention` from queries and keys).
* :data:`ATTENTION_MAPS`: a registry name -> map, so that other attention maps can be added with
  :func:`register_attention_map` and selected by name (chapter 10's sparse, norm-max and Gumbel
  maps: :mod:`kmtlib.variants.attention_maps`).
* :func:`first_argmax` and :func:`standard_gumbel`: the tie rule and the noise draw that the
  k-medoids circuit and its reference share.

The constructive attention of the paper has no ``1/sqrt(D)`` factor: ``gamma`` is the raw inverse
temperature.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ._checks import check_positive_float
from ._numerics import (
    euclidean_scores,
    lowest_true_,
    times_gamma,
)

AttentionMap = Callable[..., torch.Tensor]
"""A map ``fn(scores, gamma, **options) -> weights``: scores (B, m, r) to weights (B, m, r), row by
row. ``gamma`` is the inverse temperature; maps without a temperature ignore it."""


# ----------------------------------------------------------------------------------- scores
def dot_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Dot-product attention scores ``q_i . k_l``, shape (B, m, r)."""
    return torch.bmm(q, k.transpose(1, 2))


# (the scores of a layer's blocks: the one registry, which kmtlib.layer reads and variants add to)
def _euclidean(q: torch.Tensor, k: torch.Tensor, *, exact: bool, **_: Any) -> torch.Tensor:
    # (exact: -||q - k||^2 from the differences, 0 exactly for a copy of the query and below 0
    # for any other key; otherwise the row constant -||q||^2 is left out, as soft-max and hard
    # attention do not depend on it)
    return euclidean_scores(q, k, query_norm=exact, exact=exact)


def _dot(q: torch.Tensor, k: torch.Tensor, **_: Any) -> torch.Tensor:
    return dot_scores(q, k)


def _euclidean_within_cluster(q: torch.Tensor, k: torch.Tensor, *, d: int, clusters: int, **_: Any) -> torch.Tensor:
    """The limit ``lam -> inf`` of Euclidean scores with ``Q = K = diag(I_d, sqrt(lam) I_k)``:
    ``-||q[:d] - k[:d]||^2`` on the keys whose cluster coordinates equal the query's, ``-inf`` on
    all others. For a centre token ``[c_j; e_j]`` over point tokens ``[x_i; y_i]`` with ``y_i`` on
    the simplex, ``y_i = e_j`` exactly when ``e_j . y_i = y_ij = 1``: the members of cluster j.

    The distances are taken from the differences, so that equal points score equally on every
    CPU (a centre that averaged two points is exactly equidistant from both)."""
    distances = -euclidean_scores(q[..., :d], k[..., :d], exact=True)
    same_cluster = torch.bmm(q[..., d : d + clusters], k[..., d : d + clusters].transpose(1, 2)) == 1
    return torch.where(same_cluster, -distances, distances.new_full((), -math.inf))


ScoreFunction = Callable[..., torch.Tensor]
"""``score(q, k, *, d, clusters, exact, gamma) -> (B, m, r)``: projected queries (B, m, D') and
keys (B, r, D') to scores; ``d`` and ``clusters`` say where the data and cluster coordinates
are, ``exact`` asks for difference-based Euclidean scores, ``gamma`` is the block's inverse
temperature (a score may refine itself in the limit)."""

SCORES: dict[str, ScoreFunction] = {
    "euclidean": _euclidean,
    "dot": _dot,
    "euclidean_within_cluster": _euclidean_within_cluster,
}
"""The attention scores a block of the layer can use, by name (:func:`register_score` adds more;
:class:`kmtlib.layer.BlockConfig` names one)."""


def register_score(name: str, fn: ScoreFunction, *, overwrite: bool = False) -> ScoreFunction:
    """Add a score function to :data:`SCORES` (the k-medoids variant registers its medoid cost)."""
    if name in SCORES and not overwrite and SCORES[name] is not fn:
        raise ValueError(f"attention score {name!r} is already registered (pass overwrite=True to replace it)")
    SCORES[name] = fn
    return fn


# ----------------------------------------------------------------------------------- maps
def hard_attention(scores: torch.Tensor) -> torch.Tensor:
    """Averaging hard attention: the ``gamma -> infinity`` limit of :func:`softmax_attention`.

    Each row puts weight ``1/m`` on the ``m`` keys whose score equals the row maximum and 0
    elsewhere (one-hot when the maximiser is unique).

    Ties are detected **exactly** (``score == row max``), with no tolerance. This is the limit of
    soft-max applied to the computed scores, and it agrees with an ``argmax`` (Lloyd's
    assignment) wherever the maximiser is unique. Where two keys are mathematically tied, exact
    comparison sees the tie when the scores are computed exactly -- as in the constructions: the
    centre-update scores between one-hot ids are exactly 0 or -2 (Euclidean) or 0 or 1 (dot),
    equal keys (duplicate points, coinciding centres) are given bitwise equal scores
    (:func:`kmtlib._numerics.tie_equal_keys`; a matrix product alone does not promise that on
    every CPU), and the point self-attention keys are handled in closed form -- and otherwise
    resolves a rounding-level difference towards the larger computed score, as Lloyd's
    ``argmin`` does. A
    tolerance would instead average keys that are genuinely different, break the agreement with
    Lloyd on near-ties and make the result depend on an arbitrary threshold. Exactness claims are
    made on tie-free inputs (see the book's chapter 02 for the tie case).

    A row of ``-inf`` scores (every key masked) has every key at the maximum: uniform weights. A
    row containing NaN gives NaN weights.
    """
    top = scores.amax(dim=-1, keepdim=True)
    weights = (scores == top).to(scores.dtype)
    return weights / weights.sum(dim=-1, keepdim=True)


def softmax_attention(scores: torch.Tensor, gamma: float) -> torch.Tensor:
    """Soft-max of ``gamma * scores`` along the keys (last dimension), computed stably.

    The row maximum is subtracted **before** multiplying by ``gamma``, so ``gamma * (s - max s)``
    is <= 0 and never overflows, whatever the size of ``gamma`` and of the scores (``gamma = 1e8``
    on data of scale 1e3 gives products of order -1e14: fine, they underflow to weight 0), and the
    row sum is at least 1 (the maximum contributes exp(0)). ``gamma = math.inf`` returns the limit,
    :func:`hard_attention`.
    """
    gamma = check_positive_float("gamma", gamma, allow_inf=True)
    if gamma == math.inf:
        return hard_attention(scores)
    # (the shift is a constant for each row: no gradient flows through it)
    shifted = scores - scores.amax(dim=-1, keepdim=True).detach()
    return torch.softmax(times_gamma(shifted, gamma), dim=-1)


def linear_attention_weights(scores: torch.Tensor, gamma: float | None = None) -> torch.Tensor:
    """Normalised linear attention: each row of (non-negative) ``scores`` divided by its sum.

    This is the authors' centre update: with scores ``k_l.q_j = y_l.e_j`` (point ``l``'s
    assignment weight to cluster ``j``) the weights ``y_lj / sum_l' y_l'j`` average the points of
    cluster ``j``. A row that sums to exactly 0 (an empty cluster) gets **uniform** weights: the
    centre moves to the mean of all points, which is the limit of the Euclidean centre update and
    Lloyd's ``empty="mean"`` rule. ``gamma`` is ignored (the map has no temperature).
    """
    total = scores.sum(dim=-1, keepdim=True)
    empty = total == 0
    weights = scores / torch.where(empty, torch.ones_like(total), total)
    # (no data-dependent branch, which would be a device sync on CUDA)
    return uniform_where_empty(weights, empty)


def uniform_where_empty(weights: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
    """``weights`` (B, m, r) with the rows where ``empty`` (B, m, 1) is True replaced by uniform
    weights ``1/r``: the empty-cluster rule of the limit transformer, in attention weights (a
    centre whose attention has no preferred key averages all points, so it moves to their mean,
    as :func:`kmtlib.lloyd.fill_empty` does with ``rule="mean"``)."""
    return torch.where(empty, weights.new_full((), 1.0 / weights.shape[-1]), weights)


def normalized_linear_attention(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Weights (B, m, r) ``(k_l . q_j) / sum_l' (k_l' . q_j)``; a zero row sum gives uniform
    weights (see :func:`linear_attention_weights`)."""
    return linear_attention_weights(dot_scores(q, k))


def _hardmax_map(scores: torch.Tensor, gamma: float | None = None) -> torch.Tensor:
    return hard_attention(scores)


ATTENTION_MAPS: dict[str, AttentionMap] = {
    "softmax": softmax_attention,
    "hardmax": _hardmax_map,
    "linear": linear_attention_weights,
}
"""Attention maps by name; each is ``fn(scores, gamma, **options) -> weights`` (see
:data:`AttentionMap`). ``"softmax"`` with ``gamma = math.inf`` equals ``"hardmax"``."""


def register_attention_map(name: str, fn: AttentionMap, *, overwrite: bool = False) -> AttentionMap:
    """Add an attention map to :data:`ATTENTION_MAPS` under ``name`` (for example ``"sparsemax"``).

    ``fn(scores, gamma, **options)`` must map (B, m, r) scores to (B, m, r) weights row by row
    (rows are processed independently, which lets :meth:`kmtlib.layer.AttentionBlock.forward` split
    the queries into slices).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"an attention map needs a non-empty string name, got {name!r}")
    if not callable(fn):
        raise TypeError(f"attention map {name!r} must be callable, got {type(fn).__name__}")
    if name in ATTENTION_MAPS and not overwrite:
        raise ValueError(f"attention map {name!r} is already registered (pass overwrite=True to replace it)")
    ATTENTION_MAPS[name] = fn
    return fn


def get_attention_map(name: str) -> AttentionMap:
    """The map registered as ``name``; an unknown name raises listing the known ones."""
    try:
        return ATTENTION_MAPS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown attention map {name!r}; expected one of {', '.join(map(repr, ATTENTION_MAPS))}"
        ) from None


def first_argmax(values: torch.Tensor) -> torch.Tensor:
    """Index of the maximum along the last dimension, the **lowest** index on exact ties (made
    explicit rather than left to the backend's argmax)."""
    r = values.shape[-1]
    # (a row with no maximum, NaN, gives index 0, as argmax of a zero row does)
    return lowest_true_(values == values.amax(dim=-1, keepdim=True), dim=-1).remainder_(r)


def standard_gumbel(shape: tuple[int, ...], *, dtype: torch.dtype, device: torch.device | str,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """Standard Gumbel noise ``-log E`` with ``E ~ Exp(1)``, drawn as one contiguous tensor (the
    draw convention every Gumbel routine of kmtlib shares, so equal generators give equal noise)."""
    return torch.empty(shape, dtype=dtype, device=device).exponential_(generator=generator).log_().neg_()
