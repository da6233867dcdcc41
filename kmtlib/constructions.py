"""Theorems 2.1 and 2.2 as code: the fixed-weight k-means transformers, as a configuration of
:class:`~kmtlib.layer.KMeansLayer` and an initialiser of its weights.

One layer has four attention blocks with weights ``(Q_mu, K_mu, V_mu)``, ``mu = 1..4``, shared
across layers (the paper's Theorems 2.1 and 2.2 and their proofs):

* ``CAX`` (mu=1), cross-attention of the points over the centres: writes the new assignment;
* ``SAX`` (mu=2), self-attention of the points: erases the old assignment (a residual reset);
* ``CAC`` (mu=3), cross-attention of the centres over the updated points: adds the cluster means;
* ``SAC`` (mu=4), self-attention of the centres: erases the old centres (a residual reset).

:func:`theorem_config` says what each block computes, :func:`theorem_weights` gives the weight
matrices and :func:`load_theorem_weights` puts them into a layer; :func:`build_theorem_model`
(what ``KMeansTransformer.from_theorem`` calls) does all three.

Hard self-attention (``gamma = math.inf``) is evaluated in closed form by default
(:mod:`kmtlib.kernels`): the keys that attain the maximum score of query ``i`` are exactly the
copies of token ``i`` (for SAX the points equal to ``x_i``, whose distance 0 is the largest
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

ATTENTION_KINDS: tuple[str, ...] = ("euclidean", "dot")
"""``"euclidean"``: Theorem 2.1 (Euclidean attention, tokens of width d + k).
``"dot"``: Theorem 2.2 (dot-product attention on norm-augmented tokens of width d + k + 2, plus a
feed-forward block with rectified-quadratic activation on the centres)."""

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
    erase_center = -key
    W1 = torch.zeros(2 * d, D, dtype=dtype)
    W1[:d, :d] = torch.eye(d, dtype=dtype)
    W1[d:, :d] = -torch.eye(d, dtype=dtype)
    W2 = torch.zeros(D, 2 * d, dtype=dtype)
    W2[s, :] = 1.0
    return {
        "CAX": {"Q": query, "K": key, "V": ids.clone()},
        "SAX": {"Q": query.clone(), "K": key.clone(), "V": -ids},
        "CAC": {"Q": ids.clone(), "K": ids.clone(), "V": data.clone()},
        "SAC": {"Q": ids.clone(), "K": ids.clone(), "V": erase_center},
        "FFN": {"W1": W1, "W2": W2},
    }


def build_theorem_model(
    cls: type,
    d: int,
    k: int,
    gamma: float = math.inf,
    attention: str = "euclidean",
    *,
    center_update: str = "linear",
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

    Returns:
        ``cls(theorem_config(...))`` with the weights of :func:`theorem_weights` in its layer
        (``model.layer.CAX.query.weight`` is ``Q_1``, and so on).
    """
    config = theorem_config(
        d, k, gamma, attention, center_update=center_update, self_attention=self_attention, reset_gamma=reset_gamma
    )
    model = cls(config)
    load_theorem_weights(model.layer, attention)
    return model


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
    """What the blocks of Theorem 2.1 or 2.2 compute (arguments of :func:`build_theorem_model`)."""
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
