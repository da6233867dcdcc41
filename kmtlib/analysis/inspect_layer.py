"""Inside one layer: what the four attention blocks hold and compute, theorem and learned alike.

Chapter 09 puts the trained layer of the learning experiments beside the fixed weights of
Theorem 2.1 (the paper's Figs. 5 and 6) and measures how its one step differs from a Lloyd
step. This module is the measuring kit, in three parts:

* :func:`block_weights` reads the query, key and value maps (weights and biases) of the four
  blocks of either kind of model into one layout, :class:`BlockWeights`, keyed by the paper's
  block names ``CAX, SAX, CAC, SAC``, with the bilinear form ``Q^T K`` (the cross term of
  ``-||Q z - K z'||^2``, what decides which keys a query prefers).
* :func:`layer_maps` applies one layer to ``(X, C)`` and returns its four attention matrices
  and the tokens it produced (the learned layer without dropout, whatever its mode);
  :func:`paper_theorem_model` builds the theorem model the way the paper draws it (inverse
  temperature ``gamma / sqrt(D)`` in every block, or the limit).
* :func:`compare_with_lloyd` measures one step of a model against one Lloyd step from the same
  centres: per cluster, how far the new centre lies from the cluster mean and from the old
  centre, the step along Lloyd's direction, whether it still sits nearest its own cluster's mean;
  per task, how the objective's decrease splits into the part earned on the old assignment and
  the part earned by re-assigning the points. :func:`attention_summary` turns the maps into
  measures of softness (effective number of centres per point, of points per centre) and of
  agreement with Lloyd's nearest-centre assignment; :func:`components_covered` counts the
  mixture components that some centre sits nearest to.

Conventions. Rows are tokens; a weight ``W`` acts on row tokens as ``token @ W.T`` (``W @ token``
in the paper's column layout), as ``nn.Linear`` and :func:`kmtlib.theorem_weights` store it.
Lloyd's step here assigns every point to its nearest old centre (lowest index on ties) and
moves each centre to the mean of its points; an empty cluster keeps its old centre (stated
beside every number that depends on it). Everything is batched over tasks and computed without
gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import torch

from .._checks import check_centers, check_int, check_points, check_positive_float
from .._numerics import MAX_SCORE_ELEMENTS
from ..chunks import chunk_size, in_chunks
from ..layer import BLOCK_NAMES, KMeansLayer
from ..lloyd import lloyd_step
from ..objective import assignment_cost, kmeans_objective_unchecked, nearest_center
from ..transformer import KMeansTransformer

__all__ = [
    "BLOCK_NAMES",
    "AttentionSummary",
    "BlockWeights",
    "LayerMaps",
    "StepComparison",
    "attention_summary",
    "block_weights",
    "compare_with_lloyd",
    "components_covered",
    "effective_number",
    "entropy",
    "inspect_step",
    "layer_maps",
    "layer_maps_centers",
    "lloyd_step",  # (kmtlib.lloyd.lloyd_step, where the readers of this module look)
    "paper_theorem_model",
    "qk_structure",
]

# MAX_SCORE_ELEMENTS (kmtlib._numerics): the largest number of self-attention weights (tasks x n x n)
# that layer_maps builds per chunk of tasks; larger batches are processed a few tasks at a time.


# ------------------------------------------------------------------------------------ weights
@dataclass
class BlockWeights:
    """Query, key and value maps of one attention block: ``q = Q z + q_bias`` etc. (column layout).

    All tensors are detached float64 CPU copies: (D, D) matrices and (D,) biases (zeros for the
    theorem model, which has none).
    """

    Q: torch.Tensor
    K: torch.Tensor
    V: torch.Tensor
    q_bias: torch.Tensor
    k_bias: torch.Tensor
    v_bias: torch.Tensor

    @property
    def QtK(self) -> torch.Tensor:
        """``Q^T K`` (D, D): ``-||Q z - K z'||^2 = -z^T Q^T Q z + 2 z^T Q^T K z' - z'^T K^T K z'``
        (biases aside), so this bilinear form is how a query ``z`` rates a key ``z'``."""
        return self.Q.T @ self.K

    def matrices(self) -> dict[str, torch.Tensor]:
        """``{"Q", "K", "V", "QtK"}``, in the order of the paper's Fig. 5 columns."""
        return {"Q": self.Q, "K": self.K, "V": self.V, "QtK": self.QtK}


