"""A chapter's parameters: what each may be, and its value in each profile.

A chapter's ``parameters`` cell holds plain literals, so that papermill can override them; which
values are allowed lives here, in a :class:`ChapterSpec` per chapter (:mod:`kmtbook.chapter_specs`).
:func:`kmtbook.open_chapter` checks every parameter against its chapter's spec in one call: its
type, its bounds (a number, or another parameter's value), and for a size left at ``0`` the
profile's value. A bad value stops the chapter with a :class:`ParameterError` naming the parameter.

Papermill only warns about a parameter the notebook does not declare (``-p n_taks 10``) and runs on
with the profile's value; :func:`passed_parameters` and :func:`check_passed_parameters` find such a
name in the kernel's input history and refuse it.
"""

from __future__ import annotations

import ast
import difflib
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .install_cell import FIRST_LINE as INSTALL_CELL_FIRST_LINE

PROFILES: tuple[str, ...] = ("quick", "book", "paper")
"""``quick``: a smoke run for the tests (under a minute on 2 CPU cores); ``book``: the default build
on a 2-core CPU (a chapter within 10 minutes); ``paper``: the paper's own scale (a GPU helps)."""

Bound = float | str | Callable[[Mapping[str, Any]], float] | None
"""A bound of a parameter: a number, the name of another parameter (its value after the profile
filled it in), or a function of all the chapter's values."""


class ParameterError(ValueError):
    """A chapter parameter has a bad value; the message names the parameter."""


