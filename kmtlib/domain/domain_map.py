"""The map from a user's space into a model's domain and back (:class:`DomainMap`): the trained
layer's frame, scale and padding, or a fixed-weight model's translation. What
:class:`~kmtlib.estimator.TransformerKMeans` runs a model through."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from ..objective import data_shift
from .broad_tasks import CENTRE, TARGET_TOTAL_VARIANCE
from .frame import principal_frame


@dataclass
class DomainMap:
    """The map from the user's space (d features) to a trained model's domain (D coordinates)
    and back: the data's own frame (:func:`kmtlib.domain.frame.principal_frame`), one isotropic scale,
    then zero padding (r = min(d, D) < D) or the top D principal axes (d > D).

    ``to_model(x) = pad(CENTRE + ((x - mean) @ axes) / scale)``: the points are centred and turned
    to their principal axes (largest variance first, each with a sign fixed by the data), so that
    the model sees the same coordinates whatever the order, orientation or sign of the user's
    features (a trained layer is not equivariant to them); the mean goes to 0.5 in every
    coordinate and the total variance (the mean squared distance of the points to their mean) to
    1.6, about that of the paper's tasks, the same shift and scale
    (:func:`kmtlib.domain.broad_tasks.spread_normalise`) as the broad training tasks of the shipped layer
    went through. The turn is orthogonal and the scale one number for all coordinates: distances
    are multiplied by ``1 / scale`` and nothing else, so nearest centres are unchanged and squared
    distances (inertia) map back by ``scale ** 2``. Zero padding (r < D) changes no distance.
    With d > D only the top D axes are kept; a centre ``c`` mapped back lies in the affine
    subspace through the mean, so ``||x - c||^2 = ||x' - c'||^2 + ||residual of x||^2`` and the
    nearest centre of a point is the same in both spaces; the inertia reported is that of the
    original space.

    Why one scale and not a scale per axis: measured against ``KMeans`` from the same 12
    k-means++ starts (20 steps each) on six sets (breast cancer, iris, wine, digits, two sets of
    anisotropic blobs), the geometric mean of the inertia ratio was 1.079 with one scale, 1.093
    whitened (every axis to the same variance: worse, up to 1.20 on breast cancer and 1.15 on
    iris) and 1.069 with the variance of every axis brought to its square root (better on four
    sets, worse on digits and one blob set: less than the 1.00-1.11 that the choice of frame
    alone moves a set). One scale keeps the map a similarity, so the layer clusters in the
    user's own metric (nearest centres are the same in both spaces).

    The identity (``axes=None``, no shift, ``scale = 1``, no padding) is the map of a fixed-weight
    model run in the data's own dimension.
    """

    n_features: int
    width: int
    mean: np.ndarray
    scale: float
    axes: np.ndarray | None = None
    centre: float = 0.0

    @classmethod
    def identity(cls, n_features: int) -> DomainMap:
        return cls(n_features, n_features, np.zeros(n_features), 1.0)

    @classmethod
    def fit(cls, X: np.ndarray, width: int) -> DomainMap:
        """The map of training data ``X`` (n, d) into the trained layer's domain (width D)."""
        n, d = X.shape
        # (d > D: the top D axes, fewer where there are fewer points, and then nothing is lost)
        mean, axes, variances = principal_frame(X, rank=width if d <= width else min(width, n))
        total = float(variances.sum())
        # (all points equal: nothing to scale)
        scale = float(np.sqrt(total / TARGET_TOTAL_VARIANCE)) if total > 0 else 1.0
        return cls(X.shape[1], width, mean, scale, axes, CENTRE)

    def turned(self, Q: np.ndarray | None) -> DomainMap:
        """The same map with the frame turned by the orthogonal Q (r, r) (None: unchanged)."""
        return self if Q is None or self.axes is None else dataclasses.replace(self, axes=self.axes @ Q)

    def scaled(self, unit: float) -> DomainMap:
        """The same map for the data multiplied by ``unit``."""
        return dataclasses.replace(self, mean=self.mean * unit, scale=self.scale * unit)

    def translated(self, unit: float) -> DomainMap:
        """The shift of this map for the data multiplied by ``unit``, without its scale (a
        fixed-weight model's map: its scale is the exact power of two of the data's unit)."""
        return dataclasses.replace(self, mean=self.mean * unit)

    @property
    def reduced(self) -> int:
        """The number of coordinates the data fill in the model's domain (the rest is padding)."""
        return self.n_features if self.axes is None else self.axes.shape[1]

    def to_model(self, X: np.ndarray) -> np.ndarray:
        """Points or centres (m, d) in the user's space to (m, width) in the model's domain."""
        Z = X - self.mean
        if self.axes is not None:
            Z = Z @ self.axes
        Z = Z / self.scale + self.centre
        if self.reduced < self.width:
            Z = np.concatenate([Z, np.zeros((Z.shape[0], self.width - self.reduced), dtype=Z.dtype)], axis=1)
        return Z

    def to_user(self, Z: np.ndarray) -> np.ndarray:
        """Centres (m, width) in the model's domain back to (m, d) in the user's space (padded
        coordinates dropped: the projection onto the coordinates the data fill)."""
        Z = (Z[:, : self.reduced] - self.centre) * self.scale
        if self.axes is not None:
            Z = Z @ self.axes.T
        return Z + self.mean


def translation_map(X: np.ndarray) -> DomainMap:
    """The map of a fixed-weight model (the theorem's): the identity, or where the data lie far
    from the origin against their spread a shift by a centre of the data and no scaling
    (:func:`kmtlib.objective.data_shift`), so that the model's distances keep their digits
    (timestamps near 1.7e12, offsets of 1e9) and its centres are moved back by the same shift."""
    shift = data_shift(torch.tensor(X, dtype=torch.float64).unsqueeze(0))
    if shift is None:
        return DomainMap.identity(X.shape[1])
    return DomainMap(X.shape[1], X.shape[1], mean=shift[0, 0].numpy(), scale=1.0)
