"""The parameters of :class:`~kmtlib.estimator.TransformerKMeans`: their accepted values and their
checks, all in one place (:func:`check_params`, run at the start of every fit; a ValueError
names the parameter), and the settings of a fit they resolve to (:class:`FitSettings`)."""

from __future__ import annotations

import numbers
import warnings
from typing import Any, NamedTuple

import numpy as np
from sklearn.utils.validation import check_array

READOUTS: tuple[str, ...] = ("means", "layer")
"""How a trained model's clustering is read out: ``"means"`` (every centre moved to the mean of the
points nearest to it: one hard k-means step, the step Theorem 2.1's layer makes) or ``"layer"``
(the centres as the last trained step left them)."""

INITS: tuple[str, ...] = ("k-means++", "d2", "random")
"""The seeding methods by name: ``"k-means++"`` (scikit-learn's greedy k-means++, its spelling),
``"d2"`` (plain D^2 sampling, the k-means++ of the paper's Fig. 4c) and ``"random"``; an array of
centres is also accepted."""

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


class FitSettings(NamedTuple):
    """The parameters of a fit, checked (:func:`check_params`)."""

    n_clusters: int
    n_init: int
    """``n_init`` resolved (``"auto"`` as ``KMeans``; 1 with an array ``init``)."""
    steps: int
    sample_size: int | None
    frames: int
    polish: bool | None
    """``polish`` (None: ``"auto"``, on for a trained model only)."""
    never_worse: bool


def check_integer(name: str, value: object, minimum: int, alternatives: str = "", maximum: int | None = None) -> int:
    """``value`` as an int (numpy integers too), or a ValueError naming the parameter (bools and
    floats refused); ``alternatives`` names what else the parameter accepts."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be {alternatives}an integer >= {minimum}, got {value!r}")
    if maximum is not None and int(value) > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value!r}")
    return int(value)


def check_flag(name: str, value: object, alternatives: str = "") -> bool:
    """``value`` as a bool (numpy booleans too), or a ValueError naming the parameter."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be {alternatives}True or False, got {value!r}")
    return bool(value)


def check_params(estimator: Any, n_samples: int) -> FitSettings:
    """Every parameter of ``estimator`` (a :class:`~kmtlib.estimator.TransformerKMeans`) but
    ``model`` and ``device`` checked, in one place (a ValueError names the parameter); the
    settings of the fit on ``n_samples`` points."""
    n_clusters = check_integer("n_clusters", estimator.n_clusters, 1)
    if n_samples < n_clusters:
        raise ValueError(f"n_samples={n_samples} should be >= n_clusters={n_clusters}.")
    if not isinstance(estimator.readout, str) or estimator.readout not in READOUTS:
        raise ValueError(f"readout must be one of {', '.join(map(repr, READOUTS))}, got {estimator.readout!r}")
    auto_polish = isinstance(estimator.polish, str) and estimator.polish == "auto"
    polish = None if auto_polish else check_flag("polish", estimator.polish, "'auto', ")
    if isinstance(estimator.init, str) and estimator.init not in INITS:
        raise ValueError(
            f"init must be one of {', '.join(map(repr, INITS))}, an array or a callable, got {estimator.init!r}"
        )
    size = estimator.sample_size
    settings = FitSettings(
        n_clusters=n_clusters,
        n_init=resolved_n_init(estimator.init, estimator.n_init, type(estimator).__name__),
        steps=check_integer("steps", estimator.steps, 0),
        sample_size=None if size is None else check_integer("sample_size", size, 1, "None or "),
        frames=check_integer("frames", estimator.frames, 1, maximum=MAX_FRAMES),
        polish=polish,
        never_worse=check_flag("never_worse", estimator.never_worse),
    )
    warn_beyond_trained_k(estimator.model, n_clusters)
    return settings


def resolved_n_init(init: object, n_init: object, owner: str) -> int:
    """``n_init`` as a number: ``"auto"`` as ``KMeans`` (10 for ``"random"`` and a callable,
    else 1); with an array ``init`` 1 (another number warns, naming the estimator ``owner``, as
    ``KMeans``)."""
    given_array = not isinstance(init, str) and not callable(init)
    if isinstance(n_init, str) and n_init == "auto":
        return 10 if callable(init) or (isinstance(init, str) and init == "random") else 1
    number = check_integer("n_init", n_init, 1, "'auto' or ")
    if given_array and number != 1:
        warnings.warn(
            f"Explicit initial center position passed: performing only one init in {owner} instead of n_init={number}.",
            RuntimeWarning,
            stacklevel=4,  # (the caller of fit)
        )
        number = 1
    return number


def warn_beyond_trained_k(model: object, n_clusters: int) -> None:
    """A UserWarning where the shipped learned model is asked for more clusters than it was
    trained at (:data:`LEARNED_K_RANGE`)."""
    low, high = LEARNED_K_RANGE
    if isinstance(model, str) and model == "learned" and n_clusters > high:
        warnings.warn(
            f"n_clusters={n_clusters} lies beyond k = {low}..{high}, the numbers of clusters the learned "
            f"model was trained at; its steps may cluster worse there (the result is never worse than its "
            f"seeding, and polish runs Lloyd to a fixed point). model='theorem' runs Lloyd's algorithm at any k.",
            UserWarning,
            stacklevel=4,  # (the caller of fit)
        )


def given_centers(init: object, centers: Any, n_clusters: int, n_features: int) -> np.ndarray:
    """An array ``init`` (or the result ``centers`` of a callable ``init``) checked:
    (n_clusters, n_features), finite numbers, as float64; every error names ``init``."""
    source = "init" if not callable(init) else "the centres the init callable returned"
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
