"""The steps of a fit, in its order: the seedings (in the user's space, float64), the layer's
passes over them in the model's domain (batched within a memory bound), the read-out of a
trained model's clustering, the polish (Lloyd's algorithm in float64 to a fixed point) and the
choice, per start, between the model's candidate and its seeding's; the best run is kept.

Every function takes the data the estimator checked once, at the entry of ``fit``, and checks
nothing again (the polish makes up to :data:`POLISH_MAX_ITER` Lloyd steps)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from ..domain.domain_map import DomainMap
from ..init import greedy_trials, init_centers_unchecked
from ..lloyd import lloyd_step_unchecked
from ..objective import DistanceFrame
from ..transformer import KMeansTransformer, whole_pass
from .model import ATTENTION_BATCH_BYTES, attention_bytes
from .params import FitSettings, given_centers
from .reported import as_task, labels_inertia, labels_inertia_in_unit

_KMTLIB_INIT: dict[str, tuple[str, int | None]] = {"k-means++": ("kmeans++", None), "d2": ("kmeans++", 1),
                                                   "random": ("random", 1)}  # fmt: skip
"""Each ``init`` name's :func:`kmtlib.init_centers` method and ``n_local_trials`` (None: greedy)."""

POLISH_MAX_ITER = 300
"""The most Lloyd steps of the polish (``KMeans``' default ``max_iter``)."""

TIE_TOLERANCE = 1e-12
"""Two candidates whose inertias differ by at most this fraction tie (rounding, not clustering:
from one partition of the points, Lloyd's means differ by rounding alone)."""


# ------------------------------------------------------------------------------ the seedings
def initial_centers(
    init: str | np.ndarray | Callable[..., Any],
    X: np.ndarray,
    unit: float,
    n_clusters: int,
    n_init: int,
    random_state: np.random.RandomState,
) -> np.ndarray:
    """(n_init, k, d) initial centres (float64) for the data ``X`` in their ``unit``, by ``init``
    (a name of :data:`~kmtlib.estimator.params.INITS`, checked): a given array or a callable's
    (``init(X_user, n_clusters, random_state)``, once per seeding, as ``KMeans``) are in the
    user's space and divided by the unit."""
    if callable(init):
        X_user = X * unit  # (exact: the unit is a power of two)
        return np.stack([given_centers(init, init(X_user, n_clusters, random_state), n_clusters, X.shape[1])
                         for _ in range(n_init)]) / unit  # fmt: skip
    if not isinstance(init, str):
        return given_centers(init, init, n_clusters, X.shape[1])[None] / unit
    # one torch generator on the CPU seeded from the random state: the same centres on every device
    generator = torch.Generator().manual_seed(int(random_state.randint(np.iinfo(np.int32).max)))
    Xt = as_task(X).expand(n_init, *X.shape)
    method, trials = _KMTLIB_INIT[init]
    trials = greedy_trials(n_clusters) if trials is None else trials
    return init_centers_unchecked(Xt, n_clusters, method, generator, trials).numpy()


