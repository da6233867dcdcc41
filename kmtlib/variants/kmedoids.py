"""Randomised k-medoids by hard Gumbel attention: the Theorem 2.1 circuit whose centre update
selects one data point per cluster.

The change (this book's construction; the paper names "Gumbel attention" and "randomized
k-medoids" only)::

    CAX, SAX   as in Theorem 2.1: y_i <- e_{a(i)}, a(i) = argmin_j ||x_i - c_j||^2
    CAC        two heads in sequence over the updated point tokens, restricted to the members of
               cluster j (the lam -> infinity mask of kmtlib.variants.robust):
               (mean)   m_j = sum_i y_ij x_i / n_j,  n_j = sum_i y_ij      (Theorem 2.1's own
                        centre update; n_j is its normaliser)
               (select) s_ji = -n_j ||x_i - m_j||^2   (Euclidean attention of the mean over the
                        points, scaled by the count), and hard Gumbel attention:
                        c_j <- x_{i*},  i* = argmax_{i in cluster j} ( s_ji / tau + g_ji ),
                        g_ji ~ Gumbel(0, 1)
    SAC        the reset, as in Theorem 2.1 (added before CAC's output, see below)

Why these scores: the medoid cost of a candidate ``x_i`` for cluster ``j`` (the sum of squared
distances from it to the cluster's points) is

    cost_j(i) = sum_l y_lj ||x_i - x_l||^2 = n_j ||x_i - m_j||^2 + sum_l y_lj ||x_l - m_j||^2,

and the last sum does not depend on ``i``: ``s_ji = -cost_j(i) + const_j``, an O(nk) score
instead of the O(n^2) pairwise sum. By the Gumbel-max trick the selected point is a draw from

    P(c_j <- x_i) = exp(-cost_j(i) / tau) / sum_{l in cluster j} exp(-cost_j(l) / tau):

a Gibbs law on the k-medoids loss of the cluster, with temperature ``tau`` in the loss's own
units (squared distance). ``tau = 0`` (the default) is the deterministic limit: the member of
least medoid cost, i.e. the alternating ("Voronoi iteration") k-medoids step with squared
Euclidean dissimilarities, as ``kmedoids.alternating``; ``tau > 0`` also accepts worse medoids,
more often the larger ``tau``.

Ties at ``tau = 0``: a two-point cluster always has one (both points cost the distance between
them), so the rule matters: the member nearest to the current centre wins (the current medoid
itself when the centre is a data point, which is what ``kmedoids.alternating`` keeps), then the
lowest index. Rounding in ``s_ji`` would split such ties at random, so at ``tau = 0`` the layer
re-scores the :data:`EXACT_CANDIDATES` members of highest ``s_ji`` by the left-hand side,
``-sum_l y_lj ||x_i - x_l||^2`` with every squared distance taken from the difference of the two
points (the two costs of a pair are then bitwise equal), and decides among them. (Ties among more
than that many members, which needs duplicate points, are decided among the candidates only.)
At ``tau > 0`` ties have probability 0 and the scores ``s_ji`` are used as they are.

Every centre after a step is a data point, **exactly**: the selection is a one-hot weight
vector (products with 0 and 1 are exact), and the residual stream adds the reset first,
``(c_j - c_j) + x_{i*} = x_{i*}``, where the theorem's order ``(c_j + x_{i*}) - c_j`` would
round.

Empty clusters: with every member penalty equal, the mask drops out of the (shift-invariant)
scores, so an empty cluster selects among **all** points by their medoid cost over all points
(the medoid of the task at ``tau = 0``); the analogue of Theorem 2.1's "mean of all points".

Randomness: the layer draws its Gumbel noise from its own ``torch.Generator``, seeded with
``seed`` on the data's device at first use; ``model.layer.manual_seed(s)`` restarts it and
``model.layer.generator = g`` supplies one. Each step at ``tau > 0`` draws one standard Gumbel
tensor of shape (B, k, n) (:func:`kmtlib.attention.standard_gumbel`), whatever the masks, so that
:func:`kmtlib.reference.randomised_kmedoids` with an equal generator makes the same draws.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .._checks import check_int, check_tau
from ..attention import euclidean_scores, register_score
from ..layer import BlockConfig, LayerConfig
from .attention_maps import gumbel_max_attention
from .circuit import circuit_config, reject_unknown


def cluster_members(assignment: torch.Tensor) -> torch.Tensor:
    """Members (B, k, n) of every cluster from the assignment coordinates (B, n, k): the points
    whose ``y_i`` is ``e_j`` (the lam -> infinity mask); an empty cluster's row is all True (the
    mask is then the same for every point and drops out)."""
    member = assignment.transpose(1, 2) == 1
    return member | ~member.any(dim=-1, keepdim=True)


EXACT_CANDIDATES = 4
"""At ``tau = 0``, how many members of highest score per cluster are re-scored exactly."""


def medoid_scores(X: torch.Tensor, member: torch.Tensor) -> torch.Tensor:
    """``s_ji = -n_j ||x_i - m_j||^2`` (B, k, n) on members, ``-inf`` elsewhere: minus the medoid
    cost of every candidate up to a constant per cluster (module documentation)."""
    weights = member.to(X.dtype)
    counts = weights.sum(dim=-1, keepdim=True)  # n_j >= 1
    means = torch.bmm(weights, X) / counts  # Theorem 2.1's centre update
    scores = euclidean_scores(means, X) * counts  # -n_j ||m_j - x_i||^2
    return scores.masked_fill(~member, -math.inf)


def exact_costs(X: torch.Tensor, member: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """``cost_j(i) = sum_l member_jl ||x_i - x_l||^2`` (B, k, r) for the candidate indices
    (B, k, r), each squared distance accumulated coordinate by coordinate from the differences.

    Every operation is one correctly rounded step on whole tensors (a product, then a sum; no
    fused multiply-add, whose rounding could differ between the vectorised body and the tail of
    a kernel), so a squared distance does not depend on where its pair sits, and a cost is
    bitwise the one :func:`kmtlib.reference.kmedoids.medoid_costs` computes."""
    B, n, d = X.shape
    k, r = candidates.shape[1:]
    cand = torch.gather(X, 1, candidates.reshape(B, k * r, 1).expand(B, k * r, d)).view(B, k, r, d)
    sq = X.new_zeros(B, k, r, n)
    for c in range(d):  # (a loop over coordinates, not points)
        diff = cand[..., c].unsqueeze(-1) - X[..., c].view(B, 1, 1, n)
        sq += diff * diff
    return (sq * member.to(X.dtype).unsqueeze(2)).sum(-1)


def medoid_selection_scores(
    q: torch.Tensor, k: torch.Tensor, *, d: int, clusters: int, gamma: float, **_: Any
) -> torch.Tensor:
    """The centre block's scores (B, k, n) of centre tokens ``q`` over point tokens ``k``: the
    medoid scores :func:`medoid_scores` at ``gamma = 1/tau`` finite; in the limit ``tau = 0`` the
    exact decision (module documentation): the best few members re-scored exactly, ties to the
    member nearest to the current centre, then the lowest index; 0 for the chosen member and
    ``-inf`` for all others."""
    X, C = k[..., :d], q[..., :d]
    # the members of each query's own cluster (the block may be given a chunk of the centres):
    # point i is a member of centre j's cluster when e_j . y_i = 1; an empty cluster's row is all
    # True (the mask drops out), as cluster_members gives for all centres at once
    member = torch.bmm(q[..., d : d + clusters], k[..., d : d + clusters].transpose(1, 2)) == 1
    member = member | ~member.any(dim=-1, keepdim=True)
    scores = medoid_scores(X, member)
    if gamma != math.inf:
        return scores
    r = min(EXACT_CANDIDATES, X.shape[1])
    candidates = scores.topk(r, dim=-1).indices.sort(dim=-1).values  # (B, k, r), in index order
    valid = torch.gather(member, -1, candidates)
    exact = (-exact_costs(X, member, candidates)).masked_fill(~valid, -math.inf)
    flat = candidates.flatten(1).unsqueeze(-1).expand(-1, -1, d)
    cand = torch.gather(X, 1, flat).view(*candidates.shape, d)
    nearness = -((cand - C.unsqueeze(2)) ** 2).sum(-1)  # tie-break: -||x_i - c_j||^2
    pick = gumbel_max_attention(exact, math.inf, tiebreak=nearness).argmax(dim=-1, keepdim=True)  # (B, k, 1)
    chosen = torch.gather(candidates, -1, pick)
    return torch.full_like(scores, -math.inf).scatter_(-1, chosen, 0.0)


register_score("medoid_selection", medoid_selection_scores)


def layer_config(d: int, k: int, *, tau: float = 0.0, seed: int = 0, **unknown: Any) -> LayerConfig:
    """``KMeansTransformer.from_variant("kmedoids", d, k, tau=0.0, seed=0)``.

    Args:
        d, k: data dimension and number of centres.
        tau: Gumbel temperature in squared-distance units (>= 0); 0 is the deterministic
            alternating k-medoids step.
        seed: seed of the layer's generator (see the module documentation).
    """
    reject_unknown("kmedoids", unknown)
    d = check_int("d", d, minimum=1)
    k = check_int("k", k, minimum=1)
    tau = check_tau(tau)
    seed = check_int("seed", seed, minimum=0)
    cac = BlockConfig(score="medoid_selection", map="gumbel", gamma=math.inf if tau == 0 else 1.0 / tau)
    return circuit_config("kmedoids", d, k, CAC=cac, seed=seed, options={"tau": tau, "seed": seed})
