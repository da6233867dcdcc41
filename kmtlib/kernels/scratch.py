"""Scratch memory for the temporaries of a loop, reused from one call to the next.

On the CPU a fresh large tensor costs a page fault per 4 KB the first time it is written (the
allocator hands large blocks back to the operating system when they are freed), which for the
(B, k, n) score matrices of Lloyd's steps costs about as much as the arithmetic done on them.
A loop that makes the same temporaries at every step (Lloyd's iterations, the layers of a
weight-shared transformer) asks a :class:`Scratch` for them instead and writes into them with
``out=``. Only for values that do not leave the loop and need no autograd.
"""

from __future__ import annotations

import torch


class Scratch:
    """Named buffers: ``scratch(name, shape, dtype, device)`` returns the buffer of that name,
    made anew only when the shape, dtype, device or inference mode changed (an inference tensor
    cannot be written outside inference mode, nor an ordinary one reused inside it without
    cost). Not thread-safe: one loop at a time."""

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def __call__(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        buf = self._buffers.get(name)
        if (
            buf is None
            or buf.shape != shape
            or buf.dtype != dtype
            or buf.device != device
            or buf.is_inference() != torch.is_inference_mode_enabled()
        ):
            buf = self._buffers[name] = torch.empty(shape, dtype=dtype, device=device)
        return buf

    def clear(self) -> None:
        self._buffers.clear()


def needs_autograd(*tensors: torch.Tensor) -> bool:
    """Whether an operation on these tensors is recorded by autograd (then no ``out=`` scratch)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors are views of the same memory (writing one may change the other)."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
