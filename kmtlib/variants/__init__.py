"""Circuit variants of the k-means transformer (chapter 10).

Each variant lives in its own module ``kmtlib.variants.<name>`` with a function
``build(cls, d, k, **options)`` that returns a :class:`~kmtlib.transformer.KMeansTransformer`;
:meth:`KMeansTransformer.from_variant` dispatches here. The matching reference algorithms are in
:mod:`kmtlib.reference`.
"""

from __future__ import annotations

import importlib
from typing import Any

VARIANTS: tuple[str, ...] = ("soft", "spherical", "trimmed", "robust", "kmedoids")


def build_variant_model(cls: type, *, name: str, d: int, k: int, **options: Any):
    """Build the variant ``name`` (one of :data:`VARIANTS`) for data dimension ``d`` and ``k`` clusters."""
    if not isinstance(name, str) or name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; choose one of {', '.join(VARIANTS)}")
    module = importlib.import_module(f"{__name__}.{name}")
    return module.build(cls, d=d, k=k, **options)


def import_all() -> None:
    """Import every variant module (each registers the scores and maps it brings)."""
    for name in VARIANTS:
        importlib.import_module(f"{__name__}.{name}")
