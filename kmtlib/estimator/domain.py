"""Where a fit runs its model: the data in a power-of-two unit of their own, mapped into the
model's domain by a :class:`~kmtlib.domain.domain_map.DomainMap` (a trained model: the data's
own frame, one scale, zero padding or the top principal axes; a fixed-weight model: the identity
or a shift) in each of the fit's frames, on a sample of the points; and the map a fit reports.

The frame and the map themselves are :mod:`kmtlib.domain.frame` and
:mod:`kmtlib.domain.domain_map` (training presents its tasks through them too)."""

from __future__ import annotations

import numpy as np

from ..domain.domain_map import DomainMap, translation_map
from ..domain.frame import data_unit, frame_turns


def in_data_unit(X: np.ndarray) -> tuple[float, np.ndarray]:
    """The data's unit (a power of two near their largest absolute value,
    :func:`~kmtlib.domain.frame.data_unit`) and the data in it, in float64. The division is
    exact, so their squares neither overflow nor underflow whatever the scale the user gives
    (1e200 and 1e-200 cluster as 1)."""
    unit = data_unit(X)
    X64 = np.asarray(X, dtype=np.float64)
    if unit != 1.0:  # (the usual unit 1 needs no copy)
        X64 = X64 / unit
    return unit, X64


def fitted_domain(X64: np.ndarray, width: int, trained: bool) -> DomainMap:
    """The map of the data ``X64`` (n, d) into a model's domain: into a trained model's of
    ``width`` coordinates (:meth:`DomainMap.fit`), or a fixed-weight model's translation (the
    identity, or a shift where the data lie far from the origin; :func:`translation_map`)."""
    return DomainMap.fit(X64, width) if trained else translation_map(X64)


def turned_domains(domain: DomainMap, frames: int) -> list[DomainMap]:
    """The map ``domain`` in each of ``frames`` frames: the data's own first, then fixed rotations
    of it (:func:`~kmtlib.domain.frame.frame_turns`, the same for every data set)."""
    return [domain.turned(Q) for Q in frame_turns(domain.reduced, frames)]


def sample_indices(n_samples: int, m: int, random_state: np.random.RandomState) -> np.ndarray:
    """The indices of the m points a trained model runs on: all of them if m = n, else m of
    them drawn without replacement from the random state, in order."""
    if m >= n_samples:
        return np.arange(n_samples)
    return np.sort(random_state.choice(n_samples, m, replace=False))


def reported_map(domain: DomainMap, unit: float, trained: bool) -> DomainMap:
    """The map a fit reports (``domain_map_``): ``domain`` (from the data in their ``unit``) made a
    map from the user's space; a fixed-weight model's is the identity or its translation, up to
    the exact power of two of the unit."""
    return domain.scaled(unit) if trained else domain.translated(unit)
