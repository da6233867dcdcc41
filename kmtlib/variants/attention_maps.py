"""The attention maps of chapter 10's circuit variants, registered by name in
:data:`kmtlib.attention.ATTENTION_MAPS` when this module is imported (every variant imports it;
:func:`kmtlib.variants.import_all` does too): ``"topk"`` and ``"normmax"`` (trimmed k-means),
``"sparsemax"``, ``"entmax15"`` and ``"entmax"`` (robust k-means), ``"gumbel"`` (k-medoids).
"""

from __future__ import annotations

import math

import torch

from .._checks import check_int, check_positive_float
from ..attention import first_argmax, hard_attention, register_attention_map, standard_gumbel, uniform_where_empty

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
