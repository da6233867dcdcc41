"""kmtlib.TransformerKMeans: scikit-learn's estimator checks, the theorem model against
sklearn's KMeans, the map into the trained model's domain, errors and determinism."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
import warnings
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import torch
from _helpers import min_assignment_margin, requires_cuda
from sklearn.cluster import KMeans
from sklearn.datasets import load_iris, make_blobs
from sklearn.metrics import euclidean_distances
from sklearn.utils.estimator_checks import parametrize_with_checks

import kmtlib
import kmtlib.domain.frame
import kmtlib.estimator.domain
from kmtlib import KMeansTransformer, TransformerKMeans
from kmtlib.domain.broad_tasks import CENTRE, TARGET_TOTAL_VARIANCE, spread_normalise
from kmtlib.estimator import PRETRAINED_ANY_K, DomainMap, lloyd_to_fixed_point, means_readout, pretrained_model


# ----------------------------------------------------------------------------- sklearn's own checks
@parametrize_with_checks(
    [
        TransformerKMeans(n_clusters=2, model="theorem", steps=5),
        TransformerKMeans(n_clusters=3, model="learned", steps=5),
        TransformerKMeans(n_clusters=3, model="learned", steps=5, readout="layer"),
    ]
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_public_name():
    assert "TransformerKMeans" in kmtlib.__all__
    assert kmtlib.TransformerKMeans is TransformerKMeans


def test_pretrained_layer_is_package_data():
    """The learned model is a file inside the package, declared as package data (a pip-installed
    kmtlib has it), and runs on any k in d = 32."""
    assert (resources.files("kmtlib") / "pretrained" / PRETRAINED_ANY_K).is_file()
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert "pretrained/*.pt" in pyproject["tool"]["setuptools"]["package-data"]["kmtlib"]
    model = pretrained_model()
    assert model.d == 32 and model.config.reads_any_k and model.config.trainable and not model.training


def test_pretrained_layer_is_the_shipped_run_its_readme_names():
    """Provenance: the packaged layer is byte for byte the model.pt of the broadly trained run its
    README names, whose manifest says how it was trained."""
    root = Path(__file__).resolve().parents[1]
    readme = (root / "kmtlib" / "pretrained" / "README.md").read_text()
    run = re.search(r"the run `(data/weights_any_k_broad/[\w]+)`", readme).group(1)
    packaged = (resources.files("kmtlib") / "pretrained" / PRETRAINED_ANY_K).read_bytes()
    assert packaged == (root / run / "model.pt").read_bytes()
    assert hashlib.sha256(packaged).hexdigest() in readme
    manifest = json.loads((root / run / "manifest.json").read_text())
    assert manifest["config"]["tasks"] == "broad" and manifest["config"]["k_max"] == 32


# ----------------------------------------------------------------------------- theorem = Lloyd = KMeans
def _datasets():
    X2, _ = make_blobs(300, n_features=2, centers=4, cluster_std=1.5, random_state=1)
    X50, _ = make_blobs(200, n_features=50, centers=5, cluster_std=4.0, random_state=2)
    return {"blobs_d2": (X2, 4), "blobs_d50": (X50, 5), "iris": (load_iris().data, 3)}


def _tie_free_seeding(X, k, steps):
    """The first random k-subset of the points (seeds 0, 1, ...) from which Lloyd empties no
    cluster and meets no near tie: KMeans relocates an empty cluster to a far point where the
    limit transformer moves it to the mean of all points, and a tie may go either way in two
    correct float64 codes (iris, on a grid of 0.1, has exact ties from some seedings)."""
    for seed in range(20):
        C0 = X[np.random.default_rng(seed).choice(len(X), k, replace=False)]
        ref = kmtlib.lloyd(torch.from_numpy(X)[None], torch.from_numpy(C0)[None], steps)
        if int(ref.n_empty.sum()) == 0 and float(min_assignment_margin(torch.from_numpy(X)[None], ref.centers)) > 1e-6:
            return C0
    raise AssertionError("no tie-free seeding among the first 20")


@pytest.mark.parametrize("name", ["blobs_d2", "blobs_d50", "iris"])
def test_theorem_model_is_sklearn_lloyd(name):
    X, k = _datasets()[name]
    steps = 8
    C0 = _tie_free_seeding(X, k, steps)

    est = TransformerKMeans(k, model="theorem", init=C0, steps=steps).fit(X)
    km = KMeans(k, init=C0, n_init=1, algorithm="lloyd", max_iter=steps, tol=0).fit(X)
    np.testing.assert_array_equal(est.labels_, km.labels_)
    np.testing.assert_allclose(est.cluster_centers_, km.cluster_centers_, rtol=1e-12, atol=1e-12 * np.abs(X).max())
    np.testing.assert_allclose(est.inertia_, km.inertia_, rtol=1e-12)
    assert est.n_iter_ == steps and est.cluster_centers_.dtype == np.float64
    # the theorem model runs on the data as given
    assert est.domain_map_.axes is None and est.domain_map_.scale == 1.0 and not est.domain_map_.mean.any()


def test_predict_transform_score_agree_with_kmeans_formulas():
    X, k = _datasets()["blobs_d2"]
    est = TransformerKMeans(k, model="theorem", random_state=0).fit(X)
    D = est.transform(X)
    np.testing.assert_allclose(D, euclidean_distances(X, est.cluster_centers_), rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(est.predict(X), D.argmin(axis=1))
    np.testing.assert_array_equal(est.predict(X), est.labels_)
    assert est.score(X) == pytest.approx(-est.inertia_, rel=1e-12)
    np.testing.assert_array_equal(TransformerKMeans(k, model="theorem", random_state=0).fit_predict(X), est.labels_)


# ----------------------------------------------------------------------------- the map into the domain
def _sklearn_inertia(X, centers, labels):
    return float(((X - centers[labels]) ** 2).sum())


def test_isotropic_map_is_invertible_and_padding_keeps_distances():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(120, 5)) * [1.0, 10.0, 0.1, 3.0, 1e3] + 50.0
    est = TransformerKMeans(4, random_state=0, readout="layer").fit(X)
    dm = est.domain_map_
    assert dm.axes.shape == (5, 5) and dm.width == 32 and dm.reduced == 5
    np.testing.assert_allclose(dm.axes.T @ dm.axes, np.eye(5), rtol=0, atol=1e-12)
    Z = dm.to_model(X)
    # the mean to 0.5 in the filled coordinates, the total variance to 1.6, the padding zero
    assert Z.shape == (120, 32) and not Z[:, 5:].any()
    np.testing.assert_allclose(Z[:, :5].mean(axis=0), CENTRE, rtol=0, atol=1e-12)
    assert ((Z - Z.mean(axis=0)) ** 2).sum(axis=1).mean() == pytest.approx(TARGET_TOTAL_VARIANCE, rel=1e-12)
    assert dm.scale == pytest.approx(np.sqrt(X.var(axis=0).sum() / TARGET_TOTAL_VARIANCE), rel=1e-12)
    # the same shift and scale as the broad training tasks go through (kmtlib.domain.broad_tasks.spread_normalise),
    # in the data's principal axes
    padded = torch.zeros(1, 120, 32, dtype=torch.float64)
    padded[0, :, :5] = torch.from_numpy(X)
    spread = spread_normalise(padded, torch.tensor([5]))[0].numpy()
    np.testing.assert_allclose((spread[:, :5] - CENTRE) @ dm.axes, Z[:, :5] - CENTRE, rtol=0, atol=1e-12)
    # exactly invertible (up to rounding): points and centres come back
    np.testing.assert_allclose(dm.to_user(Z), X, rtol=1e-13, atol=1e-13 * np.abs(X).max())
    C = est.cluster_centers_
    np.testing.assert_allclose(dm.to_user(dm.to_model(C)), C, rtol=1e-13, atol=1e-13 * np.abs(X).max())
    # distances change by the one factor 1 / scale (padding changes none)
    np.testing.assert_allclose(euclidean_distances(Z) * dm.scale, euclidean_distances(X), rtol=1e-9, atol=1e-9)
    # inertia in the user's space: sklearn's formula, and the model's domain times scale ** 2
    assert est.inertia_ == pytest.approx(_sklearn_inertia(X, C, est.labels_), rel=1e-12)
    in_domain = kmtlib.kmeans_objective(torch.from_numpy(Z)[None], torch.from_numpy(dm.to_model(C))[None])
    assert est.inertia_ == pytest.approx(float(in_domain) * dm.scale**2, rel=1e-10)
    np.testing.assert_array_equal(est.labels_, est.predict(X))


def test_high_dimensional_data_go_through_pca():
    X, _ = make_blobs(150, n_features=60, centers=3, random_state=4)
    est = TransformerKMeans(3, random_state=0, readout="layer", polish=False).fit(X)
    dm = est.domain_map_
    assert dm.axes.shape == (60, 32) and dm.reduced == dm.width == 32
    # centres and inertia in the original 60-dimensional space
    C = est.cluster_centers_
    assert C.shape == (3, 60)
    assert est.inertia_ == pytest.approx(_sklearn_inertia(X, C, est.labels_), rel=1e-12)
    # the centres lie in the PCA subspace, so they map there and back
    np.testing.assert_allclose(dm.to_user(dm.to_model(C)), C, rtol=1e-10, atol=1e-10 * np.abs(X).max())
    # original inertia = inertia in the domain (times scale ** 2) + what the PCA leaves out
    Z = dm.to_model(X)
    residual = float(((X - dm.to_user(Z)) ** 2).sum())
    in_domain = kmtlib.kmeans_objective(torch.from_numpy(Z)[None], torch.from_numpy(dm.to_model(C))[None])
    assert est.inertia_ == pytest.approx(float(in_domain) * dm.scale**2 + residual, rel=1e-9)
    # the three blobs are found
    assert len(np.unique(est.labels_)) == 3
    # read out as means, the centres are the means of their clusters in the original space
    means = TransformerKMeans(3, random_state=0, polish=False).fit(X)
    np.testing.assert_array_equal(means.labels_, est.labels_)
    expected = np.stack([X[est.labels_ == j].mean(axis=0) for j in range(3)])
    np.testing.assert_allclose(means.cluster_centers_, expected, rtol=1e-12, atol=1e-12 * np.abs(X).max())
    assert means.inertia_ <= est.inertia_


@pytest.mark.parametrize(("d", "pca", "reduced"), [(3, False, 3), (32, False, 32), (40, True, 32)])
def test_which_map_each_dimension_gets(d, pca, reduced):
    """d < 32: zero padding; d = 32: the isotropic map alone; d > 32: PCA to 32 components
    (fewer where there are fewer points: then the PCA loses nothing)."""
    X = np.random.default_rng(d).normal(size=(50, d))
    dm = TransformerKMeans(2, random_state=0).fit(X).domain_map_
    assert (dm.axes.shape[0] > dm.axes.shape[1]) == pca and dm.reduced == reduced and dm.width == 32
    small = TransformerKMeans(2, random_state=0).fit(X[:10]).domain_map_
    assert small.reduced == (min(d, 10) if pca else d)


def test_map_of_constant_data():
    dm = DomainMap.fit(np.full((4, 3), 7.0), width=32)
    Z = dm.to_model(np.full((1, 3), 7.0))
    assert dm.scale == 1.0 and (Z[:, :3] == CENTRE).all() and not Z[:, 3:].any()


def test_readout_means_is_one_hard_step_from_the_layer_centres():
    """readout="means": the centres of readout="layer" moved to the means of their nearest points
    (a centre nearest to none stays); the inertia can only fall. The theorem model ignores it."""
    X = _datasets()["blobs_d2"][0]
    layer = TransformerKMeans(4, random_state=1, readout="layer", polish=False).fit(X)
    means = TransformerKMeans(4, random_state=1, polish=False).fit(X)
    np.testing.assert_allclose(means.cluster_centers_, means_readout(X, layer.cluster_centers_), rtol=0, atol=0)
    assert means.inertia_ <= layer.inertia_
    lonely = np.array([[0.0, 0.0], [1e6, 1e6]])
    np.testing.assert_array_equal(means_readout(np.zeros((3, 2)) + 1.0, lonely), [[1.0, 1.0], [1e6, 1e6]])
    a = TransformerKMeans(4, model="theorem", random_state=1).fit(X)
    b = TransformerKMeans(4, model="theorem", random_state=1, readout="layer").fit(X)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)


def test_float32_data_keep_their_dtype():
    X = _datasets()["blobs_d2"][0].astype(np.float32)
    for model in ("theorem", "learned"):
        est = TransformerKMeans(4, model=model, random_state=0).fit(X)
        assert est.cluster_centers_.dtype == np.float32 and est.transform(X).dtype == np.float32


# ----------------------------------------------------------------------------- errors
X_SMALL = np.random.default_rng(5).normal(size=(40, 3))


def test_wrong_model_path(tmp_path):
    with pytest.raises(ValueError, match="neither 'learned', 'theorem' nor the path"):
        TransformerKMeans(2, model=str(tmp_path / "missing.pt")).fit(X_SMALL)
    with pytest.raises(ValueError, match="neither"):
        TransformerKMeans(2, model="lerned").fit(X_SMALL)
    with pytest.raises(ValueError, match="model must be"):
        TransformerKMeans(2, model=3).fit(X_SMALL)


def test_model_of_one_fixed_k(tmp_path):
    fixed = KMeansTransformer.trainable(d=32, k=4)
    assert not fixed.config.reads_any_k
    with pytest.raises(ValueError, match="supports k=4 clusters only, but n_clusters=3"):
        TransformerKMeans(3, model=fixed).fit(X_SMALL)
    path = fixed.save(tmp_path / "k4.pt")
    with pytest.raises(ValueError, match="supports k=4 clusters only"):
        TransformerKMeans(3, model=path).fit(X_SMALL)
    # the right k runs (any d: a trained model gets the map into its domain), and it is the file's
    # model that runs: its own centres (no read-out, polish or seeding kept) are the given model's
    alone = dict(readout="layer", polish=False, never_worse=False, random_state=0)
    from_file = TransformerKMeans(4, model=str(path), **alone).fit(X_SMALL)
    np.testing.assert_array_equal(
        from_file.cluster_centers_, TransformerKMeans(4, model=fixed, **alone).fit(X_SMALL).cluster_centers_
    )
    assert not np.allclose(from_file.cluster_centers_, TransformerKMeans(4, **alone).fit(X_SMALL).cluster_centers_)


def test_fixed_weight_model_of_another_d():
    with pytest.raises(ValueError, match="fixed weights for d=5 features but X has 3"):
        TransformerKMeans(2, model=KMeansTransformer.from_theorem(5, 2)).fit(X_SMALL)


def test_given_model_is_copied_not_changed():
    model = pretrained_model().train()
    TransformerKMeans(3, model=model, random_state=0).fit(X_SMALL)
    assert model.training


def test_the_shipped_layer_is_shared_read_only_not_copied_per_fit(monkeypatch):
    """model="learned": every fit runs the one shipped layer loaded per process (no copy per fit),
    and leaves its weights, mode and settings as they were."""
    import copy

    from kmtlib.estimator.model import shared_pretrained_model

    shared = shared_pretrained_model(torch.device("cpu"))
    before = {name: t.clone() for name, t in shared.state_dict().items()}
    copies: list[object] = []
    deepcopy = copy.deepcopy
    monkeypatch.setattr(copy, "deepcopy", lambda x, *a: copies.append(x) or deepcopy(x, *a))
    X, _ = make_blobs(200, n_features=3, centers=4, random_state=5)
    for seed in (0, 1):
        TransformerKMeans(4, n_init=2, random_state=seed).fit(X)
    assert not any(isinstance(c, KMeansTransformer) for c in copies), "a fit copied the shipped layer"
    assert shared_pretrained_model(torch.device("cpu")) is shared and not shared.training and shared.fast
    assert all(torch.equal(t, before[name]) for name, t in shared.state_dict().items())


def test_the_polish_builds_its_distance_frame_once_with_the_same_numbers(monkeypatch):
    """The polish takes its distances in one DistanceFrame built before its first step (as
    scikit-learn computes the points' squared norms once), with the centres and labels of Lloyd's
    steps that build it anew at every step; data far from the origin (a shifted frame) and data
    with empty clusters included."""
    from kmtlib.estimator.fit import onto_farthest_points
    from kmtlib.estimator.reported import as_task
    from kmtlib.lloyd import lloyd_step_unchecked
    from kmtlib.objective import DistanceFrame

    def per_step(X, centers, max_iter=300):  # (the polish as it was: a frame at every step)
        mean = X.mean(axis=0)
        Xt = as_task(X - mean).expand(centers.shape[0], *X.shape)
        C, labels = torch.as_tensor(centers - mean, dtype=torch.float64), None
        for _ in range(max_iter):
            previous = C
            C, new, counts = lloyd_step_unchecked(Xt, C, empty="keep")
            C = onto_farthest_points(Xt, previous, new, counts == 0, C)
            if labels is not None and torch.equal(new, labels):
                break
            labels = new
        return C.numpy() + mean

    rng = np.random.default_rng(11)
    data = {"blobs": make_blobs(300, n_features=3, centers=5, random_state=2)[0],
            "far": rng.normal(1e9, 3.0, size=(200, 2)), "few distinct": np.repeat(rng.normal(size=(3, 2)), 20, axis=0)}
    built = []
    of = DistanceFrame.of.__func__
    monkeypatch.setattr(DistanceFrame, "of", classmethod(lambda cls, *a, **kw: built.append(1) or of(cls, *a, **kw)))
    for name, X in data.items():
        starts = np.stack([X[rng.choice(len(X), 5, replace=False)] for _ in range(3)])
        built.clear()
        once = lloyd_to_fixed_point(X, starts)
        assert len(built) == 1, f"{name}: the polish built {len(built)} distance frames"
        assert np.array_equal(once, per_step(X, starts)), name


def test_bad_init_and_data():
    with pytest.raises(ValueError, match=r"init must have shape \(n_clusters, n_features\) = \(2, 3\), got \(2, 4\)"):
        TransformerKMeans(2, init=np.zeros((2, 4))).fit(X_SMALL)
    with pytest.raises(ValueError, match="init must be one of"):
        TransformerKMeans(2, init="kmeans").fit(X_SMALL)
    with pytest.raises(ValueError, match="n_samples=40 should be >= n_clusters=41"):
        TransformerKMeans(41).fit(X_SMALL)
    with pytest.raises(ValueError, match="steps must be an integer >= 0"):
        TransformerKMeans(2, steps=-1).fit(X_SMALL)
    with pytest.raises(ValueError, match="readout must be one of 'means', 'layer', got 'soft'"):
        TransformerKMeans(2, readout="soft").fit(X_SMALL)
    bad = X_SMALL.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        TransformerKMeans(2).fit(bad)
    est = TransformerKMeans(2, random_state=0).fit(X_SMALL)
    with pytest.raises(ValueError, match="NaN"):
        est.predict(bad)
    with pytest.raises(ValueError, match="3 features"):
        est.predict(X_SMALL[:, :2])


def test_init_array_with_n_init_warns_and_runs_once():
    C0 = X_SMALL[:2]
    with pytest.warns(RuntimeWarning, match="performing only one init"):
        est = TransformerKMeans(2, model="theorem", init=C0, n_init=3).fit(X_SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ref = TransformerKMeans(2, model="theorem", init=C0).fit(X_SMALL)
    np.testing.assert_array_equal(est.cluster_centers_, ref.cluster_centers_)


# ----------------------------------------------------------------------------- randomness
@pytest.mark.parametrize("model", ["theorem", "learned"])
@pytest.mark.parametrize("init", ["k-means++", "random"])
def test_same_random_state_same_result(model, init):
    X = _datasets()["blobs_d2"][0]
    a = TransformerKMeans(4, model=model, init=init, n_init=3, random_state=7).fit(X)
    b = TransformerKMeans(4, model=model, init=init, n_init=3, random_state=7).fit(X)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.inertia_ == b.inertia_
    c = TransformerKMeans(4, model=model, init=init, n_init=3, random_state=np.random.RandomState(7)).fit(X)
    np.testing.assert_array_equal(a.cluster_centers_, c.cluster_centers_)


def test_n_init_keeps_the_best_run():
    """With init="random" the first of n_init seedings is the single seeding of the same random
    state (the k-subsets are drawn task by task), so more seedings can only lower the inertia."""
    X = load_iris().data
    one = TransformerKMeans(3, model="theorem", init="random", random_state=1).fit(X)
    many = TransformerKMeans(3, model="theorem", init="random", n_init=6, random_state=1).fit(X)
    assert many.inertia_ <= one.inertia_
    # steps=0 returns the seeding itself: k distinct data points
    seeds = TransformerKMeans(3, model="theorem", init="random", steps=0, random_state=1).fit(X)
    assert seeds.n_iter_ == 0 and all((c == X).all(axis=1).any() for c in seeds.cluster_centers_)


# ----------------------------------------------------------------------------- devices
@requires_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("model", ["theorem", "learned"])
def test_cuda_matches_cpu(model):
    X, k = _datasets()["blobs_d2"]
    cpu = TransformerKMeans(k, model=model, random_state=0, n_init=2).fit(X)
    gpu = TransformerKMeans(k, model=model, random_state=0, n_init=2, device="cuda").fit(X)
    # the same seeding (drawn on the CPU), the same clustering up to the device's rounding
    np.testing.assert_array_equal(cpu.labels_, gpu.labels_)
    np.testing.assert_allclose(cpu.cluster_centers_, gpu.cluster_centers_, rtol=1e-4, atol=1e-4 * np.abs(X).max())


# ----------------------------------------------------------------------------- seeding, n_init, polish
def _seeding(X: np.ndarray, k: int, random_state: int, n_local_trials: int | None) -> np.ndarray:
    """The centres the estimator seeds with: kmtlib's k-means++ from the torch seed it draws."""
    seed = int(np.random.RandomState(random_state).randint(np.iinfo(np.int32).max))
    Xt = torch.tensor(X, dtype=torch.float64)[None]
    return kmtlib.init_centers(Xt, k, "kmeans++", torch.Generator().manual_seed(seed), n_local_trials=n_local_trials)[
        0
    ].numpy()


@pytest.mark.parametrize(("init", "trials"), [("k-means++", None), ("d2", 1)])
def test_init_names_the_greedy_and_the_plain_kmeanspp(init, trials):
    X, _ = make_blobs(300, centers=8, n_features=3, random_state=5)
    est = TransformerKMeans(8, model="theorem", init=init, steps=0, random_state=3).fit(X)
    np.testing.assert_array_equal(est.cluster_centers_, _seeding(X, 8, 3, trials))


def test_n_init_auto_as_kmeans():
    """ "auto": 10 starts for init="random", 1 for the k-means++ seedings (scikit-learn's rule)."""
    X, _ = make_blobs(200, centers=5, n_features=2, random_state=6)
    for init, starts in (("random", 10), ("k-means++", 1), ("d2", 1)):
        auto = TransformerKMeans(5, model="theorem", init=init, random_state=2).fit(X)
        given = TransformerKMeans(5, model="theorem", init=init, n_init=starts, random_state=2).fit(X)
        np.testing.assert_array_equal(auto.cluster_centers_, given.cluster_centers_)
    assert TransformerKMeans().n_init == "auto"
    with pytest.raises(ValueError, match="n_init must be 'auto' or an integer"):
        TransformerKMeans(5, n_init="many").fit(X)


def test_polish_ends_at_a_kmeans_fixed_point():
    X, _ = make_blobs(400, centers=6, n_features=4, cluster_std=2.5, random_state=7)
    est = TransformerKMeans(6, random_state=0).fit(X)  # polish="auto": on for the learned model
    labels = est.labels_
    means = np.stack([X[labels == j].mean(axis=0) for j in range(6)])
    np.testing.assert_allclose(est.cluster_centers_, means, rtol=1e-12, atol=1e-12)
    km = KMeans(6, init=est.cluster_centers_, n_init=1, algorithm="lloyd", tol=0.0).fit(X)
    np.testing.assert_array_equal(km.labels_, labels)
    np.testing.assert_allclose(km.cluster_centers_, est.cluster_centers_, rtol=1e-10, atol=1e-10)
    assert est.inertia_ <= TransformerKMeans(6, random_state=0, polish=False).fit(X).inertia_ * (1 + 1e-12)
    # the theorem model is not polished by default: it stays KMeans of max_iter=steps
    theorem = TransformerKMeans(6, model="theorem", steps=2, random_state=0).fit(X)
    unpolished = TransformerKMeans(6, model="theorem", steps=2, random_state=0, polish=False).fit(X)
    np.testing.assert_array_equal(theorem.cluster_centers_, unpolished.cluster_centers_)
    with pytest.raises(ValueError, match="polish must be"):
        TransformerKMeans(6, polish="yes").fit(X)


def test_never_worse_than_its_seeding():
    """From a start that is already a k-means fixed point, the layer's own centres (no read-out,
    no polish) are worse: the seeding is kept."""
    X, _ = make_blobs(300, centers=4, n_features=2, random_state=8)
    C0 = KMeans(4, random_state=0, n_init=1).fit(X).cluster_centers_
    est = TransformerKMeans(4, init=C0, readout="layer", polish=False).fit(X)
    seeded = float(((X[:, None] - C0[None]) ** 2).sum(-1).min(1).sum())
    assert est.inertia_ <= seeded * (1 + 1e-12)
    assert not est.from_model_ or est.inertia_ < seeded
    # polished, the result is never worse than Lloyd from the same seeding (KMeans from C0)
    for state in range(3):
        X, _ = make_blobs(400, centers=9, n_features=2, cluster_std=1.5, random_state=20 + state)
        C0 = X[np.random.default_rng(state).choice(len(X), 9, replace=False)]
        est = TransformerKMeans(9, init=C0).fit(X)
        assert est.inertia_ <= KMeans(9, init=C0, n_init=1, algorithm="lloyd", tol=0.0).fit(X).inertia_ * (1 + 1e-9)


def test_learned_model_warns_beyond_its_trained_k():
    X, _ = make_blobs(400, centers=40, n_features=2, random_state=9)
    with pytest.warns(UserWarning, match="beyond k = 2..32"):
        TransformerKMeans(40, steps=1, random_state=0).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TransformerKMeans(40, model="theorem", steps=1, random_state=0).fit(X)
        TransformerKMeans(32, steps=1, random_state=0).fit(X)


# ----------------------------------------------------------------------------- the layer's candidate and the seeding's
_NINE = make_blobs(400, centers=9, n_features=3, cluster_std=1.5, random_state=4)[0]


def _layer_candidate(X: np.ndarray, k: int, random_state: int, steps: int = 20) -> np.ndarray:
    """The learned default's candidate computed from the public pieces: the seeding (the theorem
    model at 0 steps draws the same), the data in their power-of-two unit mapped into the layer's
    domain, ``steps`` steps of the shipped layer (padding kept at 0), the map back, the read-out
    and Lloyd to a fixed point."""
    seeding = TransformerKMeans(k, model="theorem", steps=0, random_state=random_state).fit(X).cluster_centers_
    unit = kmtlib.domain.frame.data_unit(X)
    Xu, Cu = X / unit, seeding / unit
    dm = DomainMap.fit(Xu, 32)
    model = pretrained_model()
    dtype = next(model.parameters()).dtype
    Z = torch.tensor(dm.to_model(Xu), dtype=dtype)[None]
    C = torch.tensor(dm.to_model(Cu), dtype=dtype)[None]
    with torch.inference_mode():
        for _ in range(steps):
            C = model.step(Z, C)
            C[..., dm.reduced :] = 0
    layer = dm.to_user(C[0].double().numpy())
    return lloyd_to_fixed_point(Xu, means_readout(Xu, layer)[None])[0] * unit


def test_never_worse_false_returns_the_layers_candidate():
    """random_state=1: the layer's candidate is worse than Lloyd from its seeding; the default
    keeps the seeding's, never_worse=False the layer's, equal to the one computed here."""
    alone = TransformerKMeans(9, random_state=1, never_worse=False).fit(_NINE)
    np.testing.assert_allclose(alone.cluster_centers_, _layer_candidate(_NINE, 9, 1), rtol=1e-9, atol=1e-9)
    default = TransformerKMeans(9, random_state=1).fit(_NINE)
    assert alone.inertia_ > default.inertia_ * 1.01
    assert not default.from_model_ and not default.tied_with_seeding_
    seeding_lloyd = TransformerKMeans(9, model="theorem", steps=300, random_state=1).fit(_NINE)
    np.testing.assert_allclose(default.inertia_, seeding_lloyd.inertia_, rtol=1e-12)
    with pytest.raises(ValueError, match="never_worse must be True or False"):
        TransformerKMeans(9, never_worse="yes").fit(_NINE)


def test_from_model_only_where_the_layer_is_strictly_better():
    """random_state=3: the layer's candidate and Lloyd from the seeding end at one fixed point (a
    tie: from_model_ False); random_state=0: the layer's is strictly better (True)."""
    tie = TransformerKMeans(9, random_state=3).fit(_NINE)
    seeding_lloyd = TransformerKMeans(9, model="theorem", steps=300, random_state=3).fit(_NINE)
    np.testing.assert_allclose(tie.inertia_, seeding_lloyd.inertia_, rtol=1e-12)
    alone = TransformerKMeans(9, random_state=3, never_worse=False).fit(_NINE)
    np.testing.assert_allclose(tie.inertia_, alone.inertia_, rtol=1e-12)
    assert tie.tied_with_seeding_ and not tie.from_model_
    won = TransformerKMeans(9, random_state=0).fit(_NINE)
    lloyd = TransformerKMeans(9, model="theorem", steps=300, random_state=0).fit(_NINE)
    assert won.from_model_ and not won.tied_with_seeding_ and won.inertia_ < lloyd.inertia_ * (1 - 1e-6)
    theorem = TransformerKMeans(9, model="theorem", random_state=3).fit(_NINE)
    assert theorem.from_model_ and not theorem.tied_with_seeding_


# ----------------------------------------------------------------------------- the last hostile cases
def test_frames_above_the_limit_are_refused_before_any_run(monkeypatch):
    """frames=10**9 is refused at once, naming the limit (no rotation is drawn)."""
    monkeypatch.setattr(kmtlib.estimator.domain, "frame_turns", lambda *a: pytest.fail("a frame was drawn"))
    with pytest.raises(ValueError, match=f"frames must be at most {kmtlib.estimator.MAX_FRAMES}, got 1000000000"):
        TransformerKMeans(4, frames=10**9).fit(X_SMALL)


def test_callable_init_as_kmeans():
    """A callable init is called as KMeans calls it, init(X, n_clusters, random_state), once per
    seeding (n_init="auto": 10, as KMeans); its centres are the start (steps=0 returns them)."""
    calls = []

    def corners(X, n_clusters, random_state):
        calls.append((X.shape, n_clusters, isinstance(random_state, np.random.RandomState)))
        return X[random_state.choice(len(X), n_clusters, replace=False)]

    est = TransformerKMeans(3, model="theorem", init=corners, steps=0, random_state=4).fit(X_SMALL * 3.0)
    assert calls == [((40, 3), 3, True)] * 10
    assert all((c == X_SMALL * 3.0).all(axis=1).any() for c in est.cluster_centers_)
    calls.clear()
    learned = TransformerKMeans(3, init=corners, n_init=2, random_state=4).fit(X_SMALL)
    assert len(calls) == 2 and learned.cluster_centers_.shape == (3, 3)
    with pytest.raises(ValueError, match=r"the centres the init callable returned must have shape .* got \(2, 3\)"):
        TransformerKMeans(3, init=lambda X, k, rs: X[:2]).fit(X_SMALL)


@pytest.mark.parametrize(
    ("init", "message"),
    [
        (np.zeros((2, 3, 1)), r"init must be a 2-D array \(n_clusters, n_features\), got 3-D"),
        (np.zeros(3), r"init must be a 2-D array"),
        ([["a", "b", "c"], ["d", "e", "f"]], r"init must be an array of finite numbers"),
        (np.array([[0.0, 1.0, np.nan], [1.0, 2.0, 3.0]]), r"init must be an array of finite numbers.*NaN"),
        (5, r"init must be a 2-D array"),
    ],
)
def test_every_init_error_names_init(init, message):
    with pytest.raises(ValueError, match=message):
        TransformerKMeans(2, init=init).fit(X_SMALL)


def test_numpy_booleans_are_accepted_where_python_booleans_are():
    X, _ = make_blobs(200, centers=3, n_features=2, random_state=3)
    for value in (True, False):
        python = TransformerKMeans(3, polish=value, random_state=0).fit(X)
        numpy = TransformerKMeans(3, polish=np.bool_(value), random_state=0).fit(X)
        np.testing.assert_array_equal(python.cluster_centers_, numpy.cluster_centers_)
        alone = TransformerKMeans(3, never_worse=np.bool_(value), random_state=0).fit(X)
        np.testing.assert_array_equal(
            alone.cluster_centers_, TransformerKMeans(3, never_worse=value, random_state=0).fit(X).cluster_centers_
        )
    with pytest.raises(ValueError, match="polish must be 'auto', True or False, got 1"):
        TransformerKMeans(3, polish=1).fit(X)


@pytest.mark.parametrize("never_worse", [True, False])
def test_constant_and_duplicated_data_get_centres_on_their_points(never_worse):
    """Every point at 7.25: every centre at 7.25, as KMeans'. Three points repeated, k = 5:
    every centre on one of them (up to rounding), none in between."""
    constant = np.full((50, 2), 7.25)
    est = TransformerKMeans(4, random_state=0, never_worse=never_worse).fit(constant)
    np.testing.assert_array_equal(est.cluster_centers_, np.full((4, 2), 7.25))
    points = np.array([[0.0, 0.0], [1.0, 1.0], [3.0, 0.0]])
    repeated = np.repeat(points, 20, axis=0)
    for state in range(3):
        est = TransformerKMeans(5, random_state=state, never_worse=never_worse).fit(repeated)
        gaps = np.sqrt(((est.cluster_centers_[:, None] - points[None]) ** 2).sum(-1)).min(axis=1)
        assert gaps.max() < 1e-12, est.cluster_centers_
        assert est.inertia_ < 1e-20
