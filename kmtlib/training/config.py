"""The configuration of a training run: :class:`TrainConfig` (every option, checked) and
the seeds of the run's random streams (:func:`derive_seeds`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._checks import check_choice, check_int, check_positive_float
from ..device import resolve_device
from ..equivariant import BROADCASTS
from ..learned import TRAINABLE_EMBEDDINGS
from ..tasks import FAMILIES

EMBEDDINGS: tuple[str, ...] = (*TRAINABLE_EMBEDDINGS, "none")
"""The --embedding choices ("none" is the old name of "data", as in the shipped runs' manifests)."""


DTYPES = {"float32": torch.float32, "float64": torch.float64}


TASK_FAMILIES: tuple[str, ...] = ("paper", "broad")
"""The training task distributions: the paper's (:func:`kmtlib.sample_tasks` with ``family`` and
``scale``) or the broad family of :func:`kmtlib.domain.broad_tasks.sample_broad_tasks`."""

STARTS: tuple[str, ...] = ("random", "estimator")
"""Where a training step starts the layer: ``"random"`` (a random k-subset of the task's points,
the paper's) or ``"estimator"`` (the task presented as ``TransformerKMeans`` presents a user's
data, from its greedy k-means++ centres: :func:`kmtlib.training.estimator_use.estimator_batch`)."""

LOSSES: tuple[str, ...] = ("soft_objective", "lloyd_gap")
"""What a training step lowers: ``"soft_objective"`` (the smoothed objective of the centres after
one layer step, the paper's) or ``"lloyd_gap"`` (the relative gap, after ``layer_steps`` layer
steps, to Lloyd's fixed point from the same start: :func:`kmtlib.training.estimator_use.lloyd_gap_loss`)."""

LOSS_TEMPERATURE_RULES: tuple[str, ...] = ("fixed", "log_k")
"""How the loss inverse temperature depends on a batch's k (:meth:`TrainConfig.loss_inv_temp_at`)."""


@dataclass
class TrainConfig:
    """Everything that determines a training run (the defaults are the paper's main run)."""

    d: int = 32
    k: int = 10
    n: int = 512
    embedding: str = "onehot"
    seed: int = 153476998  # (the first of the paper's ten training seeds, the authors' expt-run.sh)
    steps: int = 10_000
    batch: int = 32
    lr: float = 0.01
    loss_inv_temp: float = 10.0
    gamma: float = 1.0
    dropout: float = 0.01
    family: str = "normal"
    scale: float = 0.1
    eval_every: int = 50
    val_batches: int = 10
    lr_factor: float = 0.5
    lr_patience: int = 5
    device: str = "cpu"
    dtype: str = "float32"
    k_min: int = 0
    k_max: int = 0
    k_held_out: str = ""
    cluster_broadcast: str = "ones"
    loss_temperature_rule: str = "fixed"
    code_width: int = 0
    tasks: str = "paper"
    init_from: str = ""
    starts: str = "random"
    loss: str = "soft_objective"
    layer_steps: int = 1

    @property
    def mixed_k(self) -> bool:
        """One layer for any number of clusters: every batch draws its own k (``k_max > 0``)."""
        return self.k_max > 0

    def loss_inv_temp_at(self, k: int) -> float:
        """The loss inverse temperature for a batch of ``k`` clusters: ``loss_inv_temp`` under the
        rule ``"fixed"``; under ``"log_k"`` it grows as ``loss_inv_temp * ln k / ln K`` (K = ``self.k``),
        which keeps the loosening of the soft bound, about ``ln k / t`` per point, the same at every k."""
        if self.loss_temperature_rule == "fixed":
            return self.loss_inv_temp
        return self.loss_inv_temp * math.log(k) / math.log(self.k)

    def training_ks(self) -> list[int]:
        """The numbers of clusters the training draws from: ``k_min..k_max`` without the held-out
        ones (``[k]`` for a run at one k)."""
        if not self.mixed_k:
            return [self.k]
        held = set(_parse_ks(self.k_held_out))
        return [k for k in range(self.k_min, self.k_max + 1) if k not in held]

    def validated(self) -> TrainConfig:
        """Check every field; return self (raises ``ValueError``/``TypeError`` naming the field)."""
        self._check_fields()
        self._check_any_k(_parse_ks(self.k_held_out))
        self._check_combinations()
        return self

    def _check_fields(self) -> None:
        """Each field on its own: its type and range."""
        for name in ("d", "k", "n", "steps", "batch", "eval_every", "val_batches"):
            check_int(name, getattr(self, name), minimum=0 if name == "steps" else 1)
        check_int("lr_patience", self.lr_patience, minimum=0)
        check_int("seed", self.seed, minimum=0)
        check_choice("embedding", self.embedding, EMBEDDINGS)
        check_choice("family", self.family, FAMILIES)
        check_choice("dtype", self.dtype, DTYPES)
        for name in ("lr", "loss_inv_temp", "gamma", "scale"):
            check_positive_float(name, getattr(self, name))
        if not 0.0 < float(self.lr_factor) < 1.0:
            raise ValueError(f"lr_factor must be in (0, 1), got {self.lr_factor}")
        if not 0.0 <= float(self.dropout) < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        resolve_device(self.device)
        check_int("k_min", self.k_min, minimum=0)
        check_int("k_max", self.k_max, minimum=0)
        if not isinstance(self.k_held_out, str):
            raise TypeError(f"k_held_out must be a comma-separated string of integers, got {self.k_held_out!r}")
        check_choice("cluster_broadcast", self.cluster_broadcast, BROADCASTS)
        check_choice("loss_temperature_rule", self.loss_temperature_rule, LOSS_TEMPERATURE_RULES)
        check_int("code_width", self.code_width, minimum=0)
        check_choice("tasks", self.tasks, TASK_FAMILIES)
        check_choice("starts", self.starts, STARTS)
        check_choice("loss", self.loss, LOSSES)
        check_int("layer_steps", self.layer_steps, minimum=1)
        if not isinstance(self.init_from, str):
            raise TypeError(f"init_from must be the path of a saved model or '', got {self.init_from!r}")

    def _check_combinations(self) -> None:
        """The fields that constrain each other."""
        if self.k > self.n:
            raise ValueError(f"k={self.k} clusters exceed the n={self.n} points of each task")
        if self.tasks == "broad" and self.family != "normal":
            raise ValueError("tasks='broad' draws its own noise: family must stay 'normal'")
        if (self.embedding == "codes") != (self.code_width > 0):
            raise ValueError(f"embedding={self.embedding!r} with code_width={self.code_width}: "
                             "'codes' needs a code width >= 1, the other embeddings none")  # fmt: skip
        if self.loss_temperature_rule != "fixed" and not (self.mixed_k and self.k >= 2 and self.k_min >= 2):
            raise ValueError(
                "loss_temperature_rule 'log_k' needs a run for any number of clusters with k >= 2 and k_min >= 2"
            )
        if (self.starts == "estimator") != (self.loss == "lloyd_gap"):
            raise ValueError(f"starts={self.starts!r} with loss={self.loss!r}: the estimator's starts and the "
                             "'lloyd_gap' loss go together (the loss needs each start's Lloyd reference)")
        if self.starts == "estimator" and (self.tasks != "broad" or self.device != "cpu"):
            raise ValueError("starts='estimator' draws broad tasks on the CPU: tasks must be 'broad', device 'cpu'")
        if self.layer_steps != 1 and self.loss != "lloyd_gap":
            raise ValueError(f"layer_steps={self.layer_steps}: only the 'lloyd_gap' loss runs more than one step")
        if self.cluster_broadcast != "ones" and not self.mixed_k:
            raise ValueError("cluster_broadcast needs k_max > 0 (a run for any number of clusters)")

    def _check_any_k(self, held: list[int]) -> None:
        """The options of a run for any number of clusters (k_min, k_max, k_held_out), which a run
        at one k leaves unset."""
        if not self.mixed_k:
            if self.k_min or held:
                raise ValueError("k_min and k_held_out need k_max > 0 (a run for any number of clusters)")
            return
        if self.embedding not in ("onehot", "codes"):
            raise ValueError("a layer for any number of clusters needs embedding='onehot' or 'codes'")
        if not 1 <= self.k_min <= self.k_max <= self.n:
            raise ValueError(f"need 1 <= k_min <= k_max <= n, got k_min={self.k_min}, k_max={self.k_max}, n={self.n}")
        outside = [k for k in held if not self.k_min <= k <= self.k_max]
        if outside:
            raise ValueError(f"k_held_out {outside} lie outside k_min..k_max = {self.k_min}..{self.k_max}")
        if not self.training_ks():
            raise ValueError("k_held_out leaves no number of clusters to train at")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown training option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**values)


