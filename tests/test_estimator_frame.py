"""The estimator on a user's data (issue 26): a frame that does not depend on the user's axes,
any array scikit-learn accepts, data of any scale, bounded memory, and the padding of the
trained model's domain. The property tests run seeded loops (no hypothesis)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from kmtlib import KMeansTransformer, TransformerKMeans
from kmtlib.domain.frame import principal_frame
from kmtlib.estimator import means_readout


def _anisotropic(seed: int, n: int = 240, d: int = 4, k: int = 4) -> np.ndarray:
    """Blobs stretched by distinct factors and turned: distinct principal variances."""
    rng = np.random.default_rng(seed)
    X, _ = make_blobs(n, n_features=d, centers=k, random_state=seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return (X * np.linspace(0.5, 3.0, d)) @ Q + 7.0


def _transforms(d: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Orthogonal maps of the features: a permutation, a rotation, sign flips, a reversal."""
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    signs = rng.choice([-1.0, 1.0], size=d)
    signs[0] = -1.0
    return {
        "permutation": np.eye(d)[:, rng.permutation(d)],
        "rotation": Q,
        "flips": np.diag(signs),
        "reversal": np.eye(d)[:, ::-1],
    }


# ----------------------------------------------------------------------------- the frame
def test_principal_frame_turns_with_the_features():
    """The data's coordinates in their frame are the same, up to rounding, whatever the order,
    orientation and sign of the features: on anisotropic data, on exactly isotropic data (every
    eigenvalue equal: the farthest-point rule) and on data that fill a subspace only."""
    rng = np.random.default_rng(0)
    white = rng.normal(size=(200, 3))
    white = (white - white.mean(axis=0)) @ np.linalg.inv(np.linalg.cholesky(np.cov(white.T, bias=True))).T
    flat = np.concatenate([_anisotropic(3, d=2), np.zeros((240, 3))], axis=1)
    for X in (_anisotropic(1), _anisotropic(2, d=6), white, flat):
        mean, axes, variances = principal_frame(X)
        Z = (X - mean) @ axes
        assert (np.diff(variances) <= 1e-12 * variances[0]).all()
        for T in _transforms(X.shape[1], rng).values():
            mean_t, axes_t, _ = principal_frame(X @ T)
            np.testing.assert_allclose((X @ T - mean_t) @ axes_t, Z, rtol=0, atol=1e-9 * np.abs(Z).max())


@pytest.mark.parametrize("d", [2, 5, 40])
def test_learned_fit_is_the_same_in_any_axes(d):
    """Permuting, rotating, flipping or reversing the features (the initial centres mapped
    likewise) gives the same labels and inertia up to rounding, and centres mapped the same way.
    (Before the frame, reversing the columns or rotating changed the inertia by 0.43-4.3x.)"""
    rng = np.random.default_rng(d)
    for seed in range(3):
        X = _anisotropic(seed, d=d, k=5)
        C0 = X[rng.choice(len(X), 5, replace=False)]
        ref = TransformerKMeans(5, init=C0, readout="layer").fit(X)
        for name, T in _transforms(d, rng).items():
            est = TransformerKMeans(5, init=C0 @ T, readout="layer").fit(X @ T)
            np.testing.assert_array_equal(est.labels_, ref.labels_, err_msg=name)
            assert est.inertia_ == pytest.approx(ref.inertia_, rel=1e-9), name
            atol = 1e-8 * np.abs(X).max()
            np.testing.assert_allclose(est.cluster_centers_, ref.cluster_centers_ @ T, rtol=0, atol=atol)


def test_one_feature_on_another_scale_is_the_frame_of_the_data():
    """A feature multiplied by 1000 is other data (KMeans sees it too); its fit is that of the same
    data given with the features in another order or orientation."""
    X = _anisotropic(4, d=3)
    X[:, 1] *= 1000.0
    C0 = X[:4]
    ref = TransformerKMeans(4, init=C0).fit(X)
    T = np.eye(3)[:, [2, 0, 1]] @ np.diag([1.0, -1.0, 1.0])
    est = TransformerKMeans(4, init=C0 @ T).fit(X @ T)
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    assert est.inertia_ == pytest.approx(ref.inertia_, rel=1e-9)


