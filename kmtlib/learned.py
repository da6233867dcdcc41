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

Speed. The self-attention of the points (n x n per task) is the cost of a training step. Because
``||q_i||^2`` is the same for every key, it cancels in the soft-max, and

    -s ||q_i - k_j||^2  =  2 s q_i.k_j - s ||k_j||^2  (+ a constant per query),   s = gamma / sqrt(D),

so the scores are one batched matrix product of the queries, augmented with the constant ``-s``,
and the keys, augmented with ``||k_j||^2``. :class:`_EuclideanAttention` runs this with a hand-written
backward pass that keeps only the (dropped-out) attention matrix, and draws dropout sparsely:
the dropped entries (about 1 % of them) come as an index list from geometric gaps between
successes (exactly i.i.d. Bernoulli(p) positions, about p * n^2 random numbers instead of n^2),
and the soft-max backward needs only their values besides the matrix. Keys and queries
are centred on the mean key of their task first (distances do not change), which keeps the
expansion's cancellation error small when the learned weights grow.

Dropout. The paper's model applies dropout (p = 0.01) to every attention matrix. The authors call
``F.dropout(attn, p)`` whose ``training`` flag defaults to True, so their dropout is active at
evaluation as well and their evaluation curves carry a little noise. Here dropout follows the usual
``nn.Dropout`` convention instead: active in ``model.train()``, off in ``model.eval()``. Evaluation
is then deterministic (the same model on the same tasks gives the same numbers, which the book's
tables and the save/load tests rely on), and it measures the layer the training actually shaped
(the expectation of the dropped-out layer, by the inverted-dropout scaling 1/(1-p)). The effect on
the paper's numbers is tiny at p = 0.01. The dropout mask is drawn from ``layer.dropout_generator``
(a ``torch.Generator``) when one is set, else from the global RNG.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import torch
from torch import nn

from ._checks import check_choice, check_int, check_positive_float
from .embedding import OneHotEmbedding, PlainEmbedding

EMBEDDINGS: dict[str, type] = {"onehot": OneHotEmbedding, "none": PlainEmbedding}
ATTENTION_IMPLS: tuple[str, ...] = ("fast", "explicit")
BLOCK_NAMES: tuple[str, ...] = ("cax", "sax", "cac", "sac")


