"""The held-out evaluation of a layer trained for the estimator's use (kmtbook.estimator_layer): the
sets are fixed and none of chapter 13's, the ship rule reads the numbers it names, and the
chapter's numbers come from the results file."""

import json

import numpy as np
import pandas as pd
import pytest

from kmtbook.estimator_layer import (
    build_set,
    heldout_definition,
    heldout_sets,
    heldout_summary,
    load_results,
    results_metrics,
    results_table,
)
from kmtbook.real_data import REAL_DATASETS, SYNTHETIC_SETS


def test_the_heldout_sets_are_fixed_and_none_of_the_chapters():
    definition = heldout_definition()
    first, second = heldout_sets(definition), heldout_sets(definition)
    names = [s.name for s in first]
    assert len(set(names)) == len(names) == len(definition["sets"])
    assert not set(names) & (set(REAL_DATASETS) | set(SYNTHETIC_SETS))
    for a, b, spec in zip(first, second, definition["sets"]):
        np.testing.assert_array_equal(a.X, b.X)
        n = sum(spec["n"]) if isinstance(spec["n"], list) else spec["n"]
        assert a.X.shape == (n, spec["d"]) and a.k == spec["k"] and np.isfinite(a.X).all()


def test_an_unknown_generator_is_refused_by_name():
    with pytest.raises(ValueError, match=r"'mystery'.*'make_nothing'"):
        build_set(dict(name="mystery", generator="make_nothing", seed=1, d=2, k=2, n=10))


def _runs(layer, seeding, default, kmeans_2):
    n = len(layer)
    return pd.DataFrame(dict(data=["a"] * (n // 2) + ["b"] * (n - n // 2), random_state=range(n), layer_arm=layer,
                             seeding_arm=seeding, default=default, kmeans_1=kmeans_2, kmeans_2=kmeans_2,
                             kmeans_m=kmeans_2))  # fmt: skip


def test_the_ship_rule_needs_more_better_starts_and_at_most_kmeans_n_init_2():
    seeding = [1.0, 1.0, 1.0, 1.0]
    # better on two, worse on one, the same (within 1e-4) on one; the default at 0.99 of KMeans(n_init=2)
    ships = heldout_summary(_runs([0.9, 0.95, 1.1, 1.00005], seeding, [0.99] * 4, [1.0] * 4))
    assert (ships["layer_better"], ships["layer_worse"], ships["passes_ship_rule"]) == (2, 1, True)
    # as many worse as better: no
    tie = heldout_summary(_runs([0.9, 1.1, 1.0, 1.0], seeding, [0.99] * 4, [1.0] * 4))
    assert (tie["layer_better"], tie["layer_worse"], tie["passes_ship_rule"]) == (1, 1, False)
    # more better, but the default above KMeans(n_init=2): no
    slow = heldout_summary(_runs([0.9, 0.95, 1.1, 1.0], seeding, [1.01] * 4, [1.0] * 4))
    assert slow["default_vs_kmeans_2"] == pytest.approx(1.01) and not slow["passes_ship_rule"]


def _results(tmp_path):
    layers = {}
    for name, better, worse in (("shipped", 3, 9), ("estimator_trained", 5, 4)):
        per_set = [dict(data=d, default_vs_kmeans=1.0, default_vs_kmeans_2=1.01, default_vs_kmeans_m=1.02,
                        layer_vs_seeding_arm=1.03, layer_better=better, layer_worse=worse, starts=8)
                   for d in ("ho_a", "ho_b")]  # fmt: skip
        summary = dict(default_vs_kmeans=0.999, default_vs_kmeans_2=1.004, default_vs_kmeans_m=1.01,
                       layer_vs_seeding_arm=1.02, layer_better=better, layer_worse=worse, starts=16,
                       passes_ship_rule=False)  # fmt: skip
        layers[name] = dict(summary=summary, per_set=per_set)
    results = dict(layers=layers, training=dict(cpu_seconds=1500.0, cpu_budget_seconds=2700, steps=700,
                                                first_val_rel_objective=1.01, final_val_rel_objective=0.99),
                   first_run=dict(steps=100, last_val_rel_objective=2.0))  # fmt: skip
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    return path


def test_the_chapters_numbers_come_from_the_results_file(tmp_path):
    results = load_results(_results(tmp_path))
    metrics = results_metrics(results)
    assert metrics["shipped_heldout_better"] == 3 and metrics["trained_heldout_worse"] == 4
    assert metrics["training_cpu_minutes"] == pytest.approx(25.0) and metrics["training_budget_minutes"] == 45
    assert metrics["heldout_starts"] == 16 and metrics["trained_layer_ships"] is False
    assert (metrics["trained_first_val"], metrics["trained_final_val"], metrics["first_run_steps"]) == (1.01, 0.99, 100)
    table = results_table(results)
    assert list(table.index) == ["ho_a", "ho_b"]
    assert table[("trained for the estimator", "layer_better")].tolist() == [5, 5]


def test_a_damaged_results_file_is_named(tmp_path):
    path = tmp_path / "results.json"
    path.write_text('{"layers": {}}')
    with pytest.raises(ValueError, match=r"results\.json"):
        load_results(path)
