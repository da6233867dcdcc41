"""Theorems 2.1 and 2.2 as code: the fixed-weight k-means transformers.

One layer has four attention blocks with weights ``(Q_mu, K_mu, V_mu)``, ``mu = 1..4``, shared
across layers (the paper's Theorems 2.1 and 2.2 and their proofs):

* ``CAX`` (mu=1), cross-attention of the points over the centres: writes the new assignment;
* ``SAX`` (mu=2), self-attention of the points: erases the old assignment (a residual reset);
* ``CAC`` (mu=3), cross-attention of the centres over the updated points: adds the cluster means;
* ``SAC`` (mu=4), self-attention of the centres: erases the old centres (a residual reset);

with the paper's update order (rows are tokens)::

    X(t+1) = X(t) + A1(X(t), C(t)) + A2(X(t), X(t))
    C(t+1) = C(t) + A3(C(t), X(t+1)) + A4(C(t), C(t))      [+ FFN(C(t+1)) for Theorem 2.2]

``build_theorem_model`` assembles a :class:`~kmtlib.transformer.KMeansTransformer` from these
pieces (it is what ``KMeansTransformer.from_theorem`` calls); ``theorem_weights`` gives the weight
matrices alone, for drawing them.

How the blocks are evaluated
----------------------------
Every block computes ``weights @ (values)`` from its own ``Q``, ``K`` and ``V`` buffers (change a
buffer and the block follows). The theorem weights are coordinate selectors, so a projection is
evaluated on its non-zero block only: a slice of the token coordinates, times a sign or a
diagonal (a small dense product for anything else). Products with an exact identity matrix (the
centres' one-hot ids) are skipped after an exact check, and the normalisation of the weights is
applied to the output, ``(U @ V) / Z`` (as Lloyd's ``sums / counts``), instead of to the weights.
Multiplying by 1 or -1 and adding 0 do not round, so this is the dense formula with fewer
operations, not an approximation of it. The score matrices are laid out in memory for fast
reductions and live in scratch buffers reused from layer to layer when no gradient is recorded
(so a block must not be called from two threads at once).

The model stores the point tokens column by column, as the paper writes them (memory (B, D, n)):
every block then reads a coordinate of all points as one contiguous row (the scores of CAX are a
product with the points' data rows, its new assignment is k whole rows, CAC sums along rows), and
without autograd a layer writes the new point tokens over the old ones (:meth:`TheoremLayer.advance_`)
instead of copying all n tokens. Writing in place changes no number; the layout can change the
last bits of products (BLAS may add their terms in another order, as with any change of kernel).

Hard self-attention (``gamma = math.inf``) is evaluated in closed form, without the n x n score
matrix (``limit_self_attention="copies"``): the keys that attain the maximum score of query
``i`` are exactly the copies of token ``i`` (for SAX the points equal to ``x_i``, whose distance 0
is the largest possible score; for SAC only centre ``j`` itself, the ids being distinct), and
all copies carry the same value (a point's assignment is a function of the point), so the
averaging hard attention returns the value of token ``i`` itself. This holds with duplicate
points too. ``limit_self_attention="dense"`` evaluates the genuine hard attention instead (with
exact, difference-based Euclidean scores), for verification on small problems. Wherever hard
attention compares scores from a product (CAX's points over the centres, dense SAX with
dot-product scores), keys that are equal get bitwise equal scores
(:func:`~kmtlib._numerics.tie_equal_keys`): BLAS may round the same dot product differently
for a key at another place in its tile, which would break a tie by its last bit. At finite
temperature the self-attention is genuine soft-max over all n points, processed in chunks of
queries so memory stays bounded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple, cast

import torch
from torch import nn

from ._checks import check_choice, check_int, check_positive_float
from ._numerics import tie_equal_keys
from ._scratch import Scratch, same_storage
from .attention import _unnormalised_, by_query_chunks, dot_scores, euclidean_scores, get_attention_map
from .embedding import NormAugmentedEmbedding, OneHotEmbedding

ATTENTION_KINDS: tuple[str, ...] = ("euclidean", "dot")
"""``"euclidean"``: Theorem 2.1 (Euclidean attention, tokens of width d + k).
``"dot"``: Theorem 2.2 (dot-product attention on norm-augmented tokens of width d + k + 2, plus a
feed-forward block with rectified-quadratic activation on the centres)."""

CENTRE_UPDATES: tuple[str, ...] = ("linear", "attention")
"""Form of the centre update (block CAC): ``"linear"`` (default): the normalised linear attention
``y_ij / sum_i' y_i'j`` of the original paper's construction and the authors' code
(temperature-free); ``"attention"``: the model's own attention (Euclidean or dot, as in the
follow-up paper's construction; averaging hard attention over the points whose one-hot assignment
matches the centre's id in the limit, soft-max at finite gamma)."""

SELF_ATTENTION_MODES: tuple[str, ...] = ("attention", "identity")
"""Form of the two self-attention (reset) blocks SAX and SAC: ``"attention"``: genuine attention
(hard in the limit, soft-max at finite ``reset_gamma``); ``"identity"``: the identity attention
matrix, the shortcut of the authors' validation code (``osa=True``), i.e. what hard attention
gives for distinct tokens, at any gamma."""

BLOCK_NAMES: tuple[str, ...] = ("CAX", "SAX", "CAC", "SAC")
"""The four blocks in the paper's order mu = 1, 2, 3, 4."""

LIMIT_SELF_ATTENTION: tuple[str, ...] = ("copies", "dense")
"""How a hard (gamma = inf) self-attention block is evaluated: in closed form (``"copies"``, the
default) or as a genuine score matrix (``"dense"``); both give the same result (module doc)."""

