"""The trainable single layer of the paper's learning experiments (the authors' ``kmt.KModel`` in
github.com/rithram/kmeans-trf).

One layer of four attention blocks over tokens of width ``D`` (``d + k`` for the one-hot
embedding, ``d`` for the d-only ablation). Every block has its own learned query, key and value
maps (``nn.Linear`` with bias, ``D -> D``) and Euclidean soft-max attention

.. math::  \\mathrm{softmax}_j\\big(-\\gamma\\,\\lVert q_i - k_j\\rVert^2/\\sqrt D\\big).

The update order is the one of Theorem 2.1: the points read the centres (CAX) and each other
(SAX), then the centres read the *updated* points (CAC) and each other (SAC)::

    X1 = X + CAX(X, C) + SAX(X, X)
    C1 = C + CAC(C, X1) + SAC(C, C)

The model built here re-embeds before every step, so the one layer acts as a map C(t) -> C(t+1).

It is a :class:`~kmtlib.layer.KMeansLayer` (:func:`trainable_config` says what its blocks compute,
:func:`init_trainable_weights` draws its weights). Speed: the self-attention of the points (n x n
per task) is the cost of a training step; with ``model.fast`` (the default) the blocks use the
kernel :mod:`kmtlib.kernels.euclidean_softmax`, a hand-written backward pass with sparse dropout,
and the points' self-attention runs in the data's d coordinates (:mod:`kmtlib.kernels.point_attention`).

Dropout. The paper's model applies dropout (p = 0.01) to every attention matrix. The authors call
``F.dropout(attn, p)`` whose ``training`` flag defaults to True, so their dropout is active at
evaluation as well and their evaluation curves carry a little noise. Here dropout follows the usual
``nn.Dropout`` convention instead: active in ``model.train()``, off in ``model.eval()``. Evaluation
is then deterministic (the same model on the same tasks gives the same numbers, which the book's
tables and the save/load tests rely on), and it measures the layer the training actually shaped
(the expectation of the dropped-out layer, by the inverted-dropout scaling 1/(1-p)). The effect on
the paper's numbers is tiny at p = 0.01. The dropout mask is drawn from ``layer.generator``
(a ``torch.Generator``) when one is set, else from the global RNG.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._checks import check_choice, check_int, check_positive_float
from .embedding import embedding_name
from .equivariant import EquivariantMap
from .layer import BLOCK_NAMES, BlockConfig, KMeansLayer, LayerConfig

TRAINABLE_EMBEDDINGS: tuple[str, ...] = ("onehot", "data", "codes")
"""The embeddings (of :data:`kmtlib.embedding.EMBEDDINGS`) the trainable layer takes: ``"onehot"``
(width d + k, the paper's main model), ``"data"`` (width d, the d-only ablation; ``"none"``, its
name before version 0.2, is read too) and ``"codes"`` (width d + m, random cluster codes drawn per
task: a layer for any k, chapter 12)."""



def trainable_config(
    d: int,
    k: int,
    embedding: str = "onehot",
    gamma: float = 1.0,
    dropout: float = 0.01,
    any_k: bool = False,
    cluster_broadcast: str = "ones",
    code_width: int = 0,
) -> LayerConfig:
    r"""Four blocks of learned affine maps with Euclidean soft-max at inverse temperature
    ``gamma / sqrt(D)`` and attention dropout, re-embedded before every step; with ``any_k`` the
    maps are :class:`~kmtlib.equivariant.EquivariantMap`\ s that spread numbers over the cluster
    coordinates as ``cluster_broadcast`` says, and the layer reads any number of clusters (``k``
    then only sets D in the temperature). ``embedding="codes"`` reads any number of clusters too,
    through random codes of width ``code_width`` (:class:`~kmtlib.embedding.CodeEmbedding`).

    Args:
        d, k: data dimension and number of centres.
        embedding: ``"onehot"`` (tokens of width d + k, the paper's main model), ``"data"`` (width
            d, the d-only ablation; ``"none"`` is its old name) or ``"codes"`` (width d + m).
        gamma: attention inverse temperature (> 0); the scores are -gamma ||q-k||^2 / sqrt(D).
        dropout: dropout rate on every attention matrix, in [0, 1); active only in ``train()``
            mode (see the module docstring for why).
        any_k: one layer for any number of clusters: the model then runs on centres ``C0`` of any k.
        cluster_broadcast: for ``any_k``, how the maps spread one number over the k cluster
            coordinates (``"ones"``, ``"mean"`` or ``"unit"``; :mod:`kmtlib.equivariant`).
        code_width: the width of the random cluster codes of ``embedding="codes"``.
    """
    if not isinstance(any_k, bool):
        raise TypeError(f"any_k must be True or False, got {any_k!r}")
    d = check_int("d", d, minimum=1)
    k = check_int("k", k, minimum=1)
    embedding = embedding_name(embedding)
    check_choice("embedding", embedding, TRAINABLE_EMBEDDINGS)
    gamma = check_positive_float("gamma", gamma)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= float(dropout) < 1.0:
        raise ValueError(f"dropout must be a number in [0, 1), got {dropout!r}")
    code_width = check_int("code_width", code_width, minimum=1 if embedding == "codes" else 0)
    if embedding != "codes" and code_width:
        raise ValueError(f"code_width applies to embedding='codes', not {embedding!r}")
    if embedding == "codes" and any_k:
        raise ValueError("embedding='codes' reads any k through its codes; any_k (equivariant maps) is for 'onehot'")
    width = {"onehot": d + k, "data": d, "codes": d + code_width}[embedding]
    block = BlockConfig(
        score="euclidean", map="softmax", gamma=gamma, scale=1.0 / math.sqrt(width), dropout=float(dropout)
    )
    return LayerConfig(
        d=d,
        k=k,
        embedding=embedding,
        CAX=block,
        SAX=block,
        CAC=block,
        SAC=block,
        bias=True,
        trainable=True,
        reembed=True, any_k=any_k, cluster_broadcast=cluster_broadcast, code_width=code_width,
        origin=f"trainable(d={d}, k={k}, embedding={embedding!r}, gamma={gamma}, dropout={float(dropout)}"
        + (", any_k=True" if any_k else "") + (f", code_width={code_width}" if code_width else "")
        + (f", cluster_broadcast={cluster_broadcast!r})" if cluster_broadcast != "ones" else ")"),
    ).validated()


def init_trainable_weights(layer: KMeansLayer, generator: torch.Generator | None = None) -> KMeansLayer:
    """PyTorch's default ``nn.Linear`` initialisation (``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for
    weights and biases), drawn from ``generator`` block by block (CAX, SAX, CAC, SAC), map by map
    (query, key, value), weight before bias."""
    with torch.no_grad():
        for name in BLOCK_NAMES:
            block = layer.blocks[name]
            for linear in (block.query, block.key, block.value):
                if isinstance(linear, EquivariantMap):  # (the fan-in of the dense map it stands for)
                    linear.reset_parameters(layer.config.width, generator)
                    continue
                assert isinstance(linear, nn.Linear)
                bound = 1.0 / math.sqrt(linear.in_features)
                linear.weight.uniform_(-bound, bound, generator=generator)
                if linear.bias is not None:
                    linear.bias.uniform_(-bound, bound, generator=generator)
    return layer


def initial_weights_generator(generator: torch.Generator | int | None) -> torch.Generator | None:
    """The generator the initial weights are drawn from: a CPU ``torch.Generator`` as given, one
    seeded by an integer, or None (torch's global generator)."""
    if generator is not None and not isinstance(generator, torch.Generator):
        seed = check_int("generator (seed)", generator, minimum=0)
        generator = torch.Generator().manual_seed(seed)
    if generator is not None and generator.device.type != "cpu":
        raise ValueError("generator for the initial weights must be a CPU generator (weights are drawn on the CPU)")
    return generator
