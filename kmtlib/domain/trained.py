"""A trained layer's training domain and its warning: a trained layer has only seen tasks of one
position and scale (the paper's tasks, every coordinate rescaled to [0, 1], or the broad family
that TransformerKMeans maps a user's data into). On data shrunk, grown or shifted away from them
its centres can end worse than where they started; the bare model says so
(:meth:`kmtlib.KMeansTransformer.checked_steps` calls :func:`warn_outside_training_domain`) rather
than returning such centres without a word."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from ..tasks import CENTRE, TARGET_TOTAL_VARIANCE

DOMAIN_MARGIN = 1.5
"""How far beyond its training tasks a trained layer's input may reach before it warns: a factor on
the spread (either way) and, times the largest training spread, the distance the mean may move
beyond the farthest training mean (:class:`TrainingDomain`)."""

PAPER_SPREAD, PAPER_OFFSET = (0.12, 0.34), 0.2
"""The documented range of the paper's training tasks (:func:`kmtlib.sample_tasks`, normal family,
scale 0.1, any d and k): the spread per coordinate of a task's points (measured between 0.13 and
0.33 over d = 1..64, k = 2..20) and the offset of its mean from the middle of the unit cube (at
most 0.18); the broad family has spread ``sqrt(TARGET_TOTAL_VARIANCE / d)`` and offset below 0.5
(mean 0.5 in the coordinates a task fills, 0 in the others)."""


@dataclass(frozen=True)
class TrainingDomain:
    """Where a trained layer's training tasks lie, task by task: the ``spread`` of a task (the
    root-mean-square distance of its points from their mean, per coordinate: ``sqrt(total variance
    / d)``) between ``spread_low`` and ``spread_high``, and its ``offset`` (the root-mean-square
    distance per coordinate of its mean from the middle of the unit cube) at most ``offset``.
    ``source`` says where the numbers come from. A model file records it (format 4: measured on the
    run's validation tasks); an older file falls back to :meth:`documented`."""

    spread_low: float
    spread_high: float
    offset: float
    source: str

    @classmethod
    def of_tasks(cls, tasks: list[torch.Tensor], source: str) -> TrainingDomain:
        """The range of these tasks (each (B, n, d)), measured."""
        spread, offset = (torch.cat(v) for v in zip(*(task_spread_and_offset(X) for X in tasks)))
        return cls(float(spread.min()), float(spread.max()), float(offset.max()), source)

    @classmethod
    def documented(cls, d: int) -> TrainingDomain:
        """The documented range of both families kmtlib trains on, for a file that records none:
        the paper's tasks (:data:`PAPER_SPREAD`, :data:`PAPER_OFFSET`) and the broad ones."""
        broad = math.sqrt(TARGET_TOTAL_VARIANCE / d)
        low, high = min(PAPER_SPREAD[0], broad), max(PAPER_SPREAD[1], broad)
        return cls(low, high, max(PAPER_OFFSET, CENTRE), "the documented range of the paper's and the broad tasks")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def outside(self, X: torch.Tensor) -> str | None:
        """What lies outside the domain in the points X (B, n, d), or None."""
        spread, offset = task_spread_and_offset(X)
        low, high = self.spread_low / DOMAIN_MARGIN, self.spread_high * DOMAIN_MARGIN
        reach = self.offset + DOMAIN_MARGIN * self.spread_high
        if bool((spread < low).any()) or not bool((spread <= high).all()):
            return f"a spread of {spread.min():.3g} to {spread.max():.3g} per coordinate, not {low:.3g} to {high:.3g}"
        if not bool((offset <= reach).all()):
            return f"a mean {offset.max():.3g} per coordinate from the unit cube's middle, beyond {reach:.3g}"
        return None


def task_spread_and_offset(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per task of X (B, n, d): the spread (the root-mean-square distance of the points from their
    mean, per coordinate) and the offset (of the mean from the middle of the unit cube, per coordinate)."""
    X = X.detach().double()
    mean = X.mean(dim=1, keepdim=True)
    return ((X - mean) ** 2).mean(dim=(1, 2)).sqrt(), ((mean[:, 0] - CENTRE) ** 2).mean(dim=-1).sqrt()


class OutsideTrainingDomainWarning(UserWarning):
    """The warning of a trained layer run on points outside its training domain (a ``UserWarning``,
    of its own class so that a caller who expects it, and says so in words, can catch it alone)."""


def warn_outside_training_domain(X: torch.Tensor, domain: TrainingDomain) -> None:
    """Warn (a UserWarning at the caller's line, naming the range) where the points X (B, n, d) of
    some task lie outside the trained layer's domain: shrunk, grown or shifted beyond its training
    tasks by more than :data:`DOMAIN_MARGIN`. Changes nothing. (The data ``TransformerKMeans`` maps
    into the domain lie within it; the initial centres are not checked, since a seeding may pick a
    far outlier of such data.)"""
    found = domain.outside(X)
    if found is not None:
        warnings.warn(
            f"the trained layer was trained on tasks of spread {domain.spread_low:.3g} to {domain.spread_high:.3g} per "
            f"coordinate and mean within {domain.offset:.3g} of the unit cube's middle ({domain.source}); these points "
            f"have {found}: its centres may end worse than where they started. Map the data into its domain first "
            f"(kmtlib.TransformerKMeans does: mean 0.5 per coordinate, total variance {TARGET_TOTAL_VARIANCE:g})",
            OutsideTrainingDomainWarning, stacklevel=_caller_level(),
        )  # fmt: skip


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside kmtlib and torch: the caller's line (past the
    model's ``__call__`` and any ``torch.no_grad`` wrapper)."""
    inside = (os.path.dirname(os.path.dirname(__file__)), os.path.dirname(torch.__file__))
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(inside):
        frame, level = frame.f_back, level + 1
    return level
