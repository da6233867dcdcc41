"""A frame of the data that does not depend on the user's axes.

A trained layer is not equivariant to rotations of its input coordinates: it learned on tasks in
one coordinate system, so the same data given in another order, orientation or sign of the
features would be clustered differently. :func:`principal_frame` gives every data set its own
orthonormal frame, defined by the data alone: the mean, then the principal axes (the eigenvectors
of the covariance, largest variance first), each with a sign fixed by the data. If the user's
features are permuted, rotated or flipped (``X -> X Q`` for an orthogonal Q), the frame turns with
them (``axes -> Q^T axes``), so the coordinates ``(X - mean) @ axes`` are the same up to rounding.

The sign of an axis is the one that makes the third moment of the data along it positive (the
longer tail points the positive way). Where that moment is about 0 (data symmetric along the
axis), the sign is the one that puts the point farthest along the axis on the positive side
(of the points within a relative 1e-9 of the farthest, the first in row order: the rows are the
user's and do not turn with the features).

Principal axes are defined only where the eigenvalues are distinct. Where several are equal (up
to a relative :data:`DEGENERATE`: isotropic data, or a subspace the data do not fill), any basis
of their eigenspace is as good as another, and a rotation of the user's features would pick
another. There the basis is built from the data points themselves, which turn with the
features: the first axis points to the point farthest from the mean within the eigenspace, the
next to the point farthest from the span of the axes chosen so far, and so on (Gram-Schmidt over
the farthest points). So the frame is the same up to rounding for every data set, isotropic or
not, except where two points are at the same distance to within rounding.
"""

from __future__ import annotations

import numpy as np

DEGENERATE = 1e-7
"""Two eigenvalues closer than this fraction of the largest count as equal (their eigenvectors
are then not defined by the covariance; rounding alone moves them by about eps / gap)."""

SYMMETRIC = 1e-6
"""A third moment smaller than this fraction of ``sum |p|^3`` counts as 0 (the sign then comes from
the farthest point)."""

_TIE = 1e-9


def _farthest(values: np.ndarray) -> int:
    """The first row whose value is within a relative ``_TIE`` of the largest (a choice that
    rounding does not change where the largest is clear)."""
    top = values.max()
    return int(np.flatnonzero(values >= top * (1.0 - _TIE))[0])


def _eigen_groups(eigenvalues: np.ndarray) -> list[tuple[int, int]]:
    """Runs [start, stop) of the descending eigenvalues that are equal up to :data:`DEGENERATE`."""
    tol = DEGENERATE * max(float(eigenvalues[0]), np.finfo(np.float64).tiny)
    groups, start = [], 0
    for i in range(1, eigenvalues.shape[0] + 1):
        if i == eigenvalues.shape[0] or eigenvalues[i - 1] - eigenvalues[i] > tol:
            groups.append((start, i))
            start = i
    return groups


def _basis_from_points(P: np.ndarray) -> np.ndarray:
    """An orthonormal basis U (g, g) of the coordinates P (n, g) of the points in an eigenspace,
    built from the points (Gram-Schmidt over the farthest point from the span so far), so that
    it turns with them. Where the points span fewer than g directions, the rest is completed
    from the standard basis (the data have no extent there)."""
    g = P.shape[1]
    U = np.zeros((g, g))
    R = P.copy()
    scale = float(np.sqrt((P**2).sum(axis=1).max())) if P.size else 0.0
    found = 0
    for _ in range(g):
        norms = np.sqrt((R**2).sum(axis=1))
        i = _farthest(norms)
        if norms[i] <= 1e-9 * scale or norms[i] == 0.0:
            break
        u = R[i] / norms[i]
        U[:, found] = u
        found += 1
        R -= np.outer(R @ u, u)
    for e in np.eye(g):  # the directions the data do not fill
        if found == g:
            break
        v = e - U[:, :found] @ (U[:, :found].T @ e)
        if np.linalg.norm(v) > 0.5:
            U[:, found] = v / np.linalg.norm(v)
            found += 1
    return U


def _sign(p: np.ndarray) -> float:
    """+1 or -1: the sign that makes the third moment of p positive, else (p about symmetric)
    the sign that puts the farthest point on the positive side."""
    third = float((p**3).sum())
    if abs(third) > SYMMETRIC * float((np.abs(p) ** 3).sum()):
        return 1.0 if third > 0 else -1.0
    i = _farthest(np.abs(p))
    return 1.0 if p[i] >= 0 else -1.0


def principal_frame(X: np.ndarray, rank: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The frame of the points X (n, d) in float64: ``(mean (d,), axes (d, r), variances (r,))``,
    the mean of the points, the first r = ``rank`` (default d) principal axes as orthonormal
    columns, largest variance first, with the sign and the degenerate-eigenspace rules of the
    module docstring, and the variance of the data along each axis. ``(X - mean) @ axes`` are
    the data's coordinates in the frame; they do not change (up to rounding) when the features
    are permuted, rotated or flipped."""
    n, d = X.shape
    r = d if rank is None else min(rank, d)
    mean = X.mean(axis=0)
    Xc = X - mean
    eigenvalues, vectors = np.linalg.eigh(Xc.T @ Xc / n)
    order = np.argsort(eigenvalues)[::-1]
    eigenvalues, vectors = np.clip(eigenvalues[order], 0.0, None), vectors[:, order]
    axes = np.empty((d, d))
    for start, stop in _eigen_groups(eigenvalues):
        V = vectors[:, start:stop]
        if stop - start == 1:
            axes[:, start] = V[:, 0] * _sign(Xc @ V[:, 0])
        else:
            axes[:, start:stop] = V @ _basis_from_points(Xc @ V)
    return mean, axes[:, :r], eigenvalues[:r]


def data_unit(X: np.ndarray) -> float:
    """A power of two near the largest absolute value of X (1 for data of zeros): X divided by it
    is exact (no rounding: only the exponent changes, barring subnormal numbers) and lies within
    [-1, 1], so that the squares and sums of squares a clustering computes neither overflow nor
    underflow, for data of any scale float64 holds (``X * 1e200``, ``X * 1e-200``). Labels and
    centres computed in that unit are those of X; squared distances scale back by ``unit**2``."""
    top = float(np.max(np.abs(X))) if X.size else 0.0
    if top == 0.0 or not np.isfinite(top):
        return 1.0
    return float(np.ldexp(1.0, int(np.frexp(top)[1])))


def frame_turns(r: int, count: int) -> list[np.ndarray | None]:
    """``count`` turns of an r-dimensional frame: None (the frame itself), then fixed rotations
    (r, r) drawn uniformly (QR of a Gaussian matrix with the signs of R's diagonal, seeded by
    their index): the same for every data set, so a frame turned by them still turns with the
    user's features."""
    turns: list[np.ndarray | None] = [None]
    for i in range(1, count):
        Q, R = np.linalg.qr(np.random.default_rng(i).normal(size=(r, r)))
        turns.append(Q * np.sign(np.diag(R)))
    return turns
