"""Which kernel of :mod:`kmtlib.kernels` computes a block's attention, and :func:`attend`, the
function that :meth:`kmtlib.layer.KMeansLayer.forward` calls for each block when ``model.fast``.

The choice reads the configuration (a block's score, map and temperature; which construction
the layer holds, :attr:`kmtlib.layer.LayerConfig.construction`) and the block's own weights as
plain data, never inside the classes that hold the formula (:mod:`kmtlib.layer`). Each
predicate says where a kernel returns the formula's numbers (up to the last bits, or exactly
where the tests say so); where none applies, the block's formula runs.
"""

from __future__ import annotations

import torch
from torch import nn

from ..kernels import Kernel
from ..kernels.euclidean_softmax import euclidean_attention, sample_dropped
from ..kernels.limit_model import LimitBlock
from ..kernels.point_attention import point_self_attention
from ..layer import AttentionBlock, KMeansLayer, LayerConfig


def attend(block: AttentionBlock, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``block(queries, keys)``, by a kernel where one applies (the :data:`~kmtlib.layer.BlockAttention`
    that the model passes to :meth:`~kmtlib.layer.KMeansLayer.forward` with ``model.fast``)."""
    c = block.config
    p = c.dropout if block.training else 0.0
    points = point_coordinates(block, queries, keys)
    if points is not None:  # (the same numbers from d-wide products: kernels.point_attention)
        B, n, _ = points.shape
        dropped = sample_dropped(B * n * n, p, block.generator, points.device)
        Q, K, V = block.linear_maps()  # (affine maps with bias: point_coordinates checked)
        maps = (Q.weight, Q.bias), (K.weight, K.bias), (V.weight, V.bias)
        return point_self_attention(points, *maps, c.inverse_temperature, dropped, p)
    kernel = attention_kernel(block)
    if kernel is None:
        return block(queries, keys)
    Q, K = block.query(queries), block.key(keys)
    if not scores_fit(block, Q, K):
        return block(queries, keys)  # (the formula scales after the soft-max's shift: it never overflows)
    return kernel(Q, K, block.value(keys), p)


def scores_fit(block: AttentionBlock, Q: torch.Tensor, K: torch.Tensor) -> bool:
    """Whether the scores of :mod:`kmtlib.kernels.euclidean_softmax` on the projected queries Q and
    keys K stay within their dtype's range: the kernel multiplies by ``2 * scale * gamma`` before
    the soft-max's shift, and its scores are at most ``scale * gamma * (|q| + 3 max|k|)^2`` in size
    (the keys centred on their mean). Where they would overflow (``gamma = 1e39`` in float32, or
    ``gamma = 1e36`` on data of scale 100) the block's formula runs. A soft-max block of inverse
    temperature at most 1 (the trainable layer's ``1/sqrt(D)``) is not measured: its scores stay
    in range wherever its tokens' squares do (as the model's input checks ask)."""
    s = block.config.inverse_temperature
    if block.config.is_hard or s <= 1.0:  # (hard attention: no temperature in the kernel)
        return True
    q, k = (float(torch.linalg.vector_norm(T.detach(), dim=-1).amax()) for T in (Q, K))
    return 2.0 * s * max(1.0, q + 3.0 * k) ** 2 < torch.finfo(Q.dtype).max


def same_map(a: nn.Linear, b: nn.Linear) -> bool:
    """Whether two affine maps are equal (weights and biases)."""
    if not torch.equal(a.weight, b.weight):
        return False
    if a.bias is None or b.bias is None:
        return a.bias is None and b.bias is None
    return torch.equal(a.bias, b.bias)


def closed_form_self_attention(block: AttentionBlock) -> bool:
    """Whether the block is hard self-attention whose maximal keys are each query's own copies:
    exact Euclidean scores of one map for queries and keys, or, in a layer that holds Theorem
    2.2's weights (its configuration's ``construction``), SAX's dot-product queries ``[x; -1/2]``
    and keys ``[x; ||x||^2]`` (``q.k = -||x - x'||^2 / 2`` plus a constant per query). Fixed
    weights only: a learning layer's copies need not carry equal values. Then the averaging hard
    attention returns each token's own value."""
    c = block.config
    query, key = block.query, block.key
    if not (block.self_attention and c.is_hard) or not isinstance(query, nn.Linear):
        return False
    if not isinstance(key, nn.Linear) or query.weight.requires_grad:
        return False
    if c.score == "euclidean":
        return same_map(query, key)
    return c.score == "dot" and block.name == "SAX" and block.construction == "theorem 2.2"


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
    """The block as :mod:`kmtlib.kernels.limit_model` reads it (where :func:`uses_whole_pass_kernel`)."""
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


def writes_hard_assignment(layer: LayerConfig) -> bool:
    """Whether the point tokens after the layer hold the hard nearest-centre assignment of the
    centres it read: Theorem 2.1's weights (``layer.construction``) with one-hot tokens, CAX hard
    Euclidean attention (of the data coordinates, writing into the assignment coordinates) and
    SAX an exact reset (the identity shortcut or hard Euclidean attention; Theorem 2.1's limit).

    CAX then puts its weight on exactly the centres of maximal score ``2 x.c - ||c||^2`` (the
    negated scores of :func:`~kmtlib.objective.nearest_center`, so the same ties), and the reset
    leaves the positive entries where CAX put them; the lowest index with a positive entry is
    the nearest-centre label (what the whole pass reads instead of a second distance pass)."""
    cax, sax = layer.CAX, layer.SAX
    exact_reset = sax.identity or (sax.is_hard and sax.score == "euclidean")
    return (
        layer.construction == "theorem 2.1" and layer.embedding == "onehot" and not layer.any_k
        and cax.is_hard and cax.score == "euclidean" and exact_reset
    )  # fmt: skip
