"""kmtbook.dynamics and scripts/ship_dynamics.py on synthetic training logs."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from kmtbook.dynamics import (
    most_common_steps,
    read_logs,
    run_table,
    seed_bands,
    steps_to_reach,
    summarise_final,
    window_mean,
)
from kmtlib.training import LOG_COLUMNS, TrainConfig, read_log, train

ROOT = Path(__file__).resolve().parent.parent


def _config(d, k, li, embedding, seed, steps):
    return {
        "d": d,
        "k": k,
        "n": 512,
        "loss_inv_temp": float(li),
        "embedding": embedding,
        "seed": seed,
        "steps": steps,
        "eval_every": 50,
    }


def _fake_run(root: Path, d=4, k=6, li=10, embedding="onehot", seed=1, steps=200, offset=0.0, manifest=True):
    """A run folder with a log whose validation curve is 2 / (1 + step / 100) + offset."""
    name = f"d{d}_k{k}_li{li}_{embedding}_seed{seed}"
    folder = root / name
    folder.mkdir(parents=True)
    lines = [",".join(LOG_COLUMNS)]
    for s in range(0, steps + 1, 50):
        loss = "" if s == 0 else repr(100.0 / (1 + s / 100) + offset)
        lines.append(f"{s},{loss},{2 / (1 + s / 100) + offset},{5.0 + offset},0.01,{s / 10}")
    (folder / "log.csv").write_text("\n".join(lines) + "\n")
    if manifest:
        (folder / "manifest.json").write_text(
            json.dumps(
                {
                    "config": _config(d, k, li, embedding, seed, steps),
                    "seed": seed,
                    "steps": steps,
                    "wall_s": steps / 10,
                    "final_val_rel_objective": 2 / (1 + steps / 100) + offset,
                    "command": f"python -m kmtlib.train --out {name}",
                }
            )
        )
    return folder


def _ship_module():
    spec = importlib.util.spec_from_file_location("ship_dynamics", ROOT / "scripts" / "ship_dynamics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------- window_mean
def test_window_mean_equals_running_mean_of_the_steps():
    """Log rows that are means over 10 steps, window 50: the exact trailing 50-step mean of the steps."""
    rng = np.random.default_rng(0)
    per_step = rng.normal(size=400) ** 2
    steps = np.arange(0, 401, 10)
    rows = np.concatenate([[np.nan], per_step.reshape(-1, 10).mean(1)])
    got = window_mean(steps, rows, 50)
    expected = pd.Series(per_step).rolling(50, min_periods=1).mean().to_numpy()[steps[1:] - 1]
    assert math.isnan(got[0])
    np.testing.assert_allclose(got[1:], expected, rtol=1e-12)


def test_window_mean_of_matching_rows_is_identity_and_handles_gaps():
    steps = [0, 50, 100, 150]
    values = [np.nan, 3.0, 1.0, np.nan]
    out = window_mean(steps, values, 50)
    np.testing.assert_allclose(out[1:3], [3.0, 1.0])
    assert math.isnan(out[0]) and math.isnan(out[3])
    np.testing.assert_allclose(window_mean(steps, values, 100)[2], 2.0)


@pytest.mark.parametrize("bad", [0, -5, 2.5, True])
def test_window_mean_rejects_bad_window(bad):
    with pytest.raises((ValueError, TypeError), match="window"):
        window_mean([0, 1], [1.0, 2.0], bad)


def test_window_mean_rejects_unsorted_steps():
    with pytest.raises(ValueError, match="increasing"):
        window_mean([0, 50, 50], [1.0, 2.0, 3.0], 50)
    with pytest.raises(ValueError, match="same length"):
        window_mean([0, 50], [1.0], 50)


# ------------------------------------------------------------------------------- run_table & logs
def test_run_table_scans_manifests_and_skips_unfinished(tmp_path):
    _fake_run(tmp_path, seed=2)
    _fake_run(tmp_path, seed=1)
    _fake_run(tmp_path, embedding="none", seed=1)
    _fake_run(tmp_path, seed=3, manifest=False)  # still training
    runs = run_table(tmp_path)
    assert len(runs) == 3
    # (the run made as "none", the old name of the width-d embedding, under its current name)
    assert list(runs.embedding) == ["data", "onehot", "onehot"] and list(runs.seed) == [1, 1, 2]
    assert set(runs.columns) >= {"run", "folder", "d", "k", "n", "loss_inv_temp", "steps", "status"}
    assert most_common_steps(runs) == 200


def test_run_table_missing_folder_says_how_to_make_runs(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"train_dynamics.sh"):
        run_table(tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="no finished training run"):
        run_table(tmp_path)


def test_bands_are_median_and_quartiles_over_seeds(tmp_path):
    offsets = [0.0, 0.1, 0.4, 1.0]
    for seed, off in enumerate(offsets):
        _fake_run(tmp_path, seed=seed, offset=off)
    _fake_run(tmp_path, seed=9, li=1, offset=5.0)  # another configuration, another band
    logs = read_logs(run_table(tmp_path), window=50)
    assert {"train_loss_window", "val_rel_objective", "seed", "loss_inv_temp"} <= set(logs.columns)
    bands = seed_bands(logs, "val_rel_objective")
    assert 0 not in set(bands.step), "step 0 is dropped as in the paper's figures"
    at100 = bands[(bands.loss_inv_temp == 10.0) & (bands.step == 100)].iloc[0]
    values = np.array([1.0 + o for o in offsets])
    assert at100.seeds == 4
    np.testing.assert_allclose([at100["median"], at100.q25, at100.q75], np.percentile(values, [50, 25, 75]))
    other = bands[bands.loss_inv_temp == 1.0]
    assert set(other.seeds) == {1} and np.allclose(other["median"], other.q25)
    finals = summarise_final(logs)
    row = finals[finals.loss_inv_temp == 10.0].iloc[0]
    assert row.seeds == 4 and row.last_step == 200
    np.testing.assert_allclose(row["median"], np.median(2 / 3 + np.array(offsets)))


def test_read_logs_truncates_and_counts_shorter_runs(tmp_path):
    _fake_run(tmp_path, seed=1, steps=400)
    _fake_run(tmp_path, seed=2, steps=200)
    runs = run_table(tmp_path)
    logs = read_logs(runs, max_step=300)
    assert logs.step.max() == 300
    bands = seed_bands(logs, "val_rel_objective")
    assert list(bands.set_index("step").seeds.loc[[50, 200, 250, 300]]) == [2, 2, 1, 1]
    with pytest.raises(KeyError, match="nonexistent"):
        seed_bands(logs, "nonexistent")


def test_steps_to_reach():
    assert steps_to_reach([50, 100, 150], [2.0, 1.2, 0.9], 1.2) == 100
    assert steps_to_reach([50, 100], [2.0, 1.5], 1.0) == math.inf


# ------------------------------------------------------------------------------- ship_dynamics.py
def test_ship_script_copies_finished_and_diverged_runs(tmp_path):
    ship = _ship_module()
    runs_dir, out = tmp_path / "runs", tmp_path / "out"
    _fake_run(runs_dir, seed=1)
    _fake_run(runs_dir, seed=2, manifest=False)  # in progress: skipped
    diverged = _fake_run(runs_dir, k=25, seed=3, manifest=False)
    torch.save({"config": _config(4, 25, 10, "onehot", 3, 200)}, diverged / "last.pt")
    console = "2026 start x\nFloatingPointError: training diverged: non-finite loss\n"
    (runs_dir / f"{diverged.name}.log").write_text(console)
    (runs_dir / "d4_k6_li10_onehot_seed1" / "model.pt").write_bytes(b"weights")  # never shipped
    _fake_run(out, seed=7)  # stale: no longer in runs/
    index = ship.ship(runs_dir, out)
    assert set(index["runs"]) == {"d4_k6_li10_onehot_seed1", diverged.name}
    assert index["skipped_unfinished"] == ["d4_k6_li10_onehot_seed2"]
    assert index["runs"][diverged.name]["status"] == "diverged"
    assert index["runs"][diverged.name]["config"]["k"] == 25
    assert not (out / "d4_k6_li10_onehot_seed7").exists()
    assert not (out / "d4_k6_li10_onehot_seed1" / "model.pt").exists()
    assert json.loads((out / "index.json").read_text())["runs"]["d4_k6_li10_onehot_seed1"]["steps"] == 200
    assert "Shortened" in (out / "README.md").read_text()
    # The chapter's reader sees the finished run through the index; the diverged one on request.
    assert len(run_table(out)) == 1
    assert set(run_table(out, include_diverged=True).status) == {"finished", "diverged"}



def test_a_sweep_figure_shares_its_limits_without_drawing(tmp_path):
    """The rows compare at a glance: every panel has the same step axis and each column the same
    y-axis, a row without runs included, as sharing the axes would give; and building the figure
    draws nothing (axes shared across subfigures redraw the whole figure at each limit change)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kmtbook.dynamics_figures import sweep_figure

    for li, steps, offset in ((1, 200, 0.0), (4, 400, 1.0)):  # rows of other lengths and heights
        for seed in (1, 2):
            _fake_run(tmp_path, li=li, seed=seed, steps=steps, offset=offset + 0.1 * seed)
    runs = run_table(tmp_path)
    logs = read_logs(runs, window=50)
    none = runs.iloc[0:0]
    draws = []
    original = type(plt.figure().canvas).draw
    plt.close("all")

    def counting_draw(canvas, *args, **kwargs):
        draws.append(canvas)
        return original(canvas, *args, **kwargs)

    type(plt.figure().canvas).draw = counting_draw
    plt.close("all")
    try:
        fig, counts = sweep_figure(logs, (dict(d=4, k=6), "loss_inv_temp", [1, 4, 7]), "d = 4, k = 6",
                                   lambda v: f"1/lambda = {v:g}", window=50, diverged=none, borrowed=none)
        built = len(draws)
        fig.canvas.draw()
    finally:
        type(fig.canvas).draw = original
    assert built == 0
    assert counts[7] == {}
    loss, rel = fig.axes[0::2], fig.axes[1::2]
    assert len({ax.get_xlim() for ax in fig.axes}) == 1
    assert len({ax.get_ylim() for ax in loss}) == 1 and len({ax.get_ylim() for ax in rel}) == 1
    x0, x1 = fig.axes[0].get_xlim()
    assert x0 < 50 and x1 > 400  # the longer row's steps fit every panel
    # the higher row's curve (about 2.5 at step 50, against 1.5 for the first row) fits the first row's panel
    assert rel[0].get_ylim()[1] > 2.4
    plt.close(fig)

