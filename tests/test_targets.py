"""Chapter 11's targets are counted met, missed and not judged apart (kmtbook.targets)."""

from __future__ import annotations

import pytest

from kmtbook.targets import target_counts, targets_line, targets_phrase


def test_not_judged_rows_are_neither_met_nor_missed():
    statuses = ["met", "missed", "not judged (machine loaded)", "met", "not judged (quick profile)", "missed", "met"]
    counts = target_counts(statuses)
    assert counts == {"met": 3, "missed": 2, "not_judged": 2}
    assert targets_line(counts) == "3 met, 2 missed, 2 not judged (of 7 rows)"


def test_the_phrase_names_every_count_in_words():
    # the index's results table quoted the met and missed counts and dropped the rows not judged
    assert targets_phrase({"met": 3, "missed": 2, "not_judged": 22}) == "3 targets met, 2 missed and 22 not judged"
    assert targets_phrase({"met": 1, "missed": 0, "not_judged": 1}) == "1 target met, 0 missed and 1 not judged"


def test_a_status_of_another_kind_is_named():
    with pytest.raises(ValueError, match="'judged later'"):
        target_counts(["met", "judged later"])
    # a status that only starts like "met" is no met row
    with pytest.raises(ValueError, match="'metered'"):
        target_counts(["metered"])
