"""The map from a user's space into a model's domain and back, as the estimator uses it:
:class:`DomainMap` and :func:`translation_map`, defined in :mod:`kmtlib.analysis.domain_map` (plain
maths, so that training can present its tasks as the estimator presents data)."""

from ..analysis.domain_map import DomainMap, translation_map

__all__ = ["DomainMap", "translation_map"]
