"""The trainable layer with a leading run axis: S training runs of one shape in one pass.

The paper's learning results are medians over ten training seeds, and its sweeps train many runs
of the same shape (d, k, n, token width) that differ only in their seed, loss temperature or
dropout rate. :class:`RunStack` holds S such runs, each a whole :class:`~kmtlib.KMeansTransformer`
with its own weights, and applies them together: the tokens carry a leading run axis, (S, B, n, D),
and so do the weights of every map, stacked from the runs' own parameters at each step::

    W_Q = stack(W_Q[1], ..., W_Q[S])        (S, D, D),   b_Q: (S, D)
    Q(Z)[s] = Z[s] W_Q[s]^T + b_Q[s]

so run s's tokens meet run s's weights only, and each run's gradient reaches its own parameters
(the stack is differentiable), where its own optimiser updates them. The maps are applied either
run by run (S products, each the very product of a single run) or as one batched product over
the stacked weights (fewer, larger kernels, for a GPU): :data:`PRODUCTS`. The attention itself is
the same per task whatever run the task belongs to, so the S x B tasks go through the one kernel
of :mod:`kmtlib.kernels.euclidean_softmax`; only the dropout masks are the runs' own: each run
draws its blocks' dropped entries from its own generator, in the blocks' order, exactly the
numbers it would draw training alone, and a run's rate may differ from the others'. The points'
self-attention (SAX), the n x n work where the time goes, reads tokens ``[x; 0]`` and runs in the
data's coordinates (:mod:`kmtlib.kernels.point_attention`), whose kernel takes one run's maps: it
runs run by run, on B tasks each, as in a single run.

The update is the layer's own, :func:`kmtlib.layer.update` (what :meth:`KMeansLayer.forward
<kmtlib.layer.KMeansLayer.forward>` runs), called with the runs' blocks, block by block the S
runs' blocks together (:attr:`RunStack.blocks`), and :meth:`RunStack.attention` as the attention
of a block. ``RunStack(models).step(X, C)`` equals ``models[s].step(X[s], C[s])`` for every s.
``tests/test_train_group.py`` checks the forward pass and the gradients against the models one by
one: to float tolerance for both kinds of products, and it reports whether they were equal to the
last bit (with per-run products they are on the CPUs tried, since every product is then the single
run's; batched products over an odd width such as D = 9 round differently in MKL).

What a stack holds must share everything but the weights, seeds, loss temperature and dropout rate
(:func:`stack_problem`): a layer for any k (equivariant maps, a k drawn per batch) has no stack.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import torch
from torch import nn

from .._checks import check_choice
from ..embedding import Embedding
from ..kernels.euclidean_softmax import euclidean_attention, sample_dropped
from ..layer import BLOCK_NAMES, AttentionBlock, KMeansLayer, LayerConfig, update
from .choice import attend, point_coordinates


class KMeansTransformer(Protocol):
    """What a stack reads of a :class:`kmtlib.KMeansTransformer`: its configuration, layer and
    embedding, and its parameters (the model's room sits above this one)."""

    config: LayerConfig
    layer: KMeansLayer
    embedding: Embedding

    def parameters(self) -> Iterator[nn.Parameter]: ...

PRODUCTS: tuple[str, ...] = ("auto", "per_run", "batched")
"""How a stack applies the runs' query, key and value maps: ``"per_run"``, each run's own map on
its tokens (S products per map: a single run's arithmetic, bit for bit; cheap beside the n x n
attention on a CPU); ``"batched"``, one product on the stacked weights (:func:`stacked_affine`:
fewer, larger kernels, what a GPU wants; rounds differently in the last bits); ``"auto"``:
batched on CUDA, per run elsewhere."""


def stack_problem(models: Sequence[KMeansTransformer]) -> str | None:
    """Why these models cannot be trained as one stack, or None when they can."""
    if not models:
        return "no models to stack"
    first = models[0].config
    for name in ("d", "k", "embedding", "code_width", "any_k", "ffn", "normalise_data", "bias", "reembed"):
        values = {getattr(m.config, name) for m in models}
        if len(values) > 1:
            return f"the models differ in {name} ({', '.join(sorted(map(repr, values)))})"
    if first.any_k:
        return "a layer for any k (equivariant maps) has no stacked form; train its runs one at a time"
    if first.ffn or first.normalise_data or not first.trainable or not first.bias or not first.reembed:
        return "only the trainable layer (affine maps, re-embedded before every step) has a stacked form"
    for name in BLOCK_NAMES:
        blocks = [getattr(m.config, name) for m in models]
        if any(b.score != "euclidean" or b.map != "softmax" or b.options for b in blocks):
            return f"block {name} is not Euclidean soft-max attention"
        if len({b.inverse_temperature for b in blocks}) > 1:
            return f"the models' block {name} has different attention temperatures (gamma)"
    dtypes = {p.dtype for m in models for p in m.parameters()}
    devices = {p.device for m in models for p in m.parameters()}
    if len(dtypes) > 1 or len(devices) > 1:
        return "the models' weights are not all of one dtype on one device"
    return None


class _StackedAffine(torch.autograd.Function):
    """``Z[s] W[s]^T + b[s]`` on Z (S, N, D), W (S, D_out, D), b (S, D_out), with the backward pass
    of ``nn.Linear`` run by run: ``dW[s] = dY[s]^T Z[s]``, ``dZ[s] = dY[s] W[s]``, ``db[s] = sum_i dY[s]_i``
    (autograd's own backward of the batched product would compute ``(Z^T dY)^T`` for dW, which
    rounds differently from a single run's)."""

    @staticmethod
    def forward(ctx, Z, W, b):
        ctx.save_for_backward(Z, W)
        return torch.baddbmm(b.unsqueeze(1), Z, W.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad):
        Z, W = ctx.saved_tensors
        grad_Z = torch.bmm(grad, W) if ctx.needs_input_grad[0] else None
        grad_W = torch.bmm(grad.transpose(1, 2), Z) if ctx.needs_input_grad[1] else None
        grad_b = grad.sum(1) if ctx.needs_input_grad[2] else None
        return grad_Z, grad_W, grad_b


def per_run_affine(tokens: torch.Tensor, maps: Sequence[nn.Module]) -> torch.Tensor:
    """``Z[s] W[s]^T + b[s]`` for tokens (S, B, m, D): each run's own map on its own tokens, the
    very product (and backward pass) of a single run."""
    # (unbind, not indexing: its backward stacks the S gradients, where S index backwards would
    # each write a zero tensor of the whole stack)
    return torch.stack([f(z) for z, f in zip(tokens.unbind(0), maps)])


def stacked_affine(tokens: torch.Tensor, maps: Sequence[nn.Module]) -> torch.Tensor:
    """``Z[s] W[s]^T + b[s]`` for tokens (S, B, m, D) and the S runs' maps as one batched product
    on the stacked weights (S, D, D), what :func:`per_run_affine` computes in S products."""
    S, B, m, D = tokens.shape
    linear = [f for f in maps if isinstance(f, nn.Linear) and f.bias is not None]
    if len(linear) != len(maps):
        raise TypeError("a batched product needs affine maps (nn.Linear with bias)")
    W = torch.stack([f.weight for f in linear])  # (S, D_out, D)
    b = torch.stack([f.bias for f in linear])  # (S, D_out)
    out = _StackedAffine.apply(tokens.reshape(S, B * m, D), W, b)
    return out.view(S, B, m, -1)


class RunStack:
    """S trainable models of one shape applied as one (module documentation). It holds the
    models, not copies: their parameters, modes and dropout generators are the runs' own."""

    def __init__(self, models: Sequence[KMeansTransformer], products: str = "auto") -> None:
        problem = stack_problem(models)
        if problem is not None:
            raise ValueError(f"these runs cannot train as one stack: {problem}")
        check_choice("products", products, PRODUCTS)
        self.models = list(models)
        if products == "auto":
            products = "batched" if next(models[0].parameters()).device.type == "cuda" else "per_run"
        self.affine = stacked_affine if products == "batched" else per_run_affine

    def __len__(self) -> int:
        return len(self.models)

    @property
    def blocks(self) -> dict[str, list[AttentionBlock]]:
        """Each block of the layer, by name, as the S runs' blocks."""
        return {name: [m.layer.blocks[name] for m in self.models] for name in BLOCK_NAMES}

    def attention(self, blocks: list[AttentionBlock], queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """One block of every run (``blocks``, run s's block the s-th): queries (S, B, m, D) over
        keys (S, B, r, D) -> (S, B, m, D); the ``attend`` of :func:`kmtlib.layer.update`."""
        if queries is keys:
            # The points' self-attention on tokens [x; 0]: each run's block, through the d-wide
            # kernel of kmtlib.kernels.point_attention (the n x n work, where the time goes).
            tokens = queries.unbind(0)
            if all(point_coordinates(b, z, z) is not None for b, z in zip(blocks, tokens)):
                return torch.stack([attend(b, z, z) for b, z in zip(blocks, tokens)])
        q = self.affine(queries, [b.query for b in blocks])
        k = self.affine(keys, [b.key for b in blocks])
        v = self.affine(keys, [b.value for b in blocks])
        S, B, m, D = q.shape
        r = k.shape[2]
        rates = [b.config.dropout if b.training else 0.0 for b in blocks]
        # Each run's dropped entries from its own generator (what it draws alone), shifted to its tasks.
        numel = B * m * r
        dropped = torch.cat([
            sample_dropped(numel, p, b.generator, q.device) + s * numel
            for s, (b, p) in enumerate(zip(blocks, rates))
        ])  # fmt: skip
        rate: float | torch.Tensor = rates[0]
        if len(set(rates)) > 1:
            rate = torch.tensor(rates, dtype=torch.float64, device=q.device).repeat_interleave(B)
        out = euclidean_attention(
            q.reshape(S * B, m, D), k.reshape(S * B, r, D), v.reshape(S * B, r, -1),
            blocks[0].config.inverse_temperature, rate, dropped=dropped,
        )  # fmt: skip
        return out.view(S, B, m, -1)

    def step(self, X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
        """One step of every run from fresh tokens: points X (S, B, n, d) and centres C (S, B, k, d)
        -> the centres (S, B, k, d) after one layer (``models[s].step(X[s], C[s])`` for each s)."""
        if X.shape[0] != len(self.models) or C.shape[0] != len(self.models):
            raise ValueError(
                f"X and C need a leading run axis of {len(self.models)}, got {X.shape[0]} and {C.shape[0]}"
            )
        tokens = [m.embedding.embed(X[s], C[s]) for s, m in enumerate(self.models)]  # (codes: per run's stream)
        point_tokens = torch.stack([points for points, _ in tokens])  # (S, B, n, D)
        centre_tokens = torch.stack([centres for _, centres in tokens])  # (S, B, k, D)
        _, centre_tokens = update(self.blocks, point_tokens, centre_tokens, self.attention)
        return torch.stack([m.embedding.centers(centre_tokens[s]) for s, m in enumerate(self.models)])
