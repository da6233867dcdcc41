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
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
    """:func:`kmtlib.analysis.evaluate.evaluate_seeds`, computed once per book build for equal inputs.

    The layers' warnings of points outside their training domain
    (:class:`kmtlib.OutsideTrainingDomainWarning`) are filed with the result and raised again at the
    caller's line each time it is returned, so that a chapter that reads a filed result is told
    what the one that computed it was told (and can catch it: :mod:`kmtbook.domain_notes`)."""
    import kmtlib
    from kmtlib.analysis.evaluate import evaluate_seeds as compute

    models = list(models)
    parts = ("evaluate_seeds", "with the domain warnings", kmtlib.__version__, models, X, C0, steps, lloyd_empty,
             generator if not isinstance(generator, torch.Generator) else None, batch_size, dropout_seed)
    g = generator if isinstance(generator, torch.Generator) else None
    summary, said = shared(
        parts, lambda: _with_domain_warnings(lambda: compute(models, X, C0, steps, lloyd_empty, generator,
                                                             batch_size, dropout_seed)), g)
    for message in said:
        warnings.warn(message, kmtlib.OutsideTrainingDomainWarning, stacklevel=2)
    return summary


def _with_domain_warnings(compute: Callable[[], T]) -> tuple[T, tuple[str, ...]]:
    """``compute()`` and the messages of the domain warnings it raised (caught, every one); other
    warnings pass on as raised."""
    from .domain_notes import expected_domain_warnings

    with expected_domain_warnings() as said:
        value = compute()
    return value, tuple(said)


DROPOUT_REPEATS = 4
"""How many dropout seeds :func:`dropout_effect` averages over: one draw of the dropout masks moves
the median of ten layers by a few hundredths of a nat, so a single draw is not the effect."""


@dataclass(frozen=True)
class DropoutEffect:
    """What leaving the attention dropout on at evaluation does to a median after ``steps`` steps.

    ``per_seed``: the median with dropout on minus the median with dropout off, one value per
    dropout seed (``dropout_seeds``); ``mean``: their mean, the effect the chapters quote;
    ``median_off``: the median with dropout off; ``medians_on``: the medians with dropout on."""

    median_off: float
    medians_on: tuple[float, ...]
    dropout_seeds: tuple[int, ...]

    @property
    def per_seed(self) -> tuple[float, ...]:
        return tuple(on - self.median_off for on in self.medians_on)

    @property
    def mean(self) -> float:
        return sum(self.per_seed) / len(self.per_seed)

    @property
    def low(self) -> float:
        return min(self.per_seed)

    @property
    def high(self) -> float:
        return max(self.per_seed)


def dropout_seeds(seed: int, models: int, repeats: int = DROPOUT_REPEATS) -> tuple[int, ...]:
    """The first dropout seed of each repeat for a chapter of seed ``seed``: model ``i`` of repeat ``r``
    draws its masks from ``seed + 3000 + r * models + i``, so no two evaluations share a stream."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    return tuple(seed + 3000 + r * models for r in range(repeats))


def dropout_effect(models: Sequence[KMeansTransformer], X: Any, C0: Any, *, seed: int, steps: int = 20,
                   lloyd_empty: str = "random", generator_seed: int, repeats: int = DROPOUT_REPEATS,
                   batch_size: int = 32) -> DropoutEffect:
    """The effect of attention dropout at evaluation on the models' median task-averaged
    log-objective after ``steps`` steps, averaged over ``repeats`` dropout seeds (:func:`dropout_seeds`
    of the chapter seed ``seed``).

    Every evaluation runs the models on the same tasks (``X``, ``C0`` as for :func:`evaluate_seeds`)
    with Lloyd's empty-cluster draws from a generator seeded with ``generator_seed``; one without
    dropout and one per dropout seed, each computed once per book build. Two chapters that pass the
    same models, tasks and seeds get the same number."""
    models = list(models)
    if not models:
        raise ValueError("models is empty; pass at least one model")
    device = (X if isinstance(X, torch.Tensor) else X[0]).device

    def median_at_end(dropout_seed: int | None) -> float:
        g = torch.Generator(device=device).manual_seed(generator_seed)
        summary = evaluate_seeds(models, X, C0, steps, lloyd_empty, g, batch_size, dropout_seed)
        return float(summary.model_median[steps])

    seeds = dropout_seeds(seed, len(models), repeats)
    return DropoutEffect(median_at_end(None), tuple(median_at_end(s) for s in seeds), seeds)
