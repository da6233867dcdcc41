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
        "width_d_worse": 4, "width_pairs": 5,
    }
    text = found.text()
    assert "d=4, width d+k: median r after 1000 steps" in text and "best at 10; falls monotonically" in text
    assert "d=32, width d+k: not every temperature has runs yet" in text
    assert "not in: d=32 k=10 inv.temp 10." in text
    assert "k=10 onehot seed 3 at step 450" in text


def test_median_end_is_nan_without_runs():
    assert median_end(_finals(), 8, 6, 10.0, "onehot") != median_end(_finals(), 8, 6, 10.0, "onehot")
