"""The k-means transformer: one module type for the fixed-weight constructions, the trainable
layer and the circuit variants.

A model is an :class:`~kmtlib.embedding.Embedding` (points and centres to tokens and back) and a
layer (tokens to tokens). Calling it on ``(X, C0, steps=T)`` applies the layer T times and
returns the same kind of :class:`~kmtlib.results.ClusteringResult` as :func:`kmtlib.lloyd`.

* Weight-shared multi-layer models (the theorems) carry the tokens from layer to layer.
* Models with ``reembed=True`` (the trained single layer) rebuild the tokens from the current
  centres before every step, so the one learned layer acts as a map C(t) -> C(t+1).
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from . import fast as fast_path
from ._atomic_save import atomic_torch_save
from ._checks import check_centers, check_int, check_points, check_square_range
from ._version import __version__
from .constructions import load_theorem_weights, theorem_config
from .domain.trained import TrainingDomain, warn_outside_training_domain
from .embedding import make_embedding
from .layer import KMeansLayer, LayerConfig
from .learned import init_trainable_weights, initial_weights_generator, trainable_config
from .objective import kmeans_objective_unchecked, nearest_center_in_frame
from .results import ClusteringResult
from .variants import import_all, load_circuit_weights, variant_config

MODEL_FORMAT = "kmtlib.KMeansTransformer/4"
"""The format :meth:`KMeansTransformer.save` writes; its history, and the reading of every format,
in :mod:`kmtlib.io.model_file`."""


class ModelResult(ClusteringResult):
    """The :class:`ClusteringResult` of a model's forward pass: the centre ``trajectory`` the layer
    computed and the assignment weights its point tokens hold, with the ``labels`` and the
    ``objective`` measured from the points when first read (without gradient), not by the forward
    pass: a caller that wants only the centres (training, the estimator) computes no distances.
    (The whole pass, :class:`kmtlib.fast.WholePass`, passes in the ``labels`` and ``objective`` it measured.)"""

    def __init__(self, X: Tensor, trajectory: list[Tensor], assignments: Tensor | None, **measured: Tensor) -> None:
        self.points, self.trajectory = X, [C.detach() for C in trajectory]
        self.centers, self.n_empty, self.assignments = torch.stack(trajectory, dim=1), None, assignments
        self.__dict__.update(measured)  # (the labels or objective a whole pass measured: the properties below)

    # (the two fields of ClusteringResult as cached properties: computed once, on first reading)
    @functools.cached_property
    def labels(self) -> torch.Tensor:  # type: ignore[override]
        """(B, n), the nearest centre of every point under the final centres."""
        with torch.no_grad():
            return nearest_center_in_frame(self.points, self.trajectory[-1])

    @functools.cached_property
    def objective(self) -> torch.Tensor:  # type: ignore[override]
        """(B, T+1), the k-means objective of every centres of the trajectory."""
        with torch.no_grad():
            return torch.stack([kmeans_objective_unchecked(self.points, C) for C in self.trajectory], dim=1)


class KMeansTransformer(nn.Module):
    """A k-means transformer over ``d``-dimensional points with ``k`` centres: an embedding
    (points and centres to tokens and back) and one :class:`~kmtlib.layer.KMeansLayer`.

    Build one with :meth:`from_theorem`, :meth:`trainable` or :meth:`from_variant`, or from a
    :class:`~kmtlib.layer.LayerConfig` of your own (then initialise ``model.layer``'s weights).

    Attributes:
        config: the :class:`~kmtlib.layer.LayerConfig`, saved with the weights.
        embedding: the :class:`~kmtlib.embedding.Embedding` ``config.embedding``.
        layer: the :class:`~kmtlib.layer.KMeansLayer`.
        fast: compute each block's attention by a kernel of :mod:`kmtlib.fast` where one applies
            (default True); ``False`` runs every block by its formula (the same numbers up to
            rounding). Either way :meth:`forward` runs :meth:`kmtlib.layer.KMeansLayer.forward`;
            the whole pass of one kernel is asked for by name, :func:`whole_pass`.
    """

    def __init__(self, config: LayerConfig) -> None:
        super().__init__()
        if not isinstance(config, LayerConfig):
            raise TypeError(f"a KMeansTransformer is built from a LayerConfig, got {type(config).__name__}")
        import_all()  # (a block may use a score or map that a variant registers)
        self.config = config.validated()
        self.embedding = make_embedding(config.embedding, config.d, config.k, config.code_width, config.seed)
        self.layer = KMeansLayer(self.config)
        self.fast = True
        # (where a trained layer's training tasks lay: recorded by training, read from its model file)
        self.training_domain = TrainingDomain.documented(config.d) if config.trainable else None

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_theorem(cls, d: int, k: int, gamma: float = math.inf, attention: str = "euclidean", **options: Any):
        """The fixed-weight construction of Theorem 2.1 (``attention="euclidean"``) or 2.2 (``"dot"``):
        the blocks of :func:`~kmtlib.constructions.theorem_config` (its options) with the weights of
        :func:`~kmtlib.theorems.theorem_weights` (``model.layer.CAX.query.weight`` is ``Q_1``, ...)."""
        model = cls(theorem_config(d, k, gamma, attention, **options))
        load_theorem_weights(model.layer, attention)
        return model

    @classmethod
    def trainable(
        cls,
        d: int,
        k: int,
        *,
        fast: bool = True,
        generator: torch.Generator | int | None = None,
        dtype: torch.dtype | None = None,
        device: str | torch.device | None = None,
        **options: Any,
    ):
        """The learnable single layer of the paper's learning experiments, re-embedding before every
        step: the blocks of :func:`~kmtlib.learned.trainable_config` (``d``, ``k`` and its options:
        ``embedding``, ``gamma``, ``dropout``, ``any_k``, ``cluster_broadcast``, ``code_width``) with
        the weights of :func:`~kmtlib.learned.init_trainable_weights`.

        Args:
            d, k, options: those of :func:`~kmtlib.learned.trainable_config`.
            fast: the model's kernel switch (``model.fast``): True uses the hand-written Euclidean
                soft-max kernel, False the formula (cdist + soft-max; dropout from the global RNG).
            generator: a ``torch.Generator`` or an integer seed for the initial weights (None: the
                global RNG, so ``torch.manual_seed`` makes the initialisation deterministic).
            dtype, device: where the weights live (default float32, CPU).
        """
        config = trainable_config(d, k, **options)
        if not isinstance(fast, bool):
            raise TypeError(f"fast must be True or False, got {fast!r}")
        generator = initial_weights_generator(generator)
        model = cls(config)
        init_trainable_weights(model.layer, generator)
        model.fast = fast
        if dtype is not None:
            model = model.to(dtype)
        if device is not None:
            model = model.to(device)
        return model

    @classmethod
    def from_variant(cls, name: str, d: int, k: int, **options: Any):
        """A circuit variant: ``"soft"``, ``"spherical"``, ``"trimmed"``, ``"robust"`` or ``"kmedoids"``
        (the blocks of :func:`~kmtlib.variants.variant_config`, Theorem 2.1's weights)."""
        model = cls(variant_config(name, d, k, **options))
        load_circuit_weights(model.layer)
        return model

    # ------------------------------------------------------------------ properties
    @property
    def d(self) -> int:
        return self.config.d

    @property
    def k(self) -> int:
        return self.config.k

    @property
    def width(self) -> int:
        """Token width D."""
        return self.config.width

    @property
    def reembed(self) -> bool:
        """Whether the tokens are rebuilt from the current centres before every step (``config.reembed``)."""
        return self.config.reembed

    @reembed.setter
    def reembed(self, value: bool) -> None:
        # (the same weights applied the other way: the configuration says so, as saved)
        self.config = self.layer.config = self.config.replace(reembed=bool(value))

    def train(self, mode: bool = True) -> KMeansTransformer:
        """``nn.Module.train``; also tells an embedding with random codes which mode it is in."""
        super().train(mode)
        if hasattr(self.embedding, "training"):
            self.embedding.training = mode
        return self

    def extra_repr(self) -> str:
        return f"d={self.d}, k={self.k}, width={self.width}, reembed={self.reembed}, origin={self.config.origin!r}"

    # ------------------------------------------------------------------ running
    def checked_steps(self, X: torch.Tensor, C0: torch.Tensor, steps: int, warn: bool = True) -> int:
        """Check the inputs of a forward pass (a trained layer warns where they lie outside its
        domain, unless not ``warn``) and seed the layer's random maps; the number of steps."""
        check_points(X)
        check_centers(C0, X)
        if X.shape[-1] != self.d:
            raise ValueError(f"the model is built for d={self.d} but X has d={X.shape[-1]}")
        if C0.shape[1] != self.k and not self.config.reads_any_k:
            raise ValueError(f"the model is built for k={self.k} centres but C0 has {C0.shape[1]}")
        # the tokens hold the data in its own scale: their squares must stay in the dtype's range
        check_square_range(X, C0, self.d + C0.shape[1] if self.config.any_k else self.width, "the k-means transformer")
        w = next(self.parameters())
        if w.dtype != X.dtype:
            raise TypeError(f"the model's weights are {w.dtype} but X is {X.dtype}; call model.to({X.dtype})")
        if w.device != X.device:
            raise ValueError(f"the model's weights are on {w.device} but X is on {X.device}; call model.to(X.device)")
        steps = check_int("steps", steps, minimum=0)
        if warn and self.training_domain is not None:
            warn_outside_training_domain(X, self.training_domain)
        self.layer.seed_generator_for(X.device)
        return steps

    def step(self, X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
        """One step from fresh tokens: the centres (B, k, d) after one layer (the training hot path;
        no input checks)."""
        self.layer.seed_generator_for(X.device)
        point_tokens, center_tokens = self.embedding.embed(X, C)
        _, center_tokens = self.apply_layer(point_tokens, center_tokens)
        return self.embedding.centers(center_tokens)

    def apply_layer(self, point_tokens: torch.Tensor, center_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer on tokens: ``self.layer(point_tokens, center_tokens)``, with ``fast`` each
        block's attention by a kernel where one applies (:func:`kmtlib.fast.attend`)."""
        # (with fast: the same numbers up to rounding, faster; else each block by its formula)
        return self.layer(point_tokens, center_tokens, attend=fast_path.attend if self.fast else None)

    def forward(self, X: torch.Tensor, C0: torch.Tensor, steps: int = 1) -> ClusteringResult:
        """Apply the layer ``steps`` times from the initial centres ``C0``.

        Returns a :class:`ModelResult`: the centre trajectory (B, T+1, k, d), the nearest-centre
        labels under the final centres (B, n) and the objective per step (B, T+1), both measured
        when first read, and the assignment weights the point tokens hold after the last layer.
        A trained layer (``config.trainable``) warns on data outside the tasks it was trained on
        (:func:`kmtlib.domain.trained.warn_outside_training_domain`).
        """
        steps = self.checked_steps(X, C0, steps)
        point_tokens, center_tokens = self.embedding.embed(X, C0)
        trajectory = [C0]
        for t in range(steps):
            if self.reembed and t > 0:
                point_tokens, center_tokens = self.embedding.embed(X, trajectory[-1])
            point_tokens, center_tokens = self.apply_layer(point_tokens, center_tokens)
            trajectory.append(self.embedding.centers(center_tokens))
        return ModelResult(X, trajectory, self.embedding.assignments(point_tokens) if steps > 0 else None)

    def result(
        self, X: Tensor, trajectory: list[Tensor], assignments: Tensor | None, **measured: Tensor
    ) -> ModelResult:
        """The :class:`ModelResult` of a pass of this model computed elsewhere (the whole pass of
        :class:`kmtlib.fast.WholePass`, with the ``labels`` and ``objective`` it measured)."""
        return ModelResult(X, trajectory, assignments, **measured)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> Path:
        """Save weights and configuration to ``path`` atomically (a killed save leaves no partial file)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = self.state_dict()
        payload = {
            "format": MODEL_FORMAT,
            "config": self.config.to_dict(),
            "state_dict": {k: v.detach().cpu() for k, v in state.items()},
            "dtype": str(next(iter(state.values())).dtype) if state else None,
            "kmtlib_version": __version__,
        }
        if self.training_domain is not None:
            payload["training_domain"] = self.training_domain.to_dict()
        atomic_torch_save(payload, path)
        return path


def whole_pass(model: KMeansTransformer) -> fast_path.WholePass:
    """``model``'s whole forward pass by one kernel, a callable with the model's signature
    (:class:`kmtlib.fast.WholePass`): what a caller that wants the fixed-weight models' speed asks for."""
    if not isinstance(model, KMeansTransformer):
        raise TypeError(f"whole_pass takes a KMeansTransformer, got {type(model).__name__}")
    return fast_path.WholePass(model)