# ---------------------------------------------------------------------------------------- dropout
def sample_dropped(numel: int, p: float, generator: torch.Generator | None = None, device=None) -> torch.Tensor:
    """Flat indices of the entries dropped by dropout with rate ``p`` among ``numel`` entries.

    Each entry is dropped independently with probability ``p`` (exactly: the gaps between
    successive dropped positions are i.i.d. Geometric(p)). Returns a sorted int64 tensor.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    if p <= 0.0 or numel == 0:
        return torch.empty(0, dtype=torch.long, device=device)
    if p >= 1.0:
        return torch.arange(numel, device=device)
    expected = numel * p
    chunk = int(expected + 6.0 * math.sqrt(expected) + 16)
    pieces = []
    last = -1  # position of the last success drawn so far
    while True:
        gaps = torch.empty(chunk, dtype=torch.long, device=device).geometric_(p, generator=generator)
        positions = last + torch.cumsum(gaps, dim=0)
        inside = positions[positions < numel]
        pieces.append(inside)
        if inside.numel() < positions.numel():
            break
        last = int(positions[-1])
    return torch.cat(pieces) if len(pieces) > 1 else pieces[0]


# ------------------------------------------------------------------------------ attention kernels
def explicit_euclidean_weights(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """The attention matrix (B, nq, nk) in the straightforward form, ``softmax(-scale * cdist(q, k)^2)``:
    what a first implementation would write, and the formula the fast kernel is tested against."""
    return torch.softmax(-scale * torch.cdist(q, k) ** 2, dim=-1)


def explicit_euclidean_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, keep: torch.Tensor | None = None, p: float = 0.0
) -> torch.Tensor:
    """The straightforward form: ``softmax(-scale * cdist(q, k)^2) @ v``, optionally times a 0/1
    dropout ``keep`` mask (B, nq, nk) with inverted scaling ``1/(1-p)``. The reference the fast
    kernel is tested against."""
    weights = explicit_euclidean_weights(q, k, scale)
    if keep is not None:
        weights = weights * keep / (1.0 - p)
    return weights @ v


class _EuclideanAttention(torch.autograd.Function):
    """softmax_j(-scale ||q_i - k_j||^2) with optional sparse dropout, and its backward pass.

    Inputs q (B, nq, D), k (B, nk, D), v (B, nk, Dv); ``dropped``: flat indices into (B, nq, nk)
    of the dropped attention entries (int64, may be empty); ``p``: the dropout rate (for the
    inverted scaling 1/(1-p)).

    Only the dropped-out weight matrix W*M is kept for the backward pass, plus the values of the
    dropped weights (a short vector): the soft-max backward dS = W * (dW - rowsum(W * dW)) equals
    (W*M) * (dW - r) at kept entries and -W r at dropped ones, with r_i = grad_out_i . out_i
    (FlashAttention's identity), so no second n x n matrix is needed.
    """

    @staticmethod
    def forward(ctx, q, k, v, scale: float, dropped: torch.Tensor, p: float):
        B, nq, _ = q.shape
        centre = k.mean(dim=1, keepdim=True)
        kc = k - centre
        # Scores up to a per-query constant: [2s q, -s] . [k, |k|^2] = 2s q.k - s|k|^2, one product.
        D = q.shape[-1]
        qa = q.new_empty(B, nq, D + 1)  # (filled in place: no temporary, no concatenation copy)
        torch.sub(q, centre, out=qa[..., :D]).mul_(2.0 * scale)
        qa[..., D].fill_(-scale)
        ka = torch.cat([kc, (kc * kc).sum(-1, keepdim=True)], dim=-1)
        scores = torch.bmm(qa, ka.transpose(1, 2))  # (B, nq, nk)
        weights = torch.softmax(scores, dim=-1, out=scores)  # (in place: one n x n matrix, not two)
        del ka
        flat = weights.view(-1)
        dropped_weights = flat.index_select(0, dropped)
        flat.index_fill_(0, dropped, 0.0)
        out = torch.bmm(weights, v)
        if p > 0.0:
            out.mul_(1.0 / (1.0 - p))
        ctx.save_for_backward(qa, kc, v, weights, out, dropped, dropped_weights)
        ctx.scale, ctx.inv_keep = scale, 1.0 / (1.0 - p)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        qa, kc, v, weights, out, dropped, dropped_weights = ctx.saved_tensors
        scale, inv_keep = ctx.scale, ctx.inv_keep
        nk = weights.shape[2]
        g = grad_out * inv_keep if inv_keep != 1.0 else grad_out.contiguous()
        grad_v = torch.bmm(weights.transpose(1, 2), g) if ctx.needs_input_grad[2] else None
        if not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
            return None, None, grad_v, None, None, None
        # Soft-max backward: (W*M) * (dW - r) at kept entries, -W r at dropped ones, where
        # r = rowsum(W*M * dW) = grad_out . out (in place on the one n x n temporary).
        row = (grad_out * out).sum(-1, keepdim=True)  # (B, nq, 1)
        grad_s = torch.bmm(g, v.transpose(1, 2)).sub_(row).mul_(weights)  # (B, nq, nk)
        if dropped.numel() > 0:
            rows = torch.div(dropped, nk, rounding_mode="floor")
            grad_s.view(-1).index_put_((dropped,), -dropped_weights * row.view(-1)[rows])
        grad_q = grad_k = None
        if ctx.needs_input_grad[0]:
            grad_q = torch.bmm(grad_s, kc).mul_(2.0 * scale)
        if ctx.needs_input_grad[1]:
            # dS^T [2s q, -s] = [2s dS^T q, -s colsum(dS)]; grad_k = 2s dS^T q - 2s k colsum(dS).
            t = torch.bmm(grad_s.transpose(1, 2), qa)
            D = kc.shape[-1]
            grad_k = t[..., :D].addcmul_(kc, t[..., D:], value=2.0)
        return grad_q, grad_k, grad_v, None, None, None


def euclidean_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    dropout: float = 0.0,
    generator: torch.Generator | None = None,
    dropped: torch.Tensor | None = None,
) -> torch.Tensor:
    """Euclidean soft-max attention ``softmax_j(-scale ||q_i - k_j||^2) v_j``, fast path.

    Args:
        q, k, v: (B, nq, D), (B, nk, D), (B, nk, Dv).
        scale: the inverse temperature per squared distance (the layer passes gamma / sqrt(D)).
        dropout: drop each attention entry with this probability (inverted scaling 1/(1-p)).
        generator: randomness for the dropout mask (None: the global RNG).
        dropped: explicit flat indices into (B, nq, nk) of the dropped entries (overrides the
            sampling; for tests).
    """
    if dropped is None:
        dropped = sample_dropped(q.shape[0] * q.shape[1] * k.shape[1], dropout, generator, q.device)
    return _EuclideanAttention.apply(q, k, v, float(scale), dropped, float(dropout))


# ------------------------------------------------------------------------------------- modules
class AttentionBlock(nn.Module):
    """One attention block: learned query, key and value maps (``nn.Linear`` with bias, D -> D)
    and Euclidean soft-max attention with inverse temperature ``gamma / sqrt(D)``."""

    def __init__(self, width: int, gamma: float, dropout: float, impl: str = "fast"):
        super().__init__()
        self.width, self.gamma, self.dropout, self.impl = width, gamma, dropout, impl
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.dropout_generator: torch.Generator | None = None

    @property
    def scale(self) -> float:
        return self.gamma / math.sqrt(self.width)

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, dropout={self.dropout}, impl={self.impl!r}"

    def forward(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q, k, v = self.query(queries), self.key(keys), self.value(keys)
        p = self.dropout if self.training else 0.0
        if self.impl == "fast":
            return euclidean_attention(q, k, v, self.scale, p, self.dropout_generator)
        # The straightforward form (what a first implementation would write); global RNG for dropout.
        weights = nn.functional.dropout(explicit_euclidean_weights(q, k, self.scale), p, training=p > 0)
        return weights @ v

    def attention_weights(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """The attention matrix (B, nq, nk) without dropout (for the attention-map figures)."""
        q, k = self.query(queries), self.key(keys)
        return explicit_euclidean_weights(q, k, self.scale)


class TrainableLayer(nn.Module):
    """The four blocks CAX, SAX, CAC, SAC with residual connections (see the module docstring).

    Blocks are attributes ``cax``, ``sax``, ``cac``, ``sac``; each has ``query``, ``key``,
    ``value`` (``nn.Linear``). Returns the updated (point tokens, centre tokens).
    """

    cax: AttentionBlock  # (the four blocks, set in __init__)
    sax: AttentionBlock
    cac: AttentionBlock
    sac: AttentionBlock

    def __init__(self, width: int, gamma: float = 1.0, dropout: float = 0.01, impl: str = "fast"):
        super().__init__()
        self.width = width
        for name in BLOCK_NAMES:
            setattr(self, name, AttentionBlock(width, gamma, dropout, impl))

    @property
    def blocks(self) -> OrderedDict[str, AttentionBlock]:
        """The four blocks in update order: cax, sax, cac, sac."""
        return OrderedDict((name, getattr(self, name)) for name in BLOCK_NAMES)

    @property
    def dropout_generator(self) -> torch.Generator | None:
        return self.cax.dropout_generator

    @dropout_generator.setter
    def dropout_generator(self, generator: torch.Generator | None) -> None:
        """One generator for the dropout masks of all four blocks (None: the global RNG)."""
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"dropout_generator must be a torch.Generator or None, got {type(generator).__name__}")
        for block in self.blocks.values():
            block.dropout_generator = generator

    def forward(self, points: torch.Tensor, centres: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        points1 = points + self.cax(points, centres) + self.sax(points, points)
        centres1 = centres + self.cac(centres, points1) + self.sac(centres, centres)
        return points1, centres1


def _init_linear(linear: nn.Linear, generator: torch.Generator | None) -> None:
    # PyTorch's default nn.Linear initialisation (kaiming_uniform with a=sqrt(5) for the weight,
    # U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias), drawn from ``generator``.
    bound = 1.0 / math.sqrt(linear.in_features)
    with torch.no_grad():
        linear.weight.uniform_(-bound, bound, generator=generator)
        linear.bias.uniform_(-bound, bound, generator=generator)


def build_trainable_model(
    cls,
    d: int,
    k: int,
    embedding: str = "onehot",
    gamma: float = 1.0,
    dropout: float = 0.01,
    impl: str = "fast",
    generator: torch.Generator | int | None = None,
    dtype: torch.dtype | None = None,
    device: str | torch.device | None = None,
):
    """The learnable single layer of the paper, as a :class:`~kmtlib.KMeansTransformer` that
    re-embeds before every step.

    Args:
        cls: the model class (``KMeansTransformer``; :meth:`KMeansTransformer.trainable` passes it).
        d, k: data dimension and number of centres.
        embedding: ``"onehot"`` (tokens of width d + k, the paper's main model) or ``"none"``
            (width d, the d-only ablation).
        gamma: attention inverse temperature (> 0); the scores are -gamma ||q-k||^2 / sqrt(D).
        dropout: dropout rate on every attention matrix, in [0, 1); active only in ``train()``
            mode (see the module docstring for why).
        impl: ``"fast"`` (the default kernel) or ``"explicit"`` (cdist + soft-max, for checks and
            benchmarks; dropout from the global RNG).
        generator: a ``torch.Generator`` or an integer seed for the initial weights (None: the
            global RNG, so ``torch.manual_seed`` makes the initialisation deterministic). The
            initial weights follow PyTorch's default ``nn.Linear`` initialisation.
        dtype, device: where the weights live (default float32, CPU).
    """
    d = check_int("d", d, minimum=1)
    k = check_int("k", k, minimum=1)
    check_choice("embedding", embedding, EMBEDDINGS)
    gamma = check_positive_float("gamma", gamma)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= float(dropout) < 1.0:
        raise ValueError(f"dropout must be a number in [0, 1), got {dropout!r}")
    dropout = float(dropout)
    check_choice("impl", impl, ATTENTION_IMPLS)
    if generator is not None and not isinstance(generator, torch.Generator):
        seed = check_int("generator (seed)", generator, minimum=0)
        generator = torch.Generator().manual_seed(seed)
    if generator is not None and generator.device.type != "cpu":
        raise ValueError("generator for the initial weights must be a CPU generator (weights are drawn on the CPU)")

    emb = EMBEDDINGS[embedding](d, k)
    layer = TrainableLayer(emb.width, gamma=gamma, dropout=dropout, impl=impl)
    for block in layer.blocks.values():
        for linear in (block.query, block.key, block.value):
            _init_linear(linear, generator)
    config: dict[str, Any] = {
        "builder": "trainable",
        "kwargs": {"d": d, "k": k, "embedding": embedding, "gamma": gamma, "dropout": dropout, "impl": impl},
    }
    model = cls(emb, layer, reembed=True, config=config)
    if dtype is not None:
        model = model.to(dtype)
    if device is not None:
        model = model.to(device)
    return model