def _check_model(model: object) -> KMeansTransformer:
    if not isinstance(model, KMeansTransformer) or not isinstance(model.layer, KMeansLayer):
        raise TypeError(f"model must be a kmtlib.KMeansTransformer, got {type(model).__name__}")
    return model


def block_weights(model: KMeansTransformer) -> dict[str, BlockWeights]:
    """The four blocks' maps, keyed ``"CAX", "SAX", "CAC", "SAC"`` (paper order); a map without
    bias (the theorem's) gets zero biases, so that every model can be drawn and compared alike."""
    _check_model(model)

    def f64(t: torch.Tensor) -> torch.Tensor:
        return t.detach().to("cpu", torch.float64).clone()

    def bias(linear: torch.nn.Linear) -> torch.Tensor:
        return f64(linear.bias) if linear.bias is not None else torch.zeros(linear.out_features, dtype=torch.float64)

    weights = {}
    for name, block in model.layer.blocks.items():
        query, key, value = block.linear_maps()
        weights[name] = BlockWeights(
            f64(query.weight), f64(key.weight), f64(value.weight), bias(query), bias(key), bias(value)
        )
    return weights


def qk_structure(M: torch.Tensor, d: int) -> dict[str, float]:
    """How close a (D, D) bilinear form ``Q^T K`` is to the theorem's coordinate selectors.

    Returns, for the data block (first ``d`` coordinates) and the scratch/id block (the rest,
    absent for width-d tokens): the mean absolute diagonal entry, the mean absolute off-diagonal
    entry, and the mean absolute entry of the two cross blocks. The theorem's CAX/SAX form has
    data diagonal 1 and everything else 0; its CAC/SAC form has id diagonal 1 and the rest 0.
    """
    if not isinstance(M, torch.Tensor) or M.dim() != 2 or M.shape[0] != M.shape[1]:
        got = tuple(M.shape) if isinstance(M, torch.Tensor) else type(M).__name__
        raise ValueError(f"M must be a square matrix, got {got}")
    D = M.shape[0]
    d = check_int("d", d, minimum=1)
    if d > D:
        raise ValueError(f"d={d} exceeds the width {D} of M")
    A = M.detach().abs().to(torch.float64)

    def diag_off(block: torch.Tensor) -> tuple[float, float]:
        m = block.shape[0]
        diag = float(block.diagonal().mean())
        off = float((block.sum() - block.diagonal().sum()) / (m * m - m)) if m > 1 else float("nan")
        return diag, off

    out = {}
    out["data_diag"], out["data_off"] = diag_off(A[:d, :d])
    if d < D:
        out["id_diag"], out["id_off"] = diag_off(A[d:, d:])
        out["cross"] = float(torch.cat([A[:d, d:].flatten(), A[d:, :d].flatten()]).mean())
    return out


# ------------------------------------------------------------------------------------ maps
def paper_theorem_model(
    d: int, k: int, gamma: float = 1000.0, *, sqrt_scaling: bool = True, dtype: torch.dtype = torch.float64
) -> KMeansTransformer:
    """Theorem 2.1's model as the paper draws its attention maps (Fig. 6).

    Every block uses genuine Euclidean soft-max attention (the centre update included, no
    identity shortcut) at inverse temperature ``gamma / sqrt(D)`` with ``D = d + k`` when
    ``sqrt_scaling`` (the learned layer's convention; the paper's code draws the theorem model at
    ``gamma = 1000`` with it), or raw ``gamma``. ``gamma = math.inf`` is the limit (averaging hard
    attention in every block).
    """
    d = check_int("d", d, minimum=1)
    k = check_int("k", k, minimum=1)
    gamma = check_positive_float("gamma", gamma, allow_inf=True)
    if not isinstance(sqrt_scaling, bool):
        raise TypeError(f"sqrt_scaling must be a bool, got {type(sqrt_scaling).__name__}")
    effective = gamma / math.sqrt(d + k) if (sqrt_scaling and gamma != math.inf) else gamma
    model = KMeansTransformer.from_theorem(d, k, gamma=effective, center_update="attention", self_attention="attention")
    return model.to(dtype)


