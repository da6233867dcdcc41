"""The spread over training seeds against the paper's error bars (kmtbook.seed_spread)."""

from __future__ import annotations

import json
import math

import pytest

from kmtbook.seed_spread import main, shipped_table, spread_against_paper, spread_reading, task_noise_reading


def test_three_seeds_against_the_papers_value():
    s = spread_against_paper([5.02, 4.98, 5.06], 5.00)
    assert s["n_seeds"] == 3 and s["median"] == 5.02 and s["min"] == 4.98 and s["max"] == 5.06
    assert s["range"] == pytest.approx(0.08)
    assert s["sd_from_range"] == pytest.approx(0.08 / 1.693)
    assert s["expected_range_10"] == pytest.approx(0.08 / 1.693 * 3.078)
    assert s["paper_minus_median"] == pytest.approx(-0.02)
    assert s["paper_within_range"] and s["paper_within_expected_ribbon"]
    # a paper value beyond half the expected ten-seed width (0.0727) from our median
    far = spread_against_paper([5.02, 4.98, 5.06], 5.02 - 0.08)
    assert not far["paper_within_range"] and not far["paper_within_expected_ribbon"]
    assert "outside half that width" in spread_reading("trained layer", far)
    assert "inside half that width" in spread_reading("trained layer", s)


def test_ten_seeds_use_their_own_range_and_an_even_count_its_middle_pair():
    values = [5.0 + 0.01 * i for i in range(10)]
    s = spread_against_paper(values, 5.0)
    assert s["median"] == pytest.approx(5.045)  # the mean of the two middle values
    assert s["expected_range_10"] == pytest.approx(s["range"])  # ten seeds: the range itself
    reading = spread_reading("trained layer", s)
    assert "as many seeds as the paper's ribbon" in reading and "inside half that range" in reading
    assert "spreading alike" not in reading  # nothing to extrapolate
    assert "outside half that range" in spread_reading("trained layer", spread_against_paper(values, 5.2))


def test_one_seed_has_no_spread_and_bad_input_is_named():
    s = spread_against_paper([5.0], 5.0)
    assert math.isnan(s["sd_from_range"]) and not s["paper_within_expected_ribbon"]
    assert "no spread" in spread_reading("Lloyd", s)
    with pytest.raises(ValueError, match="per_seed"):
        spread_against_paper([], 5.0)
    with pytest.raises(ValueError, match="at most 10"):
        spread_against_paper([5.0] * 11, 5.0)


def test_the_shipped_table_lists_every_run(tmp_path, capsys):
    seeds = ((153476998, 0.0), (235510766, 0.02), (205084180, 0.04), (129959864, 0.2))
    index = {f"{e}_seed{s}": {"seed": s, "final_val_log_objective": base + dv, "final_val_rel_objective": 1.0,
                              "steps": 10_000, "wall_s": 1200.0}
             for e, base in (("onehot", 5.4), ("none", 5.6)) for s, dv in seeds}
    rows = shipped_table(index)
    assert len(rows) == 8 and {r["width"] for r in rows} == {"d", "d+k"} and rows[0]["wall_min"] == 20.0
    path = tmp_path / "index.json"
    path.write_text(json.dumps(index))
    assert main(["--index", str(path)]) == 0
    out = capsys.readouterr().out
    # the first three of the paper's seeds, then all four
    assert "width d+k, first 3 seeds: median final validation log-objective 5.420" in out
    assert "width d+k, all 4 seeds: median final validation log-objective 5.430" in out
    path.write_text("{")
    with pytest.raises(SystemExit):
        main(["--index", str(path)])


def test_task_noise_reading_says_whether_the_seeds_add_to_the_tasks_spread():
    lloyd = spread_against_paper([5.06, 5.35, 5.27, 5.30], 5.26)  # range 0.29: tasks alone
    narrow = spread_against_paper([4.90, 5.12, 5.00, 4.99], 5.00)  # range 0.22
    wide = spread_against_paper([4.70, 5.30, 5.00, 4.99], 5.00)  # range 0.60
    said = task_noise_reading(narrow, lloyd, 16)
    assert "0.290" in said and "0.220" in said and "its own 16 tasks" in said
    assert "not the training seeds, set the spread" in said
    said = task_noise_reading(wide, lloyd, 16)
    assert "2.1 times that" in said and "add a spread of their own" in said
    one_seed = task_noise_reading(spread_against_paper([5.0], 5.0), spread_against_paper([5.2], 5.26), 16)
    assert one_seed.startswith("One seed")


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, "5.1", True, None], ids=repr)
def test_a_value_that_is_not_a_finite_number_is_refused_naming_it(bad):
    """An infinite seed value would make an infinite ribbon with the paper's value inside it."""
    with pytest.raises(ValueError, match=r"per_seed\[1\] must be a finite number"):
        spread_against_paper([5.0, bad, 5.1], 5.0)
    with pytest.raises(ValueError, match="paper_value must be a finite number"):
        spread_against_paper([5.0, 5.1], bad)


@pytest.mark.parametrize(("field", "bad", "said"), [
    ("final_val_log_objective", "5.6", "must be a finite number, got str '5.6'"),
    ("final_val_log_objective", math.nan, "must be a finite number, got nan"),
    ("wall_s", math.inf, "must be a finite number, got inf"),
    ("final_val_rel_objective", None, "must be a finite number, got NoneType None"),
    ("seed", "abc", "must be an integer, got str 'abc'"),
    ("steps", True, "must be an integer, got bool True"),
])  # fmt: skip
def test_the_index_command_names_the_file_and_the_field_of_a_bad_value(tmp_path, field, bad, said):
    run = {"seed": 1, "final_val_log_objective": 5.4, "final_val_rel_objective": 1.0, "steps": 10, "wall_s": 60.0}
    path = tmp_path / "index.json"
    path.write_text(json.dumps({"onehot_seed1": {**run, field: bad}}))
    with pytest.raises(SystemExit) as ended:
        main(["--index", str(path)])
    assert str(ended.value) == f"error: {path} is damaged: run 'onehot_seed1': field '{field}' {said}"
