"""Chapter 11's targets are counted met, missed and not judged apart (kmtbook.targets)."""

from __future__ import annotations

import pytest

from kmtbook.targets import target_counts, targets_line


def test_not_judged_rows_are_neither_met_nor_missed():
    statuses = ["met", "missed", "not judged (machine loaded)", "met", "not judged (quick profile)", "missed", "met"]
    counts = target_counts(statuses)
    assert counts == {"met": 3, "missed": 2, "not_judged": 2}
    assert targets_line(counts) == "3 met, 2 missed, 2 not judged (of 7 rows)"


def test_a_status_of_another_kind_is_named():
    with pytest.raises(ValueError, match="'judged later'"):
        target_counts(["met", "judged later"])
    # a status that only starts like "met" is no met row
    with pytest.raises(ValueError, match="'metered'"):
        target_counts(["metered"])
