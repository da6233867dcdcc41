"""A clear, batched layer for the circuit variants of chapter 10.

:class:`CircuitLayer` is the layer of Theorem 2.1 with its four blocks written out one by one, so
that a variant can change one mechanism and keep the rest (the paper's Theorem 2.1 and its proof; rows are
tokens, point tokens ``[x_i; y_i]``, centre tokens ``[c_j; e_j]``, width ``D = d + k``)::

    CAX  y_i += sum_j  w_ij e_j,   w_i = assign_map(score(x_i, c_j))        (points -> centres)
    SAX  y_i -= y_i                (hard self-attention: every token attends to its own copies)
    CAC  c_j += sum_i  v_ji x_i,   v_j = centre weights over the updated points
    SAC  c_j -= c_j                (hard self-attention over the distinct one-hot ids)

What a variant may change:

* the assignment block CAX: the score (``"euclidean"``: ``-||x - c||^2``; ``"dot"``: ``x.c``),
  the attention map (any name of :data:`kmtlib.attention.ATTENTION_MAPS`) and its temperature;
* the centre block CAC: ``centre_scores="onehot"`` is the theorem's key-query product of the
  one-hot assignments with the centre ids, ``y_ij``, here with the normalised linear map (the
  cluster mean; an empty cluster gets uniform weights, i.e. the mean of all points, the limit of Theorem 2.1);
  ``centre_scores="masked_euclidean"`` is Euclidean attention of the centre token over the point
  tokens with ``Q = K = diag(I_d, sqrt(lam) I_k)``: the score ``-||x_i - c_j||^2 - lam ||y_i - e_j||^2``
  with ``lam -> infinity`` is ``-||x_i - c_j||^2`` on the points assigned to ``j`` and ``-inf``
  on all others (a one-hot ``y_i`` differs from ``e_j`` by 0 or by 2), so any attention map
  then works on the members of the cluster only, scored by their distance to the current
  centre;
* ``normalise_data``: a normalisation of the data coordinates of every token, ``h[:d] <- h[:d] /
  ||h[:d]||`` (RMSNorm with gain ``1/sqrt(d)``, applied to the data part only, leaving the
  assignment and id coordinates alone), on both streams at the layer's input and on the centres
  at its output. A zero data part stays zero (the rule of faiss' renormalisation).

The two resets (SAX, SAC) are evaluated in closed form, as the limit model of
:mod:`kmtlib.constructions` does by default: hard self-attention picks the token's own copies,
which carry the same value. The residual stream adds each reset before the cross-attention
output, ``(h - h) + out = out`` exactly (the theorem's order ``(h + out) - h`` rounds). The layer holds no
weights (nothing to train): it is a fixed circuit.

Ties. The hard assignment block gives equal centres bitwise equal scores
(:func:`~kmtlib._numerics.tie_equal_keys`: a matrix product may round the same dot product
differently at another position of its tile), and the masked centre scores are computed from
the differences ``c_j - x_i`` one pair at a time, so equal points score equally in the centre
update on every CPU. Ties between different keys that are equal only in exact arithmetic are
decided by the computed scores, as in :func:`kmtlib.attention.hard_attention`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from .._checks import check_choice, check_int, check_positive_float
from .._numerics import tie_equal_keys
from ..attention import _is_hard, dot_scores, euclidean_scores, get_attention_map

ASSIGN_SCORES: tuple[str, ...] = ("euclidean", "dot")
CENTRE_SCORES: tuple[str, ...] = ("onehot", "masked_euclidean")


def normalise_data(tokens: torch.Tensor, d: int) -> torch.Tensor:
    """Tokens with their first ``d`` coordinates scaled to unit Euclidean norm (zero stays zero)."""
    data = tokens[..., :d]
    norm = data.norm(dim=-1, keepdim=True)
    scaled = data / torch.where(norm > 0, norm, torch.ones_like(norm))
    return torch.cat([scaled, tokens[..., d:]], dim=-1)


class CircuitLayer(nn.Module):
    """One weight-free layer of a k-means circuit variant (module documentation).

    Args:
        d, k: data dimension and number of centres (tokens have width d + k).
        assign_score: ``"euclidean"`` or ``"dot"`` scores in the assignment block CAX.
        assign_map: attention map of CAX (default ``"softmax"``; at ``assign_gamma = math.inf``
            this is averaging hard attention, i.e. Lloyd's assignment).
        assign_gamma: inverse temperature of CAX (raw, no ``1/sqrt(D)``).
        centre_scores: ``"onehot"`` (the theorem's centre update) or ``"masked_euclidean"``.
        centre_map: attention map of CAC (default ``"linear"``, the normalised linear form).
        centre_gamma: inverse temperature of CAC (maps without one ignore it).
        centre_options: keyword options passed to the CAC map (e.g. ``tau`` of ``"normmax"``,
            ``fraction`` of ``"topk"``).
        normalise_data: normalise the data part of the tokens (spherical variant).
    """

    def __init__(
        self,
        d: int,
        k: int,
        *,
        assign_score: str = "euclidean",
        assign_map: str = "softmax",
        assign_gamma: float = math.inf,
        assign_options: dict[str, Any] | None = None,
        centre_scores: str = "onehot",
        centre_map: str = "linear",
        centre_gamma: float = math.inf,
        centre_options: dict[str, Any] | None = None,
        normalise_data: bool = False,
    ) -> None:
        super().__init__()
        self.d = check_int("d", d, minimum=1)
        self.k = check_int("k", k, minimum=1)
        self.assign_score = check_choice("assign_score", assign_score, ASSIGN_SCORES)
        get_attention_map(assign_map)
        get_attention_map(centre_map)
        self.assign_map = assign_map
        self.assign_gamma = check_positive_float("assign_gamma", assign_gamma, allow_inf=True)
        self.assign_options = dict(assign_options or {})
        self.centre_scores = check_choice("centre_scores", centre_scores, CENTRE_SCORES)
        if centre_scores == "onehot" and centre_map != "linear":
            raise ValueError("centre_scores='onehot' is the theorem's linear centre update: use centre_map='linear'")
        self.centre_map = centre_map
        self.centre_gamma = check_positive_float("centre_gamma", centre_gamma, allow_inf=True)
        self.centre_options = dict(centre_options or {})
        self.normalise_data = bool(normalise_data)

    def extra_repr(self) -> str:
        return (
            f"d={self.d}, k={self.k}, CAX={self.assign_score} {self.assign_map} (gamma={self.assign_gamma}), "
            f"CAC={self.centre_scores} {self.centre_map} {self.centre_options or ''}, "
            f"normalise_data={self.normalise_data}"
        )

    # ------------------------------------------------------------------ the blocks
    def assignment_weights(self, point_tokens: torch.Tensor, centre_tokens: torch.Tensor) -> torch.Tensor:
        """CAX's attention matrix (B, n, k): each point's weights over the centres."""
        X, C = point_tokens[..., : self.d], centre_tokens[..., : self.d]
        if self.assign_score == "euclidean":
            scores = euclidean_scores(X, C, query_norm=False)
        else:
            scores = dot_scores(X, C)
        fn = get_attention_map(self.assign_map)
        if _is_hard(fn, self.assign_gamma):
            # hard attention decides by exact comparison: equal centres (two empty clusters sent
            # to the same place) get bitwise equal scores, whatever the matrix product rounded
            scores = tie_equal_keys(scores, C, dim=2)
        return fn(scores, self.assign_gamma, **self.assign_options)

    def centre_weights(self, centre_tokens: torch.Tensor, point_tokens: torch.Tensor) -> torch.Tensor:
        """CAC's attention matrix (B, k, n): each centre's weights over the (updated) points."""
        Y = point_tokens[..., self.d :]
        if self.centre_scores == "onehot":
            # key-query product of the one-hot ids e_j with the assignments y_i: y_ij
            return get_attention_map("linear")(Y.transpose(1, 2), None)
        X, C = point_tokens[..., : self.d], centre_tokens[..., : self.d]
        # (B, k, n) ||c_j - x_i||^2 from the differences: a centre that averaged two points is
        # exactly equidistant from both, and the ranking of such ties must not hang on rounding
        distances = -euclidean_scores(C, X, exact=True)
        member = Y.transpose(1, 2) == 1  # lam -> infinity: only the points whose y_i is e_j
        scores = torch.where(member, -distances, distances.new_full((), -math.inf))
        return get_attention_map(self.centre_map)(scores, self.centre_gamma, **self.centre_options)

    def forward(self, point_tokens: torch.Tensor, centre_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.d
        if self.normalise_data:
            point_tokens = normalise_data(point_tokens, d)
            centre_tokens = normalise_data(centre_tokens, d)
        # CAX + SAX, residual: y <- (y - y) + w (the SAX reset returns each token's own value;
        # added first, so that the stream holds w itself: the order y + w - y would round)
        w = self.assignment_weights(point_tokens, centre_tokens)
        y_old = point_tokens[..., d:]
        points = torch.cat([point_tokens[..., :d], (y_old - y_old) + w], dim=-1)
        # CAC over the updated points + SAC, residual: c <- (c - c) + means (the reset first:
        # the new centre is the attention output itself, as the references compute it; the
        # order c + means - c would round it by up to an ulp of c, so that a centre halfway
        # between two points would no longer be exactly equidistant from them)
        v = self.centre_weights(centre_tokens, points)
        c_old = centre_tokens[..., :d]
        centres = torch.cat([(c_old - c_old) + torch.bmm(v, points[..., :d]), centre_tokens[..., d:]], dim=-1)
        if self.normalise_data:
            centres = normalise_data(centres, d)
        return points, centres

    def attention_maps(self, point_tokens: torch.Tensor, centre_tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """The two data-dependent attention matrices of one layer: CAX (B, n, k) and CAC (B, k, n)."""
        if self.normalise_data:
            point_tokens = normalise_data(point_tokens, self.d)
            centre_tokens = normalise_data(centre_tokens, self.d)
        points, _ = self.forward(point_tokens, centre_tokens)
        return {
            "CAX": self.assignment_weights(point_tokens, centre_tokens),
            "CAC": self.centre_weights(centre_tokens, points),
        }


def variant_model(cls: type, *, name: str, d: int, k: int, layer: nn.Module, kwargs: dict[str, Any]):
    """Wrap a variant layer in a :class:`~kmtlib.transformer.KMeansTransformer` with one-hot
    tokens, weight-shared across steps (no re-embedding), and a configuration that
    :func:`kmtlib.load_model` can rebuild (``from_variant(name, d, k, **kwargs)``)."""
    from ..embedding import OneHotEmbedding

    config = {"builder": "from_variant", "kwargs": {"name": name, "d": d, "k": k, **kwargs}}
    return cls(OneHotEmbedding(d, k), layer, reembed=False, config=config)


def reject_unknown(name: str, options: dict[str, Any]) -> None:
    """Raise naming the options a variant does not know."""
    if options:
        raise TypeError(f"variant {name!r} got unknown option(s) {', '.join(sorted(options))}")
