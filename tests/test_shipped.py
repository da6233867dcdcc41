"""kmtbook.shipped: finding the trained runs the chapters evaluate."""

from __future__ import annotations

import json

import pytest
import torch

from kmtbook.paper_sweep import PAPER_SEEDS
from kmtbook.shipped import require_runs, shipped_runs
from kmtlib import KMeansTransformer
from kmtlib.training import LOG_COLUMNS


def _fake_run(root, embedding, seed, d=3, k=2, n=8, complete=True):
    folder = root / f"{embedding}_seed{seed}"
    folder.mkdir(parents=True)
    KMeansTransformer.trainable(d, k, embedding=embedding, generator=seed % 1000).save(folder / "model.pt")
    (folder / "log.csv").write_text(",".join(LOG_COLUMNS) + "\n0,,2.0,1.0,0.01,0.1\n50,3.0,0.9,0.8,0.01,1.0\n")
    if complete:
        config = {"d": d, "k": k, "n": n, "embedding": embedding, "seed": seed}
        (folder / "manifest.json").write_text(json.dumps({"config": config, "seed": seed, "steps": 50}))
    return folder


def test_finds_complete_runs_in_paper_seed_order(tmp_path):
    _fake_run(tmp_path, "onehot", PAPER_SEEDS[2])
    _fake_run(tmp_path, "onehot", 7)
    _fake_run(tmp_path, "onehot", PAPER_SEEDS[0])
    _fake_run(tmp_path, "none", PAPER_SEEDS[1])
    _fake_run(tmp_path, "onehot", PAPER_SEEDS[1], complete=False)  # still training: no manifest
    runs = shipped_runs("onehot", tmp_path)
    assert [r.seed for r in runs] == [PAPER_SEEDS[0], PAPER_SEEDS[2], 7]
    assert [r.seed for r in shipped_runs("none", tmp_path)] == [PAPER_SEEDS[1]]
    # a run made as "none" (the old name) is the "data" embedding, asked for by either name
    assert [(r.embedding, r.seed) for r in shipped_runs("data", tmp_path)] == [("data", PAPER_SEEDS[1])]
    assert len(shipped_runs(None, tmp_path)) == 4
    assert [r.seed for r in require_runs("onehot", tmp_path, max_runs=2)] == [PAPER_SEEDS[0], PAPER_SEEDS[2]]


def test_run_loads_model_and_log(tmp_path):
    _fake_run(tmp_path, "none", 5)
    (run,) = shipped_runs("none", tmp_path, d=3, k=2)
    model = run.load()
    assert not model.training and model.width == 3
    X = torch.rand(2, 8, 3)
    assert model(X, X[:, :2], steps=2).objective.shape == (2, 3)
    log = run.log()
    assert [row["step"] for row in log] == [0, 50] and log[0]["train_loss"] is None
    assert shipped_runs("none", tmp_path, d=4) == []


def test_missing_runs_raise_with_instructions(tmp_path):
    _fake_run(tmp_path, "onehot", 5)
    with pytest.raises(FileNotFoundError, match=r"'none'.*train_shipped.sh.*ship_weights.py"):
        require_runs("none", tmp_path)
    with pytest.raises(FileNotFoundError, match="no finished training run"):
        require_runs("onehot", tmp_path / "absent")


def test_the_code_retrains_the_first_steps_of_a_shipped_run(tmp_path):
    # The shipped weights were made by `python -m kmtlib.train` with the command in their
    # manifest. Rerun its first 50 steps (one thread, as shipped): speed work on the training
    # step must not change what it computes. On the machine that made them the log is bitwise
    # the same; another CPU rounds BLAS products and torch's vector kernels differently, so the
    # comparison has a tolerance (pytest.approx, no exact comparison anywhere): 1e-5 relative,
    # far below the change of one training step (the loss falls from 798 to 617 in the next 50
    # steps) and far above what other kernels change. Measured: another x86 CPU moves the log by
    # 8e-8 relative (val_rel_objective at step 0), and so do this machine's other kernel paths
    # (MKL_CBWR=COMPATIBLE or SSE4_2, ATEN_CPU_CAPABILITY=avx2 or default): at most 1.7e-8 on
    # the training loss and 1e-7 on the validation ratio, a margin of about 100.
    from pathlib import Path

    from kmtlib.training import TrainConfig, read_log, train

    folder = Path(__file__).resolve().parent.parent / "data" / "weights" / "onehot_seed153476998"
    if not (folder / "manifest.json").exists():
        pytest.skip("the shipped weights are not in this checkout")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert "--threads 1" in manifest["command"]
    config = TrainConfig.from_dict(dict(manifest["config"], steps=50))
    train(config, tmp_path / "run", quiet=True, threads=1)
    ours = read_log(tmp_path / "run" / "log.csv")
    shipped = read_log(folder / "log.csv")[: len(ours)]
    assert [r["step"] for r in ours] == [r["step"] for r in shipped] == [0, 50]
    for mine, theirs in zip(ours, shipped):
        for column in ("train_loss", "val_rel_objective", "val_log_objective"):
            if theirs[column] is None:
                assert mine[column] is None
            else:
                assert mine[column] == pytest.approx(theirs[column], rel=1e-5), (mine["step"], column)
