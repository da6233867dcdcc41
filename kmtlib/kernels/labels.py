"""The lowest-index label search: which of several tied entries wins (Lloyd's rule).

:func:`lowest_true_` is the fast form of the plain formula :func:`lowest_true_plain`
(``argmax`` of the mask, whose first-index rule torch documents); the tests pin one to the other.
"""

from __future__ import annotations

import torch


def lowest_true_plain(mask: torch.Tensor, dim: int) -> torch.Tensor:
    """The lowest index along ``dim`` at which ``mask`` is True; ``mask.shape[dim]`` where it is
    True nowhere (the plain formula)."""
    index = torch.argmax(mask.to(torch.uint8), dim=dim)
    return torch.where(mask.any(dim=dim), index, mask.shape[dim])


def lowest_true_(mask: torch.Tensor, dim: int) -> torch.Tensor:
    """The lowest index along ``dim`` at which the boolean ``mask`` is True (int64, ``dim``
    removed); ``mask.shape[dim]`` where it is True nowhere. ``mask`` is overwritten (pass a
    temporary).

    The label search of Lloyd's assignment and of the limit model: weight ``r - j`` on the True
    entries ``j``, so that the largest weight marks the lowest index. This is ``argmax`` with its
    first-index tie rule made explicit instead of left to the backend; a reduction across
    ``dim`` (for example k rows of length n) vectorises along the other dimensions, and with at
    most 255 entries the weights fit in a byte, written in place into the mask's own memory.
    """
    r = mask.shape[dim]
    shape = [1] * mask.dim()
    shape[dim] = r
    if r <= 255:
        weights = torch.arange(r, 0, -1, dtype=torch.uint8, device=mask.device).view(shape)
        top = mask.view(torch.uint8).mul_(weights).amax(dim=dim).long()
    else:
        top = (mask * torch.arange(r, 0, -1, device=mask.device).view(shape)).amax(dim=dim)
    return top.neg_().add_(r)
