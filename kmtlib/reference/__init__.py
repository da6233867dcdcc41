"""Reference algorithms for the circuit variants, written as plain batched algorithms (no tokens,
no attention), so that each variant model can be tested against an independent formulation.

``kmtlib.reference.<module>`` holds one algorithm family each; the public functions are re-exported
here lazily (importing one does not import the others' optional dependencies).
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "soft_kmeans": "soft",
    "spherical_kmeans": "spherical",
    "trimmed_kmeans": "trimmed",
    "robust_kmeans": "robust",
    "randomised_kmedoids": "kmedoids",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
