"""Multi-step evaluation of trained layers against Lloyd (the paper's Fig. 4 protocol; the
authors' ``plot_eval_ood_gen.py`` in github.com/rithram/kmeans-trf).

The single trained layer is applied ``steps`` times with re-embedding before every step (the
model's own forward does this for models built with ``reembed=True``), and Lloyd runs the same
number of iterations from the same initial centres. The metric is the average over tasks of the
log k-means objective at every step t = 0..T; over several training seeds the paper plots the
median and the min-max range of that per-seed average.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .._checks import check_centers, check_choice, check_generator, check_int, check_points
from ..chunks import in_chunks
from ..lloyd import EMPTY_RULES, lloyd
from ..transformer import KMeansTransformer


@dataclass
class MultistepEvaluation:
    """Per-step results of one model and of Lloyd on the same tasks.

    Attributes:
        model_objective: (B, T+1) the model's k-means objective per task and step.
        lloyd_objective: (B, T+1) Lloyd's, from the same initial centres.
        model_log_objective: (T+1,) mean over tasks of log(model_objective).
        lloyd_log_objective: (T+1,) mean over tasks of log(lloyd_objective).
        lloyd_empty: the empty-cluster rule Lloyd used.
    """

    model_objective: torch.Tensor
    lloyd_objective: torch.Tensor
    model_log_objective: torch.Tensor
    lloyd_log_objective: torch.Tensor
    lloyd_empty: str

    @property
    def steps(self) -> int:
        return self.model_objective.shape[1] - 1


@torch.no_grad()
def model_objectives(
    model: KMeansTransformer,
    X: torch.Tensor,
    C0: torch.Tensor,
    steps: int,
    batch_size: int = 32,
    dropout_seed: int | None = None,
) -> torch.Tensor:
    """The model's objective (B, T+1) over ``steps`` re-embedded steps, in eval mode, computed in
    chunks of ``batch_size`` tasks (the self-attention of a chunk is batch_size * n^2 numbers).

    ``dropout_seed``: None (default) switches attention dropout off, as evaluation usually does.
    An integer leaves the layer's attention dropout on, as the authors' evaluation does (their
    model stays in training mode), with its draws from a generator seeded with ``dropout_seed``
    (the layer's own generator is put back afterwards), so the same seed gives the same numbers.
    The embedding stays in eval mode either way."""
    was_training, layer_was_training, generator = model.training, model.layer.training, model.layer.generator
    model.eval()
    try:
        if dropout_seed is not None:
            seed = check_int("dropout_seed", dropout_seed, minimum=0)
            model.layer.generator = torch.Generator(device=X.device).manual_seed(seed)
            model.layer.train()
        return in_chunks(lambda Xc, Cc: model(Xc, Cc, steps=steps).objective, X, C0, size=batch_size)
    finally:
        model.train(was_training)
        model.layer.train(layer_was_training)
        model.layer.generator = generator


def evaluate_multistep(
    model: KMeansTransformer,
    X: torch.Tensor,
    C0: torch.Tensor,
    steps: int = 20,
    lloyd_empty: str = "random",
    generator: torch.Generator | int | None = None,
    batch_size: int = 32,
    dropout_seed: int | None = None,
) -> MultistepEvaluation:
    """Apply ``model`` for ``steps`` steps (re-embedding every step, model.eval(), no gradient) and
    Lloyd for as many iterations from the same initial centres.

    Args:
        model: a :class:`~kmtlib.KMeansTransformer` (trained layers re-embed before every step).
        X: points (B, n, d) in the model's dtype and device.
        C0: initial centres (B, k, d).
        steps: number of steps T (the paper uses 20).
        lloyd_empty: Lloyd's empty-cluster rule (default ``"random"``, the authors' baseline: an
            empty cluster's centre jumps to a random point of the task); one of
            :data:`kmtlib.EMPTY_RULES`.
        generator: randomness for ``lloyd_empty="random"`` (a Generator on X's device or a seed).
        batch_size: tasks per forward pass of the model.
        dropout_seed: None (default): attention dropout off; an integer: left on, as the authors'
            evaluation does, with its draws seeded (:func:`model_objectives`).

    Returns:
        A :class:`MultistepEvaluation`.
    """
    if not isinstance(model, KMeansTransformer):
        raise TypeError(f"model must be a kmtlib KMeansTransformer, got {type(model).__name__}")
    check_points(X)
    check_centers(C0, X)
    steps = check_int("steps", steps, minimum=0)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    check_choice("empty-cluster rule", lloyd_empty, EMPTY_RULES)
    g = check_generator(generator, X.device)
    model_obj = model_objectives(model, X, C0, steps, batch_size, dropout_seed)
    lloyd_obj = lloyd(X, C0, steps, empty=lloyd_empty, generator=g).objective
    return MultistepEvaluation(
        model_objective=model_obj,
        lloyd_objective=lloyd_obj,
        model_log_objective=model_obj.log().mean(dim=0),
        lloyd_log_objective=lloyd_obj.log().mean(dim=0),
        lloyd_empty=lloyd_empty,
    )


@dataclass
class SeedSummary:
    """Task-averaged log-objective per step over S models (seeds).

    ``model_curves``/``lloyd_curves``: (S, T+1), one row per seed. ``model_median``, ``model_min``,
    ``model_max`` and the same for Lloyd: (T+1,), the median and the min-max range over seeds.
    ``evaluations``: the per-seed :class:`MultistepEvaluation`.
    """

    model_curves: torch.Tensor
    lloyd_curves: torch.Tensor
    model_median: torch.Tensor
    model_min: torch.Tensor
    model_max: torch.Tensor
    lloyd_median: torch.Tensor
    lloyd_min: torch.Tensor
    lloyd_max: torch.Tensor
    evaluations: list[MultistepEvaluation]

    def as_dict(self) -> dict[str, list]:
        """Plain lists (for metrics.json)."""
        names = ("model_median", "model_min", "model_max", "lloyd_median", "lloyd_min", "lloyd_max")
        out: dict[str, list] = {name: getattr(self, name).tolist() for name in names}
        out["model_curves"] = self.model_curves.tolist()
        out["lloyd_curves"] = self.lloyd_curves.tolist()
        return out


def _median(t: torch.Tensor) -> torch.Tensor:
    # The usual median (mean of the two middle values for an even count), unlike torch.median.
    return t.quantile(0.5, dim=0) if t.dtype in (torch.float32, torch.float64) else t.median(dim=0).values


def evaluate_seeds(
    models: Sequence[KMeansTransformer],
    X: torch.Tensor | Sequence[torch.Tensor],
    C0: torch.Tensor | Sequence[torch.Tensor],
    steps: int = 20,
    lloyd_empty: str = "random",
    generator: torch.Generator | int | None = None,
    batch_size: int = 32,
    dropout_seed: int | None = None,
) -> SeedSummary:
    """Evaluate several models (one per training seed) as :func:`evaluate_multistep` and summarise
    over seeds: the median and the min-max range of the task-averaged log-objective per step (the
    paper's curves and ribbons).

    ``X`` and ``C0`` are either one batch of tasks shared by all models, or one per model (the
    paper evaluates every seed on its own validation tasks). Lloyd runs on each model's tasks;
    with a shared ``generator`` its random empty-cluster draws continue from seed to seed.
    ``dropout_seed`` (None: dropout off) leaves attention dropout on, the i-th model's draws seeded
    with ``dropout_seed + i``.
    """
    models = list(models)
    if not models:
        raise ValueError("models is empty; pass at least one model")
    shared = isinstance(X, torch.Tensor)
    if shared != isinstance(C0, torch.Tensor):
        raise TypeError("X and C0 must both be tensors (shared tasks) or both sequences (one per model)")
    xs: list[torch.Tensor] = [X] * len(models) if isinstance(X, torch.Tensor) else list(X)
    cs: list[torch.Tensor] = [C0] * len(models) if isinstance(C0, torch.Tensor) else list(C0)
    if len(xs) != len(models) or len(cs) != len(models):
        raise ValueError(f"got {len(models)} models but {len(xs)} point sets and {len(cs)} initial centre sets")
    g = check_generator(generator, xs[0].device)
    seeds = [None if dropout_seed is None else dropout_seed + i for i in range(len(models))]
    evaluations = [
        evaluate_multistep(m, x, c, steps, lloyd_empty, g, batch_size, s)
        for m, x, c, s in zip(models, xs, cs, seeds)
    ]
    model_curves = torch.stack([e.model_log_objective for e in evaluations])
    lloyd_curves = torch.stack([e.lloyd_log_objective for e in evaluations])
    return SeedSummary(
        model_curves=model_curves,
        lloyd_curves=lloyd_curves,
        model_median=_median(model_curves),
        model_min=model_curves.amin(dim=0),
        model_max=model_curves.amax(dim=0),
        lloyd_median=_median(lloyd_curves),
        lloyd_min=lloyd_curves.amin(dim=0),
        lloyd_max=lloyd_curves.amax(dim=0),
        evaluations=evaluations,
    )
