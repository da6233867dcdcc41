"""Work in chunks: a computation applied to consecutive slices of its inputs, the results joined.

The learned layer's self-attention holds n x n numbers per task, so a batch of many tasks (or an
attention over many queries) is evaluated a slice at a time to bound memory. Where the slices
are independent (tasks of a batch; the rows of an attention map) the joined result is the
result of the whole, computed by the same operations.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


def chunk_size(limit: int, cost: int) -> int:
    """How many items fit in one chunk when each costs ``cost`` units and a chunk may hold
    ``limit`` (at least one item, whatever its cost)."""
    return max(1, limit // max(cost, 1))


def in_chunks(fn: Callable[..., Any], *tensors: torch.Tensor, size: int, dim: int = 0, copy: bool = False) -> Any:
    """``fn(*tensors)``, computed on consecutive slices of at most ``size`` entries along ``dim`` of
    every tensor and joined along ``dim``.

    ``fn`` returns a tensor, a tuple of tensors (joined one by one), or an object with a ``cat``
    method (joined as ``first.cat(second).cat(third)...``). When one chunk holds everything,
    ``fn(*tensors)`` is returned as it is. ``copy``: clone each chunk's tensors before the next
    chunk runs (for an ``fn`` that returns scratch memory it reuses).
    """
    total = tensors[0].shape[dim]
    if size >= total:
        return fn(*tensors)
    parts = []
    for start in range(0, total, size):
        part = fn(*(t[(slice(None),) * dim + (slice(start, start + size),)] for t in tensors))
        parts.append(_clone(part) if copy else part)
    return _join(parts, dim)


def _clone(part: Any) -> Any:
    if isinstance(part, torch.Tensor):
        return part.clone()
    if isinstance(part, tuple):
        return tuple(_clone(p) for p in part)
    return part


def _join(parts: list[Any], dim: int) -> Any:
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(parts, dim=dim)
    if isinstance(first, tuple):
        return tuple(_join(list(column), dim) for column in zip(*parts, strict=True))
    return functools.reduce(lambda a, b: a.cat(b), parts)
