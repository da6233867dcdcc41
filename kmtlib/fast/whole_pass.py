"""The whole forward pass of a fixed-weight model by one kernel, :mod:`kmtlib.kernels.limit_model`:
what :func:`kmtlib.whole_pass` returns when it is asked for by name (``kmtlib.whole_pass(model)(X,
C0, steps)``, as ``torch.compile(model)`` is); ``model(X, C0, steps)`` runs the layer step.

:class:`WholePass` holds the kernel's compiled blocks and scratch memory from call to call (it
belongs to the caller that asked for the whole pass, not to the model). The kernel runs the limit
(hard attention) and the finite-temperature soft-max and linear maps alike; it keeps its own
update of the layer (coordinate-major tokens updated in place, fused); ``tests/test_kernels.py``
pins it to :meth:`kmtlib.layer.KMeansLayer.forward`: centres and objective within float64
rounding (the order of its sums differs), labels and hard assignments bitwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

import torch
from torch import nn

from ..embedding import Embedding
from ..kernels import limit_model
from ..layer import KMeansLayer, LayerConfig
from ..objective import assignment_cost_rows, center_rows, kmeans_objective_unchecked, nearest_center_in_frame
from ..results import ClusteringResult
from .choice import limit_blocks, writes_hard_assignment

WHOLE_PASS_SCORES: tuple[str, ...] = ("euclidean", "dot")
WHOLE_PASS_MAPS: tuple[str, ...] = ("softmax", "hardmax", "linear")
"""The block scores and maps that :mod:`kmtlib.kernels.limit_model` computes."""


def uses_whole_pass_kernel(
    config: LayerConfig, parameters: Iterable[nn.Parameter], training: bool, X: torch.Tensor, C0: torch.Tensor
) -> bool:
    """Whether the whole pass of a model of this configuration on ``(X, C0)`` runs
    :mod:`kmtlib.kernels.limit_model`: fixed weights, no autograd, the tokens going from layer to
    layer, linear maps without bias, blocks of Euclidean or dot scores with soft-max, hard or
    linear maps (no dropout in ``training`` mode)."""
    c = config
    if c.reembed or c.normalise_data or c.bias or c.any_k or c.embedding == "data":
        return False
    if torch.is_grad_enabled() and (X.requires_grad or C0.requires_grad or any(p.requires_grad for p in parameters)):
        return False
    return all(
        b.score in WHOLE_PASS_SCORES and b.map in WHOLE_PASS_MAPS and not b.options
        and (b.dropout == 0 or not training)
        for b in c.blocks.values()
    )  # fmt: skip


class Model(Protocol):
    """What a whole pass reads of a :class:`kmtlib.KMeansTransformer` (the model's room sits above
    this one): its configuration, layer, embedding, mode and parameters, its input checks and its
    result type, and the model itself, called where the kernel does not apply."""

    config: LayerConfig
    layer: KMeansLayer
    embedding: Embedding
    training: bool

    def parameters(self) -> Iterator[nn.Parameter]: ...
    def checked_steps(self, X: torch.Tensor, C0: torch.Tensor, steps: int) -> int: ...
    def result(self, X: torch.Tensor, trajectory: list[torch.Tensor], assignments: torch.Tensor | None,
               **measured: torch.Tensor) -> ClusteringResult: ...  # fmt: skip
    def __call__(self, X: torch.Tensor, C0: torch.Tensor, steps: int = 1) -> ClusteringResult: ...


class WholePass:
    """A fixed-weight model's whole forward pass by one kernel, asked for by name where its speed
    is wanted, as ``torch.compile(model)`` is::

        whole = kmtlib.whole_pass(model)
        result = whole(X, C0, steps)          # as model(X, C0, steps), the same result type

    The kernel keeps coordinate-major point tokens, updates them in place and, in Theorem 2.1's
    limit, reads the objective from the assignment the tokens hold; it computes the model's
    numbers (module documentation). Where it does not apply (a re-embedding or learning layer,
    autograd, another map: :func:`uses_whole_pass_kernel`) the call is ``model(X, C0, steps)``.
    The compiled blocks and scratch memory are this object's, kept from call to call (not
    thread-safe: one pass at a time)."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.runner = limit_model.LimitRunner()

    def applies(self, X: torch.Tensor, C0: torch.Tensor) -> bool:
        """Whether the kernel runs the pass on these inputs (:func:`uses_whole_pass_kernel`;
        inputs that are not tensors go to the model, which says what is wrong)."""
        model, tensors = self.model, isinstance(X, torch.Tensor) and isinstance(C0, torch.Tensor)
        return tensors and uses_whole_pass_kernel(model.config, model.parameters(), model.training, X, C0)

    def __call__(self, X: torch.Tensor, C0: torch.Tensor, steps: int = 1) -> ClusteringResult:
        """``model(X, C0, steps)`` by the kernel: the model's result with the labels and the
        objective the kernel measured."""
        model = self.model
        if not self.applies(X, C0):
            return model(X, C0, steps)
        steps = model.checked_steps(X, C0, steps)
        trajectory, objectives, labels, point_tokens = self.run(model.layer, model.embedding, X, C0, steps, True)
        assignments = model.embedding.assignments(point_tokens) if steps > 0 else None
        assert labels is not None  # (measured)
        return model.result(X, trajectory, assignments, labels=labels, objective=torch.stack(objectives, dim=1))

    def final_centers(self, X: torch.Tensor, C0: torch.Tensor, steps: int = 1) -> torch.Tensor:
        """The centres (B, k, d) after ``steps`` layers, bitwise ``self(X, C0, steps).final_centers``,
        without measuring the objective of every step (for a caller that measures its own, as the
        estimator does: about a third of the kernel's work)."""
        model = self.model
        if not self.applies(X, C0):
            return model(X, C0, steps).final_centers
        steps = model.checked_steps(X, C0, steps)
        return self.run(model.layer, model.embedding, X, C0, steps, False)[0][-1]

    def run(
        self, layer: KMeansLayer, embedding: Embedding, X: torch.Tensor, C0: torch.Tensor, steps: int, measure: bool
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor | None, torch.Tensor]:
        """The ``steps`` layers from ``C0``: the centre trajectory, the objective of every centres
        and the nearest-centre labels under the last (``measure``; else an empty list and None),
        and the last point tokens."""
        config, runner = layer.config, self.runner
        hard = writes_hard_assignment(config)
        runner.compile(limit_blocks(layer), layer.ffn, hard_assignment=hard)
        _, center_tokens = embedding.embed(X[:, :1], C0)
        point_tokens = limit_model.point_tokens(X, config.width, config.k, config.embedding == "norm_augmented")
        trajectory, objectives = [C0], []
        for _ in range(steps):
            point_tokens, center_tokens = runner.advance_(point_tokens, center_tokens)
            if measure:
                objectives.append(self.objective(embedding, X, trajectory[-1], point_tokens, hard))
            trajectory.append(embedding.centers(center_tokens))
        labels = nearest_center_in_frame(X, trajectory[-1]) if measure else None
        if labels is not None:
            objectives.append(self.cost(X, trajectory[-1], labels))
        return trajectory, objectives, labels, point_tokens

    def objective(
        self, embedding: Embedding, X: torch.Tensor, C: torch.Tensor, point_tokens: torch.Tensor, hard: bool
    ) -> torch.Tensor:
        """The objective (B,) of the centres C a layer read: from the assignment it wrote where it is
        the hard nearest-centre assignment, else by a distance computation."""
        if not hard:
            return kmeans_objective_unchecked(X, C)
        labels = self.runner.labels  # (the lowest positive assignment, where the kernel read it)
        if labels is None:
            assignments = embedding.assignments(point_tokens)
            assert assignments is not None  # (one-hot tokens, checked by writes_hard_assignment)
            labels = limit_model.lowest_positive(assignments)
        return self.cost(X, C, labels)

    def cost(self, X: torch.Tensor, C: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The objective (B,) of the centres C under these labels (B, n)."""
        return assignment_cost_rows(X, C, center_rows(labels, C.shape[1]), self.runner.scratch)
