"""Smoke test of the benchmark harness: `python -m benchmarks --quick` runs every row at toy
sizes and writes JSON with the expected structure. Not a timed test: no speed is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

ROW_KEYS = {"row", "label", "dtype", "threads", "available"}
TIMED_KEYS = {
    "median_s",
    "min_s",
    "max_s",
    "times_s",
    "repeats",
    "warmup",
    "per_task_us",
    "iterations",
    "ratio_to_lloyd",
    "ratio_to_lloyd_of_minima",
}


def _run_quick(out, *args: str, timeout: int) -> str:
    """``python -m benchmarks --quick --out <out> <args>`` from the repository root; its stdout."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    stdout = _run_quick(out, "--only", "lloyd", "--threads", "1", timeout=600)
    return json.loads((out / "lloyd.json").read_text()), stdout


def test_quick_run_writes_the_expected_json(quick_run):
    result, _ = quick_run
    assert result["benchmark"] == "lloyd"
    assert result["settings"]["quick"] is True and result["settings"]["threads"] == 1
    assert result["settings"]["repeats"] >= 5
    machine = result["machine"]
    assert machine["cpu_model"] and machine["versions"]["torch"] and machine["versions"]["scikit-learn"]
    assert machine["threads"]["torch"] >= 1
    assert result["settings"]["thread_counts_during_run"]["torch"] == 1
    assert set(result["regimes"]) == {"many_small", "one_large"}
    for regime in result["regimes"].values():
        assert {"batch", "n", "d", "k", "steps"} <= set(regime["config"])
        rows = {(r["row"], r["dtype"]): r for r in regime["rows"]}
        expected = {
            ("lloyd", "float32"),
            ("lloyd", "float64"),
            ("transformer", "float32"),
            ("transformer", "float64"),
            ("sklearn", "float32"),
            ("sklearn", "float64"),
            ("faiss", "float32"),
        }
        assert set(rows) == expected
        for key in [("lloyd", "float32"), ("lloyd", "float64"), ("sklearn", "float32"), ("sklearn", "float64")]:
            assert rows[key]["available"], rows[key]
        for r in regime["rows"]:
            assert set(r) >= ROW_KEYS
            if not r["available"]:
                assert r["note"].startswith("not available")
                continue
            assert set(r) >= TIMED_KEYS, sorted(TIMED_KEYS - set(r))
            assert len(r["times_s"]) == r["repeats"] >= 5
            assert all(t > 0 for t in r["times_s"]) and r["median_s"] > 0 and r["min_s"] > 0
            if r["row"] != "lloyd":
                agree = r["agreement_vs_kmtlib_lloyd"]
                assert agree["tasks_compared"] + agree["tasks_excluded_empty_cluster"] == regime["config"]["batch"]
                if agree["tasks_compared"]:
                    # same data, same C0, same T: the centres agree up to rounding
                    assert agree["max_abs_dC_clean"] < (1e-3 if r["dtype"] == "float32" else 1e-9), r
    ratios = {(r["regime"], r["numerator"], r["denominator"]): r for r in result["ratios"]}
    assert ("one_large", "lloyd/float32", "sklearn/float32") in ratios
    target = ratios[("one_large", "lloyd/float32", "sklearn/float32")]
    assert target["value"] > 0 and target["value_of_minima"] > 0
    assert target["target"] == "<= 2" and target["status"].startswith("not judged")


def test_quick_run_prints_a_table(quick_run):
    _, stdout = quick_run
    assert "ratios of medians" in stdout and "kmtlib lloyd" in stdout and "median ms" in stdout


