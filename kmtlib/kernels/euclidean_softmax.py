"""Euclidean soft-max attention with a hand-written backward pass: the trainable layer's kernel.

The plain formula is :func:`explicit_euclidean_attention`, ``softmax(-scale * cdist(q, k)^2) @ v``;
:func:`euclidean_attention` computes the same with less memory, which the tests check (values and
gradients). The cost of a training step is the self-attention of the points (n x n per task).
Because ``||q_i||^2`` is the same for every key, it cancels in the soft-max, and

    -s ||q_i - k_j||^2  =  2 s q_i.k_j - s ||k_j||^2  (+ a constant per query),

so the scores are one batched matrix product of the queries, augmented with the constant ``-s``,
and the keys, augmented with ``||k_j||^2``. The backward pass keeps only the (dropped-out)
attention matrix, and dropout is drawn sparsely: the dropped entries (about 1 % of them) come as
an index list from geometric gaps between successes (exactly i.i.d. Bernoulli(p) positions, about
p * n^2 random numbers instead of n^2), and the soft-max backward needs only their values besides
the matrix. Keys and queries are centred on the mean key of their task first (distances do not
change), which keeps the expansion's cancellation error small when the learned weights grow.
"""

from __future__ import annotations

import math

import torch


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
    def forward(ctx, q, k, v, scale: float, dropped: torch.Tensor, p: float | torch.Tensor):
        B, nq, _ = q.shape
        center = k.mean(dim=1, keepdim=True)
        kc = k - center
        # Scores up to a per-query constant: [2s q, -s] . [k, |k|^2] = 2s q.k - s|k|^2, one product.
        D = q.shape[-1]
        qa = q.new_empty(B, nq, D + 1)  # (filled in place: no temporary, no concatenation copy)
        torch.sub(q, center, out=qa[..., :D]).mul_(2.0 * scale)
        qa[..., D].fill_(-scale)
        ka = torch.cat([kc, (kc * kc).sum(-1, keepdim=True)], dim=-1)
        scores = torch.bmm(qa, ka.transpose(1, 2))  # (B, nq, nk)
        weights = torch.softmax(scores, dim=-1, out=scores)  # (in place: one n x n matrix, not two)
        del ka
        flat = weights.view(-1)
        dropped_weights = flat.index_select(0, dropped)
        flat.index_fill_(0, dropped, 0.0)
        out = torch.bmm(weights, v)
        # (p: one rate, or a rate per task (B,) where the tasks of S runs with their own rates meet)
        inv_keep = 1.0 / (1.0 - p) if isinstance(p, float) else (1.0 / (1.0 - p)).to(out.dtype).view(B, 1, 1)
        if isinstance(inv_keep, torch.Tensor) or inv_keep != 1.0:
            out.mul_(inv_keep)
        ctx.save_for_backward(qa, kc, v, weights, out, dropped, dropped_weights)
        ctx.scale, ctx.inv_keep = scale, inv_keep
        return out

    @staticmethod
    def backward(ctx, grad_out):
        qa, kc, v, weights, out, dropped, dropped_weights = ctx.saved_tensors
        scale, inv_keep = ctx.scale, ctx.inv_keep
        nk = weights.shape[2]
        scaled = isinstance(inv_keep, torch.Tensor) or inv_keep != 1.0
        g = grad_out * inv_keep if scaled else grad_out.contiguous()
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
    dropout: float | torch.Tensor = 0.0,
    generator: torch.Generator | None = None,
    dropped: torch.Tensor | None = None,
) -> torch.Tensor:
    """Euclidean soft-max attention ``softmax_j(-scale ||q_i - k_j||^2) v_j``, fast path.

    Args:
        q, k, v: (B, nq, D), (B, nk, D), (B, nk, Dv).
        scale: the inverse temperature per squared distance (the layer passes gamma / sqrt(D)).
        dropout: drop each attention entry with this probability (inverted scaling 1/(1-p)); or a
            tensor (B,) of rates, one per task, with the dropped entries given as ``dropped``
            (what :mod:`kmtlib.fast.run_stack` passes for runs of different dropout rates).
        generator: randomness for the dropout mask (None: the global RNG).
        dropped: explicit flat indices into (B, nq, nk) of the dropped entries (overrides the
            sampling).
    """
    if isinstance(dropout, torch.Tensor):
        if dropped is None:
            raise ValueError("dropout rates per task need the dropped entries given as `dropped`")
        if dropout.shape != (q.shape[0],):
            raise ValueError(f"dropout rates per task must have shape ({q.shape[0]},), got {tuple(dropout.shape)}")
        return _EuclideanAttention.apply(q, k, v, float(scale), dropped, dropout.to(torch.float64))
    if dropped is None:
        dropped = sample_dropped(q.shape[0] * q.shape[1] * k.shape[1], dropout, generator, q.device)
    return _EuclideanAttention.apply(q, k, v, float(scale), dropped, float(dropout))
