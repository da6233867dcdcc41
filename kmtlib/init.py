"""Initial centres: a uniform random k-subset of the points, or k-means++ D^2 seeding."""

from __future__ import annotations

import torch

from ._checks import check_choice, check_generator, check_k, check_points
from ._numerics import times_power_of_two
from .objective import gather_centers, range_exponents

INIT_METHODS: tuple[str, ...] = ("random", "kmeans++")


def _random_subset(X: torch.Tensor, k: int, g: torch.Generator | None) -> torch.Tensor:
    # The first k entries of a uniform random permutation: what the authors' generator does
    # (permute the points, take the first k as centres).
    B, n, _ = X.shape
    order = torch.rand(B, n, generator=g, device=X.device).argsort(dim=1)
    return gather_centers(X, order[:, :k])


def _kmeans_plus_plus(X: torch.Tensor, k: int, g: torch.Generator | None) -> torch.Tensor:
    """D^2 seeding (Arthur and Vassilvitskii, 2007): the first centre is a uniform point, each
    next one is drawn with probability proportional to the squared distance to the nearest
    centre chosen so far. Loops over the k centres only; points and tasks are batched.

    The D^2 weights are computed on the points divided by a power of two where their squares
    (or the sum of n of them) would leave the dtype's range: the same probabilities (the
    division is exact), no overflow to inf and no underflow to a degenerate all-zero row."""
    B, n, _d = X.shape
    e = range_exponents(X, terms=n)
    S = X if e is None else times_power_of_two(X, -e)  # (the distances are taken on S, the centres from X)
    first = torch.randint(0, n, (B, 1), generator=g, device=X.device)
    chosen = [first]
    nearest = ((S - gather_centers(S, first)) ** 2).sum(-1)  # (B, n)
    for _ in range(1, k):
        weights = nearest.clone()
        # A task whose points all coincide with chosen centres has no D^2 mass left: draw uniformly.
        degenerate = weights.sum(dim=1, keepdim=True) <= 0
        weights = torch.where(degenerate, torch.ones_like(weights), weights)
        pick = torch.multinomial(weights, 1, generator=g)  # (B, 1)
        chosen.append(pick)
        nearest = torch.minimum(nearest, ((S - gather_centers(S, pick)) ** 2).sum(-1))
    return gather_centers(X, torch.cat(chosen, dim=1))


def init_centers(
    X: torch.Tensor,
    k: int,
    method: str = "random",
    generator: torch.Generator | int | None = None,
) -> torch.Tensor:
    """Initial centres (B, k, d) chosen among the points X (B, n, d).

    Args:
        method: ``"random"`` (a uniform random k-subset, the paper's default) or
            ``"kmeans++"`` (D^2 seeding, as in the paper's Fig. 4c).
        generator: a ``torch.Generator`` on X's device, an integer seed, or None.
    """
    check_points(X)
    k = check_k(k, X.shape[1])
    check_choice("init method", method, INIT_METHODS)
    g = check_generator(generator, X.device)
    if method == "random":
        return _random_subset(X, k, g)
    return _kmeans_plus_plus(X, k, g)
