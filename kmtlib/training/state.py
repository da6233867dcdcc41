"""The training state of a run (model, optimiser, scheduler, random streams), fresh from the
run seed or to be loaded from a checkpoint, and the random streams' states a checkpoint holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..embedding import CodeEmbedding
from ..io.model_file import load_model
from ..transformer import KMeansTransformer
from .config import DTYPES, TrainConfig
from .tasks import seeded_generator


@dataclass
class TrainingState:
    """Everything a training step changes, freshly initialised from the run seed."""

    model: KMeansTransformer
    optimizer: torch.optim.Optimizer
    scheduler: Any
    generators: dict[str, torch.Generator]


def new_training_state(config: TrainConfig, device: torch.device, seeds: dict[str, int]) -> TrainingState:
    model = KMeansTransformer.trainable(
        config.d, config.k, embedding=config.embedding, gamma=config.gamma, dropout=config.dropout,
        any_k=config.mixed_k and config.embedding == "onehot", cluster_broadcast=config.cluster_broadcast,
        code_width=config.code_width, generator=seeds["init"], dtype=DTYPES[config.dtype], device=device,
    )
    if config.init_from:
        _warm_start(model, config.init_from)
    model.train()
    generators = {name: seeded_generator(seeds[name], device) for name in ("train", "dropout")}
    model.layer.generator = generators["dropout"]
    if isinstance(model.embedding, CodeEmbedding):  # (new codes every step, from the data stream)
        model.embedding.generator = generators["train"]
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="min", factor=config.lr_factor, patience=config.lr_patience
    )
    return TrainingState(model, optimizer, scheduler, generators)


def _warm_start(model: KMeansTransformer, path: str) -> None:
    """Start from the weights of the model saved in ``path`` (same layer shape and embedding)."""
    try:
        source = load_model(path)
    except (OSError, ValueError, RuntimeError) as exc:
        raise ValueError(f"init_from {path!r}: cannot be read as a saved model: {exc}") from None
    ours, theirs = model.state_dict(), source.state_dict()
    if ours.keys() != theirs.keys() or any(ours[name].shape != theirs[name].shape for name in ours):
        raise ValueError(
            f"init_from {path!r}: its layer ({source.config.origin}, d={source.d}) does not have the shape of "
            f"this run's layer (d={model.d}, embedding and widths as configured)"
        )
    model.load_state_dict(theirs)


def rng_states(generators: dict[str, torch.Generator], device: torch.device) -> dict[str, torch.Tensor]:
    states = {name: g.get_state() for name, g in generators.items()}
    states["torch_global"] = torch.get_rng_state()
    if device.type == "cuda":
        states["cuda_global"] = torch.cuda.get_rng_state(device)
    return states


def set_rng_states(
    states: dict[str, torch.Tensor], generators: dict[str, torch.Generator], device: torch.device
) -> None:
    for name, g in generators.items():
        g.set_state(states[name])
    torch.set_rng_state(states["torch_global"])
    if device.type == "cuda" and "cuda_global" in states:
        torch.cuda.set_rng_state(states["cuda_global"], device)