def _parse_ks(text: str) -> list[int]:
    """``"5,9, 13"`` -> ``[5, 9, 13]``; ``""`` -> ``[]`` (a ValueError names a part that is not an integer)."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    try:
        return [int(part) for part in parts]
    except ValueError:
        raise ValueError(f"k_held_out must list integers separated by commas, got {text!r}") from None


def derive_seeds(seed: int) -> dict[str, int]:
    """Independent seeds for the run's random streams, derived from the run seed."""
    names = ("init", "train", "validation", "dropout", "lloyd", "torch")
    states = np.random.SeedSequence(int(seed)).spawn(len(names))
    return {name: int(s.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)) for name, s in zip(names, states)}


def config_differences(saved: Any, config: TrainConfig) -> list[str]:
    saved = saved if isinstance(saved, dict) else {}
    # (an option added after a run was written is that run's default)
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.name in _OPTIONS_ADDED_LATER}
    return [
        f"{k}: {saved.get(k, defaults.get(k))!r} there vs {v!r} now"
        for k, v in dataclasses.asdict(config).items()
        if k != "steps" and saved.get(k, defaults.get(k)) != v
    ]


_OPTIONS_ADDED_LATER: frozenset[str] = frozenset(
    {"cluster_broadcast", "loss_temperature_rule", "code_width", "tasks", "init_from", "starts", "loss",
     "layer_steps"}
)
"""Training options that runs written before them do not record (they ran with the default)."""
