"""Chapter 13's data and measurements: real data sets that ship offline, and the comparison of the
k-means transformer with scikit-learn's ``KMeans`` from the same initial centres.

* :func:`load_real_dataset` -- scikit-learn's bundled iris, wine, breast_cancer and digits, the
  Palmer penguins (``palmerpenguins``), and the benchmark sets R15, D31, S1 and S2 shipped in
  ``data/benchmark_sets/`` (see its README for provenance); k is the number of true classes.
* :func:`compare_on` -- for one data set, R starts of each seeding (a random k-subset of the
  points, k-means++), the same centres for every method: the trained layers, the theorem model
  (Lloyd as a transformer) and ``KMeans`` run to convergence; inertia, ARI and NMI per start.
* :func:`best_of` -- the ``n_init`` result from single starts: the start of lowest inertia in
  each group of ``n_init`` consecutive starts, which is what ``n_init`` does.
* :func:`defaults_vs_defaults` -- ``TransformerKMeans()`` against ``KMeans()``, each with its own
  defaults (its own seeding, ``n_init``, stopping rule), the same ``random_state``s: inertia and
  seconds per fit; :func:`defaults_summary` per data set, :func:`geometric_mean_ratio` over them.
* :func:`synthetic_dataset` -- the synthetic sets of :data:`SYNTHETIC_SETS` (fixed seeds): unequal
  sizes, elongated clusters, high dimension, many clusters, the digits at other k.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn import datasets as sk_datasets
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

import kmtlib
from kmtlib import KMeansTransformer, TransformerKMeans
from kmtlib.estimator import labels_inertia, lloyd_to_fixed_point, means_readout, model_or_seeding

from .repo_root import find_repo_root

SKLEARN_SETS = ("iris", "wine", "breast_cancer", "digits")
BENCHMARK_SETS = ("R15", "D31", "s1", "s2")
REAL_DATASETS: tuple[str, ...] = (*SKLEARN_SETS, "penguins", *BENCHMARK_SETS)
"""Every data set of chapter 13, smallest first within each source."""

PENGUIN_FEATURES = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g")

SEEDINGS: tuple[str, ...] = ("random", "k-means++")


S_SET_CLUSTERS = 15
"""The S sets are described as 15 Gaussian clusters; their files carry no labels."""


@dataclass(frozen=True)
class RealDataset:
    """A data set as given (float64, no scaling), its number of clusters k, its true classes where
    the data set has them (``y`` None otherwise) and where it comes from."""

    name: str
    X: np.ndarray
    y: np.ndarray | None
    source: str
    k: int
    classes: tuple[str, ...] = ()  # the names of the true classes 0, 1, ... where the data set gives them

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        return int(self.X.shape[1])


def benchmark_dir() -> Path:
    """``data/benchmark_sets`` at the repository root."""
    return find_repo_root() / "data" / "benchmark_sets"


def load_real_dataset(name: str, folder: str | Path | None = None) -> RealDataset:
    """The data set ``name`` (one of :data:`REAL_DATASETS`); the benchmark sets are read from
    ``folder`` (default :func:`benchmark_dir`). A missing or damaged file is named in the error."""
    if name in SKLEARN_SETS:
        bunch = getattr(sk_datasets, f"load_{name}")()
        y = np.asarray(bunch.target)
        return RealDataset(name, np.asarray(bunch.data, dtype=np.float64), y, "scikit-learn", int(np.unique(y).size))
    if name == "penguins":
        import palmerpenguins

        frame = palmerpenguins.load_penguins().dropna(subset=list(PENGUIN_FEATURES))
        species = pd.Categorical(frame["species"])
        y = species.codes.astype(np.int64)
        X = frame[list(PENGUIN_FEATURES)].to_numpy(np.float64)
        return RealDataset(name, X, y, "palmerpenguins", int(np.unique(y).size),
                           tuple(str(c) for c in species.categories))
    if name in BENCHMARK_SETS:
        path = Path(folder) if folder is not None else benchmark_dir()
        path = path / f"{name}.csv"
        try:
            frame = pd.read_csv(path)
            X = frame[["x", "y"]].to_numpy(np.float64)
            labels: np.ndarray | None = frame["label"].to_numpy(np.int64) if name in ("R15", "D31") else None
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{path}: the benchmark set {name} is missing (see data/benchmark_sets/README.md)"
            ) from None
        except (KeyError, ValueError, pd.errors.ParserError) as exc:
            raise ValueError(f"{path}: not a benchmark set with columns x, y, label ({exc})") from None
        if not np.isfinite(X).all() or X.shape[0] == 0:
            raise ValueError(f"{path}: the coordinates must be finite numbers, at least one row")
        k = int(np.unique(labels).size) if labels is not None else S_SET_CLUSTERS
        return RealDataset(name, X, labels, "data/benchmark_sets", k)
    raise ValueError(f"unknown data set {name!r}; choose one of {', '.join(REAL_DATASETS)}")


def initial_centers(X: np.ndarray, k: int, seeding: str, starts: int, seed: int) -> np.ndarray:
    """(starts, k, d) initial centres: ``starts`` independent draws of a seeding ("random": a
    uniform k-subset of the points; "k-means++": scikit-learn's greedy k-means++, the estimator's
    default; "d2": plain D^2 sampling), from one torch generator seeded with ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    Xt = torch.as_tensor(X, dtype=torch.float64).unsqueeze(0).expand(starts, *X.shape)
    method, trials = ("random", 1) if seeding == "random" else ("kmeans++", None if seeding == "k-means++" else 1)
    return kmtlib.init_centers(Xt, k, method, generator, n_local_trials=trials).numpy()


