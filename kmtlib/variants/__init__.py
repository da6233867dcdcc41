"""Circuit variants of the k-means transformer (chapter 10).

Each variant lives in its own module ``kmtlib.variants.<name>`` with a function
``layer_config(d, k, **options)`` that checks its options and returns the variant's
:class:`~kmtlib.layer.LayerConfig`; its weights are Theorem 2.1's
(:func:`~kmtlib.variants.circuit.load_circuit_weights`). :meth:`KMeansTransformer.from_variant`
builds the model from the two. Their attention maps (top-k, norm-max, sparsemax, entmax, Gumbel)
are in :mod:`.attention_maps`. The matching reference algorithms are in :mod:`kmtlib.reference`.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..layer import LayerConfig
from .circuit import load_circuit_weights

__all__ = ["VARIANTS", "import_all", "load_circuit_weights", "variant_config"]

VARIANTS: tuple[str, ...] = ("soft", "spherical", "trimmed", "robust", "kmedoids")


def variant_config(name: str, d: int, k: int, **options: Any) -> LayerConfig:
    """The layer configuration of the variant ``name`` (one of :data:`VARIANTS`) for data dimension
    ``d`` and ``k`` clusters (its options checked by the variant's module)."""
    if not isinstance(name, str) or name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; choose one of {', '.join(VARIANTS)}")
    module = importlib.import_module(f"{__name__}.{name}")
    return module.layer_config(d=d, k=k, **options)


def import_all() -> None:
    """Import every variant module (each registers the scores and maps it brings)."""
    for name in VARIANTS:
        importlib.import_module(f"{__name__}.{name}")
