"""Trimmed k-means as a circuit: the centre block averages only the closest points of its cluster.

The construction (chapter 10): Theorem 2.1 with the centre block CAC replaced by Euclidean
attention of each centre token over the updated point tokens, with queries and keys
``diag(I_d, sqrt(lam) I_k)`` and ``lam -> infinity``: the scores are ``-||x_i - c_j||^2`` on the
points assigned to ``j`` and ``-inf`` elsewhere (:mod:`kmtlib.variants.circuit`). The attention map then
decides which members a centre averages:

* ``attention="topk"`` (default): top-k attention keeping the fraction ``q`` of the members,
  the ``max(1, ceil(q (m_j - 1)))`` closest of the ``m_j`` points of cluster j (equal distances
  ranked by point index), uniformly weighted. Reference: ``trimmed_kmeans(..., rule="topk",
  q=q)``, exactly. Where the members' distances are distinct this is **the per-cluster quantile
  rule** of the authors' trimmed baseline (the mean of the members strictly below the q-quantile,
  linear interpolation, of their squared distances; ``rule="quantile"``); the two part on ties,
  e.g. a centre that averaged two points is equidistant from both (chapter 10 counts how often).
* ``attention="normmax"``: the infinity-norm norm-max map of Santos et al. (2024) at inverse
  temperature ``gamma`` and norm weight ``tau``: each centre averages its ``s_j`` closest members,
  with ``s_j`` minimising ``(D_s + tau / gamma) / s`` (``D_s`` the sum of the s smallest squared
  distances), so a member is kept while its squared distance stays below that running value:
  an adaptive per-cluster trimming radius. Reference: ``trimmed_kmeans(..., rule="normmax",
  lam=tau / gamma)``.

Neither is global trimmed k-means (Cuesta-Albertos et al. 1997; ``rule="global"``, trimkmeans, R
trimcluster), which drops the ``floor(alpha n)`` points farthest from their nearest centre over the
whole data set: that needs a comparison across clusters, which a centre's attention over its own
members does not make. Chapter 10 measures how far apart the rules land.

An empty cluster (all scores masked) gets uniform weights: the mean of all points (the limit transformer's rule).
"""

from __future__ import annotations

import numbers
from typing import Any

from .._checks import check_choice, check_int, check_positive_float
from ..layer import BlockConfig, LayerConfig
from . import attention_maps  # noqa: F401  (registers the maps "topk" and "normmax")
from .circuit import circuit_config, reject_unknown

TRIM_ATTENTION: tuple[str, ...] = ("topk", "normmax")


def layer_config(
    d: int,
    k: int,
    attention: str = "topk",
    q: float | None = None,
    tau: float | None = None,
    gamma: float | None = None,
    **options: Any,
) -> LayerConfig:
    """``KMeansTransformer.from_variant("trimmed", d, k, attention="topk", q=0.95)`` (or
    ``attention="normmax", tau=..., gamma=...``): trimmed k-means (module documentation)."""
    reject_unknown("trimmed", options)
    d = check_int("d", d, minimum=1)
    k = check_int("k", k, minimum=1)
    check_choice("trimmed attention", attention, TRIM_ATTENTION)
    if attention == "topk":
        if tau is not None or gamma is not None:
            raise ValueError("tau and gamma belong to attention='normmax'; top-k attention takes only q")
        q = 0.95 if q is None else q
        if isinstance(q, bool) or not isinstance(q, numbers.Real) or not 0 < q <= 1:
            raise ValueError(f"q (the share of each cluster kept) must be in (0, 1], got {q!r}")
        cac = BlockConfig(score="euclidean_within_cluster", map="topk", options={"fraction": float(q)})
        kwargs = {"attention": attention, "q": float(q)}
    else:
        if q is not None:
            raise ValueError("q belongs to attention='topk'; norm-max attention takes tau and gamma")
        tau = check_positive_float("tau", 1.0 if tau is None else tau)
        gamma = check_positive_float("gamma", 1.0 if gamma is None else gamma)
        cac = BlockConfig(score="euclidean_within_cluster", map="normmax", gamma=gamma, options={"tau": tau})
        kwargs = {"attention": attention, "tau": tau, "gamma": gamma}
    return circuit_config("trimmed", d, k, CAC=cac, options=kwargs)