def _scores(y: np.ndarray | None, labels: np.ndarray) -> dict[str, float]:
    """ARI and NMI against the true classes (NaN for a data set without them)."""
    if y is None:
        return {"ari": float("nan"), "nmi": float("nan")}
    return {"ari": adjusted_rand_score(y, labels), "nmi": normalized_mutual_info_score(y, labels)}


def compare_on(
    data: RealDataset,
    models: Mapping[str, str | KMeansTransformer],
    starts: int,
    seed: int,
    steps: int = 20,
    seedings: Sequence[str] = SEEDINGS,
    layer_readout_of: str | None = None,
) -> pd.DataFrame:
    """One row per (method, seeding, start): inertia, ARI, NMI and seconds.

    ``models`` maps a method's name to a :class:`kmtlib.TransformerKMeans` ``model`` (``"learned"``,
    ``"theorem"``, a path or a model); each runs ``steps`` steps with the estimator's defaults
    otherwise (read-out, polish). The method named ``layer_readout_of`` also gives the rows
    ``"<name without its parenthesis>, layer read-out"`` (the same run's centres as the layer leaves
    them: ``readout="layer"``, ``polish=False``) and ``"<short name>, no polish"`` (read out as
    means, :func:`kmtlib.estimator.means_readout`, and never worse than the start,
    :func:`kmtlib.estimator.model_or_seeding`); its own row is the read-out polished
    (:func:`kmtlib.estimator.lloyd_to_fixed_point`) or the start polished, whichever is lower, all computed here
    from the one run as the estimator does.
    ``"KMeans"`` is scikit-learn's Lloyd (``algorithm="lloyd"``, ``tol=0``, up to 300
    iterations: to a fixed point). Every method of a start gets the same initial centres; the
    inertia ratio of a method is taken against ``KMeans`` of the same start (column ``ratio``).
    """
    rows = []

    def row(method: str, seeding: str, start: int, centers: np.ndarray, reference: float, seconds: float) -> dict:
        labels, inertia = labels_inertia(data.X, centers)
        return dict(method=method, seeding=seeding, start=start, inertia=inertia, ratio=inertia / reference,
                    seconds=seconds, **_scores(data.y, labels))  # fmt: skip

    for s_index, seeding in enumerate(seedings):
        C0 = initial_centers(data.X, data.k, seeding, starts, seed + 1000 * s_index)
        for start, c0 in enumerate(C0):
            t = time.perf_counter()
            km = KMeans(data.k, init=c0, n_init=1, algorithm="lloyd", tol=0.0, max_iter=300).fit(data.X)
            reference = float(km.inertia_)
            rows.append(row("KMeans", seeding, start, km.cluster_centers_, reference, time.perf_counter() - t))
            for method, model in models.items():
                t = time.perf_counter()
                if method == layer_readout_of:
                    est = TransformerKMeans(data.k, model=model, init=c0, steps=steps, readout="layer", polish=False)
                    own = est.fit(data.X).cluster_centers_
                    seconds = time.perf_counter() - t
                    short = method.split(" (")[0]
                    rows.append(row(f"{short}, layer read-out", seeding, start, own, reference, seconds))
                    read = means_readout(data.X, own)[None]
                    centers = model_or_seeding(data.X, c0[None], read)[0][0]
                    rows.append(row(f"{short}, no polish", seeding, start, centers, reference, seconds))
                    seeding_lloyd = lloyd_to_fixed_point(data.X, c0[None])
                    centers = model_or_seeding(data.X, seeding_lloyd, lloyd_to_fixed_point(data.X, read))[0][0]
                else:
                    est = TransformerKMeans(data.k, model=model, init=c0, steps=steps).fit(data.X)
                    seconds, centers = time.perf_counter() - t, est.cluster_centers_
                rows.append(row(method, seeding, start, centers, reference, seconds))
    frame = pd.DataFrame(rows)
    frame.insert(0, "data", data.name)
    return frame


