"""The points' self-attention (SAX) of the trainable layer, in the data's own coordinates.

The plain formula is the block's: ``q = A_q z + b_q``, ``k``, ``v`` likewise, and
``softmax_j(-s ||q_i - k_j||^2) v_j`` (:func:`~kmtlib.kernels.euclidean_softmax.euclidean_attention`
on the projected tokens). The layer re-embeds before every step, so the point tokens that SAX
reads are ``z = [x; 0]``: only the first r = d coordinates are non-zero, and every map sees only
its first r columns (``A = W[:, :r]``, D x r). The D-wide products of the attention then factor
through r-wide ones. With ``x~_j = x_j - mean_l x_l`` (the data centred on the mean point, which
is the mean key ``k^ = A_k mean(x) + b_k`` in token space) and ``u_i = q_i - k^``::

    -s ||q_i - k_j||^2 = 2s (A_k^T u_i) . x~_j  -  s ||A_k x~_j||^2  -  s ||u_i||^2,

and the last term is the same for every key, so it cancels in the soft-max: the scores are one
(r + 1)-wide product of ``[2s A_k^T u_i, -s]`` and ``[x~_j, ||A_k x~_j||^2]``. The values
``v_j = A_v x~_j + c`` (``c = A_v mean(x) + b_v``) give, for weights W (after dropout),

    out_i = (W x~)_i A_v^T + (sum_j W_ij) c,

an r-wide product. The backward pass needs, besides the weights, two more r-wide products: the
gradient of the weights ``dW_ij = dY_i . x~_j + g_i . c`` with ``dY = g A_v``, and the gradient
of the queries ``2s G x~``; the keys' part ``-s ||A_k x~_j||^2`` needs only the column sums of the
score gradient G. The points themselves get no gradient (they are data). So a training step
makes four n x n products of width about d instead of six of width about d + k: at the paper's
d = 32, k = 10, the self-attention's arithmetic falls to half.

Dropout is the same as the plain kernel's (the same dropped entries for the same generator) and
so is the soft-max backward (FlashAttention's identity, ``r_i = g_i . out_i``). Nothing else
changes what is computed: the tests compare values and gradients with the formula.
"""

from __future__ import annotations

import torch


