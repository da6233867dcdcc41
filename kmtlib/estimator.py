"""``TransformerKMeans``: the k-means transformer as a scikit-learn estimator.

Two kinds of model run the clustering, chosen by ``model``:

* ``"theorem"``: the fixed-weight limit construction of Theorem 2.1 (``gamma -> inf``, float64),
  built for the data's own dimension d and the requested k: Lloyd's algorithm as a transformer,
  on the user's data as given (no map, any d, any scale the float64 squares allow).
* ``"learned"`` (default): the single trained layer that reads any number of clusters (random
  cluster codes, :class:`~kmtlib.embedding.CodeEmbedding`), shipped with the package. It was
  trained on synthetic tasks of width D = 32 (the broad family of
  :func:`kmtlib.broad_tasks.sample_broad_tasks`, each task shifted and scaled as here), so the
  data are first mapped into that domain by :class:`DomainMap` (one isotropic affine map, zero
  padding for d < D, PCA for d > D), and the centres mapped back; its clustering is read out as
  the means of its clusters (``readout``).

Whatever the model, every reported number is in the user's own space: ``cluster_centers_``,
``labels_`` (the nearest of those centres), ``inertia_`` (the sum of squared distances to them),
``transform`` and ``score``, the same quantities as :class:`sklearn.cluster.KMeans`.
"""

from __future__ import annotations

import copy
import functools
import numbers
import os
import warnings
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.decomposition import PCA
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from .broad_tasks import CENTRE, TARGET_TOTAL_VARIANCE
from .device import resolve_device
from .init import init_centers
from .lloyd import lloyd_step
from .model_file import load_model
from .objective import assignment_cost, nearest_center, squared_distances
from .transformer import KMeansTransformer

PRETRAINED_ANY_K = "any_k_broad.pt"
"""The trained layer for any k shipped in ``kmtlib/pretrained/`` (see its README for provenance)."""

READOUTS: tuple[str, ...] = ("means", "layer")
"""How a trained model's clustering is read out: ``"means"`` (every centre moved to the mean of the
points nearest to it: one hard k-means step, the step Theorem 2.1's layer makes) or ``"layer"``
(the centres as the last trained step left them)."""

INITS: tuple[str, ...] = ("k-means++", "d2", "random")
"""The seeding methods by name: ``"k-means++"`` (scikit-learn's greedy k-means++, its spelling),
``"d2"`` (plain D^2 sampling, the k-means++ of the paper's Fig. 4c) and ``"random"``; an array of
centres is also accepted."""

_KMTLIB_INIT: dict[str, tuple[str, int | None]] = {"k-means++": ("kmeans++", None), "d2": ("kmeans++", 1),
                                                   "random": ("random", 1)}  # fmt: skip
"""Each name's :func:`kmtlib.init_centers` method and ``n_local_trials`` (None: greedy)."""

POLISHES: tuple[object, ...] = ("auto", True, False)
"""``polish``: Lloyd to a fixed point after the model (True), not (False), or for a trained model
only ("auto", the default: a fixed-weight model is Theorem 2.1's Lloyd and stays ``KMeans`` of
``max_iter=steps``)."""

POLISH_MAX_ITER = 300
"""The most Lloyd steps of the polish (``KMeans``' default ``max_iter``)."""

LEARNED_K_RANGE = (2, 32)
"""The numbers of clusters the shipped layer was trained at (``kmtlib/pretrained/README.md``)."""


@functools.lru_cache(maxsize=1)
def _pretrained_any_k() -> KMeansTransformer:
    """The shipped trained layer for any k, loaded once per process (callers copy it)."""
    with resources.as_file(resources.files("kmtlib") / "pretrained" / PRETRAINED_ANY_K) as path:
        return load_model(path).eval()


def pretrained_model() -> KMeansTransformer:
    """A fresh copy of the trained layer for any k that ``model="learned"`` uses (d = 32)."""
    return copy.deepcopy(_pretrained_any_k())


