"""Speed kernels of kmtlib, each beside the plain formula it replaces and pinned to it by a test.

Nothing here changes what is computed, only how fast (and, through the order of a sum, at most
the last bits). One switch chooses them: ``model.fast`` (``layer.fast``, default True; set it to
False to run every block by its formula in :mod:`kmtlib.layer`).

* :mod:`.euclidean_softmax`: Euclidean soft-max attention with a hand-written backward pass and
  sparse dropout (the trainable layer; plain formula ``softmax(-s cdist(q, k)^2) @ v``).
* hard self-attention in closed form (:func:`closed_form_self_attention`): where the keys that
  attain a query's maximum are the copies of its own token (one map for queries and keys and
  exact Euclidean scores, or Theorem 2.2's dot-product form), and copies carry the same value
  (in the theorem's circuits a point's assignment is a function of the point), the averaging
  hard attention returns each token's own value (plain formula: the n x n attention matrix).
* :mod:`.point_attention`: the points' self-attention (SAX) of the trainable layer in the data's
  own coordinates: its tokens ``[x; 0]`` have only d non-zero coordinates, so its n x n products
  are about d wide instead of d + k, and the points, being data, need no gradient (plain
  formula: the Euclidean soft-max attention of the projected tokens).
* :mod:`.limit_model`: a whole forward pass of a fixed-weight model, with the point tokens
  stored coordinate-major (the paper's columns: memory (B, D, n)), updated in place, the weights'
  coordinate selectors evaluated as slices, scratch memory reused from layer to layer, and the
  objective read from the assignment the tokens hold (plain formula: the model's own loop).
* :mod:`.labels`: the lowest-index label search (plain formula: ``argmax`` of a mask).
* :mod:`.scratch`, :mod:`.layout`: reused temporaries and blocked transposing copies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from .euclidean_softmax import euclidean_attention

if TYPE_CHECKING:
    from ..layer import AttentionBlock

Kernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]
"""``kernel(q, k, v, dropout) -> output``: a block's attention on projected q, k, v."""


def same_map(a: torch.nn.Linear, b: torch.nn.Linear) -> bool:
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
    query). Fixed weights only: a learning layer's copies need not carry equal values."""
    c = block.config
    if not (block.self_attention and c.is_hard) or not isinstance(block.query, torch.nn.Linear):
        return False
    if not isinstance(block.key, torch.nn.Linear) or block.query.weight.requires_grad:
        return False
    if c.score == "euclidean":
        return same_map(block.query, block.key)
    if c.score == "dot" and block.query.bias is None and block.key.bias is None:
        from ..constructions import theorem_weights

        D = block.query.weight.shape[0]
        if block.d + block.clusters + 2 != D:
            return False
        weights = theorem_weights(block.d, block.clusters, "dot", dtype=block.query.weight.dtype)["SAX"]
        W = block.query.weight
        return torch.equal(W, weights["Q"].to(W.device)) and torch.equal(block.key.weight, weights["K"].to(W.device))
    return False


def point_coordinates(block: AttentionBlock, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor | None:
    """The non-zero coordinates x (B, n, d) of point tokens ``[x; 0]`` where the block's
    self-attention can run in them (:mod:`.point_attention`), else None: one tensor for queries
    and keys, Euclidean soft-max, affine maps, tokens without gradient that are zero past the
    data coordinates."""
    c = block.config
    if not (block.self_attention and queries is keys) or queries.requires_grad:
        return None
    if c.score != "euclidean" or c.map != "softmax" or c.is_hard or c.options:
        return None
    maps = (block.query, block.key, block.value)
    if not all(isinstance(m, torch.nn.Linear) and m.bias is not None for m in maps):
        return None
    d = block.d
    if queries.shape[-1] <= d or torch.any(queries[..., d:]):
        return None
    return queries[..., :d]


def attention_kernel(block: AttentionBlock, q: torch.Tensor, k: torch.Tensor) -> Kernel | None:
    """The kernel for this block and these projected tokens, or None (then the formula runs)."""
    c = block.config
    if closed_form_self_attention(block):
        return lambda q, k, v, p: v  # each token's own value (module documentation)
    if c.score == "euclidean" and c.map == "softmax" and not c.is_hard and not c.options:
        return lambda q, k, v, p: euclidean_attention(q, k, v, c.inverse_temperature, p, block.generator)
    return None
