"""``TransformerKMeans``: the k-means transformer as a scikit-learn estimator (the class; its
parameters are checked in :mod:`.params`, its model chosen in :mod:`.model`, its domain in
:mod:`.domain`, the steps of its fit in :mod:`.fit` and its reported quantities in
:mod:`.reported`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from ..device import resolve_device
from ..transformer import KMeansTransformer
from .domain import fitted_domain, in_data_unit, reported_map, sample_indices, turned_domains
from .fit import finish, initial_centers, run_in
from .model import resolve_model, sample_size
from .params import SAMPLE_SIZE, check_params
from .reported import distances_in_unit, labels_inertia_in_unit


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
            points), an array (n_clusters, n_features) of initial centres in the user's space, or
            a callable ``init(X, n_clusters, random_state)`` returning such an array (called once
            per seeding, as ``KMeans``). Seeding runs in the user's space (float64), so every
            model starts from the same centres.
        n_init: the number of seedings; the run with the lowest inertia is kept. All of them run
            through the model in one batched call. ``"auto"`` (default) as ``KMeans``: 1 for
            ``"k-means++"``, ``"d2"`` and an array, 10 for ``"random"`` and a callable. With an
            array ``init`` only 1 is meaningful (another value warns and uses 1, as ``KMeans``).
        steps: the number of steps T of the model (layers applied); ``n_iter_`` is T.
        readout: for a trained model, how its clustering is read out: ``"means"`` (default; every
            centre moved to the mean of the points nearest to it, one hard k-means step, the step
            of Theorem 2.1's layer; a centre nearest to no point stays) or ``"layer"`` (the centres
            as the trained steps leave them). A fixed-weight model's centres are already means.
        polish: ``True``: after the model and its read-out, Lloyd's algorithm in float64 until no
            label changes (at most :data:`POLISH_MAX_ITER` steps; :func:`lloyd_to_fixed_point`),
            so the result is a k-means fixed point as ``KMeans``' is; ``False``: none; ``"auto"``
            (default): for a trained model only (a fixed-weight model is Theorem 2.1's Lloyd, left
            equal to ``KMeans(max_iter=steps)``). ``n_iter_`` counts the model's steps only.
        sample_size: for a trained model, the number m of points it runs on (default
            :data:`SAMPLE_SIZE`; ``None``: all of them): a sample drawn from ``random_state``
            without replacement where n > m; the read-out, the polish and the labels are over all
            points. A sample whose attention cannot fit in the device's memory is refused.
        frames: for a trained model, the number of frames it runs in (1 to :data:`MAX_FRAMES`),
            every seeding in each: the data's own frame (:func:`kmtlib.domain.frame.principal_frame`) and
            ``frames - 1`` fixed rotations of it, the same for every data set; the run of lowest
            inertia is kept. The layer is not equivariant to rotations, so the frame changes its
            result; each frame costs a run.
        never_worse: for a trained model: ``True`` (default): per start, the seeding's candidate
            is kept unless the model's is strictly better (so the result is never worse than
            Lloyd from the same seeding, where ``polish`` is on); ``False``: the model's candidate
            alone, whatever its inertia, to see what the layer does by itself. A fixed-weight
            model ignores it.
        random_state: seed, ``numpy.random.RandomState`` or None (scikit-learn's convention); the
            torch generator of the seeding is seeded from it, so the same state gives the same result.
        device: ``"cpu"`` or ``"cuda"`` (``"auto"`` and ``"cuda:N"`` as :func:`kmtlib.resolve_device`).

    Attributes:
        cluster_centers_: (n_clusters, n_features) the final centres, in the user's space.
        labels_: (n_samples,) the nearest of ``cluster_centers_`` for every training point (as
            ``predict`` gives).
        inertia_: the sum of squared distances of the training points to their nearest centre.
        n_iter_: the number of steps run (``steps``).
        from_model_: whether the layer earned the result: the kept centres are the model's
            candidate and its inertia is strictly lower than its seeding's candidate's. False where
            the seeding's were better, and on a tie (see ``tied_with_seeding_``). Always True for a
            fixed-weight model, which has no seeding candidate.
        tied_with_seeding_: for a trained model, whether the model's candidate and its seeding's
            have the same inertia (within :data:`TIE_TOLERANCE`: from a seeding and a model
            that end at one fixed point). The layer then changed nothing, and the seeding's are kept.
        domain_map_: the :class:`DomainMap` used (the identity for a fixed-weight model, or its
            shift where the data lie far from the origin).
        n_features_in_, feature_names_in_: as every scikit-learn estimator.

    The theorem model and ``KMeans``: from the same initial centres, on data where no cluster
    empties and no point is exactly as near to two centres, ``model="theorem"`` gives the labels
    and centres of ``KMeans(n_clusters, init=C0, n_init=1, algorithm="lloyd", max_iter=steps,
    tol=0)`` up to float64 rounding. The two differ by design where a cluster empties (the limit
    transformer moves its centre to the mean of all points, :data:`kmtlib.EMPTY_RULES` ``"mean"``;
    ``KMeans`` to a far point) and at an exact tie (the limit of soft-max over tied keys is their
    average, so the point is shared equally among its tied centres; ``KMeans`` gives it to the
    lowest index: ``[[0], [1], [2]]`` from ``[[0], [2]]``, one step, gives 1/3 and 5/3 here and
    0.5 and 2 in ``KMeans``). Integer or gridded data have exact ties; data with a continuous
    part almost never. ``labels_`` and ``predict`` take the lowest index, as ``KMeans``.

    The trained model's space (:class:`DomainMap`): the data are turned to their own principal
    frame (so permuting, rotating or flipping the features gives the same result up to rounding),
    shifted and scaled by one number (so nearest centres are unchanged and squared distances
    differ by one factor), and padded with zeros to D = 32 coordinates (the centres projected back
    onto the data's coordinates after every step) or, for d > 32, reduced to the top 32 principal
    axes (the centres mapped back lie in that affine subspace; the inertia is the original
    space's). So for every model ``labels_ == predict(X)`` and ``inertia_ == -score(X)``. Data of
    any scale are divided by a power of two near their largest absolute value (exact), and every
    number is computed in that unit and scaled back.

    Memory and time: the layer's self-attention over the points costs ``2 m^2`` floats per
    seeding (m = min(n, ``sample_size``)), the seedings running in batches within
    :data:`ATTENTION_BATCH_BYTES`; besides it a fit holds a few float64 copies of the data and
    the distances of the read-out: in all about ``40 n d + 8 n k + min(n_init x 8 m^2, 256 MiB)``
    bytes besides the library. Time grows as ``frames x n_init x steps x m^2 D`` for the layer and
    ``n k d`` per Lloyd step of the read-out and the polish.

    What the layer adds and what it costs: with the defaults the result is a competition of two
    candidates per start, the layer's (its steps, the read-out, the polish) and Lloyd's algorithm
    from the same seeding; the layer wins where it moved the start into a better basin, and on
    many starts both end at one fixed point (a tie, which the seeding wins). The layer's steps
    cost a self-attention over the sampled points, many times the time of ``KMeans``' Lloyd
    iterations, and in that time ``KMeans`` can run more seedings. Chapter 13 of the book ("Beyond
    the paper: cluster your own data", ``book/13_your_data.md``) measures both on real data: the
    defaults against ``KMeans()``, against ``KMeans`` at equal compute, and the layer's candidate
    against its seeding's start by start (``never_worse=False`` shows the layer's alone); the
    benchmarks (``python -m benchmarks --only estimator``) time the theorem model against ``KMeans``.
    """

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        model: str | os.PathLike | KMeansTransformer = "learned",
        init: str | np.ndarray | Callable[..., Any] = "k-means++",
        n_init: int | str = "auto",
        steps: int = 20,
        readout: str = "means",
        polish: bool | str = "auto",
        sample_size: int | None = SAMPLE_SIZE,
        frames: int = 1,
        never_worse: bool = True,
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
        self.sample_size = sample_size
        self.frames = frames
        self.never_worse = never_worse
        self.random_state = random_state
        self.device = device

    # ------------------------------------------------------------------ fitting
    def fit(self, X: Any, y: Any = None) -> TransformerKMeans:
        """Cluster ``X`` (n_samples, n_features); ``y`` is ignored."""
        X = self._validate(X, reset=True)  # (the one check of the data: nothing below checks them again)
        n_samples, n_features = X.shape
        settings = check_params(self, n_samples)
        device = resolve_device(self.device)
        model = resolve_model(self.model, settings.n_clusters, n_features, device)
        trained = model.config.trainable
        dtype = next(model.parameters()).dtype
        m = sample_size(n_samples, settings.sample_size, dtype.itemsize, device) if trained else n_samples
        # the data in a power-of-two unit of their own (exact), and their map into the model's domain
        unit, X64 = in_data_unit(X)
        self._unit = unit
        domain = fitted_domain(X64, model.d, trained)

        # the initial centres (n_init, k, d), in the user's space (in the data's unit)
        random_state = check_random_state(self.random_state)
        C0 = initial_centers(self.init, X64, unit, settings.n_clusters, settings.n_init, random_state)

        # into the model's domain (a trained model: on a sample of the points, in each frame)
        points = X64[sample_indices(n_samples, m, random_state)]
        domains = turned_domains(domain, settings.frames if trained else 1)
        runs = np.stack([c for dm in domains for c in run_in(dm, model, points, C0, settings.steps)])

        # back to the user's space: read-out, polish, never worse than the seeding; the best run
        # (frame and seeding) kept
        kept = finish(X, X64, unit, C0, runs, trained, settings, self.readout)
        self.cluster_centers_, self.labels_, self.inertia_ = kept.centers, kept.labels, kept.inertia
        self.from_model_, self.tied_with_seeding_ = kept.from_model, kept.tied_with_seeding
        self.n_iter_ = settings.steps
        self.domain_map_ = reported_map(domains[kept.best // len(C0)], unit, trained)
        return self

    def _validate(self, X: Any, reset: bool) -> np.ndarray:
        """The data as scikit-learn accepts them (lists, views, negative strides, Fortran order,
        integers: float64; float32 kept), as one C-contiguous array of finite floats: the one
        check of the user's data in a fit, ``predict``, ``transform`` or ``score``."""
        return validate_data(self, X, dtype=[np.float64, np.float32], order="C", reset=reset)

    # ------------------------------------------------------------------ using the fit
    def _validate_new(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return self._validate(X, reset=False)

    def predict(self, X: Any) -> np.ndarray:
        """The index of the nearest fitted centre of every point (ties: lowest index)."""
        return labels_inertia_in_unit(self._validate_new(X), self.cluster_centers_, self._unit)[0]

    def fit_predict(self, X: Any, y: Any = None) -> np.ndarray:
        """Fit and return ``labels_``."""
        return self.fit(X).labels_

    def transform(self, X: Any) -> np.ndarray:
        """Euclidean distances (n_samples, n_clusters) to the fitted centres, as ``KMeans.transform``."""
        return distances_in_unit(self._validate_new(X), self.cluster_centers_, self._unit)

    def score(self, X: Any, y: Any = None) -> float:
        """Minus the inertia of ``X`` under the fitted centres (larger is better), as ``KMeans.score``."""
        return -labels_inertia_in_unit(self._validate_new(X), self.cluster_centers_, self._unit)[1]

    @property
    def _n_features_out(self) -> int:
        """The number of columns of ``transform`` (for ``get_feature_names_out``)."""
        return self.cluster_centers_.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
