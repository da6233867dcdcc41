"""Soft k-means as a circuit: Theorem 2.1 with a finite inverse temperature in the assignment block.

The construction (chapter 10): keep every block of Theorem 2.1 -- the hard residual resets SAX and
SAC and the normalised linear centre update CAC -- and give the assignment block CAX a finite
``gamma``. The point tokens then hold ``y_i = softmax_j(-gamma ||x_i - c_j||^2)`` (computed
stably, with the row maximum subtracted first), and CAC divides ``sum_i y_ij x_i`` by
``sum_i y_ij``: one layer is exactly one step of soft k-means with stiffness ``gamma`` (Dunn 1973;
MacKay 2003, ch. 20), the reference :func:`kmtlib.reference.soft_kmeans`. ``gamma = math.inf``
is Lloyd's algorithm (Theorem 2.1 itself).

Only if every responsibility of a cluster underflows to 0 (possible at a huge ``gamma``) does the
linear centre update see an empty cluster; it then gives uniform weights, the mean of all points
(the limit transformer's rule), and so does the reference.
"""

from __future__ import annotations

from typing import Any

from .._checks import check_int, check_positive_float
from ..layer import BlockConfig, LayerConfig
from .circuit import circuit_config, reject_unknown


def layer_config(d: int, k: int, gamma: float = 1.0, **options: Any) -> LayerConfig:
    """``KMeansTransformer.from_variant("soft", d, k, gamma=...)``: soft k-means with stiffness ``gamma``."""
    reject_unknown("soft", options)
    d = check_int("d", d, minimum=1)
    k = check_int("k", k, minimum=1)
    gamma = check_positive_float("gamma (the stiffness of soft k-means)", gamma, allow_inf=True)
    cax = BlockConfig(score="euclidean", map="softmax", gamma=gamma)
    return circuit_config("soft", d, k, CAX=cax, options={"gamma": gamma})
