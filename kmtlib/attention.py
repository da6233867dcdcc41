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
* :data:`ATTENTION_MAPS`: a registry name -> map, so that other attention maps (sparsemax,
  norm-max, Gumbel, ...) can be added with :func:`register_attention_map` and selected by name.

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


# ----------------------------------------------------------------------------------- sparse maps
# Two maps that put uniform weight on a subset of the keys: the averaging counterparts of
# hardmax for "average the best few keys". The circuit variants of chapter 10 use them in the
# centre update (kmtlib.variants.trimmed). Keys masked with a score of -inf are never selected; a
# row with no finite score (every key masked: an empty cluster) gets uniform weights, like
# :func:`hard_attention` and :func:`linear_attention_weights`.


def _uniform_on_top(scores: torch.Tensor, order: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Weights 1/count on the ``count`` (B, m, 1) first keys of ``order`` (a descending argsort of
    the scores), 0 elsewhere; rows with count 0 are uniform over all keys."""
    r = scores.shape[-1]
    rank = torch.arange(r, device=scores.device).expand_as(scores)
    none = count == 0
    chosen = (rank < count).to(scores.dtype)
    weights = torch.zeros_like(scores).scatter_(-1, order, chosen)
    weights = weights / torch.where(none, torch.ones_like(count), count).to(scores.dtype)
    return uniform_where_empty(weights, none)


def normmax_attention(scores: torch.Tensor, gamma: float = 1.0, tau: float = 1.0) -> torch.Tensor:
    """Norm-max attention with the infinity norm: ``argmax_{p in simplex} <p, gamma s> - tau ||p||_inf``.

    The norm-regularised maps of Santos et al. (2024, "Sparse and Structured Hopfield Networks")
    replace soft-max's entropy by a norm; with the infinity norm the maximiser is **uniform on the
    top s keys** (this book's derivation, chapter 10: on each piece ``1/(m+1) <= ||p||_inf <= 1/m``
    the objective is linear in ``||p||_inf``, so the optimum sits at a uniform top-m or top-(m+1)
    distribution), with ``s`` maximising ``(gamma * S_s - tau) / s``, where ``S_s`` is the sum of
    the s largest scores. So the map averages the best keys and drops the others, choosing how many
    from the gaps: a key joins while its score stays above the running value
    ``(gamma S_s - tau) / s``. ``tau -> 0`` gives hardmax (s = 1), a large ``tau`` gives the uniform
    average. Ties in the value go to the smallest s; tied scores are ranked by ``torch.sort``
    (stable, lower index first). ``gamma = math.inf`` is the hardmax limit.

    Args:
        scores: (B, m, r); ``-inf`` masks a key.
        gamma: inverse temperature multiplying the scores (> 0, or ``math.inf``).
        tau: weight of the norm (> 0).
    """
    gamma = check_positive_float("gamma", gamma, allow_inf=True)
    tau = check_positive_float("tau", tau)
    if gamma == math.inf:
        return hard_attention(scores)
    finite = torch.isfinite(scores)
    top = torch.where(finite, scores, scores.new_full((), -math.inf)).amax(dim=-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    # shift by the row maximum (the value shifts by a constant, the argmax over s does not)
    shifted = torch.where(finite, (scores - top) * gamma, scores.new_full((), -math.inf))
    ordered, order = torch.sort(shifted, dim=-1, descending=True, stable=True)
    valid = torch.isfinite(ordered)
    sizes = torch.arange(1, scores.shape[-1] + 1, device=scores.device, dtype=scores.dtype)
    value = (torch.where(valid, ordered, torch.zeros_like(ordered)).cumsum(-1) - tau) / sizes
    value = torch.where(valid, value, value.new_full((), -math.inf))
    count = (value.argmax(dim=-1, keepdim=True) + 1) * valid.any(dim=-1, keepdim=True)
    return _uniform_on_top(scores, order, count)


def topk_attention(
    scores: torch.Tensor, gamma: float | None = None, count: int | None = None, fraction: float | None = None
) -> torch.Tensor:
    """Top-k attention: uniform weights on the ``count`` highest-scoring keys of each row.

    Give either a fixed ``count`` or a ``fraction`` q in (0, 1]; with a fraction, a row with m finite
    (unmasked) scores keeps ``max(1, ceil(q (m - 1)))`` keys. For distinct scores these are the
    keys whose negated score lies strictly below the q-quantile of the row's negated finite
    scores (linear interpolation, as NumPy and torch compute it: position ``q (m - 1)``): the
    per-cluster trimming rule of the authors' trimmed k-means baseline (chapter 10); the
    ``max(1, .)`` keeps a single-key row. Equal scores are ranked by key index (stable sort).
    ``gamma`` is ignored (no temperature). A fixed ``count`` larger than the number of finite scores
    keeps them all.
    """
    if (count is None) == (fraction is None):
        raise ValueError("topk attention needs exactly one of count (a number of keys) or fraction (a share of them)")
    finite = torch.isfinite(scores)
    m = finite.sum(dim=-1, keepdim=True)
    if count is not None:
        from ._checks import check_int

        kept = m.clamp_max(check_int("count", count, minimum=1))
    else:
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise ValueError(f"topk fraction must be a number in (0, 1], got {fraction!r}")
        # the quantile position, computed as torch.quantile does (in the scores' dtype)
        position = (m - 1).to(scores.dtype) * fraction
        kept = torch.where(m > 0, torch.ceil(position).long().clamp_min(1), torch.zeros_like(m))
    masked = torch.where(finite, scores, scores.new_full((), -math.inf))
    order = torch.sort(masked, dim=-1, descending=True, stable=True).indices
    return _uniform_on_top(scores, order, kept)


register_attention_map("normmax", normmax_attention)
register_attention_map("topk", topk_attention)


# ----------------------------------------------------------------------------------- sparse and Gumbel maps
# The robust and k-medoids variants of chapter 10 (kmtlib.variants.robust, kmtlib.variants.kmedoids).
# Masking as for the maps above: a key scored -inf gets weight 0; a row with no finite score (an
# empty cluster) is uniform over all keys (for the Gumbel map: a uniformly random key).


def _entmax_weights(scores: torch.Tensor, gamma: float, alpha: float, n_iter: int = 50) -> torch.Tensor:
    """alpha-entmax of ``gamma * scores`` along the last dimension, with -inf masking (see below)."""
    import entmax  # optional dependency (extra "variants"): imported on first use

    gamma = check_positive_float("gamma", gamma)
    finite = torch.isfinite(scores)
    none = ~finite.any(dim=-1, keepdim=True)
    top = torch.where(finite, scores, scores.new_full((), -math.inf)).amax(dim=-1, keepdim=True)
    # shift by the row maximum before scaling (no overflow at any gamma; entmax is shift-invariant)
    z = (scores - torch.where(none, torch.zeros_like(top), top)) * gamma
    # entmax gives z_l exactly 0 once (alpha - 1)(max z - z_l) >= 1, so a masked key placed
    # 1/(alpha - 1) + 1 below the maximum (0) is out of the support: no -inf reaches the package
    z = torch.where(finite, z, z.new_full((), -(1.0 / (alpha - 1.0) + 1.0)))
    z = torch.where(none, torch.zeros_like(z), z)
    if alpha == 2.0:
        return entmax.sparsemax(z, dim=-1)
    if alpha == 1.5:
        return entmax.entmax15(z, dim=-1)
    return entmax.entmax_bisect(z, alpha=alpha, dim=-1, n_iter=n_iter)


def sparsemax_attention(scores: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Sparsemax of ``gamma * scores`` (Martins and Astudillo, 2016): the Euclidean projection of
    the scaled scores onto the probability simplex, ``w_l = max(gamma s_l - t, 0)`` with the
    threshold ``t`` making the row sum 1. Unlike soft-max it gives keys **exactly zero** weight
    once their score is ``1/gamma`` or more below the threshold; small ``gamma`` approaches the
    uniform average, large ``gamma`` hardmax. Computed by the ``entmax`` package."""
    return _entmax_weights(scores, gamma, 2.0)


def entmax_attention(
    scores: torch.Tensor, gamma: float = 1.0, alpha: float = 1.5, n_iter: int = 50
) -> torch.Tensor:
    """alpha-entmax of ``gamma * scores`` (Peters, Niculae and Martins, 2019):
    ``w_l = max((alpha - 1) gamma s_l - t, 0) ** (1 / (alpha - 1))`` with the threshold ``t``
    making the row sum 1. ``alpha`` in (1, 2]: 2 is sparsemax, 1.5 is entmax-1.5 (both exact,
    sort-based); other values are computed by bisection on ``t`` (``n_iter`` halvings; float64
    reaches rounding level by 50). ``alpha -> 1`` approaches soft-max, which is never sparse; use
    ``"softmax"`` for alpha = 1 (the bisection is wrong there, entmax issue 23)."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 1.0 < float(alpha) <= 2.0:
        raise ValueError(f"entmax alpha must be a number in (1, 2] (1 would be soft-max), got {alpha!r}")
    return _entmax_weights(scores, gamma, float(alpha), n_iter)


def entmax15_attention(scores: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """:func:`entmax_attention` with ``alpha = 1.5`` (exact, sort-based)."""
    return _entmax_weights(scores, gamma, 1.5)


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


def gumbel_max_attention(
    scores: torch.Tensor,
    gamma: float = 1.0,
    generator: torch.Generator | None = None,
    noise: torch.Tensor | None = None,
    tiebreak: torch.Tensor | None = None,
) -> torch.Tensor:
    """Hard Gumbel attention: one-hot weights on ``argmax_l (gamma s_l + g_l)``, ``g_l`` i.i.d.
    standard Gumbel (Gumbel-max trick; the forward pass of hard Gumbel-softmax, Jang et al. 2017,
    Maddison et al. 2017). The chosen key is a **sample** from ``softmax(gamma s)``: the map
    returns exactly one key per row. ``gamma`` is ``1/tau``; ``gamma = math.inf`` (tau = 0) is the
    deterministic argmax (no noise drawn). ``noise`` (same shape as the scores) replaces the draw
    from ``generator`` (see :func:`standard_gumbel`). Exact ties (only at ``tau = 0`` in
    practice) go to the key with the larger ``tiebreak`` score (same shape; optional), then to
    the lowest index."""
    gamma = check_positive_float("gamma", gamma, allow_inf=True)
    finite = torch.isfinite(scores)
    none = ~finite.any(dim=-1, keepdim=True)
    top = torch.where(finite, scores, scores.new_full((), -math.inf)).amax(dim=-1, keepdim=True)
    z = scores - torch.where(none, torch.zeros_like(top), top)
    z = torch.where(none, torch.zeros_like(z), z)  # no finite score: every key equally likely
    if gamma != math.inf:
        if noise is None:
            noise = standard_gumbel(tuple(scores.shape), dtype=scores.dtype, device=scores.device, generator=generator)
        elif noise.shape != scores.shape:
            raise ValueError(f"Gumbel noise has shape {tuple(noise.shape)} but the scores have {tuple(scores.shape)}")
        z = z * gamma + noise
    if tiebreak is not None:
        if tiebreak.shape != scores.shape:
            raise ValueError(
                f"tiebreak scores have shape {tuple(tiebreak.shape)} but the scores have {tuple(scores.shape)}"
            )
        best = z == z.amax(dim=-1, keepdim=True)
        z = tiebreak.masked_fill(~best, -math.inf)
    index = first_argmax(z)
    return torch.nn.functional.one_hot(index, scores.shape[-1]).to(scores.dtype)


register_attention_map("sparsemax", sparsemax_attention)
register_attention_map("entmax15", entmax15_attention)
register_attention_map("entmax", entmax_attention)
register_attention_map("gumbel", gumbel_max_attention)
