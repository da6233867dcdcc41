"""``TransformerKMeans``: the k-means transformer as a scikit-learn estimator.

Two kinds of model run the clustering, chosen by ``model``:

* ``"theorem"``: the fixed-weight limit construction of Theorem 2.1 (``gamma -> inf``, float64),
  built for the data's own dimension d and the requested k: Lloyd's algorithm as a transformer,
  on the user's data as given (no map, any d; divided by an exact power of two, so any scale).
* ``"learned"`` (default): the single trained layer that reads any number of clusters (random
  cluster codes, :class:`~kmtlib.embedding.CodeEmbedding`), shipped with the package. It was
  trained on synthetic tasks of width D = 32 (the broad family of
  :func:`kmtlib.broad_tasks.sample_broad_tasks`, each task shifted and scaled as here), so the
  data are first mapped into that domain by :class:`DomainMap` (centred, turned to their principal
  axes with a sign fixed by the data, one isotropic scale, zero padding for d < D, the top D axes
  for d > D), and the centres mapped back; it runs on a sample of at most ``sample_size`` points,
  and its clustering is read out over all points as the means of its clusters (``readout``).

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
from importlib import resources
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from .device import resolve_device
from .domain_map import DomainMap, translation_map
from .frame import data_unit, frame_turns
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

SAMPLE_SIZE = 1024
"""The number of points a trained model runs on by default (``sample_size``): its self-attention
over the points costs m^2 memory and time, so it runs on a random sample of m points (the shipped
layer was trained at n = 512) and its clustering is read out over all points."""

ATTENTION_BATCH_BYTES = 1 << 28
"""How much memory the m x m attention of the seedings that run together may take (256 MiB):
the seedings run in batches of that size (one at least)."""


def device_memory(device: torch.device) -> int:
    """The memory of the device in bytes (of the machine, for the CPU)."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def attention_bytes(m: int, itemsize: int) -> int:
    """A bound on the memory of one task's step of a trained layer on m points: the m x m scores
    of the points' self-attention, and as much again while the soft-max and its product run
    (measured on the CPU in float32: a peak of 277 MiB at m = 8192, about one m x m matrix;
    the bound is twice that)."""
    return 2 * m * m * itemsize


@functools.lru_cache(maxsize=1)
def _pretrained_any_k() -> KMeansTransformer:
    """The shipped trained layer for any k, loaded once per process (callers copy it)."""
    with resources.as_file(resources.files("kmtlib") / "pretrained" / PRETRAINED_ANY_K) as path:
        return load_model(path).eval()


def pretrained_model() -> KMeansTransformer:
    """A fresh copy of the trained layer for any k that ``model="learned"`` uses (d = 32)."""
    return copy.deepcopy(_pretrained_any_k())


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


def lloyd_to_fixed_point(X: np.ndarray, centers: np.ndarray, max_iter: int = POLISH_MAX_ITER) -> np.ndarray:
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


TIE_TOLERANCE = 1e-12
"""Two candidates whose inertias differ by at most this fraction tie (rounding, not clustering:
from one partition of the points, Lloyd's means differ by rounding alone)."""