@pytest.mark.parametrize("args", [["--repeats", "3"], ["--only", "nonesuch"], ["--threads", "0"]])
def test_bad_arguments_are_refused(args, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(tmp_path), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert not (tmp_path / "lloyd.json").exists()


@pytest.fixture(scope="module")
def quick_training_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_training")
    stdout = _run_quick(out, "--only", "training", "--only", "memory", timeout=900)
    return json.loads((out / "training.json").read_text()), json.loads((out / "memory.json").read_text()), stdout


def test_quick_training_benchmark(quick_training_runs):
    training, _, stdout = quick_training_runs
    assert training["benchmark"] == "training" and training["settings"]["quick"] is True
    assert 1 in training["settings"]["threads"]
    agree = training["agreement"]
    # same tasks, same weights, no dropout: the two implementations compute the same loss
    assert agree["loss_rel_diff"] <= 1e-4 and agree["loss_target_met"]
    assert agree["grad_max_rel_diff"] < 1e-3
    assert set(training["modes"]) == {"default", "tuned"}
    for mode in training["modes"].values():
        assert [r["threads"] for r in mode["rows"]] == training["settings"]["threads"]
        for row in mode["rows"]:
            for impl in ("kmtlib", "reference"):
                assert row[impl]["repeats"] >= 5 and row[impl]["median_s"] > 0
            assert row["speedup"] == pytest.approx(row["reference"]["median_s"] / row["kmtlib"]["median_s"])
    speed = [t for t in training["targets"] if "malloc" in t]
    assert speed and all(t["status"].startswith("not judged") for t in speed)
    assert "training step at" in stdout and "speed-up" in stdout


def test_quick_memory_benchmark(quick_training_runs):
    _, memory, stdout = quick_training_runs
    run = memory["run"]
    assert memory["benchmark"] == "memory"
    # a Python process with torch loaded holds at least tens of MB, and a toy run far less than 2 GB
    assert 20 < run["peak_rss_mb"] < 2048
    assert len(run["window_s"]) >= 5 and all(w > 0 for w in run["window_s"])
    assert run["log_steps"][0] == 0 and run["log_steps"][-1] == memory["config"]["steps"]
    assert memory["extrapolated_full_run_s"] is None  # no extrapolation from toy sizes
    assert "peak RSS" in stdout


def test_reference_model_matches_kmtlib_layer():
    """The straightforward reference computes the same layer as kmtlib (same weights, no dropout)."""
    sys.path.insert(0, str(ROOT))
    import torch

    import kmtlib
    from benchmarks.reference_model import ReferenceLayer, reference_loss, reference_tasks
    from kmtlib.losses import smoothed_objective

    for embedding in ("onehot", "data", "none"):  # ("none": the old name of "data")
        model = kmtlib.KMeansTransformer.trainable(3, 4, embedding=embedding, generator=5, dtype=torch.float64).eval()
        ref = ReferenceLayer(3, 4, embedding=embedding).double().load_kmtlib(model).eval()
        X = kmtlib.sample_tasks(6, 30, 3, 4, generator=1, dtype=torch.float64)
        C0 = kmtlib.init_centers(X, 4, generator=2)
        torch.testing.assert_close(ref(X, C0), model.step(X, C0), rtol=1e-10, atol=1e-12)
        C1 = model.step(X, C0)
        torch.testing.assert_close(reference_loss(X, C1), smoothed_objective(X, C1).mean(), rtol=1e-12, atol=0)
    X, C0 = reference_tasks(5, 40, 2, 3, generator=torch.Generator().manual_seed(0))
    assert X.shape == (5, 40, 2) and C0.shape == (5, 3, 2)
    assert torch.allclose(X.amin(1), torch.zeros(5, 2)) and torch.allclose(X.amax(1), torch.ones(5, 2))
    # the initial centres are points of their task
    assert all(any(torch.equal(c, x) for x in X[b]) for b in range(5) for c in C0[b])


def test_time_interleaved_rounds_and_failures():
    sys.path.insert(0, str(ROOT))
    from benchmarks.common import time_interleaved

    order = []

    def first():
        order.append("first")
        return 1

    def second():
        order.append("second")
        return 2

    def broken():
        raise RuntimeError("no such backend")

    out = time_interleaved({"a": first, "b": broken, "c": second}, repeats=5, warmup=1)
    assert isinstance(out["b"], RuntimeError)
    assert len(out["a"].times_s) == 5 and out["a"].last_result == 1 and out["c"].last_result == 2
    assert order == ["first", "second"] * 6  # warm-up, then rounds that alternate
    with pytest.raises(ValueError):
        time_interleaved({"a": first}, repeats=2)


def test_the_estimator_benchmark_is_registered_and_runs_quick(tmp_path):
    """``python -m benchmarks --only estimator``: the theorem model's forward and the whole fit
    against KMeans per shape, from the same start for the same steps, with their ratios."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import BENCHMARKS

    assert "estimator" in BENCHMARKS
    stdout = _run_quick(tmp_path, "--only", "estimator", timeout=600)
    result = json.loads((tmp_path / "estimator.json").read_text())
    assert result["benchmark"] == "estimator" and result["settings"]["threads"] == 1
    assert result["settings"]["thread_counts_during_run"]["torch"] == 1
    assert result["shapes"]
    for shape in result["shapes"]:
        assert {"n", "d", "k", "steps"} <= set(shape["config"])
        rows = shape["rows"]
        assert set(rows) == {"kmeans", "forward", "fit"}
        for name, row in rows.items():
            assert row["available"], (name, row)
            assert len(row["times_s"]) == row["repeats"] >= 5 and row["median_s"] > 0 and row["cpu_median_s"] >= 0
        # same data, same C0, same T: the theorem model is Lloyd's algorithm, up to rounding
        assert rows["forward"]["max_abs_dC_vs_kmeans"] < 1e-9 and rows["fit"]["max_abs_dC_vs_kmeans"] < 1e-9
        for name in ("forward", "fit"):
            ratio = shape["ratios"][name]
            assert ratio["wall"] == pytest.approx(rows[name]["median_s"] / rows["kmeans"]["median_s"])
            assert shape["status"][name].startswith("not judged")
    assert "ratios to KMeans" in stdout and "forward" in stdout and "fit" in stdout


def test_load_check_flags_a_loaded_machine():
    from benchmarks.common import LoadSnapshot, calibration_s, check_load

    assert 0 < calibration_s(rounds=1, size=1000) < 1
    quiet = check_load(LoadSnapshot(0.3, 0.010), LoadSnapshot(1.1, 0.011), usable_cpus=2)
    assert not quiet.loaded and "quiet" in quiet.note()
    by_load = check_load(LoadSnapshot(8.0, 0.010), LoadSnapshot(7.5, 0.011), usable_cpus=2)
    assert by_load.loaded and "no target is judged" in by_load.note() and "8.0" in by_load.note()
    by_slowdown = check_load(LoadSnapshot(None, 0.010), LoadSnapshot(None, 0.025), usable_cpus=2)
    assert by_slowdown.loaded and by_slowdown.peak_load is None and "unknown" in by_slowdown.note()
    now = check_load(LoadSnapshot(None, 1.0))
    assert now.usable_cpus >= 1 and now.after.calibration_s > 0
