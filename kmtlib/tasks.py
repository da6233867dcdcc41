"""The paper's clustering-task generator.

Each task draws ``k`` component locations uniformly from ``[0, 1]^d``, samples ``n`` points from
the equal-weight mixture of one location-scale family (isotropic ``scale``), and rescales every
dimension of the task to ``[0, 1]`` by its minimum and maximum (the paper's task
distribution; the authors' ``ctasks.ClusteringTasks`` in github.com/rithram/kmeans-trf).
All tasks of a batch are drawn at once; randomness comes only from ``generator``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from ._checks import check_choice, check_generator, check_int, check_positive_float
from ._numerics import times_gamma

Sampler = Callable[[torch.Tensor, torch.Generator | None], torch.Tensor]


def _standard_normal(out: torch.Tensor, g: torch.Generator | None) -> torch.Tensor:
    return out.normal_(generator=g)


def _standard_cauchy(out: torch.Tensor, g: torch.Generator | None) -> torch.Tensor:
    return out.cauchy_(generator=g)


def _standard_gumbel(out: torch.Tensor, g: torch.Generator | None) -> torch.Tensor:
    # -log(E) with E ~ Exp(1) is a standard Gumbel variable (maximum convention, as torch's Gumbel).
    return out.exponential_(generator=g).log_().neg_()


def _standard_laplace(out: torch.Tensor, g: torch.Generator | None) -> torch.Tensor:
    # The difference of two independent Exp(1) variables is standard Laplace.
    other = torch.empty_like(out).exponential_(generator=g)
    return out.exponential_(generator=g).sub_(other)


# family -> (standard noise sampler, whether the location-scale variable is exponentiated)
_FAMILIES: dict[str, tuple[Sampler, bool]] = {
    "normal": (_standard_normal, False),
    "cauchy": (_standard_cauchy, False),
    "gumbel": (_standard_gumbel, False),
    "laplace": (_standard_laplace, False),
    # LogNormal(loc, scale) = exp(Normal(loc, scale)), as torch.distributions.LogNormal.
    "lognormal": (_standard_normal, True),
}

FAMILIES: tuple[str, ...] = tuple(_FAMILIES)

TARGET_TOTAL_VARIANCE = 1.6
"""The total variance (the mean squared distance of a task's points to their mean) that
:func:`kmtlib.domain.broad_tasks.spread_normalise` gives every task of the broad family (and
``TransformerKMeans`` a user's data): about that of the paper's tasks at d = 32 (1.62 at
k = 10), so that a layer trained on them meets distances of the size it was trained on."""

CENTRE = 0.5
"""Where :func:`kmtlib.domain.broad_tasks.spread_normalise` puts the mean of the filled
coordinates (the middle of the unit cube, where the mean of the paper's tasks lies)."""


class Mixture(NamedTuple):
    """The mixture behind a batch of tasks, in the rescaled coordinates of the returned points.

    ``means``: (B, k, d) component locations mapped through each task's min-max rescaling (for
    ``lognormal`` the image of ``exp(location)``, the component median); ``components``: (B, n)
    index of the component each point came from.
    """

    means: torch.Tensor
    components: torch.Tensor


def _minmax_rescale(X: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Rescale each task and dimension of X to [0, 1]; map ``others`` by the same affine maps.

    A dimension with max == min (possible for n == 1) becomes 0, as the authors' NaN -> 0 rule.
    """
    lo = X.amin(dim=1, keepdim=True)
    span = X.amax(dim=1, keepdim=True) - lo
    safe = torch.where(span > 0, span, torch.ones_like(span))
    # Divide (not multiply by 1/span): (max - lo) / span is exactly 1, while (max - lo) * (1/span)
    # can round to 1 - ulp.
    return tuple(torch.where(span > 0, (t - lo) / safe, torch.zeros_like(t)) for t in (X, *others))


def _beyond_range(
    X: torch.Tensor,
    means: torch.Tensor,
    located: torch.Tensor,
    locations: torch.Tensor,
    noise: torch.Tensor,
    scale: float,
    exponentiate: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rescaled tasks (and means) where the direct computation overflowed (``scale * noise``
    or, for ``lognormal``, its exponential beyond the dtype's largest number: ``scale=1e300``, or
    a lognormal ``scale`` of about 100 in float32), computed finitely; the other tasks as they are.

    The min-max rescaling does not change when a task is multiplied by a positive number, so the
    tasks are drawn as ``located / scale + noise`` (times ``1/scale``), and a lognormal task as
    ``exp(scale (z - M))`` with ``z = located / scale + noise`` and ``M`` the task's largest ``z``
    per coordinate (times ``exp(-scale M)``): the same points after the rescaling, with values in
    range. A value still not finite raises, naming ``scale``."""
    z, centre = located / scale + noise, locations / scale
    if exponentiate:
        top = torch.maximum(z.amax(dim=1, keepdim=True), centre.amax(dim=1, keepdim=True))
        z, centre = times_gamma(z - top, scale), times_gamma(centre - top, scale)
        z, centre = z.exp(), centre.exp()
    Xa, ma = _minmax_rescale(z, centre)
    bad = ~torch.isfinite(X).flatten(1).all(dim=1).view(-1, 1, 1)
    X, means = torch.where(bad, Xa, X), torch.where(bad, ma, means)
    if not bool(torch.isfinite(X).all()):
        raise ValueError(
            f"scale={scale!r} is beyond the range of {X.dtype}: the points overflow (largest number "
            f"{torch.finfo(X.dtype).max:.3g}); use a smaller scale"
        )
    return X, means


def check_task_arguments(
    batch: int, n: int, d: int, k: int, dtype: torch.dtype, generator: torch.Generator | int | None, device
) -> tuple[tuple[int, int, int, int], torch.device, torch.Generator | None]:
    """Check the arguments every task generator takes; return the sizes, the device (default the
    generator's, else the CPU) and the generator (an integer seed made a generator there)."""
    sizes = (check_int("batch", batch, minimum=1), check_int("n", n, minimum=1),
             check_int("d", d, minimum=1), check_int("k", k, minimum=1))  # fmt: skip
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    if device is None:
        device = generator.device if isinstance(generator, torch.Generator) else torch.device("cpu")
    device = torch.device(device)
    return sizes, device, check_generator(generator, device)


def sample_tasks(
    batch: int,
    n: int,
    d: int,
    k: int,
    family: str = "normal",
    scale: float = 0.1,
    generator: torch.Generator | int | None = None,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    return_mixture: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, Mixture]:
    """Draw ``batch`` clustering tasks of ``n`` points in ``d`` dimensions from ``k``-component mixtures.

    Args:
        batch, n, d, k: numbers of tasks, points per task, dimensions, mixture components.
        family: one of :data:`FAMILIES` ("normal", "cauchy", "gumbel", "laplace", "lognormal").
        scale: the per-dimension scale of every component (the paper uses 0.1).
        generator: a ``torch.Generator`` (on ``device``), an integer seed, or None (global RNG).
        device: where to sample; defaults to the generator's device, else the CPU.
        dtype: torch.float32 or torch.float64.
        return_mixture: also return the :class:`Mixture` (rescaled means and component labels).

    Returns:
        ``X`` of shape (batch, n, d) with every task and dimension rescaled to [0, 1], or
        ``(X, mixture)`` when ``return_mixture``.
    """
    (batch, n, d, k), device, g = check_task_arguments(batch, n, d, k, dtype, generator, device)
    check_choice("family", family, FAMILIES)
    scale = check_positive_float("scale", scale)

    noise_sampler, exponentiate = _FAMILIES[family]
    locations = torch.rand(batch, k, d, generator=g, device=device, dtype=dtype)
    components = torch.randint(0, k, (batch, n), generator=g, device=device)
    noise = noise_sampler(torch.empty(batch, n, d, device=device, dtype=dtype), g)
    located = torch.gather(locations, 1, components.unsqueeze(-1).expand(batch, n, d))
    X = located + scale * noise
    means = locations
    if exponentiate:
        X, means = X.exp(), locations.exp()
    X, means = _minmax_rescale(X, means)
    if not bool(torch.isfinite(X).all()):
        X, means = _beyond_range(X, means, located, locations, noise, scale, exponentiate)
    if return_mixture:
        return X, Mixture(means=means, components=components)
    return X
