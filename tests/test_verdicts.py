"""kmtbook.verdicts: the conclusions chapters render as text say what their numbers show."""

from __future__ import annotations

from kmtbook.sphinx_ext.metrics import format_metric
from kmtbook.verdicts import dropout, grouped, live_run, signed


def test_a_live_run_that_crosses_and_ends_below_lloyd_shows_the_claim():
    text = live_run(1550, 4000, 2.219, 2.428, 20, book_steps=4000)
    assert "from training step 1\u00a0550 on" in text and "**0.209 below**" in text
    assert "shows the paper's claim" in text and "too short" not in text


def test_a_live_run_too_short_says_so_in_words_and_names_the_book_run():
    never = live_run(None, 20, 3.664, 2.428, 20, book_steps=4000)
    assert "never beats one Lloyd step in its 20 training steps" in never and "**1.236 above**" in never
    assert "too short to show the paper's claim" in never and "4\u00a0000 training steps" in never
    crossed_but_above = live_run(1550, 2000, 2.509, 2.428, 20, book_steps=4000)
    assert "from training step 1\u00a0550 on" in crossed_but_above and "too short" in crossed_but_above


def test_the_dropout_sentence_gives_the_mean_and_the_range_over_seeds():
    text = dropout(0.0125, -0.003, 0.036, 4, 20)
    assert "+0.013 on average over 4 dropout seeds" in text and "\u22120.003 to +0.036" in text
    assert dropout(0.01, 0.01, 0.01, 1, 1).count("1 dropout seed ") == 1


def test_numbers_are_grouped_as_the_prose_writes_them():
    assert grouped(10000) == "10\u00a0000" and grouped(500) == "500" and grouped(1550) == "1\u00a0550"
    assert format_metric(10000, ",") == "10\u00a0000" and format_metric(10000, "") == "10000"
    assert signed(-0.5, 1) == "\u22120.5" and signed(0.25, 2) == "+0.25"


def test_count_tables_print_whole_numbers_as_integers():
    import pandas as pd

    from kmtbook.summaries import whole_numbers

    table = pd.DataFrame({"exact": [285.0, 285.5], "cast": [10000.0, 9921.0]}, index=["median", "mean"])
    text = whole_numbers(table).to_string()
    assert "285.0" not in text and "285.5" in text and "10000" in text and "10000.0" not in text


def test_printouts_fold_to_what_the_column_shows():
    from kmtbook.summaries import PRINT_WIDTH, wrap_lines

    text = wrap_lines("word " * 40)
    assert PRINT_WIDTH <= 80 and max(len(line) for line in text.splitlines()) <= PRINT_WIDTH


def test_output_boxes_wrap_on_a_desktop_and_scroll_by_themselves_on_a_phone():
    from kmtbook.sphinx_ext.assets import CSS

    assert ".bd-article div.cell_output pre { overflow-x: auto; max-width: 100%; }" in CSS
    desktop = CSS.split("@media (min-width: 641px)", 1)[1].split("}", 2)
    assert "div.cell_output pre { white-space: pre-wrap;" in desktop[0]
