"""Affine maps of tokens that do not care how many clusters there are, nor how they are numbered.

A token of the k-means transformer is ``z = [x; y]``: ``d`` data coordinates ``x`` and ``k``
cluster coordinates ``y`` (a point's assignment, a centre's one-hot id). Renumbering the clusters
permutes ``y`` and nothing else, so a layer that clusters the same way under every numbering
needs query, key and value maps ``f`` with ``f([x; P y]) = [x'; P y']`` for every permutation
``P``. The most general affine map with that property is (``s = 1.y``, the sum of the cluster
coordinates; ``1`` the all-ones vector of length k)::

    x' = A x + s u + beta
    y' = a y + (b s + v.x + beta_0) 1

with a ``d x d`` matrix ``A``, vectors ``u``, ``v``, ``beta`` of length ``d`` and four numbers
``a``, ``b``, ``beta_0`` -- none of which depends on ``k``, so one set of weights reads tokens of
any number of clusters.

What the map writes to all k cluster coordinates at once (the number ``b s + v.x + beta_0``) can be
spread in three ways, :data:`BROADCASTS`: ``"ones"`` writes it to every coordinate (the form
above); ``"mean"`` writes it divided by k (the cluster block is then ``a I + (b/k) 1 1^T``);
``"unit"`` divides it by sqrt(k), so that the vector it writes has the same length at every k.
The choice matters because the attention scores are squared distances summed over the k
coordinates: a number written to all of them adds k times its square to a score under
``"ones"``, its square under ``"unit"``, and 1/k of it under ``"mean"``. Chapter 12 trains all
three and compares them. As a ``(d + k) x (d + k)`` matrix ``W`` acting on column tokens
(:meth:`EquivariantMap.dense`)::

    W = [[A,      u 1^T        ],
         [1 v^T,  a I + b 1 1^T]],     bias = [beta; beta_0 1].

Theorem 2.1's weights lie in this family (its id blocks are 0 or plus or minus the identity:
``a = +-1``, ``b = u = v = 0``), so exact Lloyd stays expressible at every k.
:meth:`EquivariantMap.from_linear` is the average of a ``d + k`` wide linear map over all ``k!``
renumberings (the projection onto the family), which chapter 12 applies to the layer trained at
k = 10 to see what the symmetry costs it.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

BROADCASTS: tuple[str, ...] = ("ones", "mean", "unit")
"""How an :class:`EquivariantMap` spreads one number over the k cluster coordinates: times the
all-ones vector, times 1/k, or times 1/sqrt(k) (module documentation)."""


def broadcast_weight(broadcast: str, k: int) -> float:
    """The factor of the all-ones vector under ``broadcast`` for ``k`` clusters: 1, 1/k or 1/sqrt(k)."""
    if broadcast not in BROADCASTS:
        raise ValueError(f"unknown broadcast {broadcast!r}; expected one of {', '.join(BROADCASTS)}")
    return {"ones": 1.0, "mean": 1.0 / k, "unit": 1.0 / math.sqrt(k)}[broadcast]


class EquivariantMap(nn.Module):
    """``z = [x; y] -> [A x + s u + beta; a y + w (b s + v.x + beta_0) 1]`` with ``s = sum(y)`` and
    ``w`` 1, 1/k or 1/sqrt(k) as ``broadcast`` says (module documentation): a map for tokens with
    ``d`` data coordinates and any number of cluster coordinates."""

    def __init__(self, d: int, trainable: bool = True, broadcast: str = "ones") -> None:
        super().__init__()
        broadcast_weight(broadcast, 1)  # (checks the name)
        self.d, self.broadcast = d, broadcast
        self.A = nn.Parameter(torch.empty(d, d), requires_grad=trainable)
        self.u = nn.Parameter(torch.empty(d), requires_grad=trainable)
        self.v = nn.Parameter(torch.empty(d), requires_grad=trainable)
        self.a = nn.Parameter(torch.empty(()), requires_grad=trainable)
        self.b = nn.Parameter(torch.empty(()), requires_grad=trainable)
        self.beta = nn.Parameter(torch.empty(d), requires_grad=trainable)
        self.beta_0 = nn.Parameter(torch.empty(()), requires_grad=trainable)

    def extra_repr(self) -> str:
        return f"d={self.d}, clusters=any, broadcast={self.broadcast!r}"

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x, y = z[..., : self.d], z[..., self.d :]
        s = y.sum(-1, keepdim=True)
        w = broadcast_weight(self.broadcast, y.shape[-1])
        x_out = x @ self.A.T + s * self.u + self.beta
        y_out = self.a * y + w * (self.b * s + x @ self.v.unsqueeze(-1) + self.beta_0)
        return torch.cat([x_out, y_out], dim=-1)

    @torch.no_grad()
    def reset_parameters(self, fan_in: int, generator: torch.Generator | None = None) -> None:
        """Uniform on ``(-1/sqrt(fan_in), 1/sqrt(fan_in))``, as ``nn.Linear`` initialises a map of
        that fan-in, drawn in the order A, u, v, a, b, beta, beta_0."""
        bound = 1.0 / math.sqrt(fan_in)
        for p in (self.A, self.u, self.v, self.a, self.b, self.beta, self.beta_0):
            p.uniform_(-bound, bound, generator=generator)

    def dense(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``(d + k) x (d + k)`` weight matrix and the bias of this map for ``k`` clusters (acting
        on row tokens as ``z @ W.T + bias``, as ``nn.Linear`` stores its weights)."""
        ones = self.A.new_ones(k)
        spread = broadcast_weight(self.broadcast, k) * ones
        top = torch.cat([self.A, torch.outer(self.u, ones)], dim=1)
        bottom = torch.cat([torch.outer(spread, self.v), self.a * torch.eye(k, dtype=self.A.dtype, device=self.A.device)
                            + self.b * torch.outer(spread, ones)], dim=1)  # fmt: skip
        return torch.cat([top, bottom], dim=0), torch.cat([self.beta, self.beta_0 * spread])

    @classmethod
    @torch.no_grad()
    def from_linear(cls, linear: nn.Linear, d: int) -> EquivariantMap:
        """The average of ``linear`` (width ``d + k``) over all renumberings of its ``k`` cluster
        coordinates: the data block is kept, each block that reads or writes cluster coordinates
        is replaced by its mean over them (the diagonal and the off-diagonal of the cluster block
        separately), as the average over all ``k!`` permutations gives. (The result spreads with
        ``"ones"``: the average of a map of one k is a map of that k.)"""
        W = linear.weight.detach()
        k = W.shape[0] - d
        if k < 1 or W.shape[1] != d + k:
            raise ValueError(f"a map of width {W.shape[1]} has no cluster coordinates after d={d} data coordinates")
        out = cls(d, trainable=False).to(W.dtype)
        ids = W[d:, d:]
        diagonal = ids.diagonal().mean()
        off = (ids.sum() - ids.diagonal().sum()) / (k * k - k) if k > 1 else ids.new_zeros(())
        out.A.copy_(W[:d, :d])
        out.u.copy_(W[:d, d:].mean(dim=1))
        out.v.copy_(W[d:, :d].mean(dim=0))
        out.a.copy_(diagonal - off)
        out.b.copy_(off)
        bias = linear.bias.detach() if linear.bias is not None else W.new_zeros(d + k)
        out.beta.copy_(bias[:d])
        out.beta_0.copy_(bias[d:].mean())
        return out


@torch.no_grad()
def symmetrised(model: Any) -> Any:
    """The :class:`~kmtlib.KMeansTransformer` ``model`` (one k, one-hot tokens) averaged over all
    renumberings of its clusters: the same configuration with ``any_k``, each query, key and value
    map replaced by :meth:`EquivariantMap.from_linear` of it. The result runs at any k; at the model's own k it is
    the layer a permutation-equivariant training would have to find near the trained one (chapter 12)."""
    config = model.config
    if config.any_k or config.embedding != "onehot":
        raise ValueError("symmetrised() takes a layer of one k with one-hot tokens")
    out = type(model)(config.replace(any_k=True, origin=f"symmetrised({config.origin})"))
    out = out.to(next(model.parameters()).dtype)
    for name, block in model.layer.blocks.items():
        for role, linear in zip(("query", "key", "value"), block.linear_maps()):
            projection = EquivariantMap.from_linear(linear, config.d)
            getattr(out.layer.blocks[name], role).load_state_dict(projection.state_dict())
    return out.to(next(model.parameters()).device).train(model.training)
