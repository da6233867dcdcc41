"""A trained layer's warning that points lie outside its training domain, caught where a chapter
expects it and said in words beside the number it affects.

The layer warns (:class:`kmtlib.OutsideTrainingDomainWarning`) when a task's spread or place lies
beyond those of its training tasks. A chapter that evaluates it there on purpose (chapter 07's
other distribution families) catches the warning with :func:`expected_domain_warnings`, so that no
raw warning, with the path of the machine that built the page, is printed; measures the tasks
against the layers' domain with :func:`outside_domain`; records those numbers; and prints
:func:`domain_sentence` of the recorded numbers next to the setting's result.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from kmtlib import OutsideTrainingDomainWarning
from kmtlib.domain.trained import task_spread_and_offset

from .figure_checks import plural


@contextlib.contextmanager
def expected_domain_warnings() -> Iterator[list[str]]:
    """Catch every :class:`kmtlib.OutsideTrainingDomainWarning` raised in the block: after the
    block, the list it yields holds their messages. Every other warning is passed on as raised."""
    said: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", OutsideTrainingDomainWarning)
        yield said
    for w in caught:
        if issubclass(w.category, OutsideTrainingDomainWarning):
            said.append(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def outside_domain(models: Sequence[Any], xs: Sequence[torch.Tensor]) -> dict[str, float | int]:
    """How the tasks ``xs[i]`` (each (B, n, d)) of model ``models[i]`` lie against the models'
    training domain: ``models_outside`` (how many models' tasks lie outside it), the tasks' spread
    per coordinate (``spread_low``, ``spread_high``) and largest offset from the unit cube's
    middle (``offset``), and the training tasks' (``trained_low``, ``trained_high``,
    ``trained_offset``). Plain numbers, for ``chapter.record``."""
    domains = [m.training_domain for m in models]
    if any(d is None for d in domains):
        raise ValueError("every model must be a trained layer with a training domain")
    spreads, offsets = zip(*(task_spread_and_offset(x) for x in xs))
    spread, offset = torch.cat(spreads), torch.cat(offsets)
    return {
        "models": len(models),
        "models_outside": sum(d.outside(x) is not None for d, x in zip(domains, xs)),
        "spread_low": float(spread.min()), "spread_high": float(spread.max()), "offset": float(offset.max()),
        "trained_low": min(d.spread_low for d in domains), "trained_high": max(d.spread_high for d in domains),
        "trained_offset": max(d.offset for d in domains),
    }  # fmt: skip


def domain_sentence(setting: str, where: dict[str, Any], model: float, lloyd: float, steps: int,
                    only_loss: bool) -> str:
    """The words for a setting whose tasks lie outside the layers' domain: which, why (the numbers of
    :func:`outside_domain`, as recorded), and what it does to the setting's median after ``steps``
    steps (``model`` against ``lloyd``; ``only_loss``: no other setting ends above Lloyd)."""
    if where["spread_high"] < where["trained_low"]:
        why = (f"min-max scaled to the unit cube, their points are squeezed together (a few far points set each "
               f"coordinate's range) to a spread of {where['spread_low']:.3f} to {where['spread_high']:.3f} per "
               f"coordinate, below the {where['trained_low']:.2f} to {where['trained_high']:.2f} of its training tasks")
    elif where["spread_low"] > where["trained_high"]:
        why = (f"their points spread {where['spread_low']:.3f} to {where['spread_high']:.3f} per coordinate, above "
               f"the {where['trained_low']:.2f} to {where['trained_high']:.2f} of its training tasks")
    else:
        why = (f"their spread of {where['spread_low']:.3f} to {where['spread_high']:.3f} per coordinate, or their "
               f"mean, up to {where['offset']:.2f} from the unit cube's middle, lies beyond its training tasks' "
               f"({where['trained_low']:.2f} to {where['trained_high']:.2f}; within {where['trained_offset']:.2f})")
    ends = "ends above Lloyd" if model > lloyd else "still ends below Lloyd"
    only = ("; it is the only setting where the layer does not end below Lloyd" if only_loss and model > lloyd
            else "")
    return (f"The tasks of the {setting} lie outside the trained layer's domain (it warned so for "
            f"{where['models_outside']} of {plural(where['models'], 'model')}): {why}. After {steps} steps the "
            f"layer {ends} there, {model:.2f} against {lloyd:.2f}, a result of the layer outside what it was "
            f"trained on{only}.")


__all__ = ["domain_sentence", "expected_domain_warnings", "outside_domain"]