SMALL_QUERY_BLOCK = 1024
"""Up to this many queries per task, strided and transposed operands are used as they are; above
it they are first laid out contiguously (speed only)."""

# ----------------------------------------------------------------------------------- weights
def coordinate_selector(
    D: int, start: int, stop: int, value: float = 1.0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """The D x D diagonal matrix with ``value`` on coordinates ``start..stop-1`` and 0 elsewhere
    (the paper's ``I^{i:j}_D``, 0-based and half-open here)."""
    W = torch.zeros(D, D, dtype=dtype)
    idx = torch.arange(start, stop)
    W[idx, idx] = value
    return W


def theorem_weights(
    d: int, k: int, attention: str = "euclidean", dtype: torch.dtype = torch.float64
) -> dict[str, dict[str, torch.Tensor]]:
    """The weight matrices of Theorem 2.1 (``attention="euclidean"``) or 2.2 (``"dot"``).

    Returns ``{"CAX": {"Q", "K", "V"}, "SAX": ..., "CAC": ..., "SAC": ...}`` with D x D matrices
    acting on row tokens as ``token @ W.T`` (i.e. ``W @ token`` in the paper's column layout), and
    for ``"dot"`` also ``"FFN": {"W1": (2d, D), "W2": (D, 2d)}``.

    Theorem 2.1 (D = d + k; data coordinates ``:d``, one-hot coordinates ``d:``)::

        CAX: Q = K = I^{:d},  V = +I^{d:}      SAX: Q = K = I^{:d},  V = -I^{d:}
        CAC: Q = K = I^{d:},  V = +I^{:d}      SAC: Q = K = I^{d:},  V = -I^{:d}

    Theorem 2.2 (D = d + k + 2; coordinates ``s = d+k`` hold ||.||^2 and ``o = d+k+1`` the constant
    1): CAX and SAX queries are [x; -1/2] in coordinates (:d, s) (``Q[s, o] = -1/2``), their keys
    [x; ||x||^2] (``K = I^{:d} + e_s e_s^T``), so ``q.k = x.c - ||c||^2/2``; CAC and SAC read the
    one-hot coordinates as in Theorem 2.1; SAC's value also erases the norm coordinate
    (``V = -(I^{:d} + e_s e_s^T)``); the feed-forward block writes ||c||^2 back into ``s``.
    """
    d = check_int("d", d, minimum=1)
    k = check_int("k", k, minimum=1)
    check_choice("attention", attention, ATTENTION_KINDS)
    D = d + k + (2 if attention == "dot" else 0)
    data = coordinate_selector(D, 0, d, dtype=dtype)
    ids = coordinate_selector(D, d, d + k, dtype=dtype)
    if attention == "euclidean":
        return {
            "CAX": {"Q": data, "K": data.clone(), "V": ids.clone()},
            "SAX": {"Q": data.clone(), "K": data.clone(), "V": -ids},
            "CAC": {"Q": ids.clone(), "K": ids.clone(), "V": data.clone()},
            "SAC": {"Q": ids.clone(), "K": ids.clone(), "V": -data},
        }
    s, o = d + k, d + k + 1
    query = data.clone()
    query[s, o] = -0.5
    key = data.clone()
    key[s, s] = 1.0
    erase_centre = -key
    W1 = torch.zeros(2 * d, D, dtype=dtype)
    W1[:d, :d] = torch.eye(d, dtype=dtype)
    W1[d:, :d] = -torch.eye(d, dtype=dtype)
    W2 = torch.zeros(D, 2 * d, dtype=dtype)
    W2[s, :] = 1.0
    return {
        "CAX": {"Q": query, "K": key, "V": ids.clone()},
        "SAX": {"Q": query.clone(), "K": key.clone(), "V": -ids},
        "CAC": {"Q": ids.clone(), "K": ids.clone(), "V": data.clone()},
        "SAC": {"Q": ids.clone(), "K": ids.clone(), "V": erase_centre},
        "FFN": {"W1": W1, "W2": W2},
    }


# ----------------------------------------------------------------------------------- projections
class _Projection(NamedTuple):
    """``tokens @ W.T`` restricted to the output coordinates ``rows``: reads coordinates ``cols``,
    then multiplies by ``sign`` (+1 or -1), by ``diag`` (a vector) or by ``dense.T`` (a matrix)."""

    rows: slice | torch.Tensor
    cols: slice | torch.Tensor
    width: int
    sign: float
    diag: torch.Tensor | None
    dense: torch.Tensor | None

    def select(self, tokens: torch.Tensor) -> torch.Tensor:
        if isinstance(self.cols, slice):
            return tokens[..., self.cols]
        return tokens.index_select(-1, self.cols)

    def lazy(self, tokens: torch.Tensor) -> tuple[torch.Tensor, float]:
        """``(x, alpha)`` with ``alpha * x`` the projection; for a signed selection ``x`` is a view
        of the tokens (no copy), the sign being applied by whoever adds it."""
        if self.diag is None and self.dense is None:
            return self.select(tokens), self.sign
        return self(tokens), 1.0

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.select(tokens)
        if self.diag is not None:
            return x * self.diag
        if self.dense is not None:
            return torch.matmul(x, self.dense.T)
        return x if self.sign == 1.0 else -x


def _as_index(coords: list[int], device: torch.device) -> slice | torch.Tensor:
    if coords and coords == list(range(coords[0], coords[0] + len(coords))):
        return slice(coords[0], coords[0] + len(coords))
    return torch.tensor(coords, dtype=torch.long, device=device)


def _compile(W: torch.Tensor, rows: list[int] | None = None) -> _Projection:
    """Compile ``tokens @ W.T`` onto ``rows`` (default: the non-zero rows of W)."""
    mask = W.detach() != 0
    if rows is None:
        rows = torch.nonzero(mask.any(dim=1)).flatten().tolist()
    cols = torch.nonzero(mask.any(dim=0)).flatten().tolist()
    sub = W.detach()[rows][:, cols]
    sign, diag, dense = 1.0, None, None
    if len(rows) == len(cols) and bool((sub == torch.diag(torch.diagonal(sub))).all()):
        dg = torch.diagonal(sub).clone()
        if bool((dg == 1).all()):
            pass
        elif bool((dg == -1).all()):
            sign = -1.0
        else:
            diag = dg
    else:
        dense = sub.clone()
    return _Projection(_as_index(rows, W.device), _as_index(cols, W.device), len(rows), sign, diag, dense)


def _nonzero_rows(W: torch.Tensor) -> list[int]:
    return torch.nonzero((W.detach() != 0).any(dim=1)).flatten().tolist()


class _Plan(NamedTuple):
    q: _Projection
    k: _Projection
    v: _Projection


_EYES: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}


