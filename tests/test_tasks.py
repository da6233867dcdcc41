"""kmtlib.sample_tasks: shapes, rescaling, determinism, the five families and the returned mixture."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from _helpers import requires_cuda
from scipy import stats

from kmtlib import FAMILIES, Mixture, sample_tasks

F64 = torch.float64


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("family", FAMILIES)
def test_shape_dtype_device_and_exact_unit_range(family, dtype):
    X = sample_tasks(300, 40, 3, 4, family=family, generator=0, dtype=dtype)
    assert X.shape == (300, 40, 3) and X.dtype == dtype and X.device.type == "cpu"
    assert bool(torch.isfinite(X).all())
    # every task and every dimension spans exactly [0, 1]
    assert (X.amin(dim=1) == 0).all()
    assert (X.amax(dim=1) == 1).all()


def test_defaults():
    X = sample_tasks(2, 5, 2, 2, generator=0)
    assert X.dtype == torch.float32 and X.device == torch.device("cpu")
    assert not isinstance(X, tuple)
    assert sample_tasks(2, 5, 2, 2, generator=0, device="cpu").device == torch.device("cpu")


def test_single_point_tasks_are_zero():
    # n == 1: every dimension has zero span; the point becomes 0 (the authors' NaN -> 0 rule).
    X, mix = sample_tasks(3, 1, 2, 1, generator=0, return_mixture=True)
    assert torch.equal(X, torch.zeros(3, 1, 2))
    assert bool(torch.isfinite(mix.means).all())


def test_determinism_under_seed_and_generator():
    a = sample_tasks(8, 30, 2, 3, generator=5)
    assert torch.equal(a, sample_tasks(8, 30, 2, 3, generator=5))
    # a Generator seeded the same way gives the same tasks as the integer seed
    assert torch.equal(a, sample_tasks(8, 30, 2, 3, generator=torch.Generator().manual_seed(5)))
    g1, g2 = torch.Generator().manual_seed(77), torch.Generator().manual_seed(77)
    b1, b2 = sample_tasks(8, 30, 2, 3, generator=g1), sample_tasks(8, 30, 2, 3, generator=g2)
    assert torch.equal(b1, b2)
    # a Generator advances, so a second draw from it is new
    assert not torch.equal(sample_tasks(8, 30, 2, 3, generator=g1), b1)
    # different seeds differ
    assert not torch.equal(a, sample_tasks(8, 30, 2, 3, generator=6))
    # the mixture is reproducible too
    _, m1 = sample_tasks(4, 10, 2, 3, generator=9, return_mixture=True)
    _, m2 = sample_tasks(4, 10, 2, 3, generator=9, return_mixture=True)
    assert torch.equal(m1.means, m2.means) and torch.equal(m1.components, m2.components)


def test_tasks_in_a_batch_differ():
    X = sample_tasks(16, 20, 2, 3, generator=1)
    assert len({tuple(x.flatten().tolist()) for x in X}) == 16


@pytest.mark.parametrize("family", FAMILIES)
def test_return_mixture(family):
    B, n, d, k = 50, 200, 3, 4
    out = sample_tasks(B, n, d, k, family=family, generator=2, return_mixture=True)
    assert isinstance(out, tuple) and len(out) == 2
    X, mix = out
    assert isinstance(mix, Mixture)
    assert mix.means.shape == (B, k, d) and mix.means.dtype == X.dtype
    assert mix.components.shape == (B, n) and mix.components.dtype == torch.int64
    assert int(mix.components.min()) >= 0 and int(mix.components.max()) < k
    # with 200 points and 4 equal-weight components, every component shows up in every task
    assert all(len(set(c)) == k for c in mix.components.tolist())
    # the same call without return_mixture gives the same points
    assert torch.equal(X, sample_tasks(B, n, d, k, family=family, generator=2))


@pytest.mark.parametrize("family", ["normal", "laplace", "cauchy", "lognormal"])
def test_mixture_means_are_component_medians_in_rescaled_units(family):
    # For these families the (mapped) location is the median of the component's points, in every
    # dimension; the rescaling is monotone and affine per dimension, so it maps medians to medians.
    X, mix = sample_tasks(10, 12000, 2, 3, family=family, scale=0.05, generator=3, dtype=F64, return_mixture=True)
    worst = 0.0
    for b, j in itertools.product(range(10), range(3)):
        pts = X[b][mix.components[b] == j]
        err = (pts.median(dim=0).values - mix.means[b, j]).abs().max().item()
        # compare with the spread of that component, so the check means the same for every family
        iqr = (pts.quantile(0.75, dim=0) - pts.quantile(0.25, dim=0)).max().item()
        worst = max(worst, err / iqr)
    # the standard error of the median of ~4000 normal points is 0.015 IQR; 0.1 is > 6 of them
    assert worst < 0.1, worst


def _shape_statistics(x: np.ndarray) -> tuple[float, float]:
    """Location- and scale-free statistics: tail weight (q95 - q05) / (q75 - q25) and Bowley skewness."""
    q05, q25, q50, q75, q95 = np.quantile(x, [0.05, 0.25, 0.5, 0.75, 0.95])
    return (q95 - q05) / (q75 - q25), (q75 + q25 - 2 * q50) / (q75 - q25)


# scipy's distribution of the standardised noise of each family, at scale 0.5 (lognormal: s = scale)
_SCIPY = {
    "normal": stats.norm(),
    "laplace": stats.laplace(),
    "cauchy": stats.cauchy(),
    "gumbel": stats.gumbel_r(),
    "lognormal": stats.lognorm(s=0.5),
}


def test_families_have_their_own_distributions():
    # With k = 1 and d = 1 a task is an affine image of n draws of the family, so affine-invariant
    # quantile statistics of the points identify the family (scipy gives the exact values).
    theory = {}
    for family, dist in _SCIPY.items():
        q05, q25, q50, q75, q95 = dist.ppf([0.05, 0.25, 0.5, 0.75, 0.95])
        theory[family] = ((q95 - q05) / (q75 - q25), (q75 + q25 - 2 * q50) / (q75 - q25))
    # the statistics tell every pair of families apart by more than the tolerances below
    for a, b in itertools.combinations(FAMILIES, 2):
        (ta, sa), (tb, sb) = theory[a], theory[b]
        assert abs(ta - tb) > 0.06 * max(ta, tb) or abs(sa - sb) > 0.04, (a, b)

    for family in FAMILIES:
        X = sample_tasks(1, 500_000, 1, 1, family=family, scale=0.5, generator=4, dtype=F64)
        tail, skew = _shape_statistics(X[0, :, 0].numpy())
        t_ref, s_ref = theory[family]
        assert abs(tail - t_ref) < 0.03 * t_ref, (family, tail, t_ref)
        assert abs(skew - s_ref) < 0.02, (family, skew, s_ref)


def test_families_give_different_tasks_from_one_seed():
    tasks = {f: sample_tasks(4, 50, 2, 3, family=f, generator=12) for f in FAMILIES}
    for a, b in itertools.combinations(FAMILIES, 2):
        assert not torch.equal(tasks[a], tasks[b])


def test_scale_controls_the_spread():
    # In rescaled units, points lie closer to their component location when the scale is smaller.
    def mean_distance(scale):
        X, mix = sample_tasks(200, 100, 2, 3, scale=scale, generator=13, dtype=F64, return_mixture=True)
        own = torch.gather(mix.means, 1, mix.components.unsqueeze(-1).expand(-1, -1, 2))
        return (X - own).norm(dim=-1).mean().item()

    assert mean_distance(0.01) < 0.5 * mean_distance(0.1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scale", [1e2, 1e30, 1e300])
def test_large_scale_gives_finite_tasks(family, dtype, scale):
    """Where scale * noise (or its exponential, lognormal) overflows, the task is computed in a
    form that does not (min-max rescaling ignores a positive factor): finite points in [0, 1]."""
    X, mixture = sample_tasks(8, 200, 3, 4, family=family, scale=scale, generator=0, dtype=dtype, return_mixture=True)
    assert bool(torch.isfinite(X).all()) and bool(torch.isfinite(mixture.means).all())
    assert bool((X.amax(dim=1) == 1).all()) and bool((X.amin(dim=1) == 0).all())


def test_large_scale_same_points_as_the_direct_form():
    """A float32 lognormal scale whose exponential overflows (scale 100) gives, up to rounding,
    the tasks of the direct form computed in float64 from the same float32 draws."""
    B, n, d, k, scale = 4, 100, 2, 3, 100.0
    X32 = sample_tasks(B, n, d, k, family="lognormal", scale=scale, generator=3, dtype=torch.float32)
    g = torch.Generator().manual_seed(3)  # (the draws of sample_tasks, in its order)
    locations = torch.rand(B, k, d, generator=g, dtype=torch.float32)
    components = torch.randint(0, k, (B, n), generator=g)
    noise = torch.empty(B, n, d, dtype=torch.float32).normal_(generator=g)
    Z = torch.gather(locations, 1, components.unsqueeze(-1).expand(B, n, d)).double() + scale * noise.double()
    assert not bool(torch.isfinite(Z.float().exp()).all())  # (the direct form overflows float32)
    direct = Z.exp()
    lo, hi = direct.amin(dim=1, keepdim=True), direct.amax(dim=1, keepdim=True)
    np.testing.assert_allclose(X32.numpy(), ((direct - lo) / (hi - lo)).numpy(), rtol=0, atol=1e-5)


@requires_cuda
@pytest.mark.cuda
def test_sampling_on_cuda():
    g = torch.Generator(device="cuda").manual_seed(0)
    X, mix = sample_tasks(16, 50, 2, 3, generator=g, dtype=F64, return_mixture=True)
    assert X.device.type == "cuda" and mix.means.device.type == "cuda" and mix.components.device.type == "cuda"
    assert (X.amin(1) == 0).all() and (X.amax(1) == 1).all()
    X2 = sample_tasks(16, 50, 2, 3, generator=7, device="cuda")
    assert X2.device.type == "cuda"
    assert torch.equal(X2, sample_tasks(16, 50, 2, 3, generator=7, device="cuda"))
