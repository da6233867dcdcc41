"""The checks of the book helpers' arguments: a flag is a boolean, a number to draw or compare is finite.

``bool("False")`` is True, and ``True == 1``: a helper that tested a flag by its truth would draw the
other figure for ``scratch="False"``, and one that took any value ``float`` accepts would read the
text ``"5.0"`` as a number and an infinite value as a result. These two functions refuse such
values with an error naming the argument.
"""

from __future__ import annotations

import math

import numpy as np


def check_flag(name: str, value: object) -> bool:
    """``value`` as a bool; a TypeError naming ``name`` for anything that is not True or False
    (the text ``"False"``, the number 0, None)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def finite_number(name: str, value: object) -> float:
    """``value`` as a float; a ValueError naming ``name`` for a flag, text, anything ``float`` cannot
    read, NaN or an infinity."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{name} must be a finite number, got {type(value).__name__} {value!r}")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, RuntimeError):  # (RuntimeError: a tensor of several elements)
        raise ValueError(f"{name} must be a finite number, got {type(value).__name__} {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {number!r}")
    return number
