"""The forward pass with the kernels of :mod:`kmtlib.kernels`, where :mod:`.choice` says they apply.

Each function here is the formula's own function (:meth:`kmtlib.layer.AttentionBlock.forward`,
:meth:`kmtlib.layer.KMeansLayer.forward`, :meth:`kmtlib.KMeansTransformer.forward`) with a kernel
in place of a block or of the whole pass: the same operations in the same order elsewhere, so
the same numbers (the tests compare the two).
"""

from __future__ import annotations

from typing import Any

import torch

from ..kernels import limit_model
from ..kernels.euclidean_softmax import sample_dropped
from ..kernels.point_attention import point_self_attention
from ..layer import AttentionBlock, KMeansLayer, normalise_data
from ..objective import _kmeans_objective, _nearest_center, assignment_cost_rows, center_rows
from ..results import ClusteringResult
from .choice import attention_kernel, limit_blocks, point_coordinates, writes_hard_assignment

KMeansTransformer = Any
"""A :class:`kmtlib.KMeansTransformer` (typed loosely: this room sits below the model's)."""


def attend(block: AttentionBlock, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``block(queries, keys)``, by a kernel where one applies."""
    c = block.config
    p = c.dropout if block.training else 0.0
    points = point_coordinates(block, queries, keys)
    if points is not None:  # (the same numbers from d-wide products: kernels.point_attention)
        B, n, _ = points.shape
        dropped = sample_dropped(B * n * n, p, block.generator, points.device)
        Q, K, V = block.linear_maps()  # (affine maps with bias: point_coordinates checked)
        maps = (Q.weight, Q.bias), (K.weight, K.bias), (V.weight, V.bias)
        return point_self_attention(points, *maps, c.inverse_temperature, dropped, p)
    kernel = attention_kernel(block)
    if kernel is None:
        return block(queries, keys)
    return kernel(block.query(queries), block.key(keys), block.value(keys), p)


def layer_step(layer: KMeansLayer, X: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``layer(X, C)`` with each block by :func:`attend` (the update of :class:`~kmtlib.layer.KMeansLayer`)."""
    d = layer.config.d
    if layer.config.normalise_data:
        X, C = normalise_data(X, d), normalise_data(C, d)
    assign, reset = attend(layer.CAX, X, C), attend(layer.SAX, X, X)
    X = X + reset + assign
    means, reset = attend(layer.CAC, C, X), attend(layer.SAC, C, C)
    C = C + reset + means
    if layer.ffn is not None:
        C = C + layer.ffn(C)
    if layer.config.normalise_data:
        C = normalise_data(C, d)
    return X, C


def limit_runner(model: KMeansTransformer) -> limit_model.LimitRunner:
    """The model's compiled blocks and scratch memory of the fixed-weight forward, kept from call to call."""
    if model.limit_runner is None:
        model.limit_runner = limit_model.LimitRunner()
    return model.limit_runner


def limit_forward(model: KMeansTransformer, X: torch.Tensor, C0: torch.Tensor, steps: int) -> ClusteringResult:
    """``model(X, C0, steps)`` by :mod:`kmtlib.kernels.limit_model` (where :func:`.choice.uses_limit_kernel`):
    coordinate-major point tokens updated in place, and where the layer writes the hard assignment
    (:func:`.choice.writes_hard_assignment`) that assignment written in one pass and the objective
    read from its labels instead of a second distance computation."""
    trajectory, objectives, point_tokens = limit_steps(model, X, C0, steps, measure=True)
    scratch = limit_runner(model).scratch
    with torch.no_grad():
        labels = _nearest_center(X, trajectory[-1])
        objectives.append(assignment_cost_rows(X, trajectory[-1], center_rows(labels, model.k), scratch))
    return ClusteringResult(
        centers=torch.stack(trajectory, dim=1),
        labels=labels,
        objective=torch.stack(objectives, dim=1),
        assignments=model.embedding.assignments(point_tokens) if steps > 0 else None,
    )


def limit_steps(
    model: KMeansTransformer, X: torch.Tensor, C0: torch.Tensor, steps: int, measure: bool
) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """The ``steps`` layers of the fixed-weight forward: the centre trajectory, the objective of
    every centres before the last (``measure``; else an empty list) and the last point tokens."""
    runner = limit_runner(model)
    hard = writes_hard_assignment(model.layer)
    runner.compile(limit_blocks(model.layer), model.layer.ffn, hard_assignment=hard)
    _, center_tokens = model.embedding.embed(X[:, :1], C0)
    point_tokens = limit_model.point_tokens(X, model.width, model.k, model.config.embedding == "norm_augmented")
    trajectory = [C0]
    objectives: list[torch.Tensor] = []
    with torch.no_grad():
        for _ in range(steps):
            point_tokens, center_tokens = runner.advance_(point_tokens, center_tokens)
            if measure:
                objectives.append(_limit_objective(model, X, trajectory[-1], point_tokens, hard))
            trajectory.append(model.embedding.centers(center_tokens))
    return trajectory, objectives, point_tokens


def _limit_objective(
    model: KMeansTransformer, X: torch.Tensor, C: torch.Tensor, point_tokens: torch.Tensor, hard: bool
) -> torch.Tensor:
    """The objective (B,) of the centres C a layer of the fast forward read: from the assignment
    it wrote where it is the hard nearest-centre assignment, else by a distance computation."""
    if not hard:
        return _kmeans_objective(X, C)
    runner = limit_runner(model)
    labels = runner.labels  # (the lowest positive assignment, where the kernel read it)
    if labels is None:
        assignments = model.embedding.assignments(point_tokens)
        assert assignments is not None  # (one-hot tokens, checked by writes_hard_assignment)
        labels = limit_model.lowest_positive(assignments)
    return assignment_cost_rows(X, C, center_rows(labels, model.k), runner.scratch)