@dataclass
class DomainMap:
    """The map from the user's space (d features) to a trained model's domain (D coordinates)
    and back: optionally a PCA (d > D), then one isotropic affine map, then zero padding.

    ``to_model(x) = pad((pca(x) - shift) / scale)``: the mean of the (projected) training data goes
    to 0.5 in every coordinate and its total variance (the mean squared distance of the points to
    their mean) to 1.6, about that of the paper's tasks, the same map
    (:func:`kmtlib.broad_tasks.spread_normalise`) as the broad training tasks of the shipped layer
    went through. One scalar for all coordinates: distances are multiplied by ``1 / scale`` and
    nothing else, so nearest centres are unchanged and squared distances (inertia) map back by
    ``scale ** 2``. Zero padding (d < D) changes no distance. The PCA (d > D: the top D principal
    directions after centring, fitted on the training data) keeps the distances within its
    subspace; a centre ``c`` mapped back lies in the affine subspace through the mean, so
    ``||x - c||^2 = ||pca(x) - pca(c)||^2 + ||residual of x||^2`` and the nearest centre of a
    point is the same in both spaces; the inertia reported is that of the original space.

    The identity (``shift = 0``, ``scale = 1``, no PCA, no padding) is the map of a fixed-weight
    model run in the data's own dimension.
    """

    n_features: int
    width: int
    shift: np.ndarray
    scale: float
    pca: PCA | None = None

    @classmethod
    def identity(cls, n_features: int) -> DomainMap:
        return cls(n_features, n_features, np.zeros(n_features), 1.0)

    @classmethod
    def fit(cls, X: np.ndarray, width: int) -> DomainMap:
        """The map of training data ``X`` (n, d) into the trained layer's domain (width D)."""
        n, d = X.shape
        pca = None
        if d > width:
            # svd_solver="full": deterministic, no random state to thread through
            pca = PCA(n_components=min(width, n), svd_solver="full").fit(X)
            X = pca.transform(X)
        mean = X.mean(axis=0)
        total = float(((X - mean) ** 2).sum(axis=1).mean())
        # (all points equal: nothing to scale)
        scale = float(np.sqrt(total / TARGET_TOTAL_VARIANCE)) if total > 0 else 1.0
        return cls(d, width, mean - CENTRE * scale, scale, pca)

    @property
    def reduced(self) -> int:
        """The number of coordinates the data fill in the model's domain (the rest is padding)."""
        return self.shift.shape[0]

    def to_model(self, X: np.ndarray) -> np.ndarray:
        """Points or centres (m, d) in the user's space to (m, width) in the model's domain."""
        Z = self.pca.transform(X) if self.pca is not None else X
        Z = (Z - self.shift) / self.scale
        if self.reduced < self.width:
            Z = np.concatenate([Z, np.zeros((Z.shape[0], self.width - self.reduced), dtype=Z.dtype)], axis=1)
        return Z

    def to_user(self, Z: np.ndarray) -> np.ndarray:
        """Centres (m, width) in the model's domain back to (m, d) in the user's space (padded
        coordinates dropped: the projection onto the coordinates the data fill)."""
        Z = Z[:, : self.reduced] * self.scale + self.shift
        return self.pca.inverse_transform(Z) if self.pca is not None else Z


def _task(a: np.ndarray) -> torch.Tensor:
    """One task (1, m, d) in float64 on the CPU (a copy: the array may be read-only)."""
    return torch.tensor(a, dtype=torch.float64).unsqueeze(0)


def _check_integer(name: str, value: object, minimum: int, alternatives: str = "") -> int:
    """``value`` as an int, or a ValueError naming the parameter (bools and floats refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be {alternatives}an integer >= {minimum}, got {value!r}")
    return int(value)


def labels_inertia(X: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, float]:
    """The nearest centre of every point (ties: lowest index) and the sum of squared distances
    to it, computed in float64 from the differences (the quantities of ``KMeans``)."""
    Xt, Ct = _task(X), _task(centers)
    labels = nearest_center(Xt, Ct)
    return labels[0].numpy().astype(np.int64), float(assignment_cost(Xt, Ct, labels)[0])


def means_readout(X: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Every centre moved to the mean of the points nearest to it (float64); a centre nearest to
    no point stays where it is: one Lloyd step (:func:`kmtlib.lloyd.lloyd_step`, ``empty="keep"``),
    the read-out ``readout="means"``."""
    return lloyd_step(_task(X), _task(centers), empty="keep")[0][0].numpy()


def polish(X: np.ndarray, centers: np.ndarray, max_iter: int = POLISH_MAX_ITER) -> np.ndarray:
    """Lloyd's algorithm in float64 from centres (B, k, d) on the points X (n, d), all B starts at
    once, until no label changes (a fixed point: every centre the mean of the points nearest to it)
    or ``max_iter`` steps; a centre nearest to no point stays (``empty="keep"``). The distances are
    taken about the data's mean (nothing else changes), so data far from the origin lose no digits."""
    mean = X.mean(axis=0)
    Xt = _task(X - mean).expand(centers.shape[0], *X.shape)
    C = torch.as_tensor(centers - mean, dtype=torch.float64)
    labels = None
    for _ in range(max_iter):
        C, new, _counts = lloyd_step(Xt, C, empty="keep")
        if labels is not None and torch.equal(new, labels):
            break
        labels = new
    return C.numpy() + mean


