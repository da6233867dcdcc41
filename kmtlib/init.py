"""Initial centres: a uniform random k-subset of the points, or k-means++ seeding (D^2 sampling,
or its greedy form with several candidates per centre, as scikit-learn seeds ``KMeans``)."""

from __future__ import annotations

import math

import torch

from ._checks import check_choice, check_generator, check_int, check_k, check_points
from ._numerics import times_power_of_two
from .objective import gather_centers, range_exponents

INIT_METHODS: tuple[str, ...] = ("random", "kmeans++")


def _random_subset(X: torch.Tensor, k: int, g: torch.Generator | None) -> torch.Tensor:
    # The first k entries of a uniform random permutation: what the authors' generator does
    # (permute the points, take the first k as centres).
    B, n, _ = X.shape
    order = torch.rand(B, n, generator=g, device=X.device).argsort(dim=1)
    return gather_centers(X, order[:, :k])


def greedy_trials(k: int) -> int:
    """scikit-learn's number of candidates per centre in greedy k-means++: ``2 + int(ln k)``."""
    return 2 + int(math.log(k))


def _distance_frame(X: torch.Tensor) -> torch.Tensor:
    """The points on which D^2 weights are computed: divided by a power of two where their squares
    (or the sum of n of them) would leave the dtype's range (exact: the same probabilities, no
    overflow to inf and no underflow to an all-zero row), then taken about their mean, so that data
    far from the origin (timestamps, offsets of 1e9) lose no digits to the offset. Neither changes
    a distance beyond its rounding."""
    e = range_exponents(X, terms=X.shape[1])
    S = X if e is None else times_power_of_two(X, -e)
    return S - S.mean(dim=1, keepdim=True)


def _d2_weights(nearest: torch.Tensor) -> torch.Tensor:
    # A task whose points all coincide with chosen centres has no D^2 mass left: draw uniformly.
    degenerate = nearest.sum(dim=1, keepdim=True) <= 0
    return torch.where(degenerate, torch.ones_like(nearest), nearest)


def _kmeans_plus_plus(X: torch.Tensor, k: int, g: torch.Generator | None, trials: int = 1) -> torch.Tensor:
    """k-means++ seeding (Arthur and Vassilvitskii, 2007): the first centre is a uniform point; for
    each next one, ``trials`` candidates are drawn with probability proportional to the squared
    distance to the nearest centre chosen so far (D^2 sampling, with replacement), and the
    candidate that leaves the lowest potential (the sum of those squared distances) is kept.
    ``trials=1`` is plain D^2 sampling; ``trials = 2 + int(ln k)`` is scikit-learn's greedy rule
    (``sklearn.cluster.kmeans_plusplus``). Loops over the k centres (and the candidates) only;
    points and tasks are batched, and no (n, n) matrix is formed."""
    B, n, _d = X.shape
    S = _distance_frame(X)  # (the distances are taken on S, the centres from X)
    first = torch.randint(0, n, (B, 1), generator=g, device=X.device)
    chosen = [first]
    nearest = ((S - gather_centers(S, first)) ** 2).sum(-1)  # (B, n)
    for _ in range(1, k):
        weights = _d2_weights(nearest)
        if trials == 1:
            pick = torch.multinomial(weights, 1, generator=g)  # (B, 1)
            nearest = torch.minimum(nearest, ((S - gather_centers(S, pick)) ** 2).sum(-1))
        else:
            pick, nearest = _best_candidate(S, nearest, torch.multinomial(weights, trials, True, generator=g))
        chosen.append(pick)
    return gather_centers(X, torch.cat(chosen, dim=1))


def _best_candidate(
    S: torch.Tensor, nearest: torch.Tensor, candidates: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Of the candidate points (B, L), per task the one whose addition lowers the potential most
    (ties: the first drawn, as ``numpy.argmin``): its index (B, 1) and the new nearest squared
    distances (B, n). One candidate at a time, so the memory is that of the points."""
    best_pot = torch.full(nearest.shape[:1], math.inf, dtype=nearest.dtype, device=nearest.device)
    best_pick = candidates[:, :1].clone()
    best_nearest = nearest
    for j in range(candidates.shape[1]):
        pick = candidates[:, j : j + 1]
        new = torch.minimum(nearest, ((S - gather_centers(S, pick)) ** 2).sum(-1))
        pot = new.sum(-1)
        better = pot < best_pot
        best_pot = torch.where(better, pot, best_pot)
        best_pick = torch.where(better[:, None], pick, best_pick)
        best_nearest = torch.where(better[:, None], new, best_nearest)
    return best_pick, best_nearest


def init_centers(
    X: torch.Tensor,
    k: int,
    method: str = "random",
    generator: torch.Generator | int | None = None,
    *,
    n_local_trials: int | None = 1,
) -> torch.Tensor:
    """Initial centres (B, k, d) chosen among the points X (B, n, d).

    Args:
        method: ``"random"`` (a uniform random k-subset, the paper's default) or
            ``"kmeans++"`` (k-means++ seeding; with the default ``n_local_trials=1`` plain D^2
            sampling, as in the paper's Fig. 4c).
        generator: a ``torch.Generator`` on X's device, an integer seed, or None.
        n_local_trials: for ``"kmeans++"``, the candidates drawn per centre after the first, of
            which the one that lowers the potential most is kept: 1 (default) is plain D^2
            sampling; None is scikit-learn's greedy k-means++ (``2 + int(ln k)`` candidates,
            :func:`greedy_trials`), the seeding of ``KMeans(init="k-means++")``.
    """
    check_points(X)
    k = check_k(k, X.shape[1])
    check_choice("init method", method, INIT_METHODS)
    trials = greedy_trials(k) if n_local_trials is None else check_int("n_local_trials", n_local_trials, minimum=1)
    g = check_generator(generator, X.device)
    return init_centers_unchecked(X, k, method, g, trials)


def init_centers_unchecked(
    X: torch.Tensor, k: int, method: str, generator: torch.Generator | None, n_local_trials: int
) -> torch.Tensor:
    """:func:`init_centers` on inputs its caller has checked (``n_local_trials`` a number): the
    same centres, no checks (for a caller that checks its data once at its entry, as the
    estimator does)."""
    if method == "random":
        return _random_subset(X, k, generator)
    return _kmeans_plus_plus(X, k, generator, n_local_trials)