# ------------------------------------------------------------------------ the layer's passes
def run_model(model: KMeansTransformer, X: torch.Tensor, C0: torch.Tensor, steps: int, filled: int) -> torch.Tensor:
    """The final centres (B, k, D) after ``steps`` steps of ``model`` on the points X (m, D)
    from each of the B initial centres ``C0`` (B, k, D).

    The seedings run as batches of tasks, as many at a time as keep the m x m attention of a
    batch within :data:`~kmtlib.estimator.model.ATTENTION_BATCH_BYTES` (one at least). A model
    that re-embeds its tokens every step runs one step at a time, with its centres projected onto
    the first ``filled`` coordinates, those the data fill (zero padding stays zero); otherwise
    the model runs as a whole (a fixed-weight model's whole pass by one kernel, where it applies)."""
    per_task = attention_bytes(X.shape[0], X.element_size())
    batch = max(1, min(C0.shape[0], ATTENTION_BATCH_BYTES // per_task))
    finals = []
    whole = whole_pass(model)
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


def run_in(
    domain: DomainMap, model: KMeansTransformer, points: np.ndarray, C0: np.ndarray, steps: int
) -> list[np.ndarray]:
    """The final centres of every seeding C0 (B, k, d) after ``steps`` steps of ``model`` on
    ``points`` mapped into its domain by ``domain``, mapped back (a list of B (k, d))."""
    like = next(model.parameters())
    Xm = torch.as_tensor(domain.to_model(points), dtype=like.dtype, device=like.device)
    C0m = torch.as_tensor(np.stack([domain.to_model(c) for c in C0]), dtype=like.dtype, device=like.device)
    with torch.inference_mode():
        final = run_model(model, Xm, C0m, steps, filled=domain.reduced).to(device="cpu", dtype=torch.float64)
    return [domain.to_user(c) for c in final.numpy()]


# ------------------------------------------------------------------ read-out and polish
def means_readout(X: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Every centre moved to the mean of the points nearest to it (float64); a centre nearest to
    no point stays where it is: one Lloyd step (:func:`kmtlib.lloyd.lloyd_step`, ``empty="keep"``),
    the read-out ``readout="means"``."""
    return lloyd_step_unchecked(as_task(X), as_task(centers), empty="keep")[0][0].numpy()


def lloyd_to_fixed_point(X: np.ndarray, centers: np.ndarray, max_iter: int = POLISH_MAX_ITER) -> np.ndarray:
    """Lloyd's algorithm in float64 from centres (B, k, d) on the points X (n, d), all B starts at
    once, until no label changes (a fixed point: every centre the mean of the points nearest to it)
    or ``max_iter`` steps. The centre of a cluster that receives no point moves onto the point
    farthest from its own centre, as ``KMeans`` relocates an empty cluster
    (:func:`onto_farthest_points`), so on data with fewer distinct points than k (constant or
    duplicated data) every centre lies on a data point. The distances are taken about the data's
    mean (nothing else changes), so data far from the origin lose no digits. X and the centres
    are finite (checked once by the caller, not at every step)."""
    mean = X.mean(axis=0)
    Xt = as_task(X - mean).expand(centers.shape[0], *X.shape)
    C = torch.as_tensor(centers - mean, dtype=torch.float64)
    # the distance frame once: every later centre is a mean of points or a point, within the
    # range of the points and the start (the frame's shift depends on the points alone)
    frame = DistanceFrame.of(Xt, C)
    labels = None
    for _ in range(max_iter):
        previous = C
        C, new, counts = lloyd_step_unchecked(Xt, C, empty="keep", frame=frame)
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


# ------------------------------------------------------------------ the choice of the run
def inertias(X: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """The inertia (B,) of every set of centres (B, k, d) on the points X (n, d), in float64."""
    return np.array([labels_inertia(X, c)[1] for c in centers])


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


class FitResult(NamedTuple):
    """The run a fit keeps: its centres (in the user's unit and the data's dtype), labels and
    inertia, its index among the runs, whether the model earned it and whether it tied with its
    seeding (``from_model_``, ``tied_with_seeding_``)."""

    centers: np.ndarray
    labels: np.ndarray
    inertia: float
    best: int
    from_model: bool
    tied_with_seeding: bool


def finish(
    X: np.ndarray,
    X64: np.ndarray,
    unit: float,
    C0: np.ndarray,
    runs: np.ndarray,
    trained: bool,
    settings: FitSettings,
    readout: str,
) -> FitResult:
    """The end of a fit from the model's centres ``runs`` (frames x n_init, k, d; in the data's
    ``unit``, like ``X64`` and the seedings ``C0`` (n_init, k, d)): a trained model's read-out;
    the polish; for a trained model, per run the better of this and its seeding (polished too
    where the model's result is: Lloyd from the seeding); the run of lowest inertia on the
    user's data ``X``."""
    if trained and readout == "means":
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
    scores = [labels_inertia_in_unit(X, c, unit) for c in runs]
    best = int(np.argmin([inertia for _, inertia in scores]))
    return FitResult(runs[best], *scores[best], best, bool(better[best]), bool(tied[best]))
