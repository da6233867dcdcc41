"""The range a trained layer was trained on, and a warning for data beyond it.

A trained layer has only seen tasks near the unit cube (the paper's tasks, every coordinate rescaled
to [0, 1], or the broad family that :class:`~kmtlib.TransformerKMeans` maps a user's data into). On
data of another scale its centres can end worse than where they started; the bare model says so
rather than returning such centres without a word. Read it when a trained model warns.
"""

from __future__ import annotations

import math
import warnings

import torch

from .broad_tasks import CENTRE, TARGET_TOTAL_VARIANCE

TRAINING_DOMAIN_MARGIN = 3.0
"""How far beyond its training tasks a trained layer's input may reach before :func:`warn_outside_training_domain`
says so: a factor on the root-mean-square distance of the points from the middle of the unit cube."""


def training_domain_radius(d: int) -> float:
    """The largest root-mean-square distance of a training task's points from the middle of the unit
    cube, ``(1/2, ..., 1/2)``, for a trained layer of dimension ``d``: ``sqrt(1.6 + d / 4)``.

    Every trained layer of kmtlib learns on one of two task families (:mod:`kmtlib.training`): the
    paper's (:func:`kmtlib.sample_tasks`, every coordinate rescaled to [0, 1], so each point lies
    within ``sqrt(d) / 2`` of the middle), or the broad family (:mod:`kmtlib.analysis.broad_tasks`, mean 0.5
    in its filled coordinates and 0 in the others, total variance 1.6: a mean squared distance
    from the middle of at most ``1.6 + d / 4``), which is also where ``TransformerKMeans`` maps a
    user's data. Both lie within this radius."""
    return math.sqrt(TARGET_TOTAL_VARIANCE + d * (CENTRE**2))


@torch.no_grad()
def warn_outside_training_domain(X: torch.Tensor, d: int) -> None:
    """Warn (a UserWarning naming the range) when the points X (B, n, d) of any task lie, in
    root-mean-square distance from the middle of the unit cube, more than
    :data:`TRAINING_DOMAIN_MARGIN` times beyond :func:`training_domain_radius`: data on another
    scale (other units) or far from the cube, where a trained layer has never been and its centres
    can end worse than where they started. Changes nothing. (The data ``TransformerKMeans`` maps
    into the domain lie within the radius itself; the initial centres are not checked, since a
    seeding may pick a far outlier of such data.)"""
    bound = TRAINING_DOMAIN_MARGIN * training_domain_radius(d)
    reach = float(((X.double() - CENTRE) ** 2).sum(-1).mean(-1).sqrt().max())
    if not reach <= bound:
        warnings.warn(
            f"the trained layer was trained on tasks around the unit cube [0, 1]^{d} (a root-mean-square distance "
            f"of the points from its middle of at most {training_domain_radius(d):.2f}), and these points reach "
            f"{reach:.3g}, beyond {TRAINING_DOMAIN_MARGIN:g} times that: its centres there may end worse than where "
            "they started. Map the data into its domain first (kmtlib.TransformerKMeans does): the mean to 0.5 in "
            "every coordinate and the total variance to 1.6",
            UserWarning,
            stacklevel=2,
        )
