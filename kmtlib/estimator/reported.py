"""The quantities an estimator reports, in the user's own space and as :class:`sklearn.cluster.KMeans`
defines them: the nearest centre of every point (``labels_``, ``predict``; ties: the lowest index),
the sum of squared distances to it (``inertia_``, ``score``) and the distances to every centre
(``transform``). All are computed in float64, in the unit of the training data (an exact power of
two: data of any scale), from data the estimator has checked once at its entry: nothing here
checks them again."""

from __future__ import annotations

import numpy as np
import torch

from ..objective import assignment_cost, nearest_center_unchecked, squared_distances_unchecked


def as_task(a: np.ndarray) -> torch.Tensor:
    """One task (1, m, d) in float64 on the CPU (a copy: the array may be read-only)."""
    return torch.tensor(a, dtype=torch.float64).unsqueeze(0)


def labels_inertia(X: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, float]:
    """The nearest centre of every point of X (n, d) (ties: lowest index) and the sum of squared
    distances to it, computed in float64 from the differences (the quantities of ``KMeans``).
    X and the centres (k, d) are finite (checked by the caller)."""
    Xt, Ct = as_task(X), as_task(centers)
    labels = nearest_center_unchecked(Xt, Ct)
    return labels[0].numpy().astype(np.int64), float(assignment_cost(Xt, Ct, labels)[0])


def labels_inertia_in_unit(X: np.ndarray, centers: np.ndarray, unit: float) -> tuple[np.ndarray, float]:
    """:func:`labels_inertia` of X and the centres in the user's space, computed in ``unit`` (the
    training data's power of two; the inertia is inf where its value in the user's unit is beyond
    float64)."""
    X64, C64 = np.asarray(X, dtype=np.float64), np.asarray(centers, np.float64)
    labels, inertia = labels_inertia(X64 / unit, C64 / unit) if unit != 1.0 else labels_inertia(X64, C64)
    return labels, inertia * unit * unit


def distances_in_unit(X: np.ndarray, centers: np.ndarray, unit: float) -> np.ndarray:
    """The Euclidean distances (n, k) of the points X to the centres (``KMeans.transform``),
    computed in ``unit`` and scaled back, in X's dtype."""
    X64, C64 = np.asarray(X, dtype=np.float64) / unit, np.asarray(centers, np.float64) / unit
    distances = squared_distances_unchecked(as_task(X64), as_task(C64))[0].sqrt().numpy() * unit
    return distances.astype(X.dtype, copy=False)