def inertias(X: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """The inertia (B,) of every set of centres (B, k, d) on the points X (n, d), in float64."""
    return np.array([labels_inertia(X, c)[1] for c in centers])


def never_worse(X: np.ndarray, seeds: np.ndarray, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per start, the model's centres, or its seeding's where these have the lower inertia on X;
    and (B,) whether the model's were kept (ties: the model's)."""
    worse = inertias(X, runs) > inertias(X, seeds)
    return np.where(worse[:, None, None], seeds, runs), ~worse


class TransformerKMeans(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, BaseEstimator):
    """k-means clustering by a k-means transformer, with scikit-learn's ``KMeans`` interface.

    Parameters:
        n_clusters: the number of clusters k.
        model: ``"learned"`` (default: the trained layer for any k shipped with kmtlib, D = 32),
            ``"theorem"`` (the exact limit construction of Theorem 2.1 for the data's d and k,
            float64: Lloyd's algorithm), a path to a model saved with
            :meth:`KMeansTransformer.save`, or a :class:`KMeansTransformer` (it is copied, never
            changed). A trained model (``config.trainable``) runs on the data mapped into its
            domain by :class:`DomainMap` (any d); a fixed-weight one runs on the data as given and
            must have the data's d. A model of one fixed k must have ``k == n_clusters``.
        init: ``"k-means++"`` (scikit-learn's greedy k-means++: ``2 + int(ln k)`` D^2 candidates per
            centre, the one that lowers the potential most kept), ``"d2"`` (plain D^2 sampling, the
            k-means++ of the paper's Fig. 4c), ``"random"`` (a uniform random k-subset of the
            points) or an array (n_clusters, n_features) of initial centres in the user's space.
            Seeding runs in the user's space (float64), so every model starts from the same centres.
        n_init: the number of seedings; the run with the lowest inertia is kept. All of them run
            through the model in one batched call. ``"auto"`` (default) as ``KMeans``: 1 for
            ``"k-means++"``, ``"d2"`` and an array, 10 for ``"random"``. With an array ``init``,
            only 1 is meaningful (another value warns and uses 1, as ``KMeans``).
        steps: the number of steps T of the model (layers applied); ``n_iter_`` is T.
        readout: for a trained model, how its clustering is read out: ``"means"`` (default): after
            the T trained steps every centre moves to the mean of the training points nearest to it
            (one hard k-means step in float64, the step of Theorem 2.1's layer, so that every centre
            is the mean of a cluster as in ``KMeans``'s result; a centre nearest to no point stays); ``"layer"``:
            the centres as the trained steps leave them (soft attention puts them between their
            points and the others'). A fixed-weight model's centres are already means: it ignores this.
            For a trained model, each start's result (after the read-out and the polish) is then
            compared with its own seeding (with ``polish``: the seeding polished, that is Lloyd's
            algorithm from it), and the seeding's are kept where they have the lower inertia: the
            result is never worse than the seeding it started from, nor, polished, than Lloyd from
            that seeding. ``from_model_`` says which one the kept start's centres came from.
        polish: ``True``: after the model (and read-out), Lloyd's algorithm in float64 from its
            centres until no label changes (at most :data:`POLISH_MAX_ITER` steps; :func:`polish`),
            so the result is a k-means fixed point as ``KMeans``' is; ``False``: none; ``"auto"``
            (default): for a trained model only (a fixed-weight model is Theorem 2.1's Lloyd, left
            equal to ``KMeans(max_iter=steps)``). ``n_iter_`` counts the model's steps only.
        random_state: seed, ``numpy.random.RandomState`` or None (scikit-learn's convention); the
            torch generator of the seeding is seeded from it, so the same state gives the same result.
        device: ``"cpu"`` or ``"cuda"`` (``"auto"`` and ``"cuda:N"`` as :func:`kmtlib.resolve_device`).

    Attributes:
        cluster_centers_: (n_clusters, n_features) the final centres, in the user's space.
        labels_: (n_samples,) the nearest of ``cluster_centers_`` for every training point (as
            ``predict`` gives; for the trained model's padded or PCA coordinates see below).
        inertia_: the sum of squared distances of the training points to their nearest centre.
        n_iter_: the number of steps run (``steps``).
        from_model_: whether the centres came from the model's path (False: from its seeding, which
            was better; always True for a fixed-weight model).
        domain_map_: the :class:`DomainMap` used (the identity for a fixed-weight model).
        n_features_in_, feature_names_in_: as every scikit-learn estimator.

    Empty clusters, and equality with ``KMeans``: from the same initial centres and on data where
    no cluster empties, ``model="theorem"`` gives the labels and centres of
    ``KMeans(n_clusters, init=C0, n_init=1, algorithm="lloyd", max_iter=steps, tol=0)`` up to
    float64 rounding. Where a cluster empties the two differ by design: the limit transformer
    moves the centre of an empty cluster to the mean of all points (its centre attention becomes
    uniform: :data:`kmtlib.EMPTY_RULES`, ``"mean"``), ``KMeans`` relocates it to the point farthest
    from its centre. (``KMeans`` also stops early at a fixed point, which changes nothing.)

    The trained model's space (:class:`DomainMap`): the data are shifted and scaled by one number
    (mean 0.5, total variance 1.6) into 32 coordinates, so nearest centres are unchanged and
    squared distances differ by one factor.
    With d < 32 they are padded with zeros; the layer may move the centres out of the data's
    coordinates into the padding, so they are projected back onto the data's coordinates after
    every step (``||x - c||^2`` for a point x with zero padding is its data part plus a term of
    the centre alone, which would otherwise make the model's nearest centre differ from the
    user's). With d > 32 the model sees the top 32 principal components of the training data
    (centred), and runs on that projection; the centres are mapped back through the PCA into the
    original space (where they lie in the 32-dimensional affine subspace of the projection), the
    labels are the nearest of those centres (the same as in the projection: the part of a point
    outside the subspace is at the same distance from every centre), and the inertia is that of
    the original space (the inertia of the projection plus the variance the PCA leaves out).
    So for every model ``labels_ == predict(X)`` and ``inertia_ == -score(X)``.

    Quality: the trained layer learned from synthetic mixtures only (unequal, elongated, heavy-tailed
    clusters in 1 to 32 coordinates); on data far from them it may cluster worse than Lloyd's
    algorithm from the same seeding (``model="theorem"``); with the default ``polish`` the estimator
    keeps, per start, the better of the polished learned result and Lloyd from the seeding, so its
    result is never worse than Lloyd's from the same start. Chapter 13 of the book measures it
    against ``KMeans`` on real data sets, from the same starts and each with its own defaults.
    """

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        model: str | os.PathLike | KMeansTransformer = "learned",
        init: str | np.ndarray = "k-means++",
        n_init: int | str = "auto",
        steps: int = 20,
        readout: str = "means",
        polish: bool | str = "auto",
        random_state: int | np.random.RandomState | None = None,
        device: str = "cpu",
    ) -> None:
        self.n_clusters = n_clusters
        self.model = model
        self.init = init
        self.n_init = n_init
        self.steps = steps
        self.readout = readout
        self.polish = polish
        self.random_state = random_state
        self.device = device

    # ------------------------------------------------------------------ parameters
    def _check_params(self, n_samples: int, n_features: int) -> tuple[int, int, int]:
        """Validate the parameters; return (n_clusters, n_init, steps) (``n_init`` resolved)."""
        for name, minimum in (("n_clusters", 1), ("steps", 0)):
            _check_integer(name, getattr(self, name), minimum)
        if n_samples < self.n_clusters:
            raise ValueError(f"n_samples={n_samples} should be >= n_clusters={self.n_clusters}.")
        if not isinstance(self.readout, str) or self.readout not in READOUTS:
            raise ValueError(f"readout must be one of {', '.join(map(repr, READOUTS))}, got {self.readout!r}")
        if not any(self.polish is p or (isinstance(p, str) and self.polish == p) for p in POLISHES):
            raise ValueError(f"polish must be 'auto', True or False, got {self.polish!r}")
        if isinstance(self.init, str) and self.init not in INITS:
            raise ValueError(f"init must be one of {', '.join(map(repr, INITS))} or an array, got {self.init!r}")
        self._warn_beyond_trained_k()
        return int(self.n_clusters), self._resolved_n_init(), int(self.steps)

    def _resolved_n_init(self) -> int:
        """``n_init`` as a number: ``"auto"`` as ``KMeans`` (10 for ``"random"``, else 1); with an
        array ``init`` 1 (another number warns, as ``KMeans``)."""
        if isinstance(self.n_init, str) and self.n_init == "auto":
            return 10 if isinstance(self.init, str) and self.init == "random" else 1
        n_init = _check_integer("n_init", self.n_init, 1, "'auto' or ")
        if not isinstance(self.init, str) and n_init != 1:
            warnings.warn(
                f"Explicit initial center position passed: performing only one init in {type(self).__name__} "
                f"instead of n_init={n_init}.",
                RuntimeWarning,
                stacklevel=4,
            )
            n_init = 1
        return n_init

    def _warn_beyond_trained_k(self) -> None:
        low, high = LEARNED_K_RANGE
        if isinstance(self.model, str) and self.model == "learned" and self.n_clusters > high:
            warnings.warn(
                f"n_clusters={self.n_clusters} lies beyond k = {low}..{high}, the numbers of clusters the learned "
                f"model was trained at; its steps may cluster worse there (the result is never worse than its "
                f"seeding, and polish runs Lloyd to a fixed point). model='theorem' runs Lloyd's algorithm at any k.",
                UserWarning,
                stacklevel=4,
            )

    def _polishes(self, trained: bool) -> bool:
        """Whether the fit ends with Lloyd to a fixed point (``polish``; "auto": trained models)."""
        return trained if isinstance(self.polish, str) else bool(self.polish)

    def _resolve_model(self, n_clusters: int, n_features: int) -> KMeansTransformer:
        """The model to run (a copy the estimator owns, in eval mode), checked against k and d."""
        spec = self.model
        if isinstance(spec, KMeansTransformer):
            model, name = copy.deepcopy(spec), f"the given model ({spec.config.origin})"
        elif isinstance(spec, str) and spec == "theorem":
            return KMeansTransformer.from_theorem(n_features, n_clusters).to(torch.float64).eval()
        elif isinstance(spec, str) and spec == "learned":
            model, name = pretrained_model(), "the learned model"
        elif isinstance(spec, str | os.PathLike):
            if not os.path.isfile(spec):
                raise ValueError(f"model={spec!r} is neither 'learned', 'theorem' nor the path of a saved model file")
            model, name = load_model(spec), f"the model in {os.fspath(spec)!r}"
        else:
            raise ValueError(
                f"model must be 'learned', 'theorem', a path or a KMeansTransformer, got {type(spec).__name__}"
            )
        model.eval()
        if not model.config.reads_any_k and model.k != n_clusters:
            raise ValueError(
                f"{name} supports k={model.k} clusters only, but n_clusters={n_clusters}; "
                f"use n_clusters={model.k} or a model that reads any k (model='learned' or 'theorem')"
            )
        if not model.config.trainable and model.d != n_features:
            raise ValueError(
                f"{name} has fixed weights for d={model.d} features but X has {n_features}; a fixed-weight "
                f"model runs in its own dimension only (model='theorem' builds one for any d)"
            )
        return model

    # ------------------------------------------------------------------ fitting
    def fit(self, X: Any, y: Any = None) -> TransformerKMeans:
        """Cluster ``X`` (n_samples, n_features); ``y`` is ignored."""
        X = validate_data(self, X, dtype=[np.float64, np.float32], copy=False)
        n_samples, n_features = X.shape
        n_clusters, n_init, steps = self._check_params(n_samples, n_features)
        device = resolve_device(self.device)
        model = self._resolve_model(n_clusters, n_features).to(device)
        X64 = np.asarray(X, dtype=np.float64)
        domain = DomainMap.fit(X64, model.d) if model.config.trainable else DomainMap.identity(n_features)

        # the initial centres (n_init, k, d), in the user's space
        C0 = self._initial_centers(X64, n_clusters, n_init, check_random_state(self.random_state))

        # into the model's domain, in its dtype, all seedings as one batch of tasks
        dtype = next(model.parameters()).dtype
        Xm = torch.as_tensor(domain.to_model(X64), dtype=dtype, device=device)
        Xm = Xm.unsqueeze(0).expand(n_init, *Xm.shape)
        C0m = torch.as_tensor(np.stack([domain.to_model(c) for c in C0]), dtype=dtype, device=device)
        with torch.inference_mode():
            final = self._run(model, Xm, C0m, steps, domain.reduced).to(device="cpu", dtype=torch.float64)

        # back to the user's space: read-out, never worse than the seeding, polish; the best start kept
        runs = np.stack([domain.to_user(c) for c in final.numpy()])
        self.cluster_centers_, self.labels_, self.inertia_ = self._finish(X, X64, C0, runs, model.config.trainable)
        self.n_iter_ = steps
        self.domain_map_ = domain
        return self

    def _initial_centers(
        self, X: np.ndarray, n_clusters: int, n_init: int, random_state: np.random.RandomState
    ) -> np.ndarray:
        """(n_init, k, d) initial centres in the user's space (float64)."""
        if not isinstance(self.init, str):
            init = check_array(self.init, dtype=np.float64, input_name="init")
            if init.shape != (n_clusters, X.shape[1]):
                raise ValueError(
                    f"init must have shape (n_clusters, n_features) = ({n_clusters}, {X.shape[1]}), got {init.shape}"
                )
            return init[None]
        # one torch generator on the CPU seeded from the random state: the same centres on every device
        generator = torch.Generator().manual_seed(int(random_state.randint(np.iinfo(np.int32).max)))
        Xt = _task(X).expand(n_init, *X.shape)
        method, trials = _KMTLIB_INIT[self.init]
        return init_centers(Xt, n_clusters, method, generator, n_local_trials=trials).numpy()

    def _finish(
        self, X: np.ndarray, X64: np.ndarray, C0: np.ndarray, runs: np.ndarray, trained: bool
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """The end of a fit from the model's centres ``runs`` (n_init, k, d) in the user's space:
        a trained model's read-out; the polish; for a trained model, per start the better of this
        and its seeding ``C0`` (polished too where the model's result is: Lloyd from the seeding);
        the start of lowest inertia as (centres in X's dtype, labels, inertia). Sets
        ``from_model_``: whether the kept start's centres came from the model's path."""
        if trained and self.readout == "means":
            runs = np.stack([means_readout(X64, c) for c in runs])
        polishes = self._polishes(trained)
        if polishes:
            runs = polish(X64, runs)
        kept = np.ones(len(runs), dtype=bool)
        if trained:
            runs, kept = never_worse(X64, polish(X64, C0) if polishes else C0, runs)
        runs = runs.astype(X.dtype, copy=False)
        scores = [labels_inertia(X, c) for c in runs]
        best = int(np.argmin([inertia for _, inertia in scores]))
        self.from_model_ = bool(kept[best])
        return runs[best], *scores[best]

    @staticmethod
    def _run(model: KMeansTransformer, X: torch.Tensor, C0: torch.Tensor, steps: int, reduced: int) -> torch.Tensor:
        """The final centres (B, k, D) after ``steps`` steps of ``model`` from ``C0``.

        A model that re-embeds its tokens every step runs one step at a time, with its centres
        projected onto the ``reduced`` coordinates the data fill (zero padding stays zero; see
        the class docstring); otherwise the model runs as a whole."""
        if reduced == X.shape[-1] or not model.reembed:
            return model(X, C0, steps=steps).final_centers
        C = C0
        for _ in range(steps):
            C = model.step(X, C)
            C[..., reduced:] = 0
        return C

    # ------------------------------------------------------------------ using the fit
    def _validate_new(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return validate_data(self, X, dtype=[np.float64, np.float32], reset=False, copy=False)

    def predict(self, X: Any) -> np.ndarray:
        """The index of the nearest fitted centre of every point (ties: lowest index)."""
        return labels_inertia(self._validate_new(X), self.cluster_centers_)[0]

    def fit_predict(self, X: Any, y: Any = None) -> np.ndarray:
        """Fit and return ``labels_``."""
        return self.fit(X).labels_

    def transform(self, X: Any) -> np.ndarray:
        """Euclidean distances (n_samples, n_clusters) to the fitted centres, as ``KMeans.transform``."""
        X = self._validate_new(X)
        return squared_distances(_task(X), _task(self.cluster_centers_))[0].sqrt().numpy().astype(X.dtype, copy=False)

    def score(self, X: Any, y: Any = None) -> float:
        """Minus the inertia of ``X`` under the fitted centres (larger is better), as ``KMeans.score``."""
        return -labels_inertia(self._validate_new(X), self.cluster_centers_)[1]

    @property
    def _n_features_out(self) -> int:
        """The number of columns of ``transform`` (for ``get_feature_names_out``)."""
        return self.cluster_centers_.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
