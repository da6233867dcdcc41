"""A straightforward implementation of the paper's trainable layer, its task sampler and its loss:
the yardstick kmtlib's training step is timed against.

Written from the description of the model (the paper's learning experiments), not from kmtlib's code, the
way a first implementation would be: squared distances from ``torch.cdist``, an explicit
soft-max over the full n x n score matrix, ``F.dropout`` on the attention weights, tasks drawn
through ``torch.distributions.MixtureSameFamily``, and autograd for every backward pass.

* :func:`reference_tasks`: ``batch`` tasks of ``n`` points from equal-weight mixtures of ``k``
  isotropic normals with uniform means in [0, 1]^d, every dimension of a task min-max rescaled to
  [0, 1], and a uniform random k-subset of each task's points as initial centres.
* :class:`ReferenceLayer`: tokens [x; 0_k] and [c; e_j] (width D = d + k) or [x], [c] (width d),
  four blocks with their own ``nn.Linear`` query, key and value maps and Euclidean soft-max
  attention ``softmax(-gamma ||q - k||^2 / sqrt(D))``, applied as
  ``X1 = X + A(X, C) + A(X, X)``, ``C1 = C + A(C, X1) + A(C, C)``; returns the centres of C1.
* :func:`reference_loss`: the smoothed k-means objective ``sum_i sum_j softmax_j(-t D_ij) D_ij``
  per task, averaged over the batch.

:meth:`ReferenceLayer.load_kmtlib` copies the weights of a ``KMeansTransformer.trainable`` model,
so both can be evaluated on the same inputs with the same weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import distributions as dist
from torch import nn

BLOCKS = ("cax", "sax", "cac", "sac")


def reference_tasks(
    batch: int, n: int, d: int, k: int, scale: float = 0.1, generator: torch.Generator | None = None,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Points (batch, n, d) and initial centres (batch, k, d), drawn with torch.distributions.

    ``torch.distributions`` samples from the global RNG; ``generator`` (if given) only seeds it,
    so that a call is reproducible.
    """
    if generator is not None:
        torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
    means = torch.rand(batch, k, d, device=device)
    mixture = dist.MixtureSameFamily(
        dist.Categorical(probs=torch.full((batch, k), 1.0 / k, device=device)),
        dist.Independent(dist.Normal(means, torch.full_like(means, scale)), 1),
    )
    X = mixture.sample((n,)).permute(1, 0, 2).contiguous()  # (batch, n, d)
    lo = X.min(dim=1, keepdim=True).values
    hi = X.max(dim=1, keepdim=True).values
    X = (X - lo) / (hi - lo)
    pick = torch.rand(batch, n, device=device).argsort(dim=1)[:, :k]
    C0 = torch.gather(X, 1, pick.unsqueeze(-1).expand(batch, k, d))
    return X, C0


class ReferenceBlock(nn.Module):
    """Euclidean soft-max attention with learned query, key and value maps."""

    def __init__(self, width: int, gamma: float, dropout: float):
        super().__init__()
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.inv_temp = gamma / math.sqrt(width)
        self.dropout = dropout

    def forward(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q, k, v = self.query(queries), self.key(keys), self.value(keys)
        sq_dist = torch.cdist(q, k) ** 2
        attn = torch.exp(-self.inv_temp * sq_dist - (-self.inv_temp * sq_dist).max(dim=-1, keepdim=True).values)
        attn = attn / attn.sum(dim=-1, keepdim=True)
        attn = F.dropout(attn, p=self.dropout, training=self.training)
        return attn @ v


class ReferenceLayer(nn.Module):
    """The paper's single trainable layer (four blocks), applied once from fresh tokens."""

    def __init__(self, d: int, k: int, embedding: str = "onehot", gamma: float = 1.0, dropout: float = 0.01):
        super().__init__()
        embedding = "data" if embedding == "none" else embedding  # ("none": the old name of "data")
        if embedding not in ("onehot", "data"):
            raise ValueError(f"embedding must be 'onehot' or 'data', got {embedding!r}")
        self.d, self.k, self.embedding = d, k, embedding
        width = d + k if embedding == "onehot" else d
        self.blocks = nn.ModuleDict({name: ReferenceBlock(width, gamma, dropout) for name in BLOCKS})

    def forward(self, X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
        if self.embedding == "onehot":
            B, n, _ = X.shape
            Xt = torch.cat([X, torch.zeros(B, n, self.k, dtype=X.dtype, device=X.device)], dim=-1)
            Ct = torch.cat([C, torch.eye(self.k, dtype=C.dtype, device=C.device).repeat(B, 1, 1)], dim=-1)
        else:
            Xt, Ct = X, C
        b = self.blocks
        Xt1 = Xt + b["cax"](Xt, Ct) + b["sax"](Xt, Xt)
        Ct1 = Ct + b["cac"](Ct, Xt1) + b["sac"](Ct, Ct)
        return Ct1[..., : self.d]

    @torch.no_grad()
    def load_kmtlib(self, model: nn.Module) -> ReferenceLayer:
        """Copy the weights of a ``kmtlib.KMeansTransformer.trainable`` model (same d, k, embedding)."""
        for name in BLOCKS:
            theirs = getattr(model.layer, name.upper())
            ours = self.blocks[name]
            for part in ("query", "key", "value"):
                getattr(ours, part).weight.copy_(getattr(theirs, part).weight)
                getattr(ours, part).bias.copy_(getattr(theirs, part).bias)
        return self


def reference_loss(X: torch.Tensor, C: torch.Tensor, inv_temperature: float = 10.0) -> torch.Tensor:
    """Mean over tasks of ``sum_i sum_j softmax_j(-t ||x_i - c_j||^2) ||x_i - c_j||^2``."""
    sq_dist = torch.cdist(X, C) ** 2
    weights = torch.softmax(-inv_temperature * sq_dist, dim=-1)
    return (weights * sq_dist).sum(dim=(1, 2)).mean()
