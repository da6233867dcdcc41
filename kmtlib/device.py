"""Device resolution for chapters and scripts.

``"auto"`` lets the book build choose the device through ``$KMT_DEVICE`` (Jupyter Book cannot pass
papermill parameters); an explicit ``"cuda"`` without CUDA is an error, so a "CUDA" run can never
fall back to the CPU unnoticed.
"""

from __future__ import annotations

import os

import torch

from ._checks import check_seed

DEVICE_ENV = "KMT_DEVICE"


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """Turn a device request into a ``torch.device``.

    ``"auto"``: ``$KMT_DEVICE`` when set, else ``cuda`` when available, else ``cpu``.
    ``"cpu"``, ``"cuda"`` and ``"cuda:N"`` are taken literally; CUDA requests fail without CUDA.
    """
    if isinstance(device, torch.device):
        request = str(device)
    elif isinstance(device, str):
        request = device.strip().lower()
    else:
        raise TypeError(f"device must be a string such as 'auto', 'cpu' or 'cuda', got {type(device).__name__}")
    if request == "auto":
        env = os.environ.get(DEVICE_ENV, "").strip()
        if env and env.lower() != "auto":
            return resolve_device(env)
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if request == "cpu":
        return torch.device("cpu")
    if request == "cuda" or request.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"device={device!r} was requested but CUDA is not available on this machine")
        dev = torch.device(request)
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise RuntimeError(f"device={device!r}: only {torch.cuda.device_count()} CUDA device(s) present")
        return dev
    raise ValueError(f"unknown device {device!r}; expected 'auto', 'cpu', 'cuda' or 'cuda:N'")


def make_generator(seed: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed`` (same seed, same device, same numbers;
    an integer in [0, 2^64 - 1], else a ValueError naming ``seed`` and the range)."""
    g = torch.Generator(device=torch.device(device))
    g.manual_seed(check_seed("seed", seed))
    return g