class _PointSelfAttention(torch.autograd.Function):
    """Inputs: x (B, n, r) the non-zero coordinates of the point tokens (no gradient); the maps'
    first r columns A_q, A_k, A_v (D, r) and biases b_q, b_k, b_v (D,); ``scale`` s; ``dropped``,
    flat indices into (B, n, n) of the dropped attention entries; ``p`` the dropout rate."""

    @staticmethod
    def forward(ctx, x, A_q, b_q, A_k, b_k, A_v, b_v, scale: float, dropped: torch.Tensor, p: float):
        B, n, r = x.shape
        mean = x.mean(dim=1, keepdim=True)  # (B, 1, r)
        xc = x - mean
        D = A_q.shape[0]
        u = torch.addmm(b_q - b_k, x.reshape(-1, r), A_q.t()).view(B, n, D)  # q_i - b_k
        u.sub_(mean @ A_k.t())  # q_i - mean key
        keys = xc @ A_k.t()  # (B, n, D): k_j - mean key
        qa = x.new_empty(B, n, r + 1)
        torch.matmul(u, A_k, out=qa[..., :r]).mul_(2.0 * scale)
        qa[..., r].fill_(-scale)
        ka = torch.cat([xc, (keys * keys).sum(-1, keepdim=True)], dim=-1)
        scores = torch.bmm(qa, ka.transpose(1, 2))  # (B, n, n)
        weights = torch.softmax(scores, dim=-1, out=scores)
        flat = weights.view(-1)
        dropped_weights = flat.index_select(0, dropped)
        flat.index_fill_(0, dropped, 0.0)
        Y = torch.bmm(weights, xc)  # (B, n, r)
        rowsum = weights.sum(-1, keepdim=True)  # (B, n, 1): 1 without dropout
        c = mean @ A_v.t() + b_v  # (B, 1, D): the value of the mean point
        out = (Y.reshape(-1, r) @ A_v.t()).view(B, n, D).addcmul_(rowsum, c)
        inv_keep = 1.0 / (1.0 - p)
        if inv_keep != 1.0:
            out.mul_(inv_keep)
        ctx.save_for_backward(x, mean, u, keys, A_k, A_v, weights, Y, rowsum, c, out, dropped, dropped_weights)
        ctx.scale, ctx.inv_keep = scale, inv_keep
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, mean, u, keys, A_k, A_v, weights, Y, rowsum, c, out, dropped, dropped_weights = ctx.saved_tensors
        scale, inv_keep = ctx.scale, ctx.inv_keep
        n, r = x.shape[1:]
        D = A_v.shape[0]
        xc = x - mean
        g = grad_out * inv_keep if inv_keep != 1.0 else grad_out.contiguous()
        # Values: out = Y A_v^T + rowsum c.
        flat_g = g.reshape(-1, D)
        grad_A_v = flat_g.t() @ Y.reshape(-1, r)
        grad_c = (g * rowsum).sum(1)  # (B, D)
        grad_A_v += grad_c.t() @ mean.squeeze(1)
        grad_b_v = grad_c.sum(0)
        # The weights: dW_ij = dY_i . x~_j + g_i . c, then the soft-max backward in place.
        dY = g @ A_v  # (B, n, r)
        row = (grad_out * out).sum(-1, keepdim=True) - (g * c).sum(-1, keepdim=True)
        grad_s = torch.bmm(dY, xc.transpose(1, 2)).sub_(row).mul_(weights)  # (B, n, n)
        if dropped.numel() > 0:
            row_full = (grad_out * out).sum(-1).view(-1)
            rows = torch.div(dropped, n, rounding_mode="floor")
            grad_s.view(-1).index_put_((dropped,), -dropped_weights * row_full[rows])
        # Scores S_ij = qa_i . [x~_j, |keys_j|^2], qa_i = [2s A_k^T u_i, -s].
        grad_qt = torch.bmm(grad_s, xc).mul_(2.0 * scale)  # (B, n, r): d(A_k^T u_i)
        col = grad_s.sum(1)  # (B, n): column sums, the gradient of the key norms over -s
        grad_keys = keys * (col * (-2.0 * scale)).unsqueeze(-1)  # d|k_j|^2 = 2 k_j, times -s col_j
        grad_u = grad_qt @ A_k.t()  # (B, n, D)
        # A_k: from A_k^T u (u (x) dq), from the keys (dk (x) x~) and from the mean key in u.
        qt_part = u.reshape(-1, D).t() @ grad_qt.reshape(-1, r)
        grad_A_k = qt_part + grad_keys.reshape(-1, D).t() @ xc.reshape(-1, r)
        grad_mean_key = -grad_u.sum(1)  # (B, D)
        grad_A_k += grad_mean_key.t() @ mean.squeeze(1)
        grad_b_k = grad_mean_key.sum(0)
        grad_A_q = grad_u.reshape(-1, D).t() @ x.reshape(-1, r)
        grad_b_q = grad_u.sum((0, 1))
        return None, grad_A_q, grad_b_q, grad_A_k, grad_b_k, grad_A_v, grad_b_v, None, None, None


def point_self_attention(
    x: torch.Tensor,
    query: tuple[torch.Tensor, torch.Tensor],
    key: tuple[torch.Tensor, torch.Tensor],
    value: tuple[torch.Tensor, torch.Tensor],
    scale: float,
    dropped: torch.Tensor,
    dropout: float,
) -> torch.Tensor:
    """Self-attention of point tokens ``[x; 0]`` (B, n, D) given by their first r coordinates x
    (B, n, r): ``softmax_j(-scale ||q_i - k_j||^2) v_j`` with the affine maps ``query``, ``key``,
    ``value``, each ``(W, b)`` (D x D and D: ``z @ W.T + b``), the entries ``dropped`` (flat
    indices into (B, n, n)) dropped at rate ``dropout`` (inverted scaling). Returns (B, n, D);
    gradients reach the maps only."""
    r = x.shape[-1]
    (W_q, b_q), (W_k, b_k), (W_v, b_v) = query, key, value
    return _PointSelfAttention.apply(
        x, W_q[:, :r], b_q, W_k[:, :r], b_k, W_v[:, :r], b_v, float(scale), dropped, float(dropout)
    )
