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

import torch

from ._checks import check_positive_float

AttentionMap = Callable[..., torch.Tensor]
"""A map ``fn(scores, gamma, **options) -> weights``: scores (B, m, r) to weights (B, m, r), row by
row. ``gamma`` is the inverse temperature; maps without a temperature ignore it."""


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


def dot_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Dot-product attention scores ``q_i . k_l``, shape (B, m, r)."""
    return torch.bmm(q, k.transpose(1, 2))


SCORES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "euclidean": euclidean_scores,
    "dot": dot_scores,
}
"""Score functions by name."""


# ----------------------------------------------------------------------------------- maps
def hard_attention(scores: torch.Tensor) -> torch.Tensor:
    """Averaging hard attention: the ``gamma -> infinity`` limit of :func:`softmax_attention`.

    Each row puts weight ``1/m`` on the ``m`` keys whose score equals the row maximum and 0
    elsewhere (one-hot when the maximiser is unique).

    Ties are detected **exactly** (``score == row max``), with no tolerance. This is the limit of
    soft-max applied to the computed scores, and it agrees with an ``argmax`` (Lloyd's
    assignment) wherever the maximiser is unique. Where two keys are mathematically tied, exact
    comparison sees the tie when the scores are computed exactly -- as in the constructions: the
    centre-update scores between one-hot ids are exactly 0 or -2 (Euclidean) or 0 or 1 (dot), and
    the point self-attention keys are handled in closed form -- and otherwise resolves a
    rounding-level difference towards the larger computed score, as Lloyd's ``argmin`` does. A
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
    return torch.softmax(shifted * gamma, dim=-1)


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
    return torch.where(empty, weights.new_full((), 1.0 / scores.shape[-1]), weights)


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


def _unnormalised_(
    name: str, scores: torch.Tensor, gamma: float, owned: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Unnormalised weights ``U`` and normaliser ``Z`` (B, m, 1) with weights ``U / Z``, or
    ``(weights, None)`` for maps that only come normalised. ``scores`` (B, m, r) may be
    overwritten when ``owned`` (a fresh tensor); otherwise (a view of someone's tokens) it is
    left untouched.

    Applying ``(U @ V) / Z`` instead of ``(U / Z) @ V`` is the same linear algebra with one
    division per output instead of one per weight (as Lloyd's ``sums / counts``), and saves a pass
    over the (B, m, r) matrix.

    * softmax at ``gamma = inf`` and hardmax: U = 1 on the keys attaining the row maximum, 0
      elsewhere (exact comparison), Z = their count;
    * softmax at finite ``gamma``: U = exp(gamma (s - max s)), Z = the row sum (>= 1);
    * linear: U = the scores, Z = the row sum; a zero row becomes a row of ones with Z = r
      (uniform weights, the empty-cluster rule).
    """
    fn = get_attention_map(name)
    hard = fn is _hardmax_map or (
        fn is softmax_attention and check_positive_float("gamma", gamma, allow_inf=True) == math.inf
    )
    if hard or fn is softmax_attention:
        if not owned:
            scores = scores.clone()
        top = scores.amax(dim=-1, keepdim=True)
        if hard:
            scores.eq_(top)  # 1.0 where a key attains the row maximum, else 0.0 (dtype kept)
        else:
            scores.sub_(top).mul_(gamma).exp_()
        return scores, _row_sums(scores)
    if fn is linear_attention_weights:
        total = _row_sums(scores)
        empty = total == 0
        if scores.device.type != "cpu" or bool(empty.any()):  # (no device sync on CUDA)
            scores = scores.masked_fill(empty, 1.0) if not owned else scores.masked_fill_(empty, 1.0)
            total = torch.where(empty, torch.full_like(total, scores.shape[-1]), total)
        return scores, total
    return fn(scores if owned else scores.clone(), gamma), None


def _row_sums(w: torch.Tensor) -> torch.Tensor:
    """``w.sum(-1, keepdim=True)``; along a short contiguous last dimension as a matrix product
    with a vector of ones, which is faster than the reduction there (exact for 0/1 weights)."""
    if w.stride(-1) == 1 and w.shape[-1] <= 64 and w.dim() == 3 and w.shape[1] > 4 * w.shape[-1]:
        return torch.bmm(w, w.new_ones(w.shape[0], w.shape[-1], 1))
    return w.sum(dim=-1, keepdim=True)


def register_attention_map(name: str, fn: AttentionMap, *, overwrite: bool = False) -> AttentionMap:
    """Add an attention map to :data:`ATTENTION_MAPS` under ``name`` (for example ``"sparsemax"``).

    ``fn(scores, gamma, **options)`` must map (B, m, r) scores to (B, m, r) weights row by row
    (rows are processed independently, which lets :func:`attend` split queries into chunks).
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


def get_score(name: str) -> Callable[..., torch.Tensor]:
    """The score function registered as ``name`` in :data:`SCORES`."""
    try:
        return SCORES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown attention score {name!r}; expected one of {', '.join(map(repr, SCORES))}") from None


# ----------------------------------------------------------------------------------- attention
DEFAULT_MAX_ELEMENTS = 1 << 22
"""Largest (B, m, r) score block :func:`attend` materialises at once (about 32 MB in float64)."""


def attention_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    score: str = "euclidean",
    map: str = "softmax",
    gamma: float = 1.0,
    **options,
) -> torch.Tensor:
    """The full attention matrix (B, m, r) of queries ``q`` over keys ``k`` (for inspection and plots)."""
    fn = get_attention_map(map)
    s = euclidean_scores(q, k, query_norm=False) if score == "euclidean" else get_score(score)(q, k)
    return fn(s, gamma, **options)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    score: str = "euclidean",
    map: str = "softmax",
    gamma: float = 1.0,
    exact: bool = False,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    **options,
) -> torch.Tensor:
    """Attention output ``weights @ v``, shape (B, m, Dv), with keys ``k`` (B, r, D) and values
    ``v`` (B, r, Dv).

    Maps work row by row, so when the (B, m, r) score matrix would exceed ``max_elements`` the
    queries are processed in chunks: memory stays bounded for self-attention over many tokens
    (n = 1e5 points would otherwise need an n x n matrix per task). ``exact`` computes Euclidean
    scores from differences (see :func:`euclidean_scores`).
    """
    fn = get_attention_map(map)

    def block(qc: torch.Tensor) -> torch.Tensor:
        if score == "euclidean":
            s = euclidean_scores(qc, k, query_norm=False, exact=exact)
        else:
            s = get_score(score)(qc, k)
        return torch.bmm(fn(s, gamma, **options), v)

    B, m, _ = q.shape
    r = k.shape[1]
    per_query = B * r * (k.shape[-1] if exact else 1)
    chunk = max(1, max_elements // max(per_query, 1))
    if chunk >= m:
        return block(q)
    return torch.cat([block(q[:, i : i + chunk]) for i in range(0, m, chunk)], dim=1)
