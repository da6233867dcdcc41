"""The book helpers take a flag only as True or False, and a number to draw or compare only when it
is finite (kmtbook.arguments, and every public helper of kmtbook that takes a flag)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from kmtbook.citation import BookCitation
from kmtbook.dynamics import run_table, seed_bands
from kmtbook.plotting import plot_matrix
from kmtbook.summaries import mean_pm_table
from kmtbook.theorem_checks import fig3_tasks
from kmtbook.variant_tasks import ring_mixture

NOT_FLAGS = ["False", "True", 0, 1, None, "no"]


def test_a_flag_is_true_or_false_and_a_number_is_finite():
    from kmtbook.arguments import check_flag, finite_number

    assert check_flag("x", True) is True and check_flag("x", np.False_) is False
    for value in NOT_FLAGS:
        with pytest.raises(TypeError, match=r"^x must be True or False, got "):
            check_flag("x", value)
    assert finite_number("y", 2) == 2.0 and finite_number("y", np.float32(0.5)) == 0.5
    assert finite_number("y", torch.tensor(1.5)) == 1.5
    for value in (math.nan, math.inf, "5.0", True, None, [1.0], torch.ones(2)):
        with pytest.raises(ValueError, match=r"^y must be a finite number, got "):
            finite_number("y", value)


def _generator():
    return torch.Generator().manual_seed(0)


HELPERS = {
    "missing_spread_as_zero": lambda flag: mean_pm_table(pd.DataFrame({"g": [1, 1], "v": [1.0, 2.0]}).groupby("g")["v"],
                                                         2, missing_spread_as_zero=flag),
    "full": lambda flag: BookCitation("t", "a", "0.1.0", "2026", commit="abc").build_text(full=flag),
    "include_diverged": lambda flag: run_table("no such folder", include_diverged=flag),
    "drop_step0": lambda flag: seed_bands(pd.DataFrame({"step": [0, 1], "v": [1.0, 2.0]}), "v", by=[],
                                          drop_step0=flag),
    "scaled": lambda flag: fig3_tasks(1, 4, 2, _generator(), scaled=flag),
    "symmetric": lambda flag: plot_matrix(None, torch.eye(2), symmetric=flag),
    "colorbar": lambda flag: plot_matrix(None, torch.eye(2), colorbar=flag),
    "rotate": lambda flag: ring_mixture(_generator(), 1, 4, 2, 2, 3.0, rotate=flag),
}  # fmt: skip


@pytest.mark.parametrize("name", HELPERS)
def test_every_flag_of_the_book_helpers_is_checked_as_a_boolean(name):
    """``"False"`` is true as a Python value, and 0 is not a flag: each is refused, naming the flag."""
    for value in ("False", 0, None):
        with pytest.raises(TypeError, match=rf"^{name} must be True or False"):
            HELPERS[name](value)


def test_a_table_has_one_header_row():
    # chapter 02's tables showed the index's name in a second label row under the column names
    import pandas as pd

    from kmtbook.summaries import one_header_row

    plain = pd.DataFrame({"a": [1, 2]}, index=["x", "y"]).rename_axis("model")
    assert plain.to_html().count("<tr") - 2 == 2  # (two header rows before)
    shown = one_header_row(plain).to_html()
    assert shown.count("<tr") - 2 == 1 and "<th>model</th>" in shown
    rows = pd.DataFrame({"case": ["e", "t"], "method": ["m", "m"], "c": [1, 2]}).set_index(["case", "method"])
    shown = one_header_row(rows).to_html()
    assert shown.count("<tr") - 2 == 1 and "<th>case</th>" in shown and "<th>method</th>" in shown
