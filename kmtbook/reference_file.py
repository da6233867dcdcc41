"""The reference file of the drift guard (:mod:`kmtbook.reference_metrics`): its keys, its entries and
their checks, reading and writing it. A damaged file or entry is an error naming it; a value must be a
finite number, a flag or text, and every guarded entry has a finite tolerance >= 0."""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_KEY = re.compile(r"^(?P<chapter>\d[\w-]*):(?P<name>[A-Za-z_]\w*)(?:\[(?P<index>-?\d+)\])?$")


def parse_key(key: str) -> tuple[str, str, int | None]:
    """``"07_generalization:gap_t20[3]"`` -> ``("07_generalization", "gap_t20", 3)``."""
    match = _KEY.match(key)
    if match is None:
        raise ValueError(f"reference key {key!r} is not <chapter>:<metric> or <chapter>:<metric>[<index>]")
    return match["chapter"], match["name"], int(match["index"]) if match["index"] else None


KINDS = ("exact", "rounding", "sampled", "not guarded")
"""What a number is, as an entry's ``kind`` says (see the module's documentation)."""


def value_type(value: Any) -> str:
    """``"number"``, ``"flag"`` (a bool, which is no number here: ``True == 1`` must not pass), ``"text"``,
    or the name of another type."""
    if isinstance(value, bool):
        return "flag"
    if isinstance(value, numbers.Real):
        return "number"
    return "text" if isinstance(value, str) else type(value).__name__


def check_tolerance(tolerance: Any, kind: str) -> None:
    """A ValueError unless ``tolerance`` is a finite number >= 0 (None for ``not guarded`` numbers)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")
    if kind == "not guarded" and tolerance is None:
        return
    if value_type(tolerance) != "number" or not math.isfinite(tolerance) or tolerance < 0:
        raise ValueError(f"tolerance must be a finite number >= 0 for a number of kind {kind!r}, got {tolerance!r}")


def check_entry(key: str, entry: Any) -> None:
    """A ValueError naming ``key`` unless ``entry`` is a whole reference entry: its fields, a kind, a
    valid tolerance (never silently unguarded) and a value that is a finite number, a flag or text."""
    parse_key(key)
    if not isinstance(entry, dict):
        raise ValueError(f"entry {key!r} is not an object")
    for field in ("value", "kind", "tolerance", "reason", "commit"):
        if field not in entry:
            raise ValueError(f"entry {key!r} has no {field!r}")
    try:
        check_tolerance(entry["tolerance"], entry["kind"])
        check_reference_value(entry["value"])
    except ValueError as err:
        raise ValueError(f"entry {key!r}: {err}") from None


def check_reference_value(value: Any) -> None:
    """A ValueError unless ``value`` can be a reference: a finite number, a flag or text."""
    if value_type(value) not in ("number", "flag", "text"):
        raise ValueError(f"value must be a number, a flag or text, got {type(value).__name__} {value!r}")
    if value_type(value) == "number" and not math.isfinite(value):
        raise ValueError(f"value must be finite, got {value!r}")


def read_references(path: Path) -> dict[str, dict[str, Any]]:
    """The entries of a reference file, by key, each checked (:func:`check_entry`); an error naming
    the file (and the entry) when it is damaged."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        entries = data["entries"]
        if not isinstance(entries, dict):
            raise TypeError("'entries' is not an object")
        for key, entry in entries.items():
            check_entry(key, entry)
    except OSError as err:
        raise FileNotFoundError(f"reference file {path} cannot be read: {err.strerror or err}") from err
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"reference file {path} is damaged: {err}") from err
    return entries


def write_references(path: Path, profile: str, entries: Mapping[str, Mapping[str, Any]]) -> None:
    payload = {
        "profile": profile,
        "about": "the published numbers of a reference build and how far a build may move them; "
                 "see kmtbook/reference_metrics.py and data/book_build/README.md",
        "entries": {key: dict(entries[key]) for key in sorted(entries)},
    }
    Path(path).write_text(json.dumps(payload, indent=1, allow_nan=False) + "\n", encoding="utf-8")