@dataclass
class LayerMaps:
    """One layer applied to ``(X, C)``: the four attention matrices and the tokens it produced.

    Attributes:
        CAX: (B, n, k) each point's weights over the centres.
        SAX: (B, n, n) each point's weights over the points.
        CAC: (B, k, n) each centre's weights over the **updated** points.
        SAC: (B, k, k) each centre's weights over the centres.
        point_tokens: (B, n, D) the point tokens after the layer (``[x; y]`` in the theorem).
        center_tokens: (B, k, D) the centre tokens after the layer.
        centers: (B, k, d) the new centres (data part of the centre tokens).
        d: data dimension (the point tokens' first d coordinates are the data part).
    """

    CAX: torch.Tensor
    SAX: torch.Tensor
    CAC: torch.Tensor
    SAC: torch.Tensor
    point_tokens: torch.Tensor
    center_tokens: torch.Tensor
    centers: torch.Tensor
    d: int

    def maps(self) -> dict[str, torch.Tensor]:
        """``{"CAX": ..., "SAX": ..., "CAC": ..., "SAC": ...}``."""
        return {name: getattr(self, name) for name in BLOCK_NAMES}

    @property
    def scratch(self) -> torch.Tensor | None:
        """(B, n, D - d) what the point tokens hold beyond the data (the one-hot assignment in the
        theorem), or None for width-d tokens."""
        return self.point_tokens[..., self.d :] if self.point_tokens.shape[-1] > self.d else None


def _check_inputs(model: KMeansTransformer, X: torch.Tensor, C: torch.Tensor) -> None:
    check_points(X)
    check_centers(C, X, name="C")
    model.checked_steps(X, C, 0, warn=False)


@torch.no_grad()
def layer_maps(model: KMeansTransformer, X: torch.Tensor, C: torch.Tensor) -> LayerMaps:
    """Embed ``(X, C)``, apply the model's layer once, and return its attention maps and tokens.

    A trained layer is evaluated without attention dropout whatever its ``train()``/``eval()``
    mode (the weights it applies in expectation); a theorem model at its own temperature (see
    :func:`paper_theorem_model` for the paper's drawing convention). The maps are full matrices,
    the self-attention of the points (B, n, n) included; large batches are processed in chunks of
    tasks so that at most :data:`MAX_SCORE_ELEMENTS` self-attention weights exist per chunk.
    """
    _check_model(model)
    _check_inputs(model, X, C)
    n = X.shape[1]
    exact = any(b.self_attention and b.config.is_hard for b in model.layer.blocks.values())
    chunk = chunk_size(MAX_SCORE_ELEMENTS, n * n * (model.width if exact else 1))

    def one_chunk(Xc: torch.Tensor, Cc: torch.Tensor) -> tuple[torch.Tensor, ...]:
        P, Ct = model.embedding.embed(Xc, Cc)
        P1, Ct1 = model.apply_layer(P, Ct)
        maps = model.layer.attention_maps(P, Ct, step=model.apply_layer)
        return (*(maps[name] for name in BLOCK_NAMES), P1, Ct1)

    training = model.training
    model.eval()  # (no attention dropout: the weights the layer applies in expectation)
    try:
        cax, sax, cac, sac, P1, Ct1 = in_chunks(one_chunk, X, C, size=chunk)
    finally:
        model.train(training)
    return LayerMaps(cax, sax, cac, sac, P1, Ct1, model.embedding.centers(Ct1), model.d)


