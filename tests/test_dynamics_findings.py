"""Chapter 8's findings come from the runs: kmtbook.dynamics_findings on final values made up here."""

from __future__ import annotations

import pandas as pd

from kmtbook.dynamics_findings import early_step, findings, median_end

SWEEPS = {
    "temperature_d4": ({"d": 4, "k": 6}, "loss_inv_temp", [1.0, 4.0, 7.0, 10.0]),
    "k": ({"d": 32, "loss_inv_temp": 10.0}, "k", [6, 10]),
    "d": ({"k": 6, "loss_inv_temp": 10.0}, "d", [4, 32]),
}


def _finals() -> pd.DataFrame:
    rows = []
    # d = 4: r falls as the inverse temperature grows for width d+k, not for width d.
    for li, onehot, data in ((10.0, 0.90, 1.30), (7.0, 0.95, 1.20), (4.0, 1.00, 1.40), (1.0, 1.20, 1.50)):
        rows += [{"d": 4, "k": 6, "loss_inv_temp": li, "embedding": "onehot", "median": onehot},
                 {"d": 4, "k": 6, "loss_inv_temp": li, "embedding": "data", "median": data}]
    # d = 32, k = 10: width d below width d+k (the one exception to claim 3); no inverse temperature 1 runs.
    rows += [{"d": 32, "k": 10, "loss_inv_temp": 10.0, "embedding": "onehot", "median": 1.10},
             {"d": 32, "k": 10, "loss_inv_temp": 10.0, "embedding": "data", "median": 1.00}]
    return pd.DataFrame(rows)


def _temp_table(early: int) -> pd.DataFrame:
    rows = [{"d": 4, "width": w, "lambda": round(1 / li, 2), f"median r at step {early}": r}
            for w, rs in (("d+k", (2.0, 1.9, 1.8, 1.5)), ("d", (2.0, 2.1, 2.2, 2.3)))
            for li, r in zip((10.0, 7.0, 4.0, 1.0), rs)]
    return pd.DataFrame(rows).set_index(["d", "width", "lambda"]).sort_index()


def test_findings_count_what_the_runs_show():
    early = early_step(1000)
    assert early == 200
    diverged = pd.DataFrame([{"d": 32, "k": 10, "loss_inv_temp": 10.0, "embedding": "onehot", "seed": 3, "steps": 450}])
    found = findings(_finals(), _temp_table(early), diverged, SWEEPS, steps=1000, early=early)
    assert found.metrics == {
        "temperature_monotone": 1, "temperature_tested": 2,  # d = 4 only; d = 32 has no temperature runs
        "early_hot_ahead": 1, "early_tested": 2,  # width d+k: inverse temperature 1 lies lower early on
        "inv_temp1_below_lloyd": 0, "inv_temp1_tested": 2,
        "sweep_configs_below_lloyd": 2, "sweep_configs": 10,  # d = 4, width d+k at inverse temperature 10 and 7
        "width_d_worse": 4, "width_pairs": 5,
    }
    text = found.text()
    assert "d=4, width d+k: median r after 1000 steps" in text and "best at 10; falls monotonically" in text
    assert "d=32, width d+k: not every temperature has runs yet" in text
    assert "not in: d=32 k=10 inv.temp 10." in text
    assert "k=10 onehot seed 3 at step 450" in text
    assert found.strings["inv_temp1_reading"].startswith("consistent with the claim")
    assert "Reading: consistent with the claim" in text
    # the page renders them: one numbered item per claim, our numbers as its bullets
    md = found.markdown().splitlines()
    assert [line.split(".")[0] for line in md if not line.startswith(" ")] == ["1", "2", "3", "4", "5"]
    assert all(line.startswith("   - ") for line in md if line.startswith(" "))
    assert len(md) == len(found.lines)


def test_inverse_temperature_1_runs_test_the_claim_only_where_some_run_beats_lloyd():
    # The sweeps' length: nothing below one Lloyd step anywhere, so the 0 of 2 tests nothing.
    shortened = _finals().assign(median=lambda f: f["median"] + 1.0)
    found = findings(shortened, _temp_table(200), pd.DataFrame(), SWEEPS, steps=1000, early=200)
    assert found.metrics["inv_temp1_below_lloyd"] == 0 and found.metrics["sweep_configs_below_lloyd"] == 0
    assert found.strings["inv_temp1_reading"].startswith("not a test of the claim")
    assert "(0 of 10)" in found.strings["inv_temp1_reading"]


def test_loose_bound_reading_covers_every_case():
    from kmtbook.dynamics_findings import loose_bound_reading

    assert loose_bound_reading(0, 0, 3, 10).startswith("not tested")
    assert loose_bound_reading(0, 4, 0, 10).startswith("not a test of the claim")
    assert loose_bound_reading(0, 4, 1, 10).startswith("consistent with the claim")
    assert loose_bound_reading(1, 4, 1, 10).startswith("against the claim")


def test_median_end_is_nan_without_runs():
    assert median_end(_finals(), 8, 6, 10.0, "onehot") != median_end(_finals(), 8, 6, 10.0, "onehot")
