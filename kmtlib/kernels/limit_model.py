"""The whole forward pass of a fixed-weight model, fast: the kernel behind ``kmtlib.whole_pass(model)``,
asked for by name, for the theorem constructions and the soft variant (:mod:`kmtlib.fast.whole_pass`
decides where it applies, :func:`~kmtlib.fast.whole_pass.uses_whole_pass_kernel`, and runs its loop;
each block is described to the kernel in plain values, :class:`LimitBlock`).

It keeps its own update of the layer. The formula is :meth:`kmtlib.KMeansTransformer.forward`:
embed, apply :meth:`kmtlib.layer.KMeansLayer.forward` ``steps`` times, read the centres;
``tests/test_kernels.py`` pins this kernel to it (centres and objective within float64 rounding,
labels and hard assignments bitwise; not bitwise everywhere: the order of its sums differs). This kernel
computes the same with five changes, none of which changes a number except through the order
of a sum (BLAS may add the terms of a product in another order for another memory layout):

* **Coordinate-major point tokens.** The points are stored coordinate by coordinate, as the paper
  writes its columns (memory (B, D, n)): every block then reads a coordinate of all points as one
  contiguous row (CAX's scores are a product with the points' data rows, its new assignment is k
  whole rows, CAC sums along rows).
* **Selectors as slices.** The theorem weights are coordinate selectors, so a projection is
  evaluated on its non-zero block only: a slice of the token coordinates, times a sign or a
  diagonal (a small dense product for anything else). Products with an exact identity matrix
  (the centres' one-hot ids) are skipped after an exact check, and the normalisation of the
  weights is applied to the output, ``(U @ V) / Z`` (as Lloyd's ``sums / counts``). Multiplying
  by 1 or -1 and adding 0 do not round.
* **In place.** The new point tokens are written over the old ones (the model made them and
  nobody else holds them); temporaries live in one :class:`~kmtlib.kernels.scratch.Scratch`.
* **One pass for the hard assignment.** Where the layer writes the hard assignment (below), CAX's
  winners are written straight into the assignment coordinates that SAX would reset, and CAC
  reads its weights and their counts from them (:class:`_HardAssignment`: the same products,
  then operations that do not round).
* **The objective from the assignment.** Where CAX is hard Euclidean attention of the data
  coordinates and SAX resets exactly, the tokens after a layer hold the nearest-centre
  assignment of the centres it read (:func:`kmtlib.fast.choice.writes_hard_assignment`),
  so the objective of those centres needs no second distance computation.

Hard self-attention is evaluated in closed form (each token's own value, see
:mod:`kmtlib.kernels`); where hard attention compares scores from a product, equal keys get
bitwise equal scores (:func:`~kmtlib._numerics.tie_equal_keys`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch

from .._numerics import MAX_SCORE_ELEMENTS, by_query_chunks, euclidean_scores, lowest_true_, tie_equal_keys
from .layout import copy_transposed_
from .scratch import Scratch, same_storage
from .weights import unnormalised_row_weights_

SMALL_QUERY_BLOCK = 1024
"""Up to this many queries per task, strided and transposed operands are used as they are; above
it they are first laid out contiguously."""


class LimitBlock(NamedTuple):
    """One attention block as this kernel reads it, in plain values (:func:`kmtlib.fast.choice.limit_block`
    fills it in from the block's configuration and weights; the layer knows nothing of it)."""

    name: str
    weights: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    """The query, key and value matrices (D, D) (``token @ W.T``), without bias."""
    own_values: bool
    """Each token gets its own value (the identity attention, or hard self-attention in closed form)."""
    self_attention: bool
    euclidean: bool
    """The block's score is Euclidean, ``-||q - k||^2`` (else dot products; the linear map reads dot products)."""
    hard: bool
    """Averaging hard attention (exact comparison of scores)."""
    linear: bool
    """The normalised linear map (the scores are the weights)."""
    inverse_temperature: float


def is_coordinate_major(tokens: torch.Tensor) -> bool:
    """Whether tokens (B, m, D) are stored coordinate by coordinate (memory (B, D, m))."""
    return tokens.dim() == 3 and tokens.shape[1] > 1 and tokens.stride(1) == 1


# ----------------------------------------------------------------------------------- projections
class _Projection(NamedTuple):
    """``tokens @ W.T`` restricted to the output coordinates ``rows``: reads coordinates ``cols``,
    then multiplies by ``sign`` (+1 or -1), by ``diag`` (a vector) or by ``dense.T`` (a matrix)."""

    rows: slice | torch.Tensor
    cols: slice | torch.Tensor
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


def _nonzero_rows(W: torch.Tensor) -> list[int]:
    return torch.nonzero((W != 0).any(dim=1)).flatten().tolist()


def _compile(W: torch.Tensor, rows: list[int] | None = None) -> _Projection:
    """``tokens @ W.T`` on ``rows`` (default: the non-zero rows of W)."""
    W = W.detach()
    mask = W != 0
    if rows is None:
        rows = _nonzero_rows(W)
    cols = torch.nonzero(mask.any(dim=0)).flatten().tolist()
    sub = W[rows][:, cols]
    sign, diag, dense = 1.0, None, None
    if len(rows) == len(cols) and bool((sub == torch.diag(torch.diagonal(sub))).all()):
        dg = torch.diagonal(sub).clone()
        if bool((dg == -1).all()):
            sign = -1.0
        elif not bool((dg == 1).all()):
            diag = dg
    else:
        dense = sub.clone()
    return _Projection(_as_index(rows, W.device), _as_index(cols, W.device), sign, diag, dense)


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


# ----------------------------------------------------------------------------------- one block
class _FastBlock:
    """One block's attention on compiled projections (module documentation)."""

    def __init__(self, block: LimitBlock, scratch: Scratch) -> None:
        self.block, self.scratch = block, scratch
        self.compile()

    def compile(self) -> None:
        """Compile the block's weights as they are now (once per forward pass, so that a weight
        changed between calls is seen)."""
        with torch.inference_mode(False):
            Q, K, V = (W.detach() for W in self.block.weights)
            score_rows = sorted(set(_nonzero_rows(Q)) | set(_nonzero_rows(K)))
            self.plan = _Plan(_compile(Q, score_rows), _compile(K, score_rows), _compile(V))

    def buffer(self, slot: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        return self.scratch(f"{self.block.name}.{slot}", shape, like.dtype, like.device)

    @property
    def euclidean(self) -> bool:
        return self.block.euclidean and not self.block.linear

    @property
    def hard_weights(self) -> bool:
        # (hard attention, or a soft-max whose inverse temperature is infinite)
        return self.block.hard or (not self.block.linear and self.block.inverse_temperature == math.inf)

    def ties_need_care(self, q: torch.Tensor) -> bool:
        # (not for the one-hot id queries of CAC and SAC, whose scores are exact small integers)
        return self.block.hard and not _is_identity(q)

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """Scores (B, m, r), and whether the map may overwrite them (False: a view of the keys).

        Euclidean scores are ``2 q.k - ||k||^2`` (the row constant ``-||q||^2`` is left out);
        identity queries (the centres' ids in CAC and SAC) give ``q.k = k``. With fewer keys than
        queries (points attending to the centres) the scores are computed keys-major, (B, r, m)
        in memory, and returned as a transposed view: the map reduces over the keys, which is slow
        along a short inner dimension."""
        euclidean = self.euclidean
        B, m, r = q.shape[0], q.shape[1], k.shape[1]
        if r < m:
            S = self.buffer("S", (B, r, m), q)
            if q.stride(-2) != 1 and not q.is_contiguous() and m > SMALL_QUERY_BLOCK:
                q = self.buffer("q", q.shape, q).copy_(q)
            if euclidean:
                k2 = (k * k).sum(-1, keepdim=True).neg_()
                return torch.baddbmm(k2, k, q.transpose(1, 2), alpha=2.0, out=S).transpose(1, 2), True
            return torch.bmm(k, q.transpose(1, 2), out=S).transpose(1, 2), True
        if _is_identity(q):
            if not euclidean:
                return k.transpose(1, 2), False
            S = torch.bmm(q, k.transpose(1, 2), out=self.buffer("S", (B, m, r), q))
            k2 = torch.mul(S, S, out=self.buffer("S2", (B, m, r), q)).sum(1, keepdim=True).neg_()
            return torch.add(k2, S, alpha=2.0, out=S), True
        S = self.buffer("S", (B, m, r), q)
        if euclidean:
            k2 = (k * k).sum(-1).neg_().unsqueeze(1)
            return torch.baddbmm(k2, q, k.transpose(1, 2), alpha=2.0, out=S), True
        return torch.bmm(q, k.transpose(1, 2), out=S), True

    def attend_chunk(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, exact: bool, columns: bool
    ) -> torch.Tensor:
        beta, hard, linear = self.block.inverse_temperature, self.hard_weights, self.block.linear
        if self.euclidean and exact:
            scores = euclidean_scores(q, k, query_norm=True, exact=True)
            U, Z = unnormalised_row_weights_(scores, beta, hard=hard, linear=linear)
        else:
            scores, owned = self.scores(q, k)
            if self.ties_need_care(q):
                tied = tie_equal_keys(scores, k, dim=2)
                scores, owned = tied, owned or tied is not scores
            U, Z = unnormalised_row_weights_(scores, beta, hard=hard, linear=linear, owned=owned)
        if _is_identity(v) and (U.is_contiguous() or U.shape[1] <= SMALL_QUERY_BLOCK or columns):
            out = U  # U @ I (the centres' one-hot ids as values): no product
        elif v.is_contiguous() and _is_identity(U):
            out = v
        else:
            out = torch.bmm(U, v, out=self.buffer("out", (U.shape[0], U.shape[1], v.shape[2]), U))
        if Z is None:
            return out
        if Z.device.type == "cpu" and bool((Z == 1).all()):
            return out  # every row has one winner (hard attention): dividing by 1 changes nothing
        return out / Z if (out is v or out is U) else out.div_(Z)

    def increment(self, queries: torch.Tensor, keys: torch.Tensor) -> tuple[slice | torch.Tensor, torch.Tensor, float]:
        """The block's output on its non-zero coordinates as ``(rows, values, alpha)``: the output
        is ``alpha * values`` there and exactly 0 elsewhere. ``values`` may be a view of the
        tokens or scratch memory that the block's next call overwrites."""
        plan, block = self.plan, self.block
        if block.own_values:
            return (plan.v.rows, *plan.v.lazy(queries))  # each token's own value
        exact = block.self_attention and block.hard and block.euclidean
        v, alpha = plan.v.lazy(keys)
        q, k = plan.q(queries), plan.k(keys)
        columns = is_coordinate_major(queries)
        per_query = q.shape[0] * k.shape[1] * (q.shape[-1] if exact else 1)
        # (a chunk's result may live in scratch memory that the next chunk reuses: copy it)
        out = by_query_chunks(lambda qc: self.attend_chunk(qc, k, v, exact, columns), q, per_query, copy=True)
        return plan.v.rows, out, alpha


# ----------------------------------------------------------------------------------- the layer
def _residual(tokens: torch.Tensor, *increments: tuple[slice | torch.Tensor, torch.Tensor, float]) -> torch.Tensor:
    """``tokens + inc_1 + inc_2 + ...`` (left to right) as a new tensor of the same layout."""
    out = tokens.clone()
    for rows, values, alpha in increments:
        if isinstance(rows, slice):
            out[..., rows].add_(values, alpha=alpha)
        else:
            out.index_add_(-1, rows, values, alpha=alpha)
    return out


def _residual_in_place(tokens: torch.Tensor, *increments: tuple[slice | torch.Tensor, torch.Tensor, float]) -> bool:
    """:func:`_residual` written into ``tokens`` itself, with the same operations in the same order
    (so the same roundings); False, leaving ``tokens`` untouched, where that is not safe: an
    increment that shares memory with the tokens must be the very coordinates it is added to (a
    reset reading ``h`` and writing ``h - h`` element by element), and come first."""
    for position, (rows, values, _) in enumerate(increments):
        if not isinstance(rows, slice):
            return False
        if same_storage(values, tokens):
            target = tokens[..., rows]
            if (
                position != 0
                or values.shape != target.shape
                or values.stride() != target.stride()
                or values.data_ptr() != target.data_ptr()
            ):
                return False
    for rows, values, alpha in increments:
        tokens[..., rows].add_(values, alpha=alpha)
    return True


class _HardAssignment:
    """CAX and SAX of Theorem 2.1's limit as one pass over the points, and CAC's means read from it
    (where the model found that the layer writes the hard assignment and the compiled weights
    have this form: :meth:`of`).

    The blocks compute, point by point: the scores ``2 x.c - ||c||^2`` (CAX), the winners ``U``
    (1.0 where a score equals the row maximum, else 0.0) and their count ``Z``, the reset
    ``h + (-h)`` of the assignment coordinates (SAX), and then ``0 + U / Z`` there. The reset of
    a finite coordinate is exactly +0, and +0 plus a value >= +0 is that value, so the new
    coordinates are ``U / Z``, and ``U`` itself where every point has one winner (``Z = 1``,
    nothing divided). This pass writes ``U`` straight into the tokens as one comparison
    ``s >= max s`` (1.0 or 0.0), which is ``s == max s`` (nothing exceeds the maximum; NaN
    satisfies neither), of the same scores (the same product, :meth:`_FastBlock.scores`, on the same chunks of
    points): passes over the (n, k) scores fewer (no comparison in place in the scores, no
    reset, no second addition). One product of ``U`` with the rows (1, ..., 1) and (0, ..., k-1)
    counts each point's winners and, where there is one (the check), gives its index: the
    label, which is the lowest positive coordinate (:func:`lowest_positive`); the cluster sizes
    are counted from the labels.

    CAC, hard or linear attention with the centres' one-hot ids as queries, reads the assignment
    coordinates as its scores. Linear: they are its weights ``U``, ``Z`` their row sum, the
    cluster's size (a sum of 0s and 1s, exact in any order). Hard: the row maximum of a cluster
    with a point is 1, so its winners are the assignment itself (no copy, no comparison) and
    ``Z`` its size. Either way the means are the same product ``U @ V`` (the same operands in the
    same memory layout) divided by the same counts, here counted from the mask.
    Ties between centres (coordinates ``1 / Z``), a NaN score, an empty cluster (row maximum 0:
    every point wins) and tiny degenerate shapes are left to the blocks, which then run as
    written; after a NaN the tokens may hold NaN, which the reset keeps, so the blocks run to
    the end of the forward pass.
    """

    def __init__(self, rows: slice, cax: _FastBlock, cac: _FastBlock | None, scratch: Scratch) -> None:
        self.rows, self.cax, self.cac, self.scratch = rows, cax, cac, scratch
        self.exact = True  # the assignment coordinates are finite (a reset gives exactly 0)
        self.labels: torch.Tensor | None = None

    @classmethod
    def of(cls, blocks: Mapping[str, _FastBlock], scratch: Scratch) -> _HardAssignment | None:
        """The pass for these compiled blocks, or None where their weights do not have its form:
        CAX hard Euclidean attention whose values (the centres' ids) go to a slice of coordinates
        that SAX resets with its own values times -1; CAC (optional) hard dot-product attention,
        or linear, whose keys are that slice as it is."""
        cax, sax, cac = blocks["CAX"], blocks["SAX"], blocks["CAC"]
        rows, reset = cax.plan.v.rows, sax.plan.v
        if not (
            isinstance(rows, slice)
            and cax.euclidean
            and cax.hard_weights
            and not (cax.block.own_values or cax.block.self_attention)
            and sax.block.own_values
            and reset.rows == rows
            and reset.cols == rows
            and reset.sign == -1.0
            and reset.diag is None
            and reset.dense is None
        ):
            return None
        keys = cac.plan.k
        reads_assignment = (
            (cac.hard_weights or cac.block.linear)
            and not (cac.euclidean or cac.block.own_values or cac.block.self_attention)
            and keys.cols == rows
            and keys.sign == 1.0
            and keys.diag is None
            and keys.dense is None
        )
        return cls(rows, cax, cac if reads_assignment else None, scratch)

    def write_(self, X: torch.Tensor, C: torch.Tensor) -> torch.Tensor | None:
        """Write CAX's hard assignment of the point tokens ``X`` (B, n, D) to the centre tokens
        ``C`` into ``X`` (what CAX and SAX write there) and return the cluster sizes (B, k), with
        the labels in ``self.labels``; None where a point has several winners or a NaN score (the
        blocks then compute the layer again, from tokens that this pass has overwritten with
        finite values, which their reset erases)."""
        plan, B, k = self.cax.plan, X.shape[0], C.shape[1]
        # (1, j) for centre j: U's product with them counts each point's winners and, where there
        # is one, gives its index (sums of 0s and 1s, and of j * 1 and zeros: exact)
        count_and_index = torch.stack([torch.ones(k), torch.arange(k)]).to(X).expand(B, 2, k)
        failed: list[bool] = []

        def chunk(Xc: torch.Tensor) -> torch.Tensor:
            m = Xc.shape[1]
            if failed:
                return Xc.new_empty(0)
            q, keys = plan.q(Xc), plan.k(C)
            scores, _ = self.cax.scores(q, keys)  # (B, m, k), keys-major in memory
            if self.cax.ties_need_care(q):
                scores = tie_equal_keys(scores, keys, dim=2)
            top = scores.amax(dim=-1, keepdim=True)
            winners = torch.ge(scores, top, out=Xc[..., self.rows])  # 1.0 and 0.0: U (see the class)
            if bool(torch.isnan(top.sum())):
                self.exact = False
            per_point = torch.bmm(count_and_index, winners.transpose(1, 2))  # (B, 2, m)
            # (every point has a winner where no score is NaN: m winners in all means one each)
            if not self.exact or B * m >= 2.0 / torch.finfo(X.dtype).eps or float(per_point[:, 0].sum()) != B * m:
                failed.append(True)
                return Xc.new_empty(0)
            return per_point[:, 1].long()

        labels = by_query_chunks(chunk, X, B * k)
        if failed:
            return None
        self.labels = labels
        # the cluster sizes: one label per point
        rows = labels + torch.arange(0, B * k, k, device=labels.device).unsqueeze(1)
        return torch.bincount(rows.view(-1), minlength=B * k).view(B, k)

    def means(
        self, X: torch.Tensor, C: torch.Tensor, counts: torch.Tensor | None
    ) -> tuple[slice | torch.Tensor, torch.Tensor, float] | None:
        """CAC's increment ``(rows, values, alpha)`` from the one-hot assignment that :meth:`write_`
        wrote (its cluster sizes ``counts``), or None where the block must compute it."""
        cac = self.cac
        if counts is None or cac is None or not bool((counts > 0).all()):
            return None
        B, n, k = X.shape[0], X.shape[1], C.shape[1]
        q = cac.plan.q(C)
        v, alpha = cac.plan.v.lazy(X)
        winners = X[..., self.rows].transpose(1, 2)  # (B, k, n): U, rows contiguous as in the block
        if not _is_identity(q) or B * n * k > MAX_SCORE_ELEMENTS or _is_identity(v) or _is_identity(winners):
            return None  # (the block would chunk the centres, or skip the product: let it)
        out = torch.bmm(winners, v, out=cac.buffer("out", (B, k, v.shape[2]), winners))
        if not bool((counts == 1).all()):
            out.div_(counts.to(out.dtype).unsqueeze(2))
        return cac.plan.v.rows, out, alpha


class LimitRunner:
    """The compiled blocks and scratch memory of one model's whole pass (the caller's
    :class:`kmtlib.fast.WholePass` keeps it between calls, so the scratch memory is reused; not
    thread-safe: one forward pass at a time).
    ``blocks``: the layer's four blocks by name (CAX, SAX, CAC, SAC); ``ffn``: its feed-forward
    block on the centre tokens, if any."""

    def __init__(
        self,
        blocks: Mapping[str, LimitBlock] | None = None,
        ffn: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.scratch = Scratch()
        self.blocks: dict[str, _FastBlock] = {}
        self.ffn = ffn
        self.labels: torch.Tensor | None = None
        self.assignment: _HardAssignment | None = None
        if blocks is not None:
            self.compile(blocks, ffn)

    def compile(
        self,
        blocks: Mapping[str, LimitBlock],
        ffn: Callable[[torch.Tensor], torch.Tensor] | None = None,
        hard_assignment: bool = False,
    ) -> None:
        """Compile the blocks' weights as they are now (once per forward pass). ``hard_assignment``:
        the model found that the layer writes the hard nearest-centre assignment
        (:func:`kmtlib.fast.choice.writes_hard_assignment`); CAX and SAX then run as one
        pass, :class:`_HardAssignment`, where their compiled weights have its form."""
        self.blocks = {name: _FastBlock(block, self.scratch) for name, block in blocks.items()}
        self.ffn = ffn
        self.labels = None
        self.assignment = _HardAssignment.of(self.blocks, self.scratch) if hard_assignment else None

    def advance_(self, X: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer (:meth:`kmtlib.layer.KMeansLayer.forward`), the new point tokens written into
        ``X`` where it can. Where the model said the layer writes the hard assignment
        (``compile(..., hard_assignment=True)``), ``self.labels`` holds afterwards the lowest
        positive entry of the new assignment (:func:`lowest_positive`), else None."""
        b = self.blocks
        self.labels = None
        counts = self.assignment.write_(X, C) if self.assignment is not None and self.assignment.exact else None
        if counts is None or self.assignment is None:
            assign = b["CAX"].increment(X, C)
            increments = (b["SAX"].increment(X, X), assign)
            if not _residual_in_place(X, *increments):
                X = _residual(X, *increments)
        else:
            self.labels = self.assignment.labels
        means = self.assignment.means(X, C, counts) if self.assignment is not None else None
        if means is None:
            means = b["CAC"].increment(C, X)
        C = _residual(C, b["SAC"].increment(C, C), means)
        if self.ffn is not None:
            C = C + self.ffn(C)
        return X, C


def point_tokens(X: torch.Tensor, width: int, k: int, norm_augmented: bool = False) -> torch.Tensor:
    """Coordinate-major point tokens (B, n, D) (memory (B, D, n)) of points X (B, n, d): ``[x; 0]``,
    or with ``norm_augmented`` ``[x; 0; ||x||^2; 1]`` (the embeddings of :mod:`kmtlib.embedding`)."""
    B, n, d = X.shape
    D = width
    tokens = X.new_empty(B, D, n).transpose(1, 2)
    if X.device.type == "cpu" and not (torch.is_grad_enabled() and X.requires_grad):
        copy_transposed_(tokens[..., :d], X)
    else:
        tokens[..., :d] = X
    tokens[..., d : d + k] = 0
    if norm_augmented:
        tokens[..., d + k] = (X * X).sum(-1)
        tokens[..., d + k + 1] = 1
    return tokens


def lowest_positive(weights: torch.Tensor) -> torch.Tensor:
    """Index (B, n) of the first positive entry along the last axis of ``weights`` (B, n, k);
    k - 1 where there is none (a NaN row). The reduction runs over the k entries viewed as
    (B, k, n): for coordinate-major tokens that view is contiguous."""
    B, n, k = weights.shape
    if k == 1:
        return torch.zeros(B, n, dtype=torch.long, device=weights.device)
    return lowest_true_(weights.transpose(1, 2) > 0, dim=1).clamp_max_(k - 1)


__all__ = ["LimitBlock", "LimitRunner", "is_coordinate_major", "lowest_positive", "point_tokens"]
