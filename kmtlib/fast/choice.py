"""Which kernel of :mod:`kmtlib.kernels` applies: decided from a block's, a layer's or a model's
configuration and weights, never inside the classes that hold the formula (:mod:`kmtlib.layer`).

Each predicate says where a kernel returns the formula's numbers (up to the last bits, or
exactly where the tests say so); where none applies, the formula runs.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..kernels import Kernel
from ..kernels.euclidean_softmax import euclidean_attention
from ..kernels.limit_model import LimitBlock
from ..layer import AttentionBlock, KMeansLayer
from ..theorems import coordinate_selector, theorem_weights

KMeansTransformer = Any
"""A :class:`kmtlib.KMeansTransformer` (typed loosely: this room sits below the model's)."""

LIMIT_KERNEL_SCORES: tuple[str, ...] = ("euclidean", "dot")
LIMIT_KERNEL_MAPS: tuple[str, ...] = ("softmax", "hardmax", "linear")
"""The block scores and maps that :mod:`kmtlib.kernels.limit_model` computes."""


def same_map(a: nn.Linear, b: nn.Linear) -> bool:
    """Whether two affine maps are equal (weights and biases)."""
    if not torch.equal(a.weight, b.weight):
        return False
    if a.bias is None or b.bias is None:
        return a.bias is None and b.bias is None
    return torch.equal(a.bias, b.bias)


def closed_form_self_attention(block: AttentionBlock) -> bool:
    """Whether the block is hard self-attention whose maximal keys are each query's own copies:
    exact Euclidean scores of one map for queries and keys, or Theorem 2.2's dot-product queries
    ``[x; -1/2]`` and keys ``[x; ||x||^2]`` (``q.k = -||x - x'||^2 / 2`` plus a constant per
    query). Fixed weights only: a learning layer's copies need not carry equal values. Then the
    averaging hard attention returns each token's own value."""
    c = block.config
    query, key = block.query, block.key
    if not (block.self_attention and c.is_hard) or not isinstance(query, nn.Linear):
        return False
    if not isinstance(key, nn.Linear) or query.weight.requires_grad:
        return False
    if c.score == "euclidean":
        return same_map(query, key)
    if c.score == "dot" and query.bias is None and key.bias is None:
        if block.d + block.clusters + 2 != query.weight.shape[0]:
            return False
        W = query.weight
        weights = theorem_weights(block.d, block.clusters, "dot", dtype=W.dtype)["SAX"]
        return torch.equal(W, weights["Q"].to(W.device)) and torch.equal(key.weight, weights["K"].to(W.device))
    return False


def point_coordinates(block: AttentionBlock, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor | None:
    """The non-zero coordinates x (B, n, d) of point tokens ``[x; 0]`` where the block's
    self-attention can run in them (:mod:`kmtlib.kernels.point_attention`), else None: one
    tensor for queries and keys, Euclidean soft-max, affine maps, tokens without gradient that
    are zero past the data coordinates."""
    c = block.config
    if c.identity or not (block.self_attention and queries is keys) or queries.requires_grad:
        return None
    if c.score != "euclidean" or c.map != "softmax" or c.is_hard or c.options:
        return None
    if not all(isinstance(m, nn.Linear) and m.bias is not None for m in (block.query, block.key, block.value)):
        return None
    d = block.d
    if queries.shape[-1] <= d or torch.any(queries[..., d:]):
        return None
    return queries[..., :d]


def attention_kernel(block: AttentionBlock) -> Kernel | None:
    """The kernel for the block's attention on projected queries, keys and values ``Q, K, V``, or
    None (then the formula runs)."""
    c = block.config
    if c.identity:
        return None
    if closed_form_self_attention(block):
        return lambda Q, K, V, p: V  # each token's own value
    if c.score == "euclidean" and c.map == "softmax" and not c.is_hard and not c.options:
        return lambda Q, K, V, p: euclidean_attention(Q, K, V, c.inverse_temperature, p, block.generator)
    return None


def limit_block(block: AttentionBlock) -> LimitBlock:
    """The block as :mod:`kmtlib.kernels.limit_model` reads it (where :func:`uses_limit_kernel`)."""
    c = block.config
    return LimitBlock(
        name=block.name,
        weights=tuple(linear.weight for linear in block.linear_maps()),  # type: ignore[arg-type]
        own_values=c.identity or closed_form_self_attention(block),
        self_attention=block.self_attention,
        euclidean=c.score == "euclidean",
        hard=c.is_hard,
        linear=c.map == "linear",
        inverse_temperature=c.inverse_temperature,
    )


def limit_blocks(layer: KMeansLayer) -> dict[str, LimitBlock]:
    """The four blocks as :mod:`kmtlib.kernels.limit_model` reads them."""
    return {name: limit_block(block) for name, block in layer.blocks.items()}


def writes_hard_assignment(layer: KMeansLayer) -> bool:
    """Whether the point tokens after the layer hold the hard nearest-centre assignment of the
    centres it read: CAX is hard Euclidean attention of the data coordinates writing into the
    assignment coordinates, and SAX erases the old assignment exactly (Theorem 2.1's limit).

    CAX then puts its weight on exactly the centres of maximal score ``2 x.c - ||c||^2`` (the
    negated scores of :func:`~kmtlib.objective.nearest_center`, so the same ties), and the reset
    leaves the positive entries where CAX put them; the lowest index with a positive entry is
    the nearest-centre label (what the fast forward reads instead of a second distance pass)."""
    c = layer.config
    cax, sax = layer.CAX, layer.SAX
    if c.embedding != "onehot" or not (cax.config.is_hard and cax.config.score == "euclidean"):
        return False
    if c.any_k:
        return False
    (q_a, k_a, v_a), (q_s, k_s, v_s) = cax.linear_maps(), sax.linear_maps()
    exact_reset = sax.config.identity or (sax.config.is_hard and sax.config.score == "euclidean" and same_map(q_s, k_s))
    if not exact_reset:
        return False
    D, d, W = c.width, c.d, q_a.weight
    data = coordinate_selector(D, 0, d, dtype=W.dtype).to(W.device)
    ids = coordinate_selector(D, d, D, dtype=W.dtype).to(W.device)
    return (
        torch.equal(q_a.weight, data)
        and torch.equal(k_a.weight, data)
        and torch.equal(v_a.weight, ids)
        and torch.equal(v_s.weight, -ids)
    )


def uses_limit_kernel(model: KMeansTransformer, X: torch.Tensor, C0: torch.Tensor) -> bool:
    """Whether the fast forward of ``model(X, C0, steps)`` runs :mod:`kmtlib.kernels.limit_model`:
    fixed weights, no autograd, the tokens going from layer to layer, linear maps without bias,
    blocks of Euclidean or dot scores with soft-max, hard or linear maps."""
    c = model.config
    if c.reembed or c.normalise_data or c.bias or c.any_k or c.embedding == "data":
        return False
    if torch.is_grad_enabled() and (
        X.requires_grad or C0.requires_grad or any(p.requires_grad for p in model.parameters())
    ):
        return False
    return all(
        b.score in LIMIT_KERNEL_SCORES and b.map in LIMIT_KERNEL_MAPS and not b.options
        and (b.dropout == 0 or not model.training)
        for b in c.blocks.values()
    )  # fmt: skip