# ------------------------------------------------------------------------------------ softness
def entropy(W: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Shannon entropy (nats) of the distributions along ``dim`` (``0 log 0 = 0``)."""
    return -torch.special.xlogy(W, W).sum(dim)


def effective_number(W: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``exp(entropy)``: the number of keys a distribution spreads over (1 for one-hot, ``m`` for
    uniform weights on ``m`` keys)."""
    return entropy(W, dim).exp()


@dataclass
class AttentionSummary:
    """Softness of the layer's attention and its agreement with Lloyd's assignment.

    ``labels`` below is Lloyd's assignment: each point's nearest **old** centre.

    Attributes:
        cax_effective: (B, n) effective number of centres each point attends to (1 = hard).
        cax_max: (B, n) each point's largest weight over the centres.
        cax_agree: (B, n) whether a point's most-attended centre is its nearest one.
        sax_self: (B, n) the weight a point puts on itself in SAX (1 = the theorem's reset).
        sax_effective: (B, n) effective number of points each point attends to in SAX.
        sax_own_mass: (B, n) the weight a point puts in SAX on the points of its own cluster
            (itself included; 1 in the theorem, whose SAX attends to the point alone).
        cac_effective: (B, k) effective number of points each centre attends to.
        cac_own_mass: (B, k) the weight a centre puts on the points of its own cluster (1 in
            the theorem's limit; NaN-free: 0 for an empty cluster).
        cac_agree: (B, n) whether the centre that attends most to a point in CAC is its nearest
            centre (the assignment the centre update actually uses, read off column-wise).
        sac_self: (B, k) the weight a centre puts on itself in SAC.
        scratch_agree: (B, n) whether the largest scratch coordinate of an updated point token is
            its nearest centre's index (the theorem writes a one-hot there), or None (width d).
        point_shift: (B, n) ``||x_i' - x_i||``: how far the layer moves a point's data part (the
            theorem leaves it exactly in place).
        counts: (B, k) cluster sizes under Lloyd's assignment.
    """

    cax_effective: torch.Tensor
    cax_max: torch.Tensor
    cax_agree: torch.Tensor
    sax_self: torch.Tensor
    sax_effective: torch.Tensor
    sax_own_mass: torch.Tensor
    cac_effective: torch.Tensor
    cac_own_mass: torch.Tensor
    cac_agree: torch.Tensor
    sac_self: torch.Tensor
    scratch_agree: torch.Tensor | None
    point_shift: torch.Tensor
    counts: torch.Tensor

    def cat(self, other: AttentionSummary) -> AttentionSummary:
        """Both batches of tasks in one summary."""

        def join(name: str) -> Any:  # (a tensor, or None where both summaries have None)
            a, b = getattr(self, name), getattr(other, name)
            return None if a is None else torch.cat([a, b])

        return AttentionSummary(**{f.name: join(f.name) for f in fields(self)})


def attention_summary(maps: LayerMaps, X: torch.Tensor, C: torch.Tensor) -> AttentionSummary:
    """Measures of softness and agreement of the maps of one layer applied to ``(X, C)``."""
    if not isinstance(maps, LayerMaps):
        raise TypeError(f"maps must be a LayerMaps (from layer_maps), got {type(maps).__name__}")
    check_points(X)
    check_centers(C, X, name="C")
    B, n, d = X.shape
    k = C.shape[1]
    if maps.CAX.shape != (B, n, k):
        raise ValueError(f"the maps were computed for CAX of shape {tuple(maps.CAX.shape)}, but X, C give {(B, n, k)}")
    X = X.to(maps.CAX.dtype)
    labels = nearest_center(X, C.to(X.dtype))
    onehot = torch.nn.functional.one_hot(labels, k).to(X.dtype)  # (B, n, k)
    counts = onehot.sum(1)
    scratch = maps.scratch
    return AttentionSummary(
        cax_effective=effective_number(maps.CAX),
        cax_max=maps.CAX.amax(-1),
        cax_agree=maps.CAX.argmax(-1) == labels,
        sax_self=maps.SAX.diagonal(dim1=1, dim2=2),
        sax_effective=effective_number(maps.SAX),
        sax_own_mass=(torch.bmm(maps.SAX, onehot) * onehot).sum(-1),
        cac_effective=effective_number(maps.CAC),
        cac_own_mass=(maps.CAC * onehot.transpose(1, 2)).sum(-1),
        cac_agree=maps.CAC.argmax(1) == labels,
        sac_self=maps.SAC.diagonal(dim1=1, dim2=2),
        scratch_agree=None if scratch is None else scratch[..., :k].argmax(-1) == labels,
        point_shift=(maps.point_tokens[..., :d] - X).norm(dim=-1),
        counts=counts,
    )


# ------------------------------------------------------------------------------------ moves
@dataclass
class StepComparison:
    """One model step against one Lloyd step from the same centres ``C``.

    Per cluster (B, k), with ``m_j`` the mean of the points nearest to old centre ``c_j`` and
    ``c_j'`` the model's new centre:

    Attributes:
        counts: cluster sizes (points nearest to each old centre).
        model_move: ``||c_j' - c_j||``.
        lloyd_move: ``||m_j - c_j||`` (0 for an empty cluster, which keeps its centre).
        dist_to_mean: ``||c_j' - m_j||`` (NaN for an empty cluster: it has no mean).
        step_ratio: the model's step projected on Lloyd's, ``<c_j' - c_j, m_j - c_j> / ||m_j - c_j||^2``
            (1 = Lloyd's step length, < 1 shorter, > 1 overshooting; NaN where Lloyd does not
            move: an empty cluster).
        cosine: cosine between the model's and Lloyd's steps (NaN where either is 0).
        nearest_own_mean: whether ``c_j'`` lies nearer to ``m_j`` than to any other cluster mean
            (False for an empty cluster): the centre still stands for its cluster.

    Per task (B,): the objective before the step and after each update, and on the **old**
    assignment (each point charged to its old cluster's new centre):

    Attributes:
        objective_before: ``L(C)``.
        objective_model, objective_lloyd: ``L(C')`` and ``L(M)`` (points re-assigned).
        fixed_model, fixed_lloyd: ``sum_i ||x_i - c'_{a_i}||^2`` and the same for ``M``, with
            ``a_i`` the old assignment. The decrease ``L(C) - L(C')`` splits into
            ``L(C) - fixed`` (earned on the old assignment; Lloyd's means are the best possible
            here) and ``fixed - L(C')`` (earned by re-assigning points to the new centres, >= 0).
        n_empty: (B,) number of empty clusters.
    """

    counts: torch.Tensor
    model_move: torch.Tensor
    lloyd_move: torch.Tensor
    dist_to_mean: torch.Tensor
    step_ratio: torch.Tensor
    cosine: torch.Tensor
    nearest_own_mean: torch.Tensor
    objective_before: torch.Tensor
    objective_model: torch.Tensor
    objective_lloyd: torch.Tensor
    fixed_model: torch.Tensor
    fixed_lloyd: torch.Tensor
    n_empty: torch.Tensor

    @property
    def update_gain_model(self) -> torch.Tensor:
        """(B,) ``L(C) - fixed_model``: decrease on the old assignment."""
        return self.objective_before - self.fixed_model

    @property
    def reassign_gain_model(self) -> torch.Tensor:
        """(B,) ``fixed_model - L(C')``: decrease from re-assigning the points."""
        return self.fixed_model - self.objective_model

    @property
    def update_gain_lloyd(self) -> torch.Tensor:
        return self.objective_before - self.fixed_lloyd

    @property
    def reassign_gain_lloyd(self) -> torch.Tensor:
        return self.fixed_lloyd - self.objective_lloyd

    def cat(self, other: StepComparison) -> StepComparison:
        """Both batches of tasks in one comparison."""
        return StepComparison(
            **{f.name: torch.cat([getattr(self, f.name), getattr(other, f.name)]) for f in fields(self)}
        )


def _pair_distances(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """(b, p, q) squared distances between the rows of A (b, p, d) and B (b, q, d) from their
    differences, each pair by the same operations (few rows: no matrix product, whose rounding
    could tell equal rows apart)."""
    diff = A.unsqueeze(2) - B.unsqueeze(1)
    return (diff * diff).sum(-1)


@torch.no_grad()
def compare_with_lloyd(
    model: KMeansTransformer, X: torch.Tensor, C: torch.Tensor, new_centers: torch.Tensor | None = None
) -> StepComparison:
    """Measure one step of ``model`` from centres ``C`` against one Lloyd step (see
    :class:`StepComparison`). ``new_centers`` (B, k, d), if given, is the model's step already
    computed (for example ``layer_maps(...).centers``); otherwise it is computed here (a trained
    layer without dropout)."""
    _check_model(model)
    _check_inputs(model, X, C)
    if new_centers is None:
        new_centers = layer_maps_centers(model, X, C)
    elif not isinstance(new_centers, torch.Tensor) or new_centers.shape != C.shape:
        raise ValueError(f"new_centers must be a tensor of shape {tuple(C.shape)} (like C)")
    new = new_centers.to(X.dtype)
    M, labels, counts = lloyd_step(X, C, empty="keep")
    empty = counts == 0
    step_m, step_l = new - C, M - C
    model_move, lloyd_move = step_m.norm(dim=-1), step_l.norm(dim=-1)
    dot = (step_m * step_l).sum(-1)
    nan = torch.full_like(dot, float("nan"))
    ratio = torch.where(lloyd_move > 0, dot / lloyd_move.square().clamp_min(torch.finfo(X.dtype).tiny), nan)
    denom = model_move * lloyd_move
    cosine = torch.where(denom > 0, dot / denom.clamp_min(torch.finfo(X.dtype).tiny), nan)
    dist_to_mean = torch.where(empty, nan, (new - M).norm(dim=-1))
    # nearest cluster mean of every new centre, among the non-empty clusters (k x k distances
    # from the differences, pair by pair: equal means are tied exactly, the first one wins)
    d2 = _pair_distances(new, M).masked_fill(empty.unsqueeze(1), float("inf"))
    own = d2.argmin(-1) == torch.arange(C.shape[1], device=X.device)
    return StepComparison(
        counts=counts,
        model_move=model_move,
        lloyd_move=lloyd_move,
        dist_to_mean=dist_to_mean,
        step_ratio=ratio,
        cosine=cosine,
        nearest_own_mean=own & ~empty,
        objective_before=kmeans_objective_unchecked(X, C),
        objective_model=kmeans_objective_unchecked(X, new),
        objective_lloyd=kmeans_objective_unchecked(X, M),
        fixed_model=assignment_cost(X, new, labels),
        fixed_lloyd=assignment_cost(X, M, labels),
        n_empty=empty.sum(-1),
    )


@torch.no_grad()
def layer_maps_centers(
    model: KMeansTransformer, X: torch.Tensor, C: torch.Tensor, batch_size: int = 32
) -> torch.Tensor:
    """The model's new centres after one step (a trained layer without dropout), (B, k, d),
    ``batch_size`` tasks at a time (the layer's self-attention is n x n per task)."""
    _check_model(model)
    _check_inputs(model, X, C)
    batch_size = check_int("batch_size", batch_size, minimum=1)

    was = model.training
    model.eval()
    try:
        return in_chunks(model.step, X, C, size=batch_size)
    finally:
        model.train(was)


@torch.no_grad()
def inspect_step(
    model: KMeansTransformer, X: torch.Tensor, C: torch.Tensor, batch_size: int = 32
) -> tuple[AttentionSummary, StepComparison]:
    """:func:`attention_summary` and :func:`compare_with_lloyd` of one step on many tasks, computed
    ``batch_size`` tasks at a time so that the (n x n) self-attention maps of only one batch exist
    at once (the summaries are small: per point or per cluster)."""
    _check_model(model)
    _check_inputs(model, X, C)
    batch_size = check_int("batch_size", batch_size, minimum=1)

    def one_chunk(Xb: torch.Tensor, Cb: torch.Tensor) -> tuple[AttentionSummary, StepComparison]:
        maps = layer_maps(model, Xb, Cb)
        return attention_summary(maps, Xb, Cb), compare_with_lloyd(model, Xb, Cb, new_centers=maps.centers)

    return in_chunks(one_chunk, X, C, size=batch_size)


def components_covered(C: torch.Tensor, means: torch.Tensor) -> torch.Tensor:
    """(B,) how many of the mixture's components are the nearest component of at least one centre.

    ``C`` (B, k, d) centres, ``means`` (B, m, d) the mixture's component means (for example
    ``sample_tasks(..., return_mixture=True)[1].means``). ``k`` centres cover at most ``min(k, m)``;
    a centre set that leaves components uncovered has two centres in one component somewhere.
    """
    for name, t in (("C", C), ("means", means)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise ValueError(f"{name} must be a tensor of shape (B, *, d)")
    if C.shape[0] != means.shape[0] or C.shape[2] != means.shape[2]:
        raise ValueError(f"C {tuple(C.shape)} and means {tuple(means.shape)} must have the same B and d")
    # (k x m distances from the differences: equal means tie exactly, the first one wins)
    nearest = _pair_distances(C, means.to(C.dtype)).argmin(-1)  # (B, k)
    hit = torch.zeros(C.shape[0], means.shape[1], dtype=torch.bool, device=C.device)
    hit.scatter_(1, nearest, True)
    return hit.sum(-1)
