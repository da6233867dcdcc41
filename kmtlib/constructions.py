"""Theorems 2.1 and 2.2 as code: the fixed-weight k-means transformers, as a configuration of
:class:`~kmtlib.layer.KMeansLayer` and an initialiser of its weights.

One layer has four attention blocks with weights ``(Q_mu, K_mu, V_mu)``, ``mu = 1..4``, shared
across layers (the paper's Theorems 2.1 and 2.2 and their proofs):

* ``CAX`` (mu=1), cross-attention of the points over the centres: writes the new assignment;
* ``SAX`` (mu=2), self-attention of the points: erases the old assignment (a residual reset);
* ``CAC`` (mu=3), cross-attention of the centres over the updated points: adds the cluster means;
* ``SAC`` (mu=4), self-attention of the centres: erases the old centres (a residual reset).

:func:`theorem_config` says what each block computes, :func:`theorem_weights` gives the weight
matrices and :func:`load_theorem_weights` puts them into a layer; ``KMeansTransformer.from_theorem``
builds a model of the configuration and loads its weights.

On the default path (``model.fast``) hard self-attention (``gamma = math.inf``) is evaluated in
closed form where :func:`kmtlib.fast.choice.closed_form_self_attention` reads it from the block's
weights (and in :func:`kmtlib.whole_pass`'s kernel): the keys that attain the maximum score of
query ``i`` are exactly the copies of token ``i`` (for SAX the points equal to ``x_i``, whose distance 0 is the largest
possible score; for SAC only centre ``j`` itself, the ids being distinct), and all copies carry
the same value (a point's assignment is a function of the point), so the averaging hard
attention returns the value of token ``i`` itself. This holds with duplicate points too.
``model.fast = False`` evaluates the genuine n x n hard attention instead (with exact,
difference-based Euclidean scores), for verification on small problems.
"""

from __future__ import annotations

import math

import torch

from ._checks import check_choice, check_int, check_positive_float
from .layer import BLOCK_NAMES, BlockConfig, KMeansLayer, LayerConfig
from .theorems import ATTENTION_KINDS, theorem_weights

CENTER_UPDATES: tuple[str, ...] = ("linear", "attention")
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


def theorem_config(
    d: int,
    k: int,
    gamma: float = math.inf,
    attention: str = "euclidean",
    *,
    center_update: str = "linear",
    self_attention: str = "attention",
    reset_gamma: float | None = None,
) -> LayerConfig:
    """The layer configuration of Theorem 2.1 or 2.2: what its blocks compute (``KMeansTransformer.from_theorem``
    builds a model of it and loads :func:`theorem_weights` with :func:`load_theorem_weights`).

    Args:
        d, k: data dimension and number of centres.
        gamma: inverse temperature of the attention blocks that have one (raw: no ``1/sqrt(D)``).
            ``math.inf`` (default) is the limit, computed as averaging hard attention; a finite
            ``gamma`` means soft-max there.
        attention: ``"euclidean"`` (Theorem 2.1: tokens [x; y], [c; e] of width d + k, Euclidean
            attention) or ``"dot"`` (Theorem 2.2, see below).
        center_update: ``"linear"`` (default: the normalised linear attention of the original
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
    ``center_update="attention"``; SAX and SAC use ``reset_gamma`` with
    ``self_attention="attention"``. Hence:

    * the limit model (``gamma = math.inf``): every option gives Lloyd's algorithm exactly on
      tie-free inputs, with the empty-cluster rule ``lloyd(..., empty="mean")`` (the centre
      attention of an empty cluster has no preferred key and becomes uniform);
    * the authors' validation model (their Fig. 3): ``gamma=1e4, self_attention="identity"``
      (with the default linear centre update only CAX is soft);
    * the fully soft-max model: ``gamma`` finite, ``center_update="attention"``,
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
    """
    d = check_int("d", d, minimum=1)
    k = check_int("k", k, minimum=1)
    gamma = check_positive_float("gamma", gamma, allow_inf=True)
    check_choice("attention", attention, ATTENTION_KINDS)
    check_choice("center_update", center_update, CENTER_UPDATES)
    check_choice("self_attention", self_attention, SELF_ATTENTION_MODES)
    if reset_gamma is not None:
        if self_attention != "attention":
            raise ValueError(
                "reset_gamma sets the temperature of genuine self-attention; it needs self_attention='attention'"
            )
        reset_gamma = check_positive_float("reset_gamma", reset_gamma, allow_inf=True)
    reset = BlockConfig(
        score=attention,
        gamma=gamma if reset_gamma is None else reset_gamma,
        scale=2.0 if attention == "dot" else 1.0,
        identity=self_attention == "identity",
    )
    cax = BlockConfig(score=attention, gamma=gamma, scale=2.0 if attention == "dot" else 1.0)
    if center_update == "attention":
        cac = cax
    else:  # the normalised linear attention y_ij / sum_i' y_i'j (temperature-free)
        cac = BlockConfig(score="dot", map="linear")
    options = [f"gamma={gamma}", f"attention={attention!r}"]
    options += [f"center_update={center_update!r}"] if center_update != "linear" else []
    options += [f"self_attention={self_attention!r}"] if self_attention != "attention" else []
    options += [f"reset_gamma={reset_gamma}"] if reset_gamma is not None else []
    return LayerConfig(
        d=d,
        k=k,
        embedding="onehot" if attention == "euclidean" else "norm_augmented",
        CAX=cax,
        SAX=reset,
        CAC=cac,
        SAC=reset,
        ffn=attention == "dot",
        construction="theorem 2.1" if attention == "euclidean" else "theorem 2.2",
        origin=f"from_theorem(d={d}, k={k}, {', '.join(options)})",
    ).validated()


def load_theorem_weights(layer: KMeansLayer, attention: str = "euclidean") -> KMeansLayer:
    """Write the weights of Theorem 2.1 (``"euclidean"``) or 2.2 (``"dot"``) into ``layer``."""
    c = layer.config
    weights = theorem_weights(c.d, c.k, attention, dtype=layer.CAX.linear_maps()[0].weight.dtype)
    if weights["CAX"]["Q"].shape[0] != c.width:
        raise ValueError(
            f"Theorem {'2.1' if attention == 'euclidean' else '2.2'} needs tokens of width "
            f"{weights['CAX']['Q'].shape[0]}, the layer has {c.width}"
        )
    with torch.no_grad():
        for name in BLOCK_NAMES:
            block = layer.blocks[name]
            for role, linear in zip("QKV", block.linear_maps()):
                linear.weight.copy_(weights[name][role])
                if linear.bias is not None:
                    linear.bias.zero_()
        if layer.ffn is not None:
            layer.ffn.up.weight.copy_(weights["FFN"]["W1"])
            layer.ffn.down.weight.copy_(weights["FFN"]["W2"])
    return layer