def _is_identity(t: torch.Tensor) -> bool:
    """Whether ``t`` (B, m, m) is exactly a stack of identity matrices (small m only)."""
    if t.dim() != 3 or t.shape[-1] != t.shape[-2] or t.shape[-1] > 64:
        return False
    key = (t.shape[-1], t.dtype, t.device)
    eye = _EYES.get(key)
    if eye is None:
        with torch.inference_mode(False):
            eye = _EYES[key] = torch.eye(t.shape[-1], dtype=t.dtype, device=t.device)
    return torch.equal(t, eye.expand_as(t))


def is_column_major(tokens: torch.Tensor) -> bool:
    """Whether tokens (B, m, D) are stored coordinate by coordinate (the paper's columns: memory
    (B, D, m)), as :meth:`~kmtlib.embedding.Embedding.embed` lays them out with
    ``columns=True``. The layout changes the speed of the operations, and at most the last bits
    of products summed over the points (BLAS may add them in another order)."""
    return tokens.dim() == 3 and tokens.shape[1] > 1 and tokens.stride(1) == 1


# ----------------------------------------------------------------------------------- blocks
class AttentionBlock(nn.Module):
    """One attention block ``A(Z, Z'; Q, K, V) = weights(QZ, KZ') @ (V Z')`` (rows are tokens).

    The weights ``Q``, ``K``, ``V`` (D x D, acting as ``token @ W.T``) are registered buffers:
    fixed, saved with the model, moved by ``.to()``; inspect them as ``block.Q`` etc.

    Args:
        name: ``"CAX"``, ``"SAX"``, ``"CAC"`` or ``"SAC"`` (any label).
        Q, K, V: the weight matrices.
        score: ``"euclidean"`` (``-||q - k||^2``) or ``"dot"`` (``q.k``).
        map: an attention map of :data:`kmtlib.attention.ATTENTION_MAPS` (``"softmax"``, whose
            ``gamma = math.inf`` is hard attention, or ``"linear"``, the normalised linear form).
        gamma: the inverse temperature (raw, no ``1/sqrt(D)``).
        scale: multiplies ``gamma`` (2 for the dot-product blocks of Theorem 2.2, so that their
            soft-max at ``2 gamma`` on ``x.c - ||c||^2/2`` equals Euclidean soft-max at ``gamma``).
        self_attention: the block attends over the queries' own sequence (SAX, SAC).
        identity: replace the attention matrix by the identity (the authors' shortcut for
            self-attention blocks): the block returns each token's own value.
    """

    Q: torch.Tensor  # (buffers, registered in __init__)
    K: torch.Tensor
    V: torch.Tensor

    def __init__(
        self,
        name: str,
        Q: torch.Tensor,
        K: torch.Tensor,
        V: torch.Tensor,
        *,
        score: str = "euclidean",
        map: str = "softmax",
        gamma: float = math.inf,
        scale: float = 1.0,
        self_attention: bool = False,
        identity: bool = False,
    ) -> None:
        super().__init__()
        if Q.shape != K.shape or Q.shape != V.shape or Q.dim() != 2 or Q.shape[0] != Q.shape[1]:
            raise ValueError(f"block {name}: Q, K, V must be square matrices of one shape")
        check_choice("attention score", score, ("euclidean", "dot"))
        get_attention_map(map)
        if identity and not self_attention:
            raise ValueError(f"block {name}: the identity shortcut needs a self-attention block")
        self.name = name
        self.score = score
        self.map = map
        self.gamma = check_positive_float("gamma", gamma, allow_inf=True)
        self.scale = check_positive_float("scale", scale)
        self.self_attention = bool(self_attention)
        self.identity = bool(identity)
        self.limit_self_attention = "copies"
        self.register_buffer("Q", Q)
        self.register_buffer("K", K)
        self.register_buffer("V", V)
        self._plan_key: tuple | None = None
        self._plan_value: _Plan | None = None
        self._scratch = Scratch()

    # ---------------------------------------------------------------- description
    @property
    def width(self) -> int:
        return self.Q.shape[0]

    @property
    def inverse_temperature(self) -> float:
        """``scale * gamma``: what multiplies the scores inside the soft-max."""
        return self.scale * self.gamma

    @property
    def is_hard(self) -> bool:
        """The block uses the limit (averaging hard attention)."""
        return self.map in ("softmax", "hardmax") and (self.gamma == math.inf or self.map == "hardmax")

    def extra_repr(self) -> str:
        form = "identity" if self.identity else f"{self.score} {self.map}"
        temp = "" if self.identity or self.map == "linear" else f", gamma={self.gamma}, scale={self.scale}"
        return f"{self.name}: {form}{temp}, width={self.width}"

    # ---------------------------------------------------------------- compiled projections
    def _plan(self) -> _Plan:
        weights = (self.Q, self.K, self.V)
        if any(t.is_inference() for t in weights):
            key = None  # (weights made under inference_mode have no version counter: recompile every call)
        else:
            key = tuple((id(t), t.data_ptr(), t._version, t.dtype, t.device) for t in weights)
        if key is None or key != self._plan_key:
            # (ordinary tensors even when first called under inference_mode, so that a later call
            # with autograd can use them)
            with torch.inference_mode(False):
                score_rows = sorted(set(_nonzero_rows(self.Q)) | set(_nonzero_rows(self.K)))
                self._plan_value = _Plan(_compile(self.Q, score_rows), _compile(self.K, score_rows), _compile(self.V))
            self._plan_key = key
        return cast(_Plan, self._plan_value)

    # ---------------------------------------------------------------- evaluation
    # Two evaluations of the same formula: ``_reference_weights`` (plain out-of-place operations:
    # autograd, and the attention matrices handed out by ``weights()``) and the fast path of
    # ``_attend_fast`` (no autograd: in-place maps on scratch memory, normalisation after the
    # product). The tests check that they agree.

    def _buffer(self, slot: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """Scratch memory (:class:`~kmtlib._scratch.Scratch`) for a temporary of the fast path, of
        ``like``'s dtype and device, reused from call to call."""
        return self._scratch(slot, shape, like.dtype, like.device)

    @property
    def _euclidean(self) -> bool:
        return self.score == "euclidean" and self.map != "linear"

    def _map_name(self) -> str:
        return "hardmax" if self.is_hard else self.map

    def _reference_weights(self, q: torch.Tensor, k: torch.Tensor, exact: bool) -> torch.Tensor:
        """Attention weights (B, m, r) by the textbook formula (fresh tensor, autograd-safe)."""
        if self._euclidean:
            # (exact: -||q - k||^2 in full, 0 exactly for a copy of the query, below 0 for any
            # other key; adding the row constant ||q||^2 would round neighbours up to a tie)
            scores = euclidean_scores(q, k, query_norm=exact, exact=exact)
        else:
            scores = dot_scores(q, k)
        if self._ties_need_care(q):
            scores = tie_equal_keys(scores, k, dim=2)
        return get_attention_map(self._map_name())(scores, self.inverse_temperature)

    def _ties_need_care(self, q: torch.Tensor) -> bool:
        """Whether equal keys must be given bitwise equal scores (:func:`~kmtlib._numerics.tie_equal_keys`):
        in hard attention, where ties are decided by exact comparison, and where the scores come
        from a product that can round (not for the one-hot id queries of CAC and SAC, whose
        scores are exact small integers)."""
        return self.is_hard and not _is_identity(q)

    def _fast_scores(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """Scores (B, m, r) of projected queries q (B, m, D') over projected keys k (B, r, D'), and
        whether the map may overwrite them (False: a view of the key tokens).

        Euclidean scores are ``2 q.k - ||k||^2``: the ``-||q||^2`` term is constant along each
        row, so it is left out (soft-max and hard attention do not depend on it). Queries that are
        exactly the identity (the centres' one-hot ids in CAC and SAC) give ``q.k = k``.

        Memory layout (for speed; the values do not depend on it, except through the rounding of
        the products): the map reduces over the keys, which is slow along a short inner
        dimension. So with fewer keys than queries (points attending to the centres) the scores
        are computed keys-major, (B, r, m) in memory, and returned as a transposed view; otherwise
        queries-major, (B, m, r), reading the point tokens transposed through the product (BLAS
        takes strided and transposed operands; a transposing copy would cost more).
        """
        euclidean = self._euclidean
        B, m, r = q.shape[0], q.shape[1], k.shape[1]
        if r < m:
            # Few keys (points attending to the centres): keys-major, the same product as kmtlib's
            # nearest_center (C @ X^T on contiguous points, ||c||^2 added by the product).
            S = self._buffer("S", (B, r, m), q)
            if q.stride(-2) != 1 and not q.is_contiguous() and m > SMALL_QUERY_BLOCK:
                # a strided slice of row-major tokens: the product would copy it into fresh memory
                # (column-major tokens, q.stride(-2) == 1, are read as they are)
                q = self._buffer("q", q.shape, q).copy_(q)
            if euclidean:
                k2 = (k * k).sum(-1, keepdim=True).neg_()
                return torch.baddbmm(k2, k, q.transpose(1, 2), alpha=2.0, out=S).transpose(1, 2), True
            return torch.bmm(k, q.transpose(1, 2), out=S).transpose(1, 2), True
        if _is_identity(q):
            if not euclidean:
                return k.transpose(1, 2), False
            # 2 k^T - ||k||^2, laid out (B, m, r) by the product with the identity (BLAS transposes
            # the strided token slice faster than a copy); the key norms are its column sums of squares.
            S = torch.bmm(q, k.transpose(1, 2), out=self._buffer("S", (B, m, r), q))
            k2 = torch.mul(S, S, out=self._buffer("S2", (B, m, r), q)).sum(1, keepdim=True).neg_()
            return torch.add(k2, S, alpha=2.0, out=S), True
        S = self._buffer("S", (B, m, r), q)
        if euclidean:
            k2 = (k * k).sum(-1).neg_().unsqueeze(1)
            return torch.baddbmm(k2, q, k.transpose(1, 2), alpha=2.0, out=S), True
        return torch.bmm(q, k.transpose(1, 2), out=S), True

    def _attend_fast(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, exact: bool, columns: bool = False
    ) -> torch.Tensor:
        if self._euclidean and exact:
            scores = euclidean_scores(q, k, query_norm=True, exact=True)  # (see _reference_weights)
            U, Z = _unnormalised_(self._map_name(), scores, self.inverse_temperature)
        else:
            scores, owned = self._fast_scores(q, k)
            if self._ties_need_care(q):
                tied = tie_equal_keys(scores, k, dim=2)
                scores, owned = tied, owned or tied is not scores
            U, Z = _unnormalised_(self._map_name(), scores, self.inverse_temperature, owned)
        if _is_identity(v) and (U.is_contiguous() or U.shape[1] <= SMALL_QUERY_BLOCK or columns):
            # U @ I (the centres' one-hot ids as values): no product. (For a keys-major U with many
            # queries per task, added to row-major tokens, the product is kept: it is the fastest
            # way to transpose U; column-major tokens take the keys-major U as it is.)
            out = U
        elif v.is_contiguous() and _is_identity(U):
            out = v
        else:
            out = torch.bmm(U, v, out=self._buffer("out", (U.shape[0], U.shape[1], v.shape[2]), U))
        if Z is None:
            return out
        if Z.device.type == "cpu" and bool((Z == 1).all()):
            return out  # every row has one winner (hard attention): dividing by 1 changes nothing
        return out / Z if (out is v or out is U) else out.div_(Z)

    def _attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, exact: bool = False, columns: bool = False
    ) -> torch.Tensor:
        """``weights(q, k) @ v``, by queries in chunks when the score matrix would be large;
        ``columns``: the output is added to column-major tokens (a keys-major result suits them)."""
        per_query = q.shape[0] * k.shape[1] * (q.shape[-1] if exact else 1)
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            return by_query_chunks(lambda qc: torch.bmm(self._reference_weights(qc, k, exact), v), q, per_query)
        # (a fast chunk's result may live in scratch memory that the next chunk reuses: copy it)
        return by_query_chunks(lambda qc: self._attend_fast(qc, k, v, exact, columns), q, per_query, copy=True)

    def increment(
        self, query_tokens: torch.Tensor, key_tokens: torch.Tensor | None = None
    ) -> tuple[slice | torch.Tensor, torch.Tensor, float]:
        """The block's output on its non-zero coordinates as ``(rows, values, alpha)``: the output
        is ``alpha * values`` (B, m, len(rows)) there and exactly 0 elsewhere (``alpha`` is +1 or
        -1). For the layer's own use: ``values`` may be a view of the tokens or scratch memory
        that the block's next call overwrites; :meth:`forward` returns a fresh tensor."""
        plan = self._plan()
        if key_tokens is None:
            key_tokens = query_tokens
        if self.identity or (
            self.self_attention and self.is_hard and self.limit_self_attention == "copies"
        ):
            # Identity attention matrix (shortcut), or hard self-attention in closed form (module doc).
            return (plan.v.rows, *plan.v.lazy(query_tokens))
        exact = self.self_attention and self.is_hard and self.score == "euclidean"
        v, alpha = plan.v.lazy(key_tokens)
        columns = is_column_major(query_tokens)
        return plan.v.rows, self._attend(plan.q(query_tokens), plan.k(key_tokens), v, exact, columns), alpha

    def forward(self, query_tokens: torch.Tensor, key_tokens: torch.Tensor | None = None) -> torch.Tensor:
        """The block's output (B, m, D), the increment a residual connection adds to the queries."""
        return _residual(query_tokens.new_zeros(query_tokens.shape), self.increment(query_tokens, key_tokens))

    def weights(self, query_tokens: torch.Tensor, key_tokens: torch.Tensor | None = None) -> torch.Tensor:
        """The attention matrix (B, m, r) the block applies (for inspection and plots).

        Materialises the full matrix: keep ``m * r`` small. Hard Euclidean self-attention uses
        exact, difference-based scores, so that every token attains its own maximum.
        """
        if key_tokens is None:
            key_tokens = query_tokens
        if self.identity:
            B, m, _ = query_tokens.shape
            if key_tokens.shape[1] != m:
                raise ValueError(f"block {self.name}: the identity attention needs as many keys as queries")
            return torch.eye(m, dtype=query_tokens.dtype, device=query_tokens.device).expand(B, m, m).clone()
        plan = self._plan()
        exact = self.self_attention and self.is_hard and self.score == "euclidean"
        return self._reference_weights(plan.q(query_tokens), plan.k(key_tokens), exact)


class RectifiedQuadraticFFN(nn.Module):
    """Feed-forward block ``h -> W2 phi(W1 h)`` with the rectified-quadratic activation
    ``phi(z) = max(z, 0)^2`` (row tokens: ``phi(h @ W1.T) @ W2.T``); weights are buffers.

    In Theorem 2.2, W1 reads ``+c`` and ``-c`` and W2 sums all 2d outputs into the norm
    coordinate: since ``max(z,0)^2 + max(-z,0)^2 = z^2`` it writes ``||c||^2``.
    """

    W1: torch.Tensor  # (buffers, registered in __init__)
    W2: torch.Tensor

    def __init__(self, W1: torch.Tensor, W2: torch.Tensor) -> None:
        super().__init__()
        if W1.dim() != 2 or W2.dim() != 2 or W1.shape[0] != W2.shape[1] or W1.shape[1] != W2.shape[0]:
            raise ValueError("FFN weights must be W1 (H, D) and W2 (D, H)")
        self.register_buffer("W1", W1)
        self.register_buffer("W2", W2)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.matmul(torch.relu(torch.matmul(h, self.W1.T)).square(), self.W2.T)

    def extra_repr(self) -> str:
        return f"width={self.W1.shape[1]}, hidden={self.W1.shape[0]}, activation=max(z,0)^2"


class _TokenPool:
    """Memory for the point tokens a layer returns, recycled once the caller has let go of it.

    A weight-shared model calls its layer T times and drops each layer's input tokens as soon as
    the next tokens exist; allocating fresh (B, n, D) tokens every layer makes the CPU pay a page
    fault per 4 KB of first-touched memory, which for large n costs as much as the layer's
    arithmetic. The pool keeps the buffers it handed out and reuses one only when nothing else
    references its storage any more (no tensor, no view: checked with the storage's use count),
    so a caller that keeps tokens (or the ``assignments`` view of a result) never sees them change.
    Used only on the CPU, without autograd, and where the use count can be read; otherwise it
    simply allocates. ``TheoremLayer.release_memory()`` empties it.
    """

    MAX_BUFFERS = 4

    def __init__(self) -> None:
        self.buffers: list[torch.Tensor] = []

    @staticmethod
    def _only_ours(buf: torch.Tensor) -> bool:
        try:
            # 2 = the pool's tensor + the temporary storage object of this query
            return torch._C._storage_Use_Count(buf.untyped_storage()._cdata) <= 2
        except Exception:  # pragma: no cover - private API missing: never reuse
            return False

    def empty_like(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.device.type != "cpu" or (torch.is_grad_enabled() and tokens.requires_grad):
            return torch.empty_like(tokens)
        inference = torch.is_inference_mode_enabled()
        for buf in self.buffers:
            if (
                buf.shape == tokens.shape
                and buf.stride() == tokens.stride()
                and buf.dtype == tokens.dtype
                and buf.is_inference() == inference  # (inference tensors cannot be written outside)
                and self._only_ours(buf)
            ):
                return buf.view(buf.shape)  # a new tensor on the same memory: the caller's reference
        buf = torch.empty_like(tokens)  # (the same layout: row- or column-major)
        # keep the buffers still in use (they come back when the caller lets go of them); drop free
        # ones of another shape; at most MAX_BUFFERS
        in_use = [b for b in self.buffers if not self._only_ours(b)]
        self.buffers = [*in_use[-(self.MAX_BUFFERS - 1) :], buf]
        return buf.view(buf.shape)

    def clear(self) -> None:
        self.buffers = []


def _residual(
    tokens: torch.Tensor, *increments: tuple[slice | torch.Tensor, torch.Tensor, float], pool: _TokenPool | None = None
) -> torch.Tensor:
    """``tokens + inc_1 + inc_2 + ...`` (left to right) as a new tensor, adding only on the
    non-zero coordinates of each increment (``alpha * values``, ``alpha`` = +-1: exact)."""
    out = tokens.clone() if pool is None else pool.empty_like(tokens).copy_(tokens)
    for rows, values, alpha in increments:
        if isinstance(rows, slice):
            out[..., rows].add_(values, alpha=alpha)
        else:
            out.index_add_(-1, rows, values, alpha=alpha)
    return out


def _dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements occupy distinct memory with no gaps (so ``out=t`` is safe)."""
    expected = 1
    for stride, size in sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz > 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _residual_in_place(
    tokens: torch.Tensor,
    increments: tuple[tuple[slice | torch.Tensor, torch.Tensor, float], ...],
    protected: tuple[torch.Tensor, ...] = (),
) -> bool:
    """:func:`_residual` written into ``tokens`` itself, with the same operations in the same
    order (so the same roundings); returns False, leaving ``tokens`` untouched, where that is not
    possible.

    Two patterns are handled: increments that share no memory with ``tokens`` or ``protected``
    (added in place), and the layer's pattern ``t_R + a U + b t_R`` (the reset block returns a
    view of the very coordinates it resets): ``U <- t_R + a U`` is formed in the first increment's
    own scratch memory, then ``t_R <- U + b t_R`` (an elementwise operation reading each element
    before writing it).
    """
    if tokens.requires_grad and torch.is_grad_enabled():
        return False
    if any(not isinstance(rows, slice) for rows, _, _ in increments):
        return False
    views = [same_storage(values, tokens) for _, values, _ in increments]
    if any(same_storage(values, p) for _, values, _ in increments for p in protected):
        return False
    if not any(views):
        for rows, values, alpha in increments:
            tokens[..., rows].add_(values, alpha=alpha)
        return True
    if len(increments) != 2 or views != [False, True]:
        return False
    (rows_u, u, a), (rows_v, v, b) = increments
    target = tokens[..., rows_u]
    if (
        rows_u != rows_v
        or v.shape != target.shape
        or v.stride() != target.stride()
        or v.data_ptr() != target.data_ptr()
    ):
        return False
    if u.shape != target.shape or u.is_inference() != target.is_inference() or not _dense(u):
        return False
    torch.add(target, u, alpha=a, out=u)
    torch.add(u, target, alpha=b, out=target)
    return True


class TheoremLayer(nn.Module):
    """One weight-shared layer of the theorem constructions: blocks CAX, SAX, CAC, SAC (in
    ``self.blocks``) and, for Theorem 2.2, the feed-forward block on the centres (``self.ffn``).

    ``forward(point_tokens, centre_tokens)`` returns the updated ``(point_tokens, centre_tokens)``
    in the paper's order: the centres attend to the **updated** point tokens.

    Its blocks read and write whole coordinates of all points (a score row per centre over all
    points, a new assignment coordinate per centre), so :class:`~kmtlib.transformer.KMeansTransformer`
    hands it column-major point tokens (``column_tokens``; the paper's layout) and, without
    autograd, lets it update them in place (:meth:`advance_`).
    """

    column_tokens = True

    def __init__(
        self, blocks: dict[str, AttentionBlock], ffn: RectifiedQuadraticFFN | None, *, description: dict[str, Any]
    ):
        super().__init__()
        missing = [b for b in BLOCK_NAMES if b not in blocks]
        if missing:
            raise ValueError(f"a theorem layer needs the blocks {BLOCK_NAMES}; missing {missing}")
        self.blocks = nn.ModuleDict({name: blocks[name] for name in BLOCK_NAMES})
        self.ffn = ffn
        self.description = dict(description)
        self._pool = _TokenPool()

    def release_memory(self) -> None:
        """Free the recycled token memory and the blocks' scratch buffers (they are kept between
        calls to spare the allocations; see the module documentation)."""
        self._pool.clear()
        for block in self._blocks().values():
            block._scratch.clear()

    @property
    def limit_self_attention(self) -> str:
        """How hard self-attention is evaluated, ``"copies"`` or ``"dense"`` (see :data:`LIMIT_SELF_ATTENTION`)."""
        return self._blocks()["SAX"].limit_self_attention

    @limit_self_attention.setter
    def limit_self_attention(self, value: str) -> None:
        check_choice("limit_self_attention", value, LIMIT_SELF_ATTENTION)
        for name in ("SAX", "SAC"):
            self._blocks()[name].limit_self_attention = value

    def _blocks(self) -> Mapping[str, AttentionBlock]:
        """``self.blocks`` as what it holds (an ``nn.ModuleDict`` is typed as holding any module)."""
        return cast(Mapping[str, AttentionBlock], self.blocks)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.description.items())

    def _check_tokens(self, point_tokens: torch.Tensor, centre_tokens: torch.Tensor) -> None:
        ref = self._blocks()["CAX"].Q
        for name, t in (("point tokens", point_tokens), ("centre tokens", centre_tokens)):
            if t.dtype != ref.dtype:
                raise TypeError(
                    f"the model's weights are {ref.dtype} but the {name} are {t.dtype}; call model.to({t.dtype})"
                )
            if t.device != ref.device:
                raise ValueError(
                    f"the model's weights are on {ref.device} but the {name} are on {t.device}; "
                    f"call model.to({str(t.device)!r})"
                )
            if t.shape[-1] != ref.shape[0]:
                raise ValueError(f"the {name} have width {t.shape[-1]} but the layer expects {ref.shape[0]}")

    def forward(self, point_tokens: torch.Tensor, centre_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._forward(point_tokens, centre_tokens, in_place=False)

    def advance_(self, point_tokens: torch.Tensor, centre_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward`, writing the new point tokens into ``point_tokens`` where it can (same
        values, same roundings; saves copying all n tokens per layer). Only for tokens nobody
        else needs and without autograd: :class:`~kmtlib.transformer.KMeansTransformer` calls it
        on the tokens it embedded itself. Returns ``(points, centres)``; ``points`` is
        ``point_tokens`` itself unless the update could not be done in place."""
        return self._forward(point_tokens, centre_tokens, in_place=True)

    def _forward(
        self, point_tokens: torch.Tensor, centre_tokens: torch.Tensor, in_place: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self._check_tokens(point_tokens, centre_tokens)
        b = self._blocks()
        increments = (b["CAX"].increment(point_tokens, centre_tokens), b["SAX"].increment(point_tokens, point_tokens))
        if in_place and _residual_in_place(point_tokens, increments, protected=(centre_tokens,)):
            points = point_tokens
        else:
            points = _residual(point_tokens, *increments, pool=self._pool)
        centres = _residual(
            centre_tokens,
            b["CAC"].increment(centre_tokens, points),
            b["SAC"].increment(centre_tokens, centre_tokens),
        )
        if self.ffn is not None:
            centres = centres + self.ffn(centres)
        return points, centres

    def attention_maps(self, point_tokens: torch.Tensor, centre_tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """The four attention matrices of one layer applied to these tokens (full matrices: keep
        n small): CAX (B, n, k), SAX (B, n, n), CAC (B, k, n, over the updated points), SAC (B, k, k)."""
        points, _ = self.forward(point_tokens, centre_tokens)
        b = self._blocks()
        return {
            "CAX": b["CAX"].weights(point_tokens, centre_tokens),
            "SAX": b["SAX"].weights(point_tokens, point_tokens),
            "CAC": b["CAC"].weights(centre_tokens, points),
            "SAC": b["SAC"].weights(centre_tokens, centre_tokens),
        }


# ----------------------------------------------------------------------------------- builder
def _qkv(weights: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return weights["Q"], weights["K"], weights["V"]


def build_theorem_model(
    cls,
    d: int,
    k: int,
    gamma: float = math.inf,
    attention: str = "euclidean",
    *,
    centre_update: str = "linear",
    self_attention: str = "attention",
    reset_gamma: float | None = None,
):
    """Build the fixed-weight k-means transformer of Theorem 2.1 or 2.2 (``KMeansTransformer.from_theorem``).

    Args:
        cls: the model class (:class:`~kmtlib.transformer.KMeansTransformer`).
        d, k: data dimension and number of centres.
        gamma: inverse temperature of the attention blocks that have one (raw: no ``1/sqrt(D)``).
            ``math.inf`` (default) is the limit, computed as averaging hard attention; a finite
            ``gamma`` means soft-max there.
        attention: ``"euclidean"`` (Theorem 2.1: tokens [x; y], [c; e] of width d + k, Euclidean
            attention) or ``"dot"`` (Theorem 2.2, see below).
        centre_update: ``"linear"`` (default: the normalised linear attention of the original
            paper's construction and the authors' code, ``y_ij / sum_i' y_i'j``, temperature-free)
            or ``"attention"`` (the model's own attention, as in the follow-up paper's Euclidean
            construction: in the limit the average of the points whose one-hot assignment
            matches the centre's id; soft-max at ``gamma`` otherwise).
        self_attention: ``"attention"`` (genuine attention in SAX and SAC: hard in the limit,
            soft-max at ``reset_gamma`` otherwise) or ``"identity"`` (the authors' shortcut: the
            identity attention matrix).
        reset_gamma: inverse temperature of the two self-attention blocks when
            ``self_attention="attention"``; default ``gamma``. Only meaningful with that option.

    Which blocks use which temperature: CAX always uses ``gamma``; CAC uses ``gamma`` with
    ``centre_update="attention"``; SAX and SAC use ``reset_gamma`` with
    ``self_attention="attention"``. Hence:

    * the limit model (``gamma = math.inf``): every option gives Lloyd's algorithm exactly on
      tie-free inputs, with the empty-cluster rule ``lloyd(..., empty="mean")`` (the centre
      attention of an empty cluster has no preferred key and becomes uniform);
    * the authors' validation model (their Fig. 3): ``gamma=1e4, self_attention="identity"``
      (with the default linear centre update only CAX is soft);
    * the fully soft-max model: ``gamma`` finite, ``centre_update="attention"``,
      ``self_attention="attention"``: every block is soft at ``gamma``. Its reset blocks need a
      far larger temperature than CAX, because SAX must tell apart points that are close to each
      other (the soft-max weight of a point on itself must dominate its neighbours'): at
      ``gamma=1e4`` on the paper's Fig. 3 data it fails where ``1e7`` works; ``reset_gamma``
      sets the resets' temperature separately.

    Theorem 2.2 (``attention="dot"``) is a **reconstruction** -- the paper's exact weights were
    not public -- that reproduces Lloyd's algorithm exactly in the limit: tokens [x; y; ||x||^2; 1]
    and [c; e; ||c||^2; 1] (:class:`~kmtlib.embedding.NormAugmentedEmbedding`, width d + k + 2);
    dot-product attention with queries [x; -1/2] and keys [c; ||c||^2], so
    ``q.k = x.c - ||c||^2/2 = -||x - c||^2/2 + ||x||^2/2``, which is Euclidean attention up to a
    per-query constant (its blocks therefore run at ``2 gamma``); after the attention blocks the
    centre tokens pass through a feed-forward block with rectified-quadratic activation
    ``phi(z) = max(z, 0)^2`` that writes ||c||^2 back into the norm coordinate, which SAC erased
    (the point norms never change).

    Returns:
        ``cls(embedding, layer, reembed=False, config=...)``; the layer (``model.layer``) is a
        :class:`TheoremLayer` whose blocks (``model.layer.blocks["CAX"].Q`` etc.) hold the weights.
    """
    d = check_int("d", d, minimum=1)
    k = check_int("k", k, minimum=1)
    gamma = check_positive_float("gamma", gamma, allow_inf=True)
    check_choice("attention", attention, ATTENTION_KINDS)
    check_choice("centre_update", centre_update, CENTRE_UPDATES)
    check_choice("self_attention", self_attention, SELF_ATTENTION_MODES)
    if reset_gamma is not None:
        if self_attention != "attention":
            raise ValueError(
                "reset_gamma sets the temperature of genuine self-attention; it needs self_attention='attention'"
            )
        reset_gamma = check_positive_float("reset_gamma", reset_gamma, allow_inf=True)
    sa_gamma = gamma if reset_gamma is None else reset_gamma

    weights = theorem_weights(d, k, attention, dtype=torch.get_default_dtype())
    scale = 2.0 if attention == "dot" else 1.0
    identity = self_attention == "identity"
    blocks = {
        "CAX": AttentionBlock("CAX", *_qkv(weights["CAX"]), score=attention, gamma=gamma, scale=scale),
        "SAX": AttentionBlock(
            "SAX",
            *_qkv(weights["SAX"]),
            score=attention,
            gamma=sa_gamma,
            scale=scale,
            self_attention=True,
            identity=identity,
        ),
        "CAC": AttentionBlock(
            "CAC",
            *_qkv(weights["CAC"]),
            score=attention if centre_update == "attention" else "dot",
            map="softmax" if centre_update == "attention" else "linear",
            gamma=gamma,
            scale=scale,
        ),
        "SAC": AttentionBlock(
            "SAC",
            *_qkv(weights["SAC"]),
            score=attention,
            gamma=sa_gamma,
            scale=scale,
            self_attention=True,
            identity=identity,
        ),
    }
    ffn = RectifiedQuadraticFFN(**weights["FFN"]) if attention == "dot" else None
    kwargs = {
        "d": d,
        "k": k,
        "gamma": gamma,
        "attention": attention,
        "centre_update": centre_update,
        "self_attention": self_attention,
        "reset_gamma": reset_gamma,
    }
    layer = TheoremLayer(blocks, ffn, description={key: v for key, v in kwargs.items() if key not in ("d", "k")})
    embedding = OneHotEmbedding(d, k) if attention == "euclidean" else NormAugmentedEmbedding(d, k)
    return cls(embedding, layer, reembed=False, config={"builder": "from_theorem", "kwargs": kwargs})
