"""Copying points between row-major (B, n, d) and coordinate-major (B, d, n) memory.

A transposing copy of a long, thin matrix in one call reads or writes memory with a large stride
in its inner loop and runs at a fraction of memory speed; copying blocks of a few thousand points
at a time keeps both sides in cache. The copy is exact: only the memory order changes.
"""

from __future__ import annotations

import torch

POINTS_PER_BLOCK = 4096


def copy_transposed_(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``dst.copy_(src)`` for a destination (B, n, d) stored coordinate-major (or any strides) and a
    row-major source, by blocks of points; returns ``dst``."""
    if dst.shape != src.shape:
        raise ValueError(f"copy_transposed_: shapes {tuple(dst.shape)} and {tuple(src.shape)} differ")
    n = src.shape[1]
    if n <= POINTS_PER_BLOCK:
        return dst.copy_(src)
    for start in range(0, n, POINTS_PER_BLOCK):
        dst[:, start : start + POINTS_PER_BLOCK].copy_(src[:, start : start + POINTS_PER_BLOCK])
    return dst