# ------------------------------------------------------------------------------- truncation claim
def test_first_steps_of_a_longer_run_are_the_shorter_run(tmp_path):
    """The chapter compares the first S steps of 10 000-step runs with S-step runs: nothing in the
    protocol may depend on the total number of steps."""
    base = dict(d=2, k=2, n=12, batch=4, eval_every=5, val_batches=1, seed=3)
    train(TrainConfig(steps=10, **base), tmp_path / "short", quiet=True, threads=1)
    train(TrainConfig(steps=20, **base), tmp_path / "long", quiet=True, threads=1)
    short = read_log(tmp_path / "short" / "log.csv")
    long = read_log(tmp_path / "long" / "log.csv")[: len(short)]
    for a, b in zip(short, long):
        assert {k: a[k] for k in ("step", "train_loss", "val_rel_objective", "lr")} == {
            k: b[k] for k in ("step", "train_loss", "val_rel_objective", "lr")
        }


def test_a_sweep_figure_has_one_row_per_value_and_readable_text(tmp_path):
    """The sweep figure (the panels of the paper's Fig. 9/10): one row per swept value, loss on the
    left and relative objective on the right, every text at least 9 px tall on the book's page."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kmtbook.chapter import SAVED_DPI
    from kmtbook.dynamics_figures import sweep_figure
    from kmtbook.figure_checks import figure_problems, small_text

    values = [1.0, 4.0, 7.0, 10.0]
    for li in values:
        for embedding in ("onehot", "data"):
            for seed in (1, 2):
                _fake_run(tmp_path, li=int(li), embedding=embedding, seed=seed, offset=0.1 * seed)
    runs = run_table(tmp_path)
    logs = read_logs(runs, window=50)
    none = runs.iloc[0:0]
    fig, counts = sweep_figure(logs, (dict(d=4, k=6), "loss_inv_temp", values), "d = 4, k = 6",
                               lambda v: f"1/lambda = {v:g}", window=50, diverged=none, borrowed=none)
    assert counts == {v: {"onehot": 2, "data": 2} for v in values}
    assert [row.get_suptitle() for row in fig.subfigs] == [f"1/lambda = {v:g}" for v in values]
    assert len(fig.axes) == 2 * len(values)
    assert not figure_problems(fig)
    png = tmp_path / "sweep.png"
    fig.savefig(png, dpi=SAVED_DPI, bbox_inches="tight")
    assert small_text(fig, int.from_bytes(png.read_bytes()[16:20], "big"), SAVED_DPI) is None
    plt.close(fig)
