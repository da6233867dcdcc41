"""The book's performance targets (Chapter 11) counted by their status.

Each target row of Chapter 11 is ``"met"``, ``"missed"`` or ``"not judged (<why>)"`` (timed on a
loaded machine, at the quick profile's sizes, ...). :func:`target_counts` counts the three apart,
so that a row that was not judged is never read as met, and :func:`targets_line` is the sentence
that closes the chapter's table, the same counts as its opening box.
"""

from __future__ import annotations

from collections.abc import Iterable

STATUSES = ("met", "missed", "not judged")
"""The three outcomes of a target row; a status ``"not judged (...)"`` counts as ``"not judged"``."""


def target_counts(statuses: Iterable[str]) -> dict[str, int]:
    """How many of ``statuses`` are met, missed and not judged (keys ``met``, ``missed``,
    ``not_judged``). A status other than these three (and ``"not judged (<why>)"``) raises
    :class:`ValueError` naming it: a new outcome must be counted on purpose."""
    counts = {"met": 0, "missed": 0, "not_judged": 0}
    for status in statuses:
        if status in ("met", "missed"):
            counts[status] += 1
        elif status == "not judged" or status.startswith("not judged ("):
            counts["not_judged"] += 1
        else:
            raise ValueError(f"target status {status!r} is none of {', '.join(STATUSES)}")
    return counts


def targets_line(counts: dict[str, int]) -> str:
    """``"3 met, 2 missed, 22 not judged (of 27 rows)"``: the counts of :func:`target_counts`."""
    total = counts["met"] + counts["missed"] + counts["not_judged"]
    return f"{counts['met']} met, {counts['missed']} missed, {counts['not_judged']} not judged (of {total} rows)"


def targets_phrase(counts: dict[str, int]) -> str:
    """``"3 targets met, 2 missed and 22 not judged"``: the counts of :func:`target_counts` as a
    clause of a sentence (the index's results table), every count named, the noun in its number."""
    from .figure_checks import plural

    return f"{plural(counts['met'], 'target')} met, {counts['missed']} missed and {counts['not_judged']} not judged"


__all__ = ["STATUSES", "target_counts", "targets_line", "targets_phrase"]