def test_isotropic_data_and_more_frames_are_the_same_in_any_axes():
    """Where the principal axes are not defined (whitened data: every variance equal), the frame
    comes from the farthest points, and the fit is still the same in any axes; so is a fit in
    several frames (fixed turns of the data's frame), which keeps the best run, never worse
    than the data's own frame alone."""
    X, _ = make_blobs(300, centers=5, n_features=4, random_state=1)
    X = X - X.mean(axis=0)
    X = X @ np.linalg.inv(np.linalg.cholesky(np.cov(X.T, bias=True))).T
    rng = np.random.default_rng(8)
    C0 = X[rng.choice(len(X), 5, replace=False)]
    one = TransformerKMeans(5, init=C0).fit(X)
    three = TransformerKMeans(5, init=C0, frames=3).fit(X)
    assert three.inertia_ <= one.inertia_
    for name, T in _transforms(4, rng).items():
        for ref, frames in ((one, 1), (three, 3)):
            est = TransformerKMeans(5, init=C0 @ T, frames=frames).fit(X @ T)
            np.testing.assert_array_equal(est.labels_, ref.labels_, err_msg=name)
            assert est.inertia_ == pytest.approx(ref.inertia_, rel=1e-9), name
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="frames must be an integer >= 1"):
            TransformerKMeans(5, frames=bad).fit(X)


# ----------------------------------------------------------------------------- what scikit-learn accepts
def test_accepts_every_array_sklearn_accepts():
    """Views, negative strides (``X[:, ::-1]``, refused before with torch's message), Fortran order,
    strided rows, lists and integers fit and predict as their C-contiguous float copies."""
    X = _anisotropic(5, d=3) * 10
    for model in ("learned", "theorem"):
        for given in (X[:, ::-1], X[::-1], np.asfortranarray(X), X[::2], X.round().astype(np.int64), X.tolist()):
            plain = np.ascontiguousarray(np.asarray(given, dtype=np.float64))
            est = TransformerKMeans(3, model=model, random_state=0).fit(given)
            ref = TransformerKMeans(3, model=model, random_state=0).fit(plain)
            np.testing.assert_array_equal(est.labels_, ref.labels_)
            np.testing.assert_array_equal(est.cluster_centers_, ref.cluster_centers_)
            np.testing.assert_array_equal(est.predict(given), ref.labels_)
    est = TransformerKMeans(3, random_state=0).fit(X.astype(np.float32)[:, ::-1])
    assert est.cluster_centers_.dtype == np.float32


# ----------------------------------------------------------------------------- data of any scale
@pytest.mark.parametrize("model", ["learned", "theorem"])
def test_data_of_any_scale_cluster_as_at_scale_one(model):
    """``X * 1e200`` said "C contains NaN or inf values" (the user passed no C) and ``X * 1e-200``
    returned inertia 0 with a quarter of the labels right: both cluster as X. A power-of-two factor
    gives the same labels and centres and the inertia times its square (where float64 holds it)."""
    X, _ = make_blobs(300, centers=4, n_features=3, random_state=0)
    ref = TransformerKMeans(4, model=model, random_state=0).fit(X)
    for factor in (1e200, 1e-200, 2.0**500, 2.0**-500, 1e150):
        est = TransformerKMeans(4, model=model, random_state=0).fit(X * factor)
        np.testing.assert_array_equal(est.labels_, ref.labels_)
        np.testing.assert_array_equal(est.predict(X * factor), est.labels_)
        expected = ref.inertia_ * factor * factor
        if np.isfinite(expected) and expected > 1e-300:
            assert est.inertia_ == pytest.approx(expected, rel=1e-9)
            assert -est.score(X * factor) == pytest.approx(expected, rel=1e-9)
        atol = 1e-9 * np.abs(X).max()
        np.testing.assert_allclose(est.cluster_centers_ / factor, ref.cluster_centers_, rtol=1e-9, atol=atol)
        np.testing.assert_allclose(est.transform(X * factor) / factor, ref.transform(X), rtol=1e-9, atol=1e-9)


