"""``TransformerKMeans``: the k-means transformer as a scikit-learn estimator.

Two kinds of model run the clustering, chosen by ``model``:

* ``"theorem"``: the fixed-weight limit construction of Theorem 2.1 (``gamma -> inf``, float64),
  built for the data's own dimension d and the requested k: Lloyd's algorithm as a transformer,
  on the user's data as given (no map, any d; divided by an exact power of two, so any scale).
* ``"learned"`` (default): the single trained layer that reads any number of clusters (random
  cluster codes, :class:`~kmtlib.embedding.CodeEmbedding`), shipped with the package. It was
  trained on synthetic tasks of width D = 32 (the broad family of
  :func:`kmtlib.analysis.broad_tasks.sample_broad_tasks`, each task shifted and scaled as here), so the
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
from collections.abc import Callable
from importlib import resources
from typing import Any, NamedTuple

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from ..analysis.domain_map import DomainMap, translation_map
from ..analysis.frame import data_unit, frame_turns
from ..device import resolve_device
from ..init import init_centers
from ..io.model_file import load_model
from ..lloyd import lloyd_step
from ..objective import assignment_cost, nearest_center, squared_distances
from ..transformer import KMeansTransformer, whole_pass

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

POLISH_MAX_ITER = 300
"""The most Lloyd steps of the polish (``KMeans``' default ``max_iter``)."""

LEARNED_K_RANGE = (2, 32)
"""The numbers of clusters the shipped layer was trained at (``kmtlib/pretrained/README.md``)."""

SAMPLE_SIZE = 1024
"""The number of points a trained model runs on by default (``sample_size``): its self-attention
over the points costs m^2 memory and time, so it runs on a random sample of m points (the shipped
layer was trained at n = 512) and its clustering is read out over all points."""

MAX_FRAMES = 64
"""The most frames a fit may run in (``frames``), refused above before any run: each frame costs
a run of every seeding, so a larger number buys a wider choice among fixed rotations at a cost
that grows with it."""

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


def _check_integer(name: str, value: object, minimum: int, alternatives: str = "", maximum: int | None = None) -> int:
    """``value`` as an int (numpy integers too), or a ValueError naming the parameter (bools and
    floats refused); ``alternatives`` names what else the parameter accepts."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be {alternatives}an integer >= {minimum}, got {value!r}")
    if maximum is not None and int(value) > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value!r}")
    return int(value)


def _check_flag(name: str, value: object, alternatives: str = "") -> bool:
    """``value`` as a bool (numpy booleans too), or a ValueError naming the parameter."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be {alternatives}True or False, got {value!r}")
    return bool(value)


class FitSettings(NamedTuple):
    """The parameters of a fit, checked (:meth:`TransformerKMeans._check_params`)."""

    n_clusters: int
    n_init: int
    """``n_init`` resolved (``"auto"`` as ``KMeans``; 1 with an array ``init``)."""
    steps: int
    sample_size: int | None
    frames: int
    polish: bool | None
    """``polish`` (None: ``"auto"``, on for a trained model only)."""
    never_worse: bool


