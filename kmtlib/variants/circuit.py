"""The circuit variants of chapter 10 as configurations of :class:`~kmtlib.layer.KMeansLayer`.

:func:`circuit_config` is the layer of Theorem 2.1 with one mechanism changed, so that a variant
keeps the rest (the paper's Theorem 2.1 and its proof; rows are
tokens, point tokens ``[x_i; y_i]``, centre tokens ``[c_j; e_j]``, width ``D = d + k``)::

    CAX  y_i += sum_j  w_ij e_j,   w_i = assign_map(score(x_i, c_j))        (points -> centres)
    SAX  y_i -= y_i                (hard self-attention: every token attends to its own copies)
    CAC  c_j += sum_i  v_ji x_i,   v_j = centre weights over the updated points
    SAC  c_j -= c_j                (hard self-attention over the distinct one-hot ids)

What a variant may change:

* the assignment block CAX: the score (``"euclidean"``: ``-||x - c||^2``; ``"dot"``: ``x.c``),
  the attention map (any name of :data:`kmtlib.attention.ATTENTION_MAPS`) and its temperature;
* the centre block CAC: the theorem's key-query product of the one-hot assignments with the
  centre ids, ``y_ij``, with the normalised linear map (the cluster mean; an empty cluster gets
  uniform weights, i.e. the mean of all points, the limit of Theorem 2.1); or the score
  ``"euclidean_within_cluster"`` (:mod:`kmtlib.layer`), Euclidean attention of the centre token
  over the point tokens with ``Q = K = diag(I_d, sqrt(lam) I_k)``: the score
  ``-||x_i - c_j||^2 - lam ||y_i - e_j||^2`` with ``lam -> infinity`` is ``-||x_i - c_j||^2`` on
  the points assigned to ``j`` and ``-inf`` on all others, so any attention map then works on the
  members of the cluster only, scored by their distance to the current centre;
* ``normalise_data``: a normalisation of the data coordinates of every token, ``h[:d] <- h[:d] /
  ||h[:d]||`` (RMSNorm with gain ``1/sqrt(d)``, applied to the data part only, leaving the
  assignment and id coordinates alone), on both streams at the layer's input and on the centres
  at its output. A zero data part stays zero (the rule of faiss' renormalisation).

The two resets (SAX, SAC) are Theorem 2.1's hard self-attention (evaluated in closed form by
:mod:`kmtlib.kernels`: the token's own copies, which carry the same value), and the layer adds
each reset before the cross-attention output, ``(h - h) + out = out`` exactly. The weights are
Theorem 2.1's, with the identity as query and key of a within-cluster centre block; they are
fixed (nothing to train).

Ties. The hard assignment block gives equal centres bitwise equal scores
(:func:`~kmtlib._numerics.tie_equal_keys`: a matrix product may round the same dot product
differently at another position of its tile), and the within-cluster centre scores are computed
from the differences ``c_j - x_i`` one pair at a time, so equal points score equally in the centre
update on every CPU. Ties between different keys that are equal only in exact arithmetic are
decided by the computed scores, as in :func:`kmtlib.attention.hard_attention`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..constructions import load_theorem_weights
from ..layer import BlockConfig, KMeansLayer, LayerConfig

HARD_RESET = BlockConfig(score="euclidean", map="softmax", gamma=math.inf)
"""Theorem 2.1's reset blocks SAX and SAC (hard self-attention)."""

LINEAR_CENTER_UPDATE = BlockConfig(score="dot", map="linear")
"""Theorem 2.1's centre block CAC: the normalised linear attention ``y_ij / sum_i' y_i'j``."""


def circuit_config(
    name: str,
    d: int,
    k: int,
    *,
    CAX: BlockConfig | None = None,
    CAC: BlockConfig | None = None,
    normalise_data: bool = False,
    seed: int = 0,
    options: dict[str, Any] | None = None,
) -> LayerConfig:
    """Theorem 2.1's layer with the blocks given here in place of its own (``CAX`` default: hard
    Euclidean assignment; ``CAC`` default: the linear centre update)."""
    shown = ", ".join(f"{key}={value!r}" for key, value in (options or {}).items())
    return LayerConfig(
        d=d,
        k=k,
        embedding="onehot",
        CAX=CAX or BlockConfig(score="euclidean", map="softmax", gamma=math.inf),
        SAX=HARD_RESET,
        CAC=CAC or LINEAR_CENTER_UPDATE,
        SAC=HARD_RESET,
        normalise_data=normalise_data,
        seed=seed,
        origin=f"from_variant({name!r}, d={d}, k={k}{', ' + shown if shown else ''})",
    ).validated()


def load_circuit_weights(layer: KMeansLayer) -> KMeansLayer:
    """Theorem 2.1's weights; a centre block that scores whole tokens (within a cluster, or by the
    medoid cost) reads them through the identity (its score picks the coordinates it needs)."""
    load_theorem_weights(layer, "euclidean")
    if layer.CAC.config.score not in ("dot", "euclidean"):
        query, key, _ = layer.CAC.linear_maps()
        eye = torch.eye(layer.config.width, dtype=query.weight.dtype)
        with torch.no_grad():
            query.weight.copy_(eye)
            key.weight.copy_(eye)
    return layer


def reject_unknown(name: str, options: dict[str, Any]) -> None:
    """Raise naming the options a variant does not know."""
    if options:
        raise TypeError(f"variant {name!r} got unknown option(s) {', '.join(sorted(options))}")
