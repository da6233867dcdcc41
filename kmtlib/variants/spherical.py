"""Spherical k-means as a circuit: dot-product attention on tokens whose data part is normalised.

The construction (chapter 10): Theorem 2.1's four blocks with two changes,

* a normalisation of the data coordinates of every token (RMSNorm-style, ``h[:d] / ||h[:d]||``,
  on the data part only: the one-hot coordinates keep their meaning), at the layer's input on
  both streams and on the centres after their update;
* dot-product scores ``x_i . c_j`` in the assignment block. On the unit sphere
  ``-||x - c||^2 = 2 x.c - 2``, so this is Euclidean attention at twice the temperature; in the
  limit it is the cosine assignment ``argmax_j x_i . c_j``.

With the normalised linear centre update, one layer is one step of spherical k-means (Dhillon and
Modha 2001): assign by cosine, average the unit vectors of each cluster, renormalise -- the
reference :func:`kmtlib.reference.spherical_kmeans`, and faiss' ``Kmeans(spherical=True)``.

Conventions: the model normalises ``X`` and ``C0`` itself; ``result.centers[:, 0]`` is ``C0`` as
given and ``result.objective`` is the Euclidean objective of the data as given, so pass unit
vectors to read it as ``2 (n - sum_i cos)``. An empty cluster gets the normalised mean of all
points (the limit transformer's rule, normalised); a zero mean stays zero. ``gamma`` finite gives soft spherical k-means
(softmax of ``gamma x.c``).
"""

from __future__ import annotations

import math
from typing import Any

from .._checks import check_int, check_positive_float
from ..layer import BlockConfig, LayerConfig
from .circuit import circuit_config, reject_unknown


def layer_config(d: int, k: int, gamma: float = math.inf, **options: Any) -> LayerConfig:
    """``KMeansTransformer.from_variant("spherical", d, k)``: spherical k-means (cosine assignment)."""
    reject_unknown("spherical", options)
    d = check_int("d", d, minimum=1)
    k = check_int("k", k, minimum=1)
    gamma = check_positive_float("gamma", gamma, allow_inf=True)
    cax = BlockConfig(score="dot", map="softmax", gamma=gamma)
    return circuit_config("spherical", d, k, CAX=cax, normalise_data=True, options={"gamma": gamma})