def _sample_size(n_samples: int, size: int | None, itemsize: int, device: torch.device) -> int:
    """The number m of points a trained model runs on (``sample_size``, None: all; at most n),
    checked against the device's memory: a sample whose attention cannot fit is refused."""
    m = n_samples if size is None else min(size, n_samples)
    need, total = attention_bytes(m, itemsize), device_memory(device)
    if need > total:
        raise ValueError(
            f"a trained model on {m} points needs about {need / 2**30:.1f} GiB for its attention over the "
            f"points (2 m^2 x {itemsize} bytes), more than the {total / 2**30:.1f} GiB of {device}; "
            f"set sample_size to at most {int(np.sqrt(total / (2 * itemsize)))} (default {SAMPLE_SIZE})"
        )
    return m


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
    or ``max_iter`` steps. The centre of a cluster that receives no point moves onto the point
    farthest from its own centre, as ``KMeans`` relocates an empty cluster
    (:func:`onto_farthest_points`), so on data with fewer distinct points than k (constant or
    duplicated data) every centre lies on a data point. The distances are taken about the data's
    mean (nothing else changes), so data far from the origin lose no digits."""
    mean = X.mean(axis=0)
    Xt = _task(X - mean).expand(centers.shape[0], *X.shape)
    C = torch.as_tensor(centers - mean, dtype=torch.float64)
    labels = None
    for _ in range(max_iter):
        previous = C
        C, new, counts = lloyd_step(Xt, C, empty="keep")
        C = onto_farthest_points(Xt, previous, new, counts == 0, C)
        if labels is not None and torch.equal(new, labels):
            break
        labels = new
    return C.numpy() + mean


def onto_farthest_points(
    X: torch.Tensor, previous: torch.Tensor, labels: torch.Tensor, empty: torch.Tensor, centers: torch.Tensor
) -> torch.Tensor:
    """``centers`` (B, k, d) with every empty cluster's (``empty`` (B, k)) moved onto a point of X
    (B, n, d): the points farthest from the ``previous`` centre they were assigned to (``labels``
    (B, n)), farthest first (ties: the first in row order), one per empty cluster, as ``KMeans``
    relocates empty clusters. A loop over the starts that have an empty cluster only."""
    if not bool(empty.any()):
        return centers
    assigned = torch.gather(previous, 1, labels.unsqueeze(-1).expand(-1, -1, X.shape[-1]))
    far = torch.sort(((X - assigned) ** 2).sum(-1), dim=1, descending=True, stable=True).indices  # (B, n)
    centers = centers.clone()
    for b in torch.nonzero(empty.any(dim=1)).flatten().tolist():
        slots = torch.nonzero(empty[b]).flatten()
        centers[b, slots] = X[b, far[b, : len(slots)]]
    return centers


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
            every seeding in each: the data's own frame (:func:`kmtlib.analysis.frame.principal_frame`) and
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

    # ------------------------------------------------------------------ parameters
    def _check_params(self, n_samples: int) -> FitSettings:
        """Every parameter but ``model`` and ``device`` checked, in one place (a ValueError names
        the parameter); the settings of the fit."""
        n_clusters = _check_integer("n_clusters", self.n_clusters, 1)
        if n_samples < n_clusters:
            raise ValueError(f"n_samples={n_samples} should be >= n_clusters={n_clusters}.")
        if not isinstance(self.readout, str) or self.readout not in READOUTS:
            raise ValueError(f"readout must be one of {', '.join(map(repr, READOUTS))}, got {self.readout!r}")
        auto_polish = isinstance(self.polish, str) and self.polish == "auto"
        polish = None if auto_polish else _check_flag("polish", self.polish, "'auto', ")
        if isinstance(self.init, str) and self.init not in INITS:
            raise ValueError(
                f"init must be one of {', '.join(map(repr, INITS))}, an array or a callable, got {self.init!r}"
            )
        size = self.sample_size
        settings = FitSettings(
            n_clusters=n_clusters,
            n_init=self._resolved_n_init(),
            steps=_check_integer("steps", self.steps, 0),
            sample_size=None if size is None else _check_integer("sample_size", size, 1, "None or "),
            frames=_check_integer("frames", self.frames, 1, maximum=MAX_FRAMES),
            polish=polish,
            never_worse=_check_flag("never_worse", self.never_worse),
        )
        self._warn_beyond_trained_k()
        return settings

    def _resolved_n_init(self) -> int:
        """``n_init`` as a number: ``"auto"`` as ``KMeans`` (10 for ``"random"`` and a callable,
        else 1); with an array ``init`` 1 (another number warns, as ``KMeans``)."""
        given_array = not isinstance(self.init, str) and not callable(self.init)
        if isinstance(self.n_init, str) and self.n_init == "auto":
            return 10 if callable(self.init) or (isinstance(self.init, str) and self.init == "random") else 1
        n_init = _check_integer("n_init", self.n_init, 1, "'auto' or ")
        if given_array and n_init != 1:
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
        settings = self._check_params(n_samples)
        device = resolve_device(self.device)
        model = self._resolve_model(settings.n_clusters, n_features).to(device)
        trained = model.config.trainable
        dtype = next(model.parameters()).dtype
        m = _sample_size(n_samples, settings.sample_size, dtype.itemsize, device) if trained else n_samples
        # the data in a power-of-two unit of their own (exact): their squares neither overflow
        # nor underflow, whatever the scale the user gives (1e200 and 1e-200 cluster as 1)
        self._unit = unit = data_unit(X)
        X64 = np.asarray(X, dtype=np.float64)
        if unit != 1.0:  # (the usual unit 1 needs no copy)
            X64 = X64 / unit
        domain = DomainMap.fit(X64, model.d) if trained else translation_map(X64)

        # the initial centres (n_init, k, d), in the user's space (in the data's unit)
        random_state = check_random_state(self.random_state)
        C0 = self._initial_centers(X64, unit, settings.n_clusters, settings.n_init, random_state)

        # into the model's domain (a trained model: on a sample of the points, in each frame)
        points = X64[self._sample(n_samples, m, random_state)]
        domains = [domain.turned(Q) for Q in frame_turns(domain.reduced, settings.frames if trained else 1)]
        runs = np.stack([c for dm in domains for c in self._run_in(dm, model, points, C0, settings.steps)])

        # back to the user's space: read-out, polish, never worse than the seeding; the best run
        # (frame and seeding) kept
        self.cluster_centers_, self.labels_, self.inertia_, best = self._finish(
            X, X64, unit, C0, runs, trained, settings
        )
        self.n_iter_ = settings.steps
        # (from the user's space; a fixed-weight model's is the identity or its translation, up to
        # the exact power of two of the unit)
        domain = domains[best // len(C0)]
        self.domain_map_ = domain.scaled(unit) if trained else domain.translated(unit)
        return self

    def _run_in(
        self, domain: DomainMap, model: KMeansTransformer, points: np.ndarray, C0: np.ndarray, steps: int
    ) -> list[np.ndarray]:
        """The final centres of every seeding C0 (B, k, d) after ``steps`` steps of ``model`` on
        ``points`` mapped into its domain by ``domain``, mapped back (a list of B (k, d))."""
        like = next(model.parameters())
        Xm = torch.as_tensor(domain.to_model(points), dtype=like.dtype, device=like.device)
        C0m = torch.as_tensor(np.stack([domain.to_model(c) for c in C0]), dtype=like.dtype, device=like.device)
        with torch.inference_mode():
            final = self._run(model, Xm, C0m, steps, filled=domain.reduced).to(device="cpu", dtype=torch.float64)
        return [domain.to_user(c) for c in final.numpy()]

    def _prepare(self, X: Any, reset: bool) -> np.ndarray:
        """The data as scikit-learn accepts them (lists, views, negative strides, Fortran order,
        integers: float64; float32 kept), as one C-contiguous float array."""
        return validate_data(self, X, dtype=[np.float64, np.float32], order="C", reset=reset)

    @staticmethod
    def _sample(n_samples: int, m: int, random_state: np.random.RandomState) -> np.ndarray:
        """The indices of the m points a trained model runs on: all of them if m = n, else m of
        them drawn without replacement from the random state, in order."""
        if m >= n_samples:
            return np.arange(n_samples)
        return np.sort(random_state.choice(n_samples, m, replace=False))

    def _initial_centers(
        self, X: np.ndarray, unit: float, n_clusters: int, n_init: int, random_state: np.random.RandomState
    ) -> np.ndarray:
        """(n_init, k, d) initial centres (float64) for the data ``X`` in their ``unit``: a given
        array or a callable's (``init(X_user, n_clusters, random_state)``, once per seeding, as
        ``KMeans``) are in the user's space and divided by the unit."""
        if callable(self.init):
            X_user = X * unit  # (exact: the unit is a power of two)
            return np.stack([self._given_centers(self.init(X_user, n_clusters, random_state), n_clusters, X.shape[1])
                             for _ in range(n_init)]) / unit  # fmt: skip
        if not isinstance(self.init, str):
            return self._given_centers(self.init, n_clusters, X.shape[1])[None] / unit
        # one torch generator on the CPU seeded from the random state: the same centres on every device
        generator = torch.Generator().manual_seed(int(random_state.randint(np.iinfo(np.int32).max)))
        Xt = _task(X).expand(n_init, *X.shape)
        method, trials = _KMTLIB_INIT[self.init]
        return init_centers(Xt, n_clusters, method, generator, n_local_trials=trials).numpy()

    def _given_centers(self, centers: Any, n_clusters: int, n_features: int) -> np.ndarray:
        """An array ``init`` (or a callable's result) checked: (n_clusters, n_features), finite
        numbers; every error names ``init``."""
        source = "init" if not callable(self.init) else "the centres the init callable returned"
        try:
            ndim = np.ndim(centers)
        except ValueError as error:  # (a ragged nesting of lists)
            raise ValueError(f"{source} must be a 2-D array (n_clusters, n_features): {error}") from error
        if ndim != 2:
            raise ValueError(f"{source} must be a 2-D array (n_clusters, n_features), got {ndim}-D")
        try:
            array = check_array(centers, dtype=np.float64, input_name="init")
        except (TypeError, ValueError) as error:
            raise ValueError(f"{source} must be an array of finite numbers: {error}") from error
        if array.shape != (n_clusters, n_features):
            raise ValueError(
                f"{source} must have shape (n_clusters, n_features) = ({n_clusters}, {n_features}), got {array.shape}"
            )
        return array

    def _finish(
        self,
        X: np.ndarray,
        X64: np.ndarray,
        unit: float,
        C0: np.ndarray,
        runs: np.ndarray,
        trained: bool,
        settings: FitSettings,
    ) -> tuple[np.ndarray, np.ndarray, float, int]:
        """The end of a fit from the model's centres ``runs`` (frames x n_init, k, d; in the data's
        unit, like ``X64`` and the seedings ``C0`` (n_init, k, d)): a trained model's read-out; the
        polish; for a trained model, per run the better of this and its seeding (polished too where
        the model's result is: Lloyd from the seeding); the run of lowest inertia as (centres in
        the user's unit and X's dtype, labels, inertia, its index). Sets ``from_model_`` and
        ``tied_with_seeding_`` of the kept run."""
        if trained and self.readout == "means":
            runs = np.stack([means_readout(X64, c) for c in runs])
        polishes = trained if settings.polish is None else settings.polish
        if polishes:
            runs = lloyd_to_fixed_point(X64, runs)
        better, tied = np.ones(len(runs), dtype=bool), np.zeros(len(runs), dtype=bool)
        if trained:
            seeding = lloyd_to_fixed_point(X64, C0) if polishes else C0
            chosen, better, tied = model_or_seeding(X64, np.concatenate([seeding] * (len(runs) // len(C0))), runs)
            if settings.never_worse:
                runs = chosen
        runs = (runs * unit).astype(X.dtype, copy=False)
        scores = [self._labels_inertia(X, c) for c in runs]
        best = int(np.argmin([inertia for _, inertia in scores]))
        self.from_model_, self.tied_with_seeding_ = bool(better[best]), bool(tied[best])
        return runs[best], *scores[best], best

    @staticmethod
    def _run(model: KMeansTransformer, X: torch.Tensor, C0: torch.Tensor, steps: int, filled: int) -> torch.Tensor:
        """The final centres (B, k, D) after ``steps`` steps of ``model`` on the points X (m, D)
        from each of the B initial centres ``C0`` (B, k, D).

        The seedings run as batches of tasks, as many at a time as keep the m x m attention of a
        batch within :data:`ATTENTION_BATCH_BYTES` (one at least). A model that re-embeds its
        tokens every step runs one step at a time, with its centres projected onto the
        first ``filled`` coordinates, those the data fill (zero padding stays zero; see the class
        docstring); otherwise the model runs as a whole."""
        per_task = attention_bytes(X.shape[0], X.element_size())
        batch = max(1, min(C0.shape[0], ATTENTION_BATCH_BYTES // per_task))
        finals = []
        whole = whole_pass(model)  # (a fixed-weight model's whole pass by one kernel, where it applies)
        for start in range(0, C0.shape[0], batch):
            C = C0[start : start + batch]
            Xb = X.unsqueeze(0).expand(C.shape[0], *X.shape)
            if filled == X.shape[-1] or not model.reembed:
                finals.append(whole.final_centers(Xb, C, steps))
                continue
            for _ in range(steps):
                C = model.step(Xb, C)
                C[..., filled:] = 0
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