# ----------------------------------------------------------------------------- the padding of the domain
def test_centres_keep_zero_padding_in_the_model_domain(monkeypatch):
    """d < 32: the data are padded with zeros, and the centres are projected back onto the data's
    coordinates after every step (else a centre's padding adds a term of its own to its distance
    to every point, and the model's nearest centre differs from the user's). Every step of the
    layer after the first starts from centres with zero padding, and labels_ are predict's."""
    seen = []
    step = KMeansTransformer.step

    def spy(self, X, C):
        seen.append(C[..., 3:].abs().max().item())
        return step(self, X, C)

    monkeypatch.setattr(KMeansTransformer, "step", spy)
    X = _anisotropic(6, d=3)
    est = TransformerKMeans(4, random_state=0, steps=5, readout="layer").fit(X)
    assert len(seen) == 5 and seen == [0.0] * 5
    np.testing.assert_array_equal(est.labels_, est.predict(X))


# ----------------------------------------------------------------------------- bounded memory
def test_a_trained_model_runs_on_a_sample_and_reads_out_over_all_points():
    """Above ``sample_size`` points the layer runs on a sample drawn from random_state (the same
    state, the same sample) and the clustering is read out over all points: the centres are the
    means of their clusters over all points, labels_ predict's."""
    X, _ = make_blobs(3000, centers=5, n_features=4, random_state=1)
    a = TransformerKMeans(5, sample_size=500, random_state=3).fit(X)
    b = TransformerKMeans(5, sample_size=500, random_state=3).fit(X)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(a.labels_, a.predict(X))
    layer = TransformerKMeans(5, sample_size=500, random_state=3, readout="layer").fit(X)
    np.testing.assert_allclose(a.cluster_centers_, means_readout(X, layer.cluster_centers_), rtol=0, atol=1e-12)
    # no sample: all points
    full = TransformerKMeans(5, sample_size=None, random_state=3).fit(X[:600])
    same = TransformerKMeans(5, sample_size=600, random_state=3).fit(X[:600])
    np.testing.assert_array_equal(full.cluster_centers_, same.cluster_centers_)


def test_a_sample_too_large_for_the_memory_is_refused():
    X = np.random.default_rng(0).normal(size=(40, 2))
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="sample_size must be None or an integer >= 1"):
            TransformerKMeans(2, sample_size=bad).fit(X)
    with pytest.raises(ValueError, match=r"on 2000000 points needs about .* GiB .*set sample_size to at most"):
        TransformerKMeans(2, sample_size=None).fit(np.arange(2_000_000.0)[:, None])


_MEMORY_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    import numpy as np
    from kmtlib import TransformerKMeans
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200_000, 10)) + rng.normal(size=(10, 10))[rng.integers(0, 10, 200_000)] * 4
    TransformerKMeans(10, random_state=0).fit(X[:2000])  # the layer loaded, every kernel run once
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    est = TransformerKMeans(10, random_state=0).fit(X)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    json.dump({"growth_bytes": peak - before, "labels": len(est.labels_)}, sys.stdout)
    """
)


def test_learned_fit_at_200000_points_in_bounded_memory():
    """n = 200 000, d = 10, k = 10 with the defaults, in a fresh process: the peak memory grows
    during the fit by at most half again the docstring's bound, ``40 n d + 8 n k + 8 m^2`` bytes
    (m = 1024, the default ``sample_size``; the whole n x n attention would ask for 160 GB). A default sample eight
    times larger (m = 8192: the growth measured 395 MiB against a bound of 149) breaks it."""
    command = [sys.executable, "-c", _MEMORY_SCRIPT]
    run = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert result["labels"] == 200_000
    n, d, k, m = 200_000, 10, 10, 1024  # (m: the default sample_size the docstring states)
    bound = 40 * n * d + 8 * n * k + 8 * m * m
    assert result["growth_bytes"] <= 1.5 * bound, (result, bound)