def model_or_seeding(
    X: np.ndarray, seeding_centers: np.ndarray, model_centers: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per start, the model's centres where they have a strictly lower inertia on X than its
    seeding's, else the seeding's (B, k, d); (B,) whether the model's were strictly better; (B,)
    whether the two tie (inertias within :data:`TIE_TOLERANCE`: the seeding's are kept)."""
    model, seeding = inertias(X, model_centers), inertias(X, seeding_centers)
    tied = np.abs(model - seeding) <= TIE_TOLERANCE * np.maximum(model, seeding)
    better = (model < seeding) & ~tied
    return np.where(better[:, None, None], model_centers, seeding_centers), better, tied


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
        sample_size: for a trained model, the number m of points it runs on (default
            :data:`SAMPLE_SIZE` = 1024; ``None``: all of them): a sample drawn from ``random_state``
            without replacement where n > m; the read-out and the labels are over all points.
        frames: for a trained model, the number of frames it runs in, every seeding in each: the
            data's own frame and ``frames - 1`` fixed rotations of it (the same for every data
            set, so the result still does not depend on the user's axes); the run of lowest
            inertia is kept. The layer is not equivariant to rotations, and its inertia from one
            start can differ by up to 1.8x between frames; more frames cost as many runs.
        readout: for a trained model, how its clustering is read out: ``"means"`` (default): after
            the T trained steps every centre moves to the mean of the training points nearest to it
            (one hard k-means step in float64, the step of Theorem 2.1's layer, so that every centre
            is the mean of a cluster as in ``KMeans``'s result; a centre nearest to no point stays); ``"layer"``:
            the centres as the trained steps leave them (soft attention puts them between their
            points and the others'). A fixed-weight model's centres are already means: it ignores this.
            For a trained model each start's result (after the read-out and the polish) is then
            compared with its seeding's (polished too where the result is: Lloyd from the seeding);
            see ``never_worse``.
        polish: ``True``: after the model (and read-out), Lloyd's algorithm in float64 from its
            centres until no label changes (at most :data:`POLISH_MAX_ITER` steps; :func:`lloyd_to_fixed_point`),
            so the result is a k-means fixed point as ``KMeans``' is; ``False``: none; ``"auto"``
            (default): for a trained model only (a fixed-weight model is Theorem 2.1's Lloyd, left
            equal to ``KMeans(max_iter=steps)``). ``n_iter_`` counts the model's steps only.
        never_worse: for a trained model: ``True`` (default): per start, the seeding's candidate
            is kept unless the model's is strictly better (so the result is never worse than
            Lloyd from the same seeding); ``False``: the model's candidate alone, whatever its
            inertia, to see what the layer does by itself. A fixed-weight model ignores it.
        random_state: seed, ``numpy.random.RandomState`` or None (scikit-learn's convention); the
            torch generator of the seeding is seeded from it, so the same state gives the same result.
        device: ``"cpu"`` or ``"cuda"`` (``"auto"`` and ``"cuda:N"`` as :func:`kmtlib.resolve_device`).

    Attributes:
        cluster_centers_: (n_clusters, n_features) the final centres, in the user's space.
        labels_: (n_samples,) the nearest of ``cluster_centers_`` for every training point (as
            ``predict`` gives; for the trained model's padded or projected coordinates see below).
        inertia_: the sum of squared distances of the training points to their nearest centre.
        n_iter_: the number of steps run (``steps``).
        from_model_: whether the layer earned the result: the kept centres are the model's
            candidate and its inertia is strictly lower than its seeding's candidate's. False where
            the seeding's were better, and on a tie (see ``tied_with_seeding_``). Always True for a
            fixed-weight model, which has no seeding candidate.
        tied_with_seeding_: for a trained model, whether the model's candidate and its seeding's
            have the same inertia (within :data:`TIE_TOLERANCE`: from a seeding and a model
            that end at one fixed point). The layer then changed nothing, and the seeding's are kept.
        domain_map_: the :class:`DomainMap` used (the identity for a fixed-weight model).
        n_features_in_, feature_names_in_: as every scikit-learn estimator.

    Empty clusters, and equality with ``KMeans``: from the same initial centres and on data where
    no cluster empties, ``model="theorem"`` gives the labels and centres of
    ``KMeans(n_clusters, init=C0, n_init=1, algorithm="lloyd", max_iter=steps, tol=0)`` up to
    float64 rounding. Where a cluster empties the two differ by design: the limit transformer
    moves the centre of an empty cluster to the mean of all points (its centre attention becomes
    uniform: :data:`kmtlib.EMPTY_RULES`, ``"mean"``), ``KMeans`` relocates it to the point farthest
    from its centre. (``KMeans`` also stops early at a fixed point, which changes nothing.)

    Exact ties differ too. A point at exactly the same distance from two or more centres is, in
    the limit transformer, shared equally among them: the limit of soft-max over tied keys is
    their average, so the point adds ``1/m`` of itself to each of its ``m`` tied clusters' sums
    and ``1/m`` to their counts. ``KMeans`` and :func:`kmtlib.lloyd` give it whole to the lowest
    index. So wherever a step meets a tie the centres differ from then on: ``[[0], [1], [2]]``
    from ``[[0], [2]]``, one step, gives 1/3 and 5/3 here and 0.5 and 2 in ``KMeans``. The
    layer offers no lowest-index hard map (its hard attention averages the tied keys, the
    paper's construction), so the estimator keeps the transformer's rule. ``labels_`` and
    ``predict`` are read from the final centres with lowest-index ties, as ``KMeans``'. Exact
    ties need exactly equal distances: integer or gridded data have them (issue 26 found 6 of 16
    fits on small integer grids differ), data with a continuous part almost never.

    Data far from the origin: where the data lie far from it against their spread (timestamps,
    a large offset), the fixed-weight model runs on the data shifted by a centre of the data
    (:func:`kmtlib.objective.data_shift`; ``domain_map_.shift``) and its centres are shifted
    back, so that its distances keep their digits as ``KMeans``' (which centres its data) do.

    The trained model's space (:class:`DomainMap`): the data are shifted and scaled by one number
    (mean 0.5, total variance 1.6) into 32 coordinates, so nearest centres are unchanged and
    squared distances differ by one factor.
    With d < 32 they are padded with zeros; the layer may move the centres out of the data's
    coordinates into the padding, so they are projected back onto the data's coordinates after
    every step (``||x - c||^2`` for a point x with zero padding is its data part plus a term of
    the centre alone, which would otherwise make the model's nearest centre differ from the
    user's). With d > 32 the model sees the top 32 principal components of the training data
    (centred), and runs on that projection; the centres are mapped back through the axes into the
    original space (where they lie in the 32-dimensional affine subspace of the projection), the
    labels are the nearest of those centres (the same as in the projection: the part of a point
    outside the subspace is at the same distance from every centre), and the inertia is that of
    the original space (the inertia of the projection plus the variance the projection leaves out).
    So for every model ``labels_ == predict(X)`` and ``inertia_ == -score(X)``.

    The frame (every d): the layer is not equivariant to rotations of its coordinates, so the data
    are given to it in their own frame (:func:`kmtlib.frame.principal_frame`): centred, on their
    principal axes, largest variance first, each axis signed so that the data's third moment along
    it is positive (the farthest point decides where that moment is about 0; where eigenvalues
    are equal, the axes point to the farthest points). Permuting, rotating or flipping the
    features (and an array ``init`` with them) gives the same labels and inertia up to rounding.
    How well the layer clusters still depends on the frame it is given: over fixed turns of the
    frame, a set's mean inertia ratio to ``KMeans`` from the same starts moved by up to 11 %
    (wine) and single starts on isotropic data by up to 1.8x; the frame fixes which one, and so
    the result, whatever the user's axes. ``frames=4`` (the best of four fixed frames) brought
    the geometric mean over the six sets below from 1.080 to 1.024, at four times the cost.

    Memory and time: the learned layer's self-attention over the points costs m^2 per seeding
    (m = min(n, ``sample_size``)), so a fit needs a few (about five) copies of the data in
    float64, ``8 n d`` bytes each (the data in their unit, centred, and the read-out's), ``8 n k``
    bytes for the distances of the read-out, and ``2 m^2 x 4`` bytes (float32) per seeding of a
    batch for the attention, the seedings running in batches within
    :data:`ATTENTION_BATCH_BYTES`: in all about ``40 n d + 8 n k + min(n_init x 8 m^2, 256 MiB)``
    bytes besides the library; time grows as ``frames x n_init x steps x m^2 D`` for the layer
    and ``n k d`` for the read-out. At n = 200 000, d = 10, k = 10 with the defaults a fit took
    0.5 s and 0.52 GiB of peak memory for the whole process on one CPU thread. A ``sample_size``
    whose attention exceeds the device's memory is refused with the size and the way out. The
    layer was trained at n = 512: on sets of n = 5 000 and 20 000 its inertia from a sample of
    512 to 4 096 points was no worse than from all points (at n = 20 000 all points took 130 s
    and were worse on the one start measured), so the default samples 1 024.

    Data of any scale: the data are divided by a power of two near their largest absolute value
    (exact), and every number is computed in that unit and scaled back; ``X * 1e200`` and
    ``X * 1e-200`` give the labels of X (the inertia is inf or 0 where float64 cannot hold it).

    What the layer adds and what it costs: with the defaults the result is a competition of two
    candidates per start, the layer's (its steps, the read-out, the polish) and Lloyd's algorithm
    from the same seeding; the layer wins where it moved the start into a better basin, and on
    many starts both end at one fixed point (a tie, which the seeding wins). The layer's steps
    cost a self-attention over the sampled points, many times the time of ``KMeans``' Lloyd
    iterations, and at that time ``KMeans`` can run more seedings. Chapter 13 of the book ("Beyond
    the paper: cluster your own data", ``book/13_your_data.md``) measures both on real data: the
    defaults against ``KMeans()``, against ``KMeans`` at equal compute, and the layer's candidate
    against its seeding's start by start (``never_worse=False`` shows the layer's alone).
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

    def _never_worse(self) -> bool:
        """``never_worse`` as a bool (numpy booleans accepted)."""
        if not isinstance(self.never_worse, bool | np.bool_):
            raise ValueError(f"never_worse must be True or False, got {self.never_worse!r}")
        return bool(self.never_worse)

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
        X = self._prepare(X, reset=True)
        n_samples, n_features = X.shape
        n_clusters, n_init, steps = self._check_params(n_samples, n_features)
        device = resolve_device(self.device)
        model = self._resolve_model(n_clusters, n_features).to(device)
        dtype = next(model.parameters()).dtype
        m = self._sample_size(n_samples, dtype.itemsize, device) if model.config.trainable else n_samples
        # the data in a power-of-two unit of their own (exact): their squares neither overflow
        # nor underflow, whatever the scale the user gives (1e200 and 1e-200 cluster as 1)
        self._unit = unit = data_unit(X)
        X64 = np.asarray(X, dtype=np.float64)
        if unit != 1.0:  # (the usual unit 1 needs no copy)
            X64 = X64 / unit
        domain = DomainMap.fit(X64, model.d) if model.config.trainable else translation_map(X64)

        # the initial centres (n_init, k, d), in the user's space (in the data's unit)
        random_state = check_random_state(self.random_state)
        C0 = self._initial_centers(X64, n_clusters, n_init, random_state)
        if not isinstance(self.init, str):
            C0 = C0 / unit

        # into the model's domain (a trained model: on a sample of the points, in each frame)
        points = X64[self._sample(n_samples, m, random_state)]
        domains = [domain.turned(Q) for Q in frame_turns(domain.reduced, self._frames(model))]
        runs = np.stack([c for dm in domains for c in self._run_in(dm, model, points, C0, steps)])

        # back to the user's space: read-out, polish, never worse than the seeding; the best run
        # (frame and seeding) kept
        self.cluster_centers_, self.labels_, self.inertia_, best = self._finish(
            X, X64, unit, C0, runs, model.config.trainable
        )
        self.n_iter_ = steps
        # (from the user's space; a fixed-weight model's is the identity or its translation, up to
        # the exact power of two of the unit)
        domain = domains[best // len(C0)]
        self.domain_map_ = domain.scaled(unit) if model.config.trainable else domain.translated(unit)
        return self

    def _frames(self, model: KMeansTransformer) -> int:
        """The number of frames a model runs in (``frames``; a fixed-weight model: its own only)."""
        frames = self.frames
        if isinstance(frames, bool) or not isinstance(frames, numbers.Integral) or frames < 1:
            raise ValueError(f"frames must be an integer >= 1, got {frames!r}")
        return int(frames) if model.config.trainable else 1

    def _run_in(
        self, domain: DomainMap, model: KMeansTransformer, points: np.ndarray, C0: np.ndarray, steps: int
    ) -> list[np.ndarray]:
        """The final centres of every seeding C0 (B, k, d) after ``steps`` steps of ``model`` on
        ``points`` mapped into its domain by ``domain``, mapped back (a list of B (k, d))."""
        like = next(model.parameters())
        Xm = torch.as_tensor(domain.to_model(points), dtype=like.dtype, device=like.device)
        C0m = torch.as_tensor(np.stack([domain.to_model(c) for c in C0]), dtype=like.dtype, device=like.device)
        with torch.inference_mode():
            final = self._run(model, Xm, C0m, steps, domain.reduced).to(device="cpu", dtype=torch.float64)
        return [domain.to_user(c) for c in final.numpy()]

    def _prepare(self, X: Any, reset: bool) -> np.ndarray:
        """The data as scikit-learn accepts them (lists, views, negative strides, Fortran order,
        integers: float64; float32 kept), as one C-contiguous float array."""
        return validate_data(self, X, dtype=[np.float64, np.float32], order="C", reset=reset)

    def _sample_size(self, n_samples: int, itemsize: int, device: torch.device) -> int:
        """The number m of points a trained model runs on (``sample_size``, at most n), checked
        against the device's memory: a sample whose attention cannot fit is refused."""
        size = self.sample_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1):
            raise ValueError(f"sample_size must be an integer >= 1 or None, got {size!r}")
        m = n_samples if size is None else min(int(size), n_samples)
        need, total = attention_bytes(m, itemsize), device_memory(device)
        if need > total:
            raise ValueError(
                f"a trained model on {m} points needs about {need / 2**30:.1f} GiB for its attention over the "
                f"points (2 m^2 x {itemsize} bytes), more than the {total / 2**30:.1f} GiB of {device}; "
                f"set sample_size to at most {int(np.sqrt(total / (2 * itemsize)))} (default {SAMPLE_SIZE})"
            )
        return m

    @staticmethod
    def _sample(n_samples: int, m: int, random_state: np.random.RandomState) -> np.ndarray:
        """The indices of the m points a trained model runs on: all of them if m = n, else m of
        them drawn without replacement from the random state, in order."""
        if m >= n_samples:
            return np.arange(n_samples)
        return np.sort(random_state.choice(n_samples, m, replace=False))

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
        self, X: np.ndarray, X64: np.ndarray, unit: float, C0: np.ndarray, runs: np.ndarray, trained: bool
    ) -> tuple[np.ndarray, np.ndarray, float, int]:
        """The end of a fit from the model's centres ``runs`` (frames x n_init, k, d; in the data's
        unit, like ``X64`` and the seedings ``C0`` (n_init, k, d)): a trained model's read-out; the
        polish; for a trained model, per run the better of this and its seeding (polished too where
        the model's result is: Lloyd from the seeding); the run of lowest inertia as (centres in
        the user's unit and X's dtype, labels, inertia, its index). Sets ``from_model_``: whether
        the kept run's centres came from the model's path."""
        if trained and self.readout == "means":
            runs = np.stack([means_readout(X64, c) for c in runs])
        polishes = self._polishes(trained)
        if polishes:
            runs = lloyd_to_fixed_point(X64, runs)
        better, tied = np.ones(len(runs), dtype=bool), np.zeros(len(runs), dtype=bool)
        if trained:
            seeding = lloyd_to_fixed_point(X64, C0) if polishes else C0
            chosen, better, tied = model_or_seeding(X64, np.concatenate([seeding] * (len(runs) // len(C0))), runs)
            if self._never_worse():
                runs = chosen
        runs = (runs * unit).astype(X.dtype, copy=False)
        scores = [self._labels_inertia(X, c) for c in runs]
        best = int(np.argmin([inertia for _, inertia in scores]))
        self.from_model_, self.tied_with_seeding_ = bool(better[best]), bool(tied[best])
        return runs[best], *scores[best], best

    @staticmethod
    def _run(model: KMeansTransformer, X: torch.Tensor, C0: torch.Tensor, steps: int, reduced: int) -> torch.Tensor:
        """The final centres (B, k, D) after ``steps`` steps of ``model`` on the points X (m, D)
        from each of the B initial centres ``C0`` (B, k, D).

        The seedings run as batches of tasks, as many at a time as keep the m x m attention of a
        batch within :data:`ATTENTION_BATCH_BYTES` (one at least). A model that re-embeds its
        tokens every step runs one step at a time, with its centres projected onto the
        ``reduced`` coordinates the data fill (zero padding stays zero; see the class
        docstring); otherwise the model runs as a whole."""
        per_task = attention_bytes(X.shape[0], X.element_size())
        batch = max(1, min(C0.shape[0], ATTENTION_BATCH_BYTES // per_task))
        finals = []
        for start in range(0, C0.shape[0], batch):
            C = C0[start : start + batch]
            Xb = X.unsqueeze(0).expand(C.shape[0], *X.shape)
            if reduced == X.shape[-1] or not model.reembed:
                finals.append(model.final_centers(Xb, C, steps))
                continue
            for _ in range(steps):
                C = model.step(Xb, C)
                C[..., reduced:] = 0
            finals.append(C)
        return torch.cat(finals)

    # ------------------------------------------------------------------ using the fit
    def _validate_new(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return self._prepare(X, reset=False)

    def _labels_inertia(self, X: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, float]:
        """:func:`labels_inertia`, computed in the unit of the training data (the inertia is
        inf where its value in the user's unit is beyond float64)."""
        unit = self._unit
        X64, C64 = np.asarray(X, dtype=np.float64), np.asarray(centers, np.float64)
        labels, inertia = labels_inertia(X64 / unit, C64 / unit) if unit != 1.0 else labels_inertia(X64, C64)
        return labels, inertia * unit * unit

    def predict(self, X: Any) -> np.ndarray:
        """The index of the nearest fitted centre of every point (ties: lowest index)."""
        return self._labels_inertia(self._validate_new(X), self.cluster_centers_)[0]

    def fit_predict(self, X: Any, y: Any = None) -> np.ndarray:
        """Fit and return ``labels_``."""
        return self.fit(X).labels_

    def transform(self, X: Any) -> np.ndarray:
        """Euclidean distances (n_samples, n_clusters) to the fitted centres, as ``KMeans.transform``."""
        X = self._validate_new(X)
        unit = self._unit
        X64, C64 = np.asarray(X, dtype=np.float64) / unit, np.asarray(self.cluster_centers_, np.float64) / unit
        distances = squared_distances(_task(X64), _task(C64))[0].sqrt().numpy() * unit
        return distances.astype(X.dtype, copy=False)

    def score(self, X: Any, y: Any = None) -> float:
        """Minus the inertia of ``X`` under the fitted centres (larger is better), as ``KMeans.score``."""
        return -self._labels_inertia(self._validate_new(X), self.cluster_centers_)[1]

    @property
    def _n_features_out(self) -> int:
        """The number of columns of ``transform`` (for ``get_feature_names_out``)."""
        return self.cluster_centers_.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
