"""Robust k-means by sparse attention: the Theorem 2.1 circuit with sparsemax (or alpha-entmax)
in the centre update.

The change (this book's construction; the paper names "sparse attention" and the authors' code
has a sparsemax baseline, ``rkm_iters`` in github.com/rithram/kmeans-trf)::

    CAX, SAX   as in Theorem 2.1: y_i <- e_{a(i)}, a(i) = argmin_j ||x_i - c_j||^2
    CAC        c_j <- sum_i w_ji x_i,   w_j = entmax_alpha( beta * s_j ),
               s_ji = -||x_i - c_j||^2 - lam ||y_i - e_j||^2,   lam -> infinity
    SAC        the reset, as in Theorem 2.1

The score is Euclidean attention of the centre token ``[c_j; e_j]`` over the updated point
tokens ``[x_i; y_i]`` with ``Q = K = diag(I_d, sqrt(lam) I_k)``. A one-hot ``y_i`` differs from
``e_j`` by 0 or 2 in squared norm, so in the limit ``lam -> infinity`` the map sees the members
of cluster ``j`` only, each scored by its squared distance to the **current** centre. Where soft-max
would give every member some weight, sparsemax (``alpha = 2``) and entmax (``1 < alpha < 2``)
give members far from the centre **exactly zero** weight: with sparsemax, member ``i`` keeps
weight ``w_ji = beta (s_bar - ||x_i - c_j||^2) + 1/m`` over the support of ``m`` members whose
distance is below the support mean ``s_bar`` plus ``1/(m beta)``, and is dropped beyond that.

The score scale ``beta`` (``inv_temperature``):

* default ``0.01 / sqrt(d)``, the authors' baseline ``rkm_iters``; on data rescaled to
  ``[0, 1]^d`` this drops almost nothing in clusters of about 100 points (the drop threshold
  ``1/(m beta)`` is of order ``sqrt(d)`` there), so it is close to Lloyd. Pass a larger value to
  make the update robust; chapter 10 shows the sweep;
* ``beta -> 0``: the weights tend to ``1/m`` on every member: **Lloyd's update exactly** in the
  limit (the support is the whole cluster as soon as ``beta (max - mean distance) < 1/m``);
* ``beta -> infinity``: the support shrinks to the member nearest to the current centre, and the
  centre jumps onto that data point and stays there (a one-point support returns that point
  itself: the centre freezes). Between the two, ``beta`` sets how far a point may be before it
  stops pulling.

Empty clusters: every key is masked, and the map's rule for such a row (uniform weights) moves
the centre to the mean of all points, as the limit transformer of Theorem 2.1 does.
Reference: :func:`kmtlib.reference.robust_kmeans`.
"""

from __future__ import annotations

from typing import Any

from .._checks import SPARSE_MAPS, authors_inv_temperature, check_int, check_robust_options
from ..layer import BlockConfig, LayerConfig
from . import attention_maps  # noqa: F401  (registers the sparsemax and entmax maps)
from .circuit import circuit_config, reject_unknown

# (SPARSE_MAPS, authors_inv_temperature and check_robust_options live in kmtlib._checks, shared with
# the reference algorithm kmtlib.reference.robust; re-exported here, where the variant's users look)
__all__ = ["SPARSE_MAPS", "authors_inv_temperature", "check_robust_options", "layer_config"]


def layer_config(
    d: int,
    k: int,
    *,
    inv_temperature: float | None = None,
    map: str = "sparsemax",
    alpha: float | None = None,
    **unknown: Any,
) -> LayerConfig:
    """``KMeansTransformer.from_variant("robust", d, k, inv_temperature=None, map="sparsemax", alpha=None)``.

    Args:
        d, k: data dimension and number of centres.
        inv_temperature: the score scale ``beta``; None is the authors' ``0.01 / sqrt(d)``.
        map: ``"sparsemax"`` (default), ``"entmax15"`` or ``"entmax"`` (with ``alpha``).
        alpha: entmax's alpha in (1, 2] for ``map="entmax"`` (default 1.5).
    """
    reject_unknown("robust", unknown)
    d = check_int("d", d, minimum=1)
    k = check_int("k", k, minimum=1)
    beta, options = check_robust_options(d, inv_temperature, map, alpha)
    cac = BlockConfig(score="euclidean_within_cluster", map=map, gamma=beta, options=options)
    kwargs = {"inv_temperature": inv_temperature, "map": map, "alpha": alpha}
    return circuit_config("robust", d, k, CAC=cac, options=kwargs)
