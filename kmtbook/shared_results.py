"""What several chapters compute alike, computed once per book build.

Chapters 05, 06 and 07 each evaluate the ten shipped one-hot layers and Lloyd's algorithm on the
same 320 fresh tasks per seed (n = 512, d = 32, k = 10, the same task seeds, the same empty-cluster
draws): chapter 05 for its main result, chapter 06 as the d + k side of its ablation, chapter 07 as
its baseline setting. :func:`evaluate_seeds` is :func:`kmtlib.analysis.evaluate.evaluate_seeds`, except that
during a book build the first chapter to ask computes the result and the others read it.

A result is filed under a fingerprint of everything it is computed from: the bytes of the points
and initial centres, every parameter and the configuration of every model, the generator's state
and the other arguments, and the version of kmtlib. Equal fingerprints mean the same computation,
so a chapter gets bitwise what it would have computed itself, and a generator it passed ends in the
state the computation leaves it in. The book build (:mod:`kmtbook.execute_chapters`) names a fresh
folder in ``$KMT_SHARED_RESULTS`` for the chapters it runs; without it (a reader's rerun, the tests)
every chapter computes everything itself.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch

from kmtlib import KMeansTransformer

SHARED_VARIABLE = "KMT_SHARED_RESULTS"
"""The environment variable naming the folder where chapters of one build share results."""

T = TypeVar("T")


def _feed(h: Any, part: Any) -> None:
    """Add ``part`` to the hash ``h``: tensors by dtype, shape and bytes, modules by their
    configuration and parameters, generators by their state, sequences item by item."""
    if isinstance(part, torch.Tensor):
        t = part.detach().cpu().contiguous()
        h.update(f"tensor {t.dtype} {tuple(t.shape)};".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(part, torch.Generator):
        h.update(f"generator {part.device};".encode())
        _feed(h, part.get_state())
    elif isinstance(part, torch.nn.Module):
        h.update(f"module {type(part).__qualname__} {getattr(part, 'config', None)!r} {part.training};".encode())
        for name, value in part.state_dict().items():
            h.update(name.encode())
            _feed(h, value)
    elif isinstance(part, (list, tuple)):
        h.update(f"sequence {len(part)};".encode())
        for item in part:
            _feed(h, item)
    else:
        h.update(f"{type(part).__name__} {part!r};".encode())


def fingerprint(*parts: Any) -> str:
    """The SHA-256 of ``parts`` (see :func:`_feed` for how each kind of part is read)."""
    h = hashlib.sha256()
    for part in parts:
        _feed(h, part)
    return h.hexdigest()


def shared(parts: Sequence[Any], compute: Callable[[], T], generator: torch.Generator | None = None,
           folder: str | os.PathLike | None = None) -> T:
    """``compute()``, filed under the fingerprint of ``parts`` in ``folder`` (default
    ``$KMT_SHARED_RESULTS``; unset: computed, not filed). ``generator``, when ``compute`` draws
    from it, ends in the same state whether the result was computed or read."""
    folder = folder if folder is not None else os.environ.get(SHARED_VARIABLE) or None
    try:
        import fcntl
    except ImportError:  # (no file locks: compute, as without a folder)
        folder = None
    if folder is None:
        return compute()
    path = Path(folder) / f"{fingerprint(*parts, generator)}.pkl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second chapter asking meanwhile waits for the first
        if path.is_file():
            value, state = pickle.loads(path.read_bytes())
            if generator is not None:
                generator.set_state(state)
            return value
        value = compute()
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps((value, generator.get_state() if generator is not None else None)))
        os.replace(tmp, path)
        return value


def evaluate_seeds(models: Sequence[KMeansTransformer], X: Any, C0: Any, steps: int = 20, lloyd_empty: str = "random",
                   generator: torch.Generator | int | None = None, batch_size: int = 32,
                   dropout_seed: int | None = None):
    """:func:`kmtlib.analysis.evaluate.evaluate_seeds`, computed once per book build for equal inputs."""
    import kmtlib
    from kmtlib.analysis.evaluate import evaluate_seeds as compute

    models = list(models)
    parts = ("evaluate_seeds", kmtlib.__version__, models, X, C0, steps, lloyd_empty,
             generator if not isinstance(generator, torch.Generator) else None, batch_size, dropout_seed)
    g = generator if isinstance(generator, torch.Generator) else None
    return shared(parts, lambda: compute(models, X, C0, steps, lloyd_empty, generator, batch_size, dropout_seed), g)