def check_parameter(
    name: str,
    value: Any,
    kind: type,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: tuple | None = None,
) -> Any:
    """Check one chapter parameter and return it; raise :class:`ParameterError` naming it otherwise."""
    if kind is int:
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if ok and math.isnan(float(value)):
            raise ParameterError(f"parameter {name} must be a number, got NaN")
    elif kind is bool:
        ok = isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise ParameterError(f"parameter {name} must be of type {kind.__name__}, got {type(value).__name__} {value!r}")
    if choices is not None and value not in choices:
        raise ParameterError(f"parameter {name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    if minimum is not None and value < minimum:
        raise ParameterError(f"parameter {name} must be >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ParameterError(f"parameter {name} must be <= {maximum}, got {value!r}")
    return value


@dataclass(frozen=True)
class Parameter:
    """What one chapter parameter may be.

    ``profiles`` makes it a *size*: a value of ``0`` in the parameters cell takes the profile's value,
    the run prints it and ``metrics.json`` records it as ``param_<name>``. Without ``profiles`` the
    parameter is an *option*, checked as given (a folder, a temperature with a default)."""

    kind: type
    minimum: Bound = None
    maximum: Bound = None
    choices: tuple | None = None
    multiple_of: str | None = None  # another parameter whose value this one must be a multiple of
    profiles: Mapping[str, Any] | None = None

    @property
    def is_size(self) -> bool:
        return self.profiles is not None

    @property
    def refers_to_others(self) -> bool:
        """Whether a bound of this parameter is read from other parameters."""
        return self.multiple_of is not None or any(
            isinstance(b, str) or callable(b) for b in (self.minimum, self.maximum)
        )

    def check(self, name: str, value: Any, values: Mapping[str, Any]) -> Any:
        """Check ``value`` of the parameter ``name``; bounds that name other parameters are read from ``values``."""
        check_parameter(
            name,
            value,
            self.kind,
            minimum=_bound(self.minimum, values),
            maximum=_bound(self.maximum, values),
            choices=self.choices,
        )
        if self.multiple_of is not None and value % values[self.multiple_of]:
            raise ParameterError(
                f"parameter {name} ({value}) must be a multiple of {self.multiple_of} ({values[self.multiple_of]})"
            )
        return value


def size(
    kind: type,
    *,
    quick: Any,
    book: Any,
    paper: Any,
    minimum: Bound = None,
    maximum: Bound = None,
    multiple_of: str | None = None,
) -> Parameter:
    """A size parameter with its value in each profile (taken when the parameters cell leaves it at 0)."""
    return Parameter(
        kind,
        minimum=minimum,
        maximum=maximum,
        multiple_of=multiple_of,
        profiles={"quick": quick, "book": book, "paper": paper},
    )


def option(kind: type, *, minimum: Bound = None, maximum: Bound = None, choices: tuple | None = None) -> Parameter:
    """A parameter checked as the parameters cell (or papermill) gives it, with no profile value."""
    return Parameter(kind, minimum=minimum, maximum=maximum, choices=choices)


COMMON: dict[str, Parameter] = {
    "profile": option(str, choices=PROFILES),
    "seed": option(int, minimum=0),
    "output_dir": option(str),
    "device": option(str),
}
"""The parameters every chapter has (the chapter contract), checked first, in this order."""


@dataclass(frozen=True)
class ChapterSpec:
    """A chapter's own parameters (besides :data:`COMMON`), in the order of its parameters cell."""

    stem: str  # the chapter's file stem, e.g. "03_temperature"; names its default output folder
    parameters: Mapping[str, Parameter] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """Every parameter the chapter's parameters cell must declare."""
        return [*COMMON, *self.parameters]

    def profile_sizes(self, profile: str) -> dict[str, Any]:
        """The value of every size parameter in ``profile``."""
        return {name: p.profiles[profile] for name, p in self.parameters.items() if p.profiles}

    def resolve(self, given: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Check the parameters as the parameters cell set them (``given`` holds at least every name
        of :attr:`names`) and return ``(values, overridden)``: every parameter's value, sizes left at
        ``0`` filled from the profile, and the sizes set explicitly."""
        missing = [name for name in self.names if name not in given]
        if missing:
            raise ParameterError(
                f"parameter {missing[0]} is in the spec of {self.stem} but its parameters cell does not set it"
            )
        values = {name: p.check(name, given[name], given) for name, p in COMMON.items()}
        profile = values["profile"]
        overridden = []
        for name, p in self.parameters.items():
            value = given[name]
            if p.profiles is not None and (value is None or (_is_number(value) and value == 0)):
                value = p.profiles[profile]
            elif p.profiles is not None:
                overridden.append(name)
            values[name] = value
        # A parameter whose bounds read other parameters is checked after those.
        for name, p in sorted(self.parameters.items(), key=lambda item: item[1].refers_to_others):
            p.check(name, values[name], values)
        return values, sorted(overridden)


def _bound(bound: Bound, values: Mapping[str, Any]) -> float | None:
    if isinstance(bound, str):
        return values[bound]
    if callable(bound):
        return bound(values)
    return bound


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


# --------------------------------------------------------------------------- names papermill injected

PAPERMILL_HEADER = "# Parameters"
"""The first line of the cell papermill injects after the ``parameters`` cell (its Python translator
writes ``# Parameters`` and then one assignment per parameter given with ``-p``)."""


def _assigned_names(source: str) -> list[str]:
    """The names a cell assigns at top level (``x = 1``, ``x: int = 1``), in order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def passed_parameters(history: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """``(declared, passed)`` read from a kernel's input history (IPython's ``In``), or ``None``
    when no parameters were injected (the book build, an interactive session).

    Papermill runs the ``parameters`` cell, then the cell it injected with the values given on its
    command line (first line ``# Parameters``), then the rest. ``declared`` are the names assigned
    before the injected cell (the chapter's parameters), ``passed`` the names the injected cell
    assigns. The install cell of a downloaded notebook (:mod:`kmtbook.install_cell`) declares none."""
    for i in range(len(history) - 1, -1, -1):
        source = history[i] or ""
        if source.lstrip().startswith(PAPERMILL_HEADER):
            chapter = [cell or "" for cell in history[:i] if not (cell or "").startswith(INSTALL_CELL_FIRST_LINE)]
            declared = [name for cell in chapter for name in _assigned_names(cell)]
            return declared, _assigned_names(source)
    return None


def check_passed_parameters(declared: Sequence[str], passed: Sequence[str]) -> None:
    """Raise :class:`ParameterError` naming the first passed parameter the chapter does not declare
    (a misspelling such as ``-p n_taks 10`` would otherwise run silently with the profile's value)
    and the closest declared name."""
    known = list(dict.fromkeys(declared))
    unknown = [name for name in dict.fromkeys(passed) if name not in known]
    if not unknown:
        return
    name = unknown[0]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    more = f" (nor are {', '.join(unknown[1:])})" if len(unknown) > 1 else ""
    hint = f" Did you mean {close[0]}?" if close else ""
    raise ParameterError(
        f"parameter {name} is not a parameter of this chapter{more}.{hint} Its parameters are {', '.join(known)}."
    )


def kernel_history() -> list[str] | None:
    """The raw input history of the IPython kernel running this code, or ``None`` outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with the kernel
        return None
    shell = get_ipython()
    if shell is None:
        return None
    return list(shell.history_manager.input_hist_raw)
