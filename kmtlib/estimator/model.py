"""The model a fit runs (``model=``): the shipped trained layer for any k, the theorem's
construction, a model file or a given model, checked against the data's k and d; and what a
trained model's self-attention over the points costs in memory (the sample it may run on)."""

from __future__ import annotations

import copy
import functools
import os
from importlib import resources

import numpy as np
import torch

from ..io.model_file import load_model
from ..transformer import KMeansTransformer
from .params import SAMPLE_SIZE

PRETRAINED_ANY_K = "any_k_broad.pt"
"""The trained layer for any k shipped in ``kmtlib/pretrained/`` (see its README for provenance)."""

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


@functools.cache
def shared_pretrained_model(device: torch.device) -> KMeansTransformer:
    """The shipped trained layer for any k on ``device``, loaded once per process and device and
    shared by every fit, read-only: in eval mode, and a fit only runs it, under
    ``torch.inference_mode`` (it changes no weight or setting of the model; a test checks this)."""
    with resources.as_file(resources.files("kmtlib") / "pretrained" / PRETRAINED_ANY_K) as path:
        return load_model(path).eval().to(device)


def pretrained_model() -> KMeansTransformer:
    """A fresh copy of the trained layer for any k that ``model="learned"`` uses (d = 32), the
    caller's own to change or train."""
    return copy.deepcopy(shared_pretrained_model(torch.device("cpu")))


def resolve_model(spec: object, n_clusters: int, n_features: int, device: torch.device) -> KMeansTransformer:
    """The model ``spec`` names (``model=``) to run on ``device``, in eval mode, checked against k
    and d (a ValueError names ``model``): the shipped layer shared read-only
    (:func:`shared_pretrained_model`), or a model the estimator owns (a given model is copied,
    so that the user's stays as it was)."""
    if isinstance(spec, KMeansTransformer):
        model, name = copy.deepcopy(spec), f"the given model ({spec.config.origin})"
    elif isinstance(spec, str) and spec == "theorem":
        return KMeansTransformer.from_theorem(n_features, n_clusters).to(torch.float64).eval().to(device)
    elif isinstance(spec, str) and spec == "learned":
        model, name = shared_pretrained_model(device), "the learned model"
    elif isinstance(spec, str | os.PathLike):
        if not os.path.isfile(spec):
            raise ValueError(f"model={spec!r} is neither 'learned', 'theorem' nor the path of a saved model file")
        model, name = load_model(spec), f"the model in {os.fspath(spec)!r}"
    else:
        raise ValueError(
            f"model must be 'learned', 'theorem', a path or a KMeansTransformer, got {type(spec).__name__}"
        )
    model = model.eval().to(device)  # (the shared model is both already: nothing changes)
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


def sample_size(n_samples: int, size: int | None, itemsize: int, device: torch.device) -> int:
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
