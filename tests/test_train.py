"""kmtlib.train: the training protocol on a tiny configuration.

* training lowers the loss and the validation metric;
* stop + resume ends with exactly the weights (and log) of an uninterrupted run;
* an interrupted or killed run leaves valid checkpoint files and can be resumed;
* the output files (log.csv, best.pt, model.pt, manifest.json) and the argument errors.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _helpers import kill_training_command, log_without_wall, one_thread  # noqa: F401 (one_thread: a fixture every test uses)

from kmtlib.io.model_file import load_model
from kmtlib.training import (
    TrainConfig,
    derive_seeds,
    load_checkpoint_model,
    make_validation_set,
    read_log,
    train,
)
from kmtlib.training.cli import main

TINY = dict(d=3, k=3, n=24, batch=8, eval_every=5, val_batches=2, seed=123)


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path / "last.pt", weights_only=True)["model"]


def _assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name




pytestmark = pytest.mark.usefixtures("one_thread")


def test_training_lowers_the_loss(tmp_path):
    summary = train(dict(TINY, steps=40, lr=0.02), tmp_path / "run", quiet=True)
    assert summary["status"] == "finished" and summary["step"] == 40
    rows = read_log(tmp_path / "run" / "log.csv")
    assert [r["step"] for r in rows] == [0, 5, 10, 15, 20, 25, 30, 35, 40]
    assert rows[0]["train_loss"] is None and rows[0]["lr"] == 0.02
    assert rows[-1]["train_loss"] < rows[1]["train_loss"]
    assert rows[-1]["val_rel_objective"] < 0.8 * rows[0]["val_rel_objective"]
    assert summary["best_val_rel_objective"] == min(r["val_rel_objective"] for r in rows)


def test_resume_equals_uninterrupted_run(tmp_path):
    E = 10
    straight = train(dict(TINY, steps=2 * E), tmp_path / "straight", quiet=True)
    first = train(dict(TINY, steps=2 * E), tmp_path / "resumed", quiet=True, stop_at=E)
    assert first["status"] == "stopped" and first["step"] == E
    assert not (tmp_path / "resumed" / "model.pt").exists()
    second = train(dict(TINY, steps=2 * E), tmp_path / "resumed", quiet=True, resume=True)
    assert second["status"] == "finished" and straight["status"] == "finished"
    _assert_same_weights(_weights(tmp_path / "straight"), _weights(tmp_path / "resumed"))
    a = torch.load(tmp_path / "straight" / "last.pt", weights_only=True)
    b = torch.load(tmp_path / "resumed" / "last.pt", weights_only=True)
    for s1, s2 in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        assert torch.equal(s1["exp_avg"], s2["exp_avg"]) and torch.equal(s1["exp_avg_sq"], s2["exp_avg_sq"])
    assert a["scheduler"] == b["scheduler"]
    for name in a["rng"]:
        assert torch.equal(a["rng"][name], b["rng"][name]), name
    assert log_without_wall(tmp_path / "straight") == log_without_wall(tmp_path / "resumed")
    m1, m2 = load_model(tmp_path / "straight" / "model.pt"), load_model(tmp_path / "resumed" / "model.pt")
    _assert_same_weights(m1.state_dict(), m2.state_dict())
    assert second["best_step"] == straight["best_step"]


def test_interrupted_run_leaves_valid_checkpoints_and_resumes(tmp_path):
    out = tmp_path / "run"

    def interrupt(row):
        if row["step"] == 10:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(dict(TINY, steps=20), out, quiet=True, callback=interrupt)
    names = sorted(p.name for p in out.iterdir() if p.name != ".lock")
    assert names == ["best.pt", "last.pt", "log.csv", "previous.pt"]  # no temporary files left behind
    ckpt = torch.load(out / "last.pt", weights_only=True)
    assert ckpt["step"] == 10
    assert load_checkpoint_model(out / "last.pt").k == 3
    load_model(out / "best.pt")
    with pytest.raises(FileExistsError, match="resume"):
        train(dict(TINY, steps=20), out, quiet=True)
    with pytest.raises(ValueError, match="lr"):
        train(dict(TINY, steps=20, lr=0.5), out, quiet=True, resume=True)
    summary = train(dict(TINY, steps=20), out, quiet=True, resume=True)
    assert summary["status"] == "finished"
    assert [r["step"] for r in read_log(out / "log.csv")] == [0, 5, 10, 15, 20]


def test_killed_cli_run_resumes_to_the_same_weights(tmp_path):
    out = tmp_path / "killed"
    args = [
        "--d",
        "3",
        "--k",
        "3",
        "--n",
        "24",
        "--batch",
        "8",
        "--eval-every",
        "5",
        "--val-batches",
        "2",
        "--seed",
        "123",
        "--steps",
        "5000",
        "--threads",
        "1",
        "--quiet",
        "--out",
        str(out),
    ]
    kill_training_command(args, lambda: (out / "last.pt").exists() and len(read_log(out / "log.csv")) >= 3)
    ckpt = torch.load(out / "last.pt", weights_only=True)  # valid after a SIGKILL at any moment
    assert ckpt["step"] % 5 == 0 and ckpt["step"] < 5000
    load_model(out / "best.pt")
    # Resume in-process to a short total, and compare with an uninterrupted in-process run.
    total = ckpt["step"] + 10
    train(dict(TINY, steps=total), out, quiet=True, resume=True)
    train(dict(TINY, steps=total), tmp_path / "straight", quiet=True)
    _assert_same_weights(_weights(out), _weights(tmp_path / "straight"))


def test_manifest_and_cli(tmp_path, capsys):
    out = tmp_path / "cli"
    summary = main(
        [
            "--d",
            "3",
            "--k",
            "3",
            "--n",
            "24",
            "--batch",
            "8",
            "--eval-every",
            "5",
            "--val-batches",
            "2",
            "--steps",
            "5",
            "--embedding",
            "none",
            "--quiet",
            "--out",
            str(out),
        ]
    )
    assert summary["status"] == "finished"
    assert json.loads(capsys.readouterr().out)["step"] == 5
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["embedding"] == "none" and manifest["steps"] == 5
    assert manifest["command"].startswith("python -m kmtlib.train ") and "--embedding none" in manifest["command"]
    for key in (
        "kmtlib_version",
        "torch_version",
        "device",
        "wall_s",
        "final_val_rel_objective",
        "best_val_rel_objective",
    ):
        assert key in manifest
    # Provenance: the fingerprint of every file of the package that trained, and how it was taken.
    from kmtlib.training.provenance import source_sha256

    assert manifest["kmtlib_source_sha256"] == source_sha256()
    assert manifest["kmtlib_source_sha256_scheme"] == "every file under kmtlib/, recursive"
    model = load_model(out / "model.pt")
    assert model.config.embedding == "data" and model.config.trainable  # ("none": the old name of the d-only tokens)
    _assert_same_weights(model.state_dict(), _weights(out))
    with pytest.raises(SystemExit, match="already holds"):
        main(["--d", "3", "--k", "3", "--n", "24", "--steps", "5", "--quiet", "--out", str(out)])
    with pytest.raises(SystemExit, match="gamma"):
        main(["--gamma", "0", "--quiet", "--out", str(tmp_path / "bad")])
    with pytest.raises(SystemExit, match="k=30 clusters exceed"):
        main(["--k", "30", "--n", "20", "--quiet", "--out", str(tmp_path / "bad")])


def test_config_validation_and_validation_set():
    with pytest.raises(ValueError, match="unknown training option"):
        TrainConfig.from_dict({"stepz": 3})
    with pytest.raises(ValueError, match="unknown embedding"):
        TrainConfig(embedding="binary").validated()
    with pytest.raises(ValueError, match="eval_every must be >= 1"):
        TrainConfig(eval_every=0).validated()
    cfg = TrainConfig(**TINY)
    X, C0, ref = make_validation_set(cfg)
    X2, C02, ref2 = make_validation_set(cfg)
    assert X.shape == (16, 24, 3) and C0.shape == (16, 3, 3) and ref.shape == (16,)
    assert torch.equal(X, X2) and torch.equal(C0, C02) and torch.equal(ref, ref2)
    # the first batches do not depend on how many validation batches there are
    X1, _, _ = make_validation_set(TrainConfig(**dict(TINY, val_batches=1)))
    assert torch.equal(X1, X[:8])
    seeds = derive_seeds(123)
    assert len(set(seeds.values())) == len(seeds) and all(0 <= s < 2**63 for s in seeds.values())


def test_resume_with_other_thread_count_warns(tmp_path):
    train(dict(TINY, steps=10), tmp_path / "run", quiet=True, stop_at=5)
    with pytest.warns(UserWarning, match="threads"):
        train(dict(TINY, steps=10), tmp_path / "run", quiet=True, resume=True, threads=2)


def test_two_processes_cannot_train_into_one_folder(tmp_path):
    from kmtlib.training import RunInUseError
    from kmtlib.training.run_folder import run_lock

    out = tmp_path / "run"
    out.mkdir()
    with run_lock(out):
        with pytest.raises(RunInUseError, match="in use"):
            train(dict(TINY, steps=5), out, quiet=True)
        code = "import sys; from kmtlib.train import main; main(sys.argv[1:])"
        proc = subprocess.run(
            [sys.executable, "-c", code, "--steps", "5", "--quiet", "--out", str(out)], capture_output=True, text=True
        )
        assert proc.returncode != 0 and "in use by another training process" in proc.stderr
    assert train(dict(TINY, steps=5), out, quiet=True)["status"] == "finished"  # free again


def test_manifest_records_paths_below_the_working_directory_relatively(tmp_path, monkeypatch, capsys):
    from kmtlib.training.cli import _portable_argv
    from kmtlib.training.run_folder import portable_path

    monkeypatch.chdir(tmp_path)
    inside, outside = tmp_path / "runs" / "a", tmp_path.parent / "elsewhere"
    assert portable_path(inside) == "runs/a" and portable_path("runs/a") == "runs/a"
    assert portable_path(outside) == str(outside)  # not below: kept, nothing made up
    assert _portable_argv(["--out", str(inside), f"--init-from={inside}/model.pt", "--k", "3"]) == [
        "--out", "runs/a", "--init-from=runs/a/model.pt", "--k", "3"]
    main(["--d", "3", "--k", "3", "--n", "24", "--batch", "8", "--eval-every", "5", "--val-batches", "2",
          "--steps", "5", "--embedding", "none", "--quiet", "--out", str(inside)])
    capsys.readouterr()
    manifest = json.loads((inside / "manifest.json").read_text())
    assert manifest["command"].endswith("--out runs/a") and str(tmp_path) not in json.dumps(manifest)
    assert "relative to the working directory" in manifest["paths"]


def test_resume_on_a_folder_holding_no_run_says_it_starts_afresh(tmp_path, capsys):
    """``--resume --out typo_dir`` (a misspelt folder, or one that holds no run) trains a fresh run
    there, and one line on stderr says so even under ``--quiet``; ``--help`` says it too. A folder
    that holds the run resumes without that line."""
    small = ["--d", "3", "--k", "3", "--n", "24", "--batch", "8", "--eval-every", "1", "--val-batches", "1",
             "--steps", "1", "--quiet", "--resume"]  # fmt: skip
    (tmp_path / "empty").mkdir()
    for name, said in (("typo_dir", "does not exist"), ("empty", "holds no run")):
        summary = main([*small, "--out", str(tmp_path / name)])
        err = capsys.readouterr().err
        assert f"--resume: {tmp_path / name} {said}: starting a fresh run there" in err, err
        assert summary["status"] == "finished" and summary["step"] == 1
    main([*small[:-4], "--steps", "2", "--quiet", "--resume", "--out", str(tmp_path / "typo_dir")])
    assert "starting a fresh run" not in capsys.readouterr().err
    # --seeds: a line per seed folder that holds no run
    main([*small, "--seeds", "4,5", "--out", str(tmp_path / "group")])
    err = capsys.readouterr().err
    for seed in ("seed4", "seed5"):
        assert f"{tmp_path / 'group' / seed} does not exist: starting a fresh run there" in err, err
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "holds no run" in " ".join(capsys.readouterr().out.split())
