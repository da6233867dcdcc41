"""kmtlib.book.Chapter: what a chapter records goes into a flat metrics.json."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from kmtlib.book import Chapter

PROFILES = {"quick": {"n": 4}, "book": {"n": 8}, "paper": {"n": 16}}


def _chapter(tmp_path, **sizes):
    return Chapter("00_test", device="cpu", seed=1, profile="quick", output_dir=str(tmp_path),
                   sizes=sizes or {"n": 0}, profiles=PROFILES)


def test_profile_fills_unset_sizes_and_explicit_values_win(tmp_path):
    assert _chapter(tmp_path)["n"] == 4
    assert _chapter(tmp_path, n=5)["n"] == 5


def test_metrics_are_flat_and_plain(tmp_path):
    chapter = _chapter(tmp_path)
    chapter.record(value=torch.tensor(1.5), curve=np.arange(3), names=["a", "b"])
    path = chapter.write_metrics()
    metrics = json.loads(path.read_text())
    assert metrics["value"] == 1.5 and metrics["curve"] == [0, 1, 2] and metrics["names"] == ["a", "b"]


def test_a_mapping_is_refused_with_its_name(tmp_path):
    chapter = _chapter(tmp_path)
    with pytest.raises(TypeError, match="'table' is a mapping"):
        chapter.record(table={"a": 1.0})