def best_of(runs: pd.DataFrame, n_init: int) -> pd.DataFrame:
    """The ``n_init`` result of every method and seeding: in each group of ``n_init`` consecutive
    starts the start of lowest inertia (``KMeans(n_init=...)``'s rule), its ratio taken against the
    best ``KMeans`` of the same group. Starts that do not fill a group are left out."""
    out = []
    for _, part in runs.groupby(["data", "seeding"], sort=False):
        n_groups = (int(part.start.max()) + 1) // n_init
        part = part[part.start < n_groups * n_init]
        part = part.assign(group=part.start // n_init)
        best = part.loc[part.groupby(["method", "group"]).inertia.idxmin()]
        reference = best[best.method == "KMeans"].set_index("group").inertia
        best = best.assign(ratio=best.inertia.to_numpy() / reference.loc[best.group].to_numpy())
        out.append(best)
    return pd.concat(out, ignore_index=True) if out else runs.iloc[:0]


def summary_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per data set, seeding and method: mean and spread (standard deviation) of the inertia ratio
    to ``KMeans`` from the same start, and mean ARI and NMI."""
    grouped = runs.groupby(["data", "seeding", "method"], sort=False)
    return grouped.agg(ratio=("ratio", "mean"), ratio_sd=("ratio", "std"), ari=("ari", "mean"),
                       nmi=("nmi", "mean"), starts=("ratio", "size"))  # fmt: skip


# ------------------------------------------------------------------------------ beside the table
def pca_cost(data: RealDataset, width: int, starts: int, seed: int) -> pd.DataFrame:
    """What clustering in the top ``width`` principal components costs, measured with Lloyd: per
    random start, ``KMeans`` in the projection (the same initial centres, projected), its centres
    mapped back, against ``KMeans`` in the original space; inertias and ARI in the original space."""
    from sklearn.decomposition import PCA

    pca = PCA(n_components=width, svd_solver="full").fit(data.X)
    Z = pca.transform(data.X)
    rows = []
    for start, c0 in enumerate(initial_centers(data.X, data.k, "random", starts, seed)):
        full = KMeans(data.k, init=c0, n_init=1, algorithm="lloyd", tol=0.0, max_iter=300).fit(data.X)
        proj = KMeans(data.k, init=pca.transform(c0), n_init=1, algorithm="lloyd", tol=0.0, max_iter=300).fit(Z)
        C = pca.inverse_transform(proj.cluster_centers_)
        labels, inertia = labels_inertia(data.X, C)
        rows.append(dict(start=start, original=float(full.inertia_), projected=inertia,
                         ratio=inertia / float(full.inertia_), ari_original=_scores(data.y, full.labels_)["ari"],
                         ari_projected=_scores(data.y, labels)["ari"]))  # fmt: skip
    return pd.DataFrame(rows)


def paper_task_cost(
    models: Mapping[str, KMeansTransformer], ks: Sequence[int], n_tasks: int, steps: int, seed: int
) -> pd.DataFrame:
    """On the paper's own tasks (d = 32, n = 512, :func:`kmtlib.sample_tasks`), per k: each
    model's mean log objective after ``steps`` steps minus Lloyd's from the same random centres."""
    from .any_k import _batched, _log_objective

    rows = []
    for k in ks:
        g = torch.Generator().manual_seed(seed + k)
        X = kmtlib.sample_tasks(n_tasks, 512, 32, k, generator=g)
        assert isinstance(X, torch.Tensor)  # (without return_mixture: the points alone)
        C0 = kmtlib.init_centers(X, k, "random", generator=g)
        lloyd = kmtlib.lloyd(X, C0, steps, empty="random", generator=torch.Generator().manual_seed(seed)).objective
        reference = float(lloyd[:, -1].log().mean())
        row: dict[str, float] = {"k": k}
        for name, model in models.items():
            with torch.inference_mode():
                row[name] = float(_log_objective(X, _batched(model.eval(), X, C0, steps, 32)).mean()) - reference
        rows.append(row)
    return pd.DataFrame(rows).set_index("k")


def spherical_on_unit_rows(data: RealDataset, starts: int, seed: int, steps: int) -> pd.DataFrame:
    """The spherical circuit (chapter 10) on the data's rows scaled to unit length, against the
    reference spherical k-means and Lloyd on the same unit rows, from the same random centres:
    ARI and NMI against the true classes, and whether circuit and reference agree exactly."""
    from kmtlib.reference import spherical_kmeans

    U = data.X / np.linalg.norm(data.X, axis=1, keepdims=True).clip(min=1e-300)
    Ut = torch.as_tensor(U).unsqueeze(0)
    circuit = KMeansTransformer.from_variant("spherical", data.d, data.k).to(torch.float64).eval()
    rows = []
    for start, c0 in enumerate(initial_centers(U, data.k, "random", starts, seed)):
        C0 = torch.as_tensor(c0).unsqueeze(0)
        with torch.inference_mode():
            C = circuit(Ut, C0, steps=steps).final_centers
        labels = torch.bmm(Ut, C.transpose(1, 2)).argmax(-1)[0].numpy()
        reference = spherical_kmeans(Ut, C0, steps).labels[0].numpy()
        lloyd = KMeans(data.k, init=c0, n_init=1, algorithm="lloyd", tol=0.0, max_iter=300).fit(U).labels_
        for method, found in (("spherical circuit", labels), ("spherical k-means", reference), ("KMeans", lloyd)):
            rows.append(dict(start=start, method=method, **_scores(data.y, found)))
        rows[-3]["equal_to_reference"] = bool((labels == reference).all())
    return pd.DataFrame(rows)


def with_outliers(data: RealDataset, share: float, seed: int) -> RealDataset:
    """The data set with ``round(share * n)`` extra points drawn uniformly in its bounding box
    widened by a quarter on every side (true class -1)."""
    rng = np.random.default_rng(seed)
    lo, hi = data.X.min(axis=0), data.X.max(axis=0)
    pad = (hi - lo) / 4
    extra = rng.uniform(lo - pad, hi + pad, size=(round(share * data.n), data.d))
    if data.y is None:
        raise ValueError(f"{data.name} has no true classes to tell its points from the outliers")
    return RealDataset(f"{data.name} + {share:.0%} outliers", np.vstack([data.X, extra]),
                       np.concatenate([data.y, np.full(len(extra), -1)]), data.source, data.k)  # fmt: skip


def trimmed_on(data: RealDataset, q: float, starts: int, seed: int, steps: int) -> pd.DataFrame:
    """The trimmed circuit (top-k attention keeping the fraction ``q`` of each cluster) against
    ``KMeans``, from the same random centres, on data with outliers (class -1): ARI on the true
    points, and the mean distance of every true class mean to the nearest final centre."""
    if data.y is None:
        raise ValueError(f"{data.name} has no true classes to measure the trimming against")
    Xt = torch.as_tensor(data.X).unsqueeze(0)
    inliers = data.y >= 0
    truth = np.stack([data.X[data.y == c].mean(axis=0) for c in np.unique(data.y[inliers])])
    k = truth.shape[0]
    circuit = KMeansTransformer.from_variant("trimmed", data.d, k, q=q).to(torch.float64).eval()
    rows = []
    for start, c0 in enumerate(initial_centers(data.X, k, "random", starts, seed)):
        with torch.inference_mode():
            C = circuit(Xt, torch.as_tensor(c0).unsqueeze(0), steps=steps).final_centers[0].numpy()
        km = KMeans(k, init=c0, n_init=1, algorithm="lloyd", tol=0.0, max_iter=300).fit(data.X)
        for method, centers in (("trimmed circuit", C), ("KMeans", km.cluster_centers_)):
            labels, _ = labels_inertia(data.X, centers)
            gap = np.sqrt(((truth[:, None, :] - centers[None]) ** 2).sum(-1)).min(axis=1).mean()
            ari = adjusted_rand_score(data.y[inliers], labels[inliers])
            rows.append(dict(start=start, method=method, ari_inliers=ari, centre_error=float(gap)))
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------ defaults against defaults
def _blobs(n: int | list[int], k: int, d: int, std: float | list[float], seed: int, name: str) -> RealDataset:
    centers = np.random.default_rng(seed).uniform(-10, 10, size=(k, d)) if isinstance(n, list) else k
    X, y = sk_datasets.make_blobs(n, n_features=d, centers=centers, cluster_std=std, random_state=seed)
    return RealDataset(name, X, y, "sklearn make_blobs", k)


def _elongated(seed: int) -> RealDataset:
    X, y = sk_datasets.make_blobs(1500, centers=3, random_state=seed)
    return RealDataset("elongated", X @ np.array([[0.6, -0.6], [-0.4, 0.8]]), y, "sklearn make_blobs, sheared", 3)


def _digits_at(k: int) -> RealDataset:
    digits = load_real_dataset("digits")
    return RealDataset(f"digits_k{k}", digits.X, None, "scikit-learn digits", k)


SYNTHETIC_SETS: dict[str, Callable[[], RealDataset]] = {
    "unequal": lambda: _blobs([1000, 300, 100, 50, 20], 5, 2, 1.0, 11, "unequal"),
    "elongated": lambda: _elongated(170),
    "highdim": lambda: _blobs(1000, 10, 100, 4.0, 13, "highdim"),
    "many": lambda: _blobs(3000, 50, 5, 0.8, 14, "many"),
    "spreads": lambda: _blobs([300] * 6, 6, 3, [0.3, 0.6, 1.0, 1.5, 2.0, 3.0], 15, "spreads"),
    "digits_k5": lambda: _digits_at(5),
    "digits_k20": lambda: _digits_at(20),
}
"""Synthetic data sets (fixed seeds) for the defaults-against-defaults measurement, beside the real
ones: unequal sizes, elongated (sheared) clusters, 100 features, 50 clusters (beyond the learned
layer's trained k), unequal spreads, and the digits at k = 5 and 20."""


def synthetic_dataset(name: str) -> RealDataset:
    """The synthetic set ``name`` of :data:`SYNTHETIC_SETS`."""
    if name not in SYNTHETIC_SETS:
        raise ValueError(f"unknown synthetic set {name!r}; choose one of {', '.join(SYNTHETIC_SETS)}")
    return SYNTHETIC_SETS[name]()


DEFAULT_METHODS: dict[str, dict[str, object]] = {"learned (default)": {}}
"""The estimators of :func:`defaults_vs_defaults` by name: ``TransformerKMeans`` options beside
``n_clusters`` and ``random_state`` (none: its defaults)."""


def defaults_vs_defaults(
    data_sets: Sequence[RealDataset],
    random_states: Sequence[int],
    methods: Mapping[str, Mapping[str, object]] = DEFAULT_METHODS,
) -> pd.DataFrame:
    """One row per (data set, random_state, method): ``KMeans(k, random_state=s)`` and
    ``TransformerKMeans(k, random_state=s, **methods[method])``, each with its own defaults
    otherwise (seeding, ``n_init``, stopping rule): their inertias, the ratio ours / KMeans', and
    the seconds of each fit."""
    rows = []
    for data in data_sets:
        for state in random_states:
            t = time.perf_counter()
            km = KMeans(data.k, random_state=state).fit(data.X)
            t_km = time.perf_counter() - t
            for method, options in methods.items():
                t = time.perf_counter()
                ours = TransformerKMeans(data.k, random_state=state, **options).fit(data.X)  # type: ignore[arg-type]
                t_ours = time.perf_counter() - t
                rows.append(dict(data=data.name, n=data.n, d=data.d, k=data.k, random_state=state, method=method,
                                 kmeans=float(km.inertia_), ours=float(ours.inertia_),
                                 ratio=float(ours.inertia_) / float(km.inertia_),
                                 kmeans_seconds=t_km, ours_seconds=t_ours))  # fmt: skip
    return pd.DataFrame(rows)


def defaults_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per data set and method: mean inertias, the mean and largest inertia ratio over the random
    states, the share of states where ours is lower, and the mean seconds of each fit."""
    grouped = runs.groupby(["data", "method"], sort=False)
    return grouped.agg(n=("n", "first"), d=("d", "first"), k=("k", "first"), kmeans=("kmeans", "mean"),
                       ours=("ours", "mean"), ratio=("ratio", "mean"), worst=("ratio", "max"),
                       wins=("ratio", lambda r: float((r < 1 - 1e-12).mean())),
                       kmeans_seconds=("kmeans_seconds", "mean"), ours_seconds=("ours_seconds", "mean"))  # fmt: skip


def geometric_mean_ratio(summary: pd.DataFrame, method: str = "learned (default)") -> float:
    """The geometric mean over data sets of one method's mean inertia ratio (the goal: at most 1.00)."""
    return float(np.exp(np.log(summary.xs(method, level="method").ratio.to_numpy()).mean()))


GOAL_GMEAN, GOAL_LARGEST = 1.00, 1.05
"""The learned default's goal against ``KMeans()``: a geometric mean of the mean ratios at most
1.00 and no data set's mean ratio above 1.05."""


def defaults_goal(gmean: float, largest: float, largest_set: str) -> str:
    """The sentence that says whether the goal (:data:`GOAL_GMEAN`, :data:`GOAL_LARGEST`) is met, and
    where it is not, which half failed and by how much, so that no half met reads as the whole missed."""
    goal = f"The goal (a geometric mean at most {GOAL_GMEAN:.2f}, no data set above {GOAL_LARGEST:.2f})"
    misses = ([f"the geometric mean, {gmean:.3f}, is above {GOAL_GMEAN:.2f}"] if gmean > GOAL_GMEAN else []) + (
        [f"{largest_set}'s mean ratio, {largest:.3f}, is above {GOAL_LARGEST:.2f}"] if largest > GOAL_LARGEST else [])
    if not misses:
        return f"{goal} is met."
    held = "; the other half is met" if len(misses) == 1 else ""
    return f"{goal} is not met on this run: {' and '.join(misses)}{held}."
