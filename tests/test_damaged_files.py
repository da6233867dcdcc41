"""Damaged, foreign and missing files: a clear error naming the file, or a repair that loses nothing.

* a run folder of ``kmtlib.train`` damaged by category (log cut short or padded, checkpoint
  truncated, empty, missing, foreign; manifest not JSON; temporaries of a killed save): ``--resume``
  either repairs it, says so, and ends bitwise where an uninterrupted run ends (same code path,
  same thread count), or refuses before anything is trained or changed, naming the file;
* the training command's arguments (``--out ""``, fewer ``--steps`` than done, a folder that
  holds a run without ``--resume``/``--overwrite``);
* model files (``kmtlib.load_model``) and checkpoints (``load_checkpoint_model``) damaged or of
  something else: one :class:`kmtlib.ModelFileError` naming the file and the problem;
* ``read_log`` and the shipped-run reader on damaged logs and manifests.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _helpers import log_without_wall

import kmtlib
from kmtbook.shipped import shipped_runs
from kmtlib import KMeansTransformer, ModelFileError, load_model
from kmtlib.training import RunFolderError, load_checkpoint_model, read_log, train
from kmtlib.training.cli import main

TINY = dict(d=3, k=3, n=24, batch=8, eval_every=5, val_batches=2, seed=123)
STEPS, STOPPED_AT = 30, 20  # the damaged folders are a 30-step run stopped at step 20
CLI = [
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
    "--threads",
    "1",
    "--quiet",
]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    # Every run of a comparison with the same thread count (float sums depend on the split).
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An uninterrupted run, the same run stopped at step 20 (the folder the tests damage), a
    finished run of the first 20 steps, and a run of another configuration (d=4)."""
    root = tmp_path_factory.mktemp("runs")
    train(dict(TINY, steps=STEPS), root / "straight", quiet=True)
    stopped = train(dict(TINY, steps=STEPS), root / "stopped", quiet=True, stop_at=STOPPED_AT)
    assert stopped["status"] == "stopped" and stopped["step"] == STOPPED_AT
    train(dict(TINY, steps=STOPPED_AT), root / "finished20", quiet=True)
    train(dict(TINY, d=4, steps=5), root / "other", quiet=True)
    return root


def _copy(runs: Path, tmp_path: Path, name: str = "stopped") -> Path:
    folder = tmp_path / "run"
    shutil.copytree(runs / name, folder, ignore=shutil.ignore_patterns(".lock"))
    return folder


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True, map_location="cpu")[
        "model" if path.name in ("last.pt", "previous.pt") else "state_dict"
    ]


def _assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file's bytes and modification time (the lock file aside)."""
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name != ".lock"
    }


def _rewrite_log(folder: Path, edit) -> None:
    path = folder / "log.csv"
    path.write_text(edit(path.read_text()))


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


# ------------------------------------------------------------------ run folders: repaired
# (damage, what the repair line must say); the log at step 20 has a header and rows 0, 5, ..., 20.
_ROW_25 = "25,1.5,0.5,0.3,0.01,2.0\n"
REPAIRABLE = {
    "log cut mid-row": (
        lambda f, runs: _rewrite_log(f, lambda t: t[:-9]),
        r"log\.csv: cut short mid-row after step 15.*restored from the copy in .*last\.pt.*log\.csv\.damaged",
    ),
    "log with fewer rows": (
        lambda f, runs: _rewrite_log(f, lambda t: "".join(_lines(t)[:3])),
        r"log\.csv: cut short after step 5.*restored.*up to step 20",
    ),
    "log cut to its header": (lambda f, runs: _rewrite_log(f, lambda t: _lines(t)[0]), r"log\.csv: cut short"),
    "log empty": (lambda f, runs: (f / "log.csv").write_bytes(b""), r"log\.csv: empty; restored"),
    "log missing": (
        lambda f, runs: (f / "log.csv").unlink(),
        r"log\.csv: missing; restored from the copy in .*last\.pt",
    ),
    "log with rows after the checkpoint": (
        lambda f, runs: _rewrite_log(f, lambda t: t + _ROW_25 + "30,1.4,0.5,0.3,0.01,2.5\n"),
        r"log\.csv: dropped 2 row\(s\) after step 20 \(step 25, 30\).*trained again",
    ),
    "log with a garbage line": (
        lambda f, runs: _rewrite_log(f, lambda t: t + "hello, world\n"),
        r"log\.csv: line 7, after the checkpoint's last row, is not a later row",
    ),
    "log with garbage inside": (
        lambda f, runs: _rewrite_log(f, lambda t: "".join(_lines(t)[:3]) + "x,y,z\n" + "".join(_lines(t)[3:])),
        r"log\.csv: line 4 differs from the checkpoint's copy",
    ),
    "log with a repeated row": (
        lambda f, runs: _rewrite_log(f, lambda t: t + _lines(t)[-1]),
        r"log\.csv: line 7, after the checkpoint's last row, is not a later row",
    ),
    "log with binary junk": (
        lambda f, runs: (f / "log.csv").write_bytes((f / "log.csv").read_bytes() + b"\0\xff" * 40),
        r"log\.csv: line 7",
    ),
    "log of another run": (
        lambda f, runs: shutil.copy(runs / "other" / "log.csv", f / "log.csv"),
        r"log\.csv: line 2 differs",
    ),
    "checkpoint truncated": (
        lambda f, runs: (f / "last.pt").write_bytes((f / "last.pt").read_bytes()[:2000]),
        r"last\.pt: not a kmtlib training checkpoint \(truncated.*"
        r"resuming from the earlier checkpoint .*previous\.pt \(step 15\)",
    ),
    "checkpoint empty": (
        lambda f, runs: (f / "last.pt").write_bytes(b""),
        r"last\.pt: not a kmtlib training checkpoint \(the file is empty",
    ),
    "checkpoint missing": (
        lambda f, runs: (f / "last.pt").unlink(),
        r"last\.pt: no such file.*previous\.pt \(step 15\)",
    ),
    "checkpoint random bytes": (
        lambda f, runs: (f / "last.pt").write_bytes(os.urandom(4000)),
        r"last\.pt: not a kmtlib training checkpoint",
    ),
    "checkpoint is a tensor": (
        lambda f, runs: torch.save(torch.zeros(3), f / "last.pt"),
        r"last\.pt: not a kmtlib training checkpoint \(it holds a tensor of shape \(3,\)",
    ),
    "checkpoint is a model file": (
        lambda f, runs: shutil.copy(f / "best.pt", f / "last.pt"),
        r"last\.pt: .*a model file",
    ),
    "checkpoint lacks an entry": (
        lambda f, runs: _edit_checkpoint(f / "last.pt", lambda p: p.pop("optimizer")),
        r"last\.pt: damaged kmtlib training checkpoint \(its 'optimizer' entry is missing",
    ),
    "checkpoint weights of another shape": (
        lambda f, runs: _edit_checkpoint(
            f / "last.pt", lambda p: p.update(model=torch.load(runs / "other" / "last.pt", weights_only=True)["model"])
        ),
        r"last\.pt: damaged kmtlib training checkpoint \(its training state does not load",
    ),
    "best model truncated": (
        lambda f, runs: (f / "best.pt").write_bytes((f / "best.pt").read_bytes()[:500]),
        r"best\.pt: not a kmtlib model file \(truncated.*restored the best model so far",
    ),
    "best model missing": (
        lambda f, runs: (f / "best.pt").unlink(),
        r"best\.pt: no such file.*restored the best model",
    ),
    "manifest not JSON": (
        lambda f, runs: _extended_finished_run(f, runs, "manifest.json", b"{not json"),
        r"manifest\.json: not a valid manifest.*manifest\.json\.damaged",
    ),
    "manifest JSON but not a manifest": (
        lambda f, runs: _extended_finished_run(f, runs, "manifest.json", b"[]"),
        r"manifest\.json: not a valid manifest.*set aside",
    ),
    "model file damaged": (
        lambda f, runs: _extended_finished_run(f, runs, "model.pt", b"\x80\x02garbage"),
        r"model\.pt: not a kmtlib model file.*written again when the run finishes",
    ),
    "temporaries of a killed save": (
        lambda f, runs: ((f / ".last.pt.k1l2.tmp").write_bytes(b"half"), (f / ".manifest.json.tmp").write_text("{")),
        r"removed 2 temporary file\(s\).*\.last\.pt\.k1l2\.tmp",
    ),
    "killed between the two renames of a save": (
        lambda f, runs: _killed_between_renames(f),
        r"last\.pt: no such file.*previous\.pt \(step 20\)",
    ),
}


def _extended_finished_run(folder: Path, runs: Path, name: str, damaged: bytes) -> None:
    """A finished 20-step run being extended to 30 steps (so it holds model.pt and manifest.json),
    one of the two damaged."""
    for result in ("model.pt", "manifest.json"):
        shutil.copy(runs / "finished20" / result, folder / result)
    (folder / name).write_bytes(damaged)


def _killed_between_renames(folder: Path) -> None:
    """What a kill between the two renames of ``atomic_torch_save(..., keep_previous=...)`` leaves:
    last.pt already renamed to previous.pt, the new checkpoint still a temporary file."""
    os.replace(folder / "last.pt", folder / "previous.pt")
    (folder / ".last.pt.x1y2.tmp").write_bytes(b"a new checkpoint, never renamed")


def _edit_checkpoint(path: Path, edit) -> None:
    payload = torch.load(path, weights_only=True)
    edit(payload)
    torch.save(payload, path)


@pytest.mark.parametrize("case", list(REPAIRABLE), ids=list(REPAIRABLE))
def test_resume_repairs_a_damaged_folder_and_ends_as_an_uninterrupted_run(runs, tmp_path, case, capsys):
    damage, said = REPAIRABLE[case]
    folder = _copy(runs, tmp_path)
    damage(folder, runs)
    damaged = {name: data for name, (data, _) in _snapshot(folder).items()}
    summary = train(dict(TINY, steps=STEPS), folder, quiet=True, resume=True)
    printed = capsys.readouterr().err
    assert summary["status"] == "finished" and summary["step"] == STEPS
    text = "\n".join(summary["notes"])
    assert re.search(said, text, re.S), text
    assert all(line in printed for line in summary["notes"])  # said on stderr, one line each
    assert all("\n" not in note for note in summary["notes"])
    assert str(folder) in text  # the repair names the file
    straight = runs / "straight"
    _assert_same_weights(_weights(folder / "last.pt"), _weights(straight / "last.pt"))
    _assert_same_weights(_weights(folder / "model.pt"), _weights(straight / "model.pt"))
    _assert_same_weights(_weights(folder / "best.pt"), _weights(straight / "best.pt"))
    assert log_without_wall(folder) == log_without_wall(straight)
    assert summary["best_step"] == json.loads((straight / "manifest.json").read_text())["best_step"]
    assert json.loads((folder / "manifest.json").read_text())["steps"] == STEPS
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
    kept = sorted(p.name for p in folder.iterdir() if p.name.endswith(".damaged"))
    assert kept == sorted(re.findall(r"(?:kept|set aside) as ([\w.]+\.damaged)", text))  # as said
    for name in kept:  # what a repair replaced is kept, byte for byte, for the reader
        assert (folder / name).read_bytes() == damaged[name.removesuffix(".damaged")]
    # and the folder is healthy again: the next resume has nothing to say
    again = train(dict(TINY, steps=STEPS + 5), folder, quiet=True, resume=True)
    assert again["notes"] == [] and again["step"] == STEPS + 5


# ------------------------------------------------------------------ run folders: refused
REFUSED = {
    "both checkpoints damaged": (
        lambda f, runs: ((f / "last.pt").write_bytes(b""), (f / "previous.pt").write_bytes(b"junk")),
        r"last\.pt: not a kmtlib training checkpoint \(the file is empty.*"
        r"previous\.pt: not a kmtlib training checkpoint.*--overwrite",
    ),
    "checkpoint truncated, no earlier one": (
        lambda f, runs: (
            (f / "last.pt").write_bytes((f / "last.pt").read_bytes()[:3000]),
            (f / "previous.pt").unlink(),
        ),
        r"last\.pt: not a kmtlib training checkpoint \(truncated.*no earlier checkpoint",
    ),
    "no checkpoint but a log of 20 steps": (
        lambda f, runs: ((f / "last.pt").unlink(), (f / "previous.pt").unlink()),
        r"last\.pt: missing, so .* cannot be resumed \(.*log\.csv records training up to step 20\)",
    ),
    "checkpoint of another run": (
        lambda f, runs: shutil.copy(runs / "other" / "last.pt", f / "last.pt"),
        r"last\.pt: the checkpoint of another run \(d: 4 there vs 3 now\)",
    ),
    "manifest of another run": (
        lambda f, runs: shutil.copy(runs / "other" / "manifest.json", f / "manifest.json"),
        r"manifest\.json: the manifest of another run \(d: 4 there vs 3 now\)",
    ),
    "model of another run": (
        lambda f, runs: shutil.copy(runs / "other" / "model.pt", f / "model.pt"),
        r"model\.pt: a model of another configuration \(d: 4 there vs 3 here[;)]",
    ),
    "a pickle of other objects as checkpoint": (
        lambda f, runs: (
            (f / "last.pt").write_bytes(pickle.dumps({"a": _Foreign()}, protocol=2)),
            (f / "previous.pt").unlink(),
        ),
        r"last\.pt: not a kmtlib training checkpoint \(it holds Python objects that a weights-only load refuses",
    ),
    "a folder in place of a file": (
        lambda f, runs: ((f / "best.pt").unlink(), (f / "best.pt").mkdir()),
        r"best\.pt: a folder where the run keeps its best\.pt file",
    ),
    "a finished run without its checkpoints (as shipped)": (
        lambda f, runs: _as_shipped(f, runs),
        r"last\.pt: missing.*model\.pt.*no checkpoint",
    ),
}


class _Foreign:
    """A class of this module: its pickles are not weights."""


def _as_shipped(folder: Path, runs: Path) -> None:
    """A finished run as data/weights ships it: model.pt, log.csv, manifest.json, no checkpoints."""
    for name in ("last.pt", "previous.pt", "best.pt"):
        (folder / name).unlink()
    for name in ("model.pt", "manifest.json", "log.csv"):
        shutil.copy(runs / "finished20" / name, folder / name)


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_resume_refuses_what_it_cannot_repair_before_anything_runs(runs, tmp_path, case, monkeypatch):
    damage, said = REFUSED[case]
    folder = _copy(runs, tmp_path)
    damage(folder, runs)
    before = _snapshot(folder)

    def no_training(*args, **kwargs):
        raise AssertionError("a task was drawn (validation set or training step) before the refusal")

    monkeypatch.setattr("kmtlib.training.tasks.sample_tasks", no_training)
    with pytest.raises(ValueError) as info:  # RunFolderError / ModelFileError
        train(dict(TINY, steps=STEPS), folder, quiet=True, resume=True)
    message = str(info.value)
    assert re.search(said, message, re.S), message
    assert str(folder) in message  # names the file with its path
    assert _snapshot(folder) == before  # nothing trained, nothing repaired, nothing removed
    # the command line says the same in one "error: ..." line, with a non-zero exit
    with pytest.raises(SystemExit) as exit_info:
        main([*CLI, "--steps", str(STEPS), "--resume", "--out", str(folder)])
    assert str(exit_info.value).startswith("error: ") and "\n" not in str(exit_info.value)
    assert _snapshot(folder) == before


def test_resume_with_fewer_steps_than_done_names_both(runs, tmp_path):
    folder = _copy(runs, tmp_path)
    before = _snapshot(folder)
    with pytest.raises(
        RunFolderError, match=r"last\.pt: the run is at step 20, past the 10 steps asked for: pass --steps 20 or more"
    ):
        train(dict(TINY, steps=10), folder, quiet=True, resume=True)
    assert _snapshot(folder) == before


def test_checkpoint_of_an_older_format_resumes_when_its_log_agrees(runs, tmp_path):
    # Checkpoints written before the log and best model were carried in them hold only the
    # log's length: a log that agrees resumes (rows after the checkpoint dropped), a cut one is refused.
    folder = _copy(runs, tmp_path)
    for name in ("last.pt", "previous.pt"):
        _edit_checkpoint(folder / name, lambda p: (p.pop("log_text"), p.pop("best_model")))
    _rewrite_log(folder, lambda t: t + _ROW_25)
    summary = train(dict(TINY, steps=STEPS), folder, quiet=True, resume=True)
    assert "dropped 1 row(s) after step 20" in summary["notes"][0]
    _assert_same_weights(_weights(folder / "last.pt"), _weights(runs / "straight" / "last.pt"))
    assert log_without_wall(folder) == log_without_wall(runs / "straight")

    folder = _copy(runs, tmp_path / "cut")
    _edit_checkpoint(folder / "last.pt", lambda p: (p.pop("log_text"), p.pop("best_model")))
    _rewrite_log(folder, lambda t: "".join(_lines(t)[:3]))
    before = _snapshot(folder)
    with pytest.raises(RunFolderError, match=r"log\.csv: does not match the checkpoint .*last\.pt.*older format"):
        train(dict(TINY, steps=STEPS), folder, quiet=True, resume=True)
    assert _snapshot(folder) == before


def test_cli_refuses_a_damaged_folder_in_one_error_line(runs, tmp_path):
    folder = _copy(runs, tmp_path)
    (folder / "last.pt").write_bytes(b"")
    (folder / "previous.pt").write_bytes(b"")
    proc = subprocess.run(
        [sys.executable, "-m", "kmtlib.train", *CLI, "--steps", str(STEPS), "--resume", "--out", str(folder)],
        capture_output=True,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(folder / "last.pt") in lines[0], proc.stderr
    assert "the file is empty" in lines[0]


# ------------------------------------------------------------------ the command's arguments
@pytest.mark.parametrize("out", ["", "   "])
def test_an_empty_run_folder_is_refused(out, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="error: --out must name a run folder"):
        main([*CLI, "--steps", "5", "--out", out])
    with pytest.raises(ValueError, match="must be a non-empty path"):
        train(dict(TINY, steps=5), out, quiet=True)
    assert list(tmp_path.iterdir()) == []  # nothing written into the working directory


@pytest.mark.parametrize(
    "args, said",
    [
        (["--threads", "0"], "--threads must be >= 1"),
        (["--steps", "-1"], "steps must be >= 0"),
        (["--eval-every", "0"], "eval_every must be >= 1"),
        (["--lr", "nan"], "lr must be a positive finite number"),
        (["--dropout", "1"], r"dropout must be in \[0, 1\)"),
        (["--resume", "--overwrite"], "--resume and --overwrite exclude each other"),
    ],
)
def test_bad_arguments_are_refused_before_the_folder_is_made(args, said, tmp_path):
    with pytest.raises(SystemExit, match=said):
        main([*CLI, "--steps", "5", *args, "--out", str(tmp_path / "new")])
    assert not (tmp_path / "new").exists()


def test_a_folder_holding_a_run_is_not_overwritten_without_overwrite(runs, tmp_path):
    folder = _copy(runs, tmp_path)
    before = _snapshot(folder)
    with pytest.raises(
        SystemExit, match=r"error: .* already holds a training run \(log\.csv, last\.pt.*--resume.*--overwrite"
    ):
        main([*CLI, "--steps", "5", "--out", str(folder)])
    assert _snapshot(folder) == before
    only_log = tmp_path / "only_log"  # a log alone (say, copied in) is protected as well
    only_log.mkdir()
    (only_log / "log.csv").write_text("my notes\n")
    with pytest.raises(FileExistsError, match=r"only_log already holds a training run \(log\.csv\)"):
        train(dict(TINY, steps=5), only_log, quiet=True)
    assert (only_log / "log.csv").read_text() == "my notes\n"
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    with pytest.raises(SystemExit, match="exists and is not a folder"):
        main([*CLI, "--steps", "5", "--out", str(a_file)])


def test_overwrite_starts_again_as_a_fresh_run(runs, tmp_path):
    folder = _copy(runs, tmp_path)
    (folder / ".best.pt.zz.tmp").write_bytes(b"")
    summary = main([*CLI, "--steps", "10", "--overwrite", "--out", str(folder)])
    assert summary["status"] == "finished" and any(
        "--overwrite: deleted the previous run's" in n for n in summary["notes"]
    )
    fresh = train(dict(TINY, steps=10), tmp_path / "fresh", quiet=True)
    assert fresh["notes"] == []
    _assert_same_weights(_weights(folder / "model.pt"), _weights(tmp_path / "fresh" / "model.pt"))
    assert log_without_wall(folder) == log_without_wall(tmp_path / "fresh")
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in (tmp_path / "fresh").iterdir())


def test_a_run_killed_in_its_first_evaluation_starts_afresh_on_resume(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "log.csv").write_text(
        "step,train_loss,val_rel_objective,val_log_objective,lr,wall_s\n0,,2.7,1.5,0.01,0.1\n"
    )
    summary = train(dict(TINY, steps=10), folder, quiet=True, resume=True)
    assert summary["status"] == "finished" and "starting it afresh" in summary["notes"][0]
    train(dict(TINY, steps=10), tmp_path / "fresh", quiet=True)
    _assert_same_weights(_weights(folder / "model.pt"), _weights(tmp_path / "fresh" / "model.pt"))


# ------------------------------------------------------------------ model files
def _model_payload(path: Path) -> dict:
    return torch.load(path, weights_only=True)


def _old_payload(path: Path, **kwargs) -> dict:
    """The trainable model of ``path`` as a format-1 file (before version 0.2) wrote it: the
    builder's name and options, and the weights under the old layer's names
    (``layer.cax.query.weight``); ``kwargs`` change or add builder options."""
    payload = _model_payload(path)
    config = payload["config"]
    assert config["trainable"] and config["embedding"] in ("onehot", "data")  # (the runs train this)
    options = {
        "d": config["d"],
        "k": config["k"],
        "embedding": "none" if config["embedding"] == "data" else "onehot",
        "gamma": config["CAX"]["gamma"],
        "dropout": config["CAX"]["dropout"],
        "impl": "fast",
    }
    state = {
        ".".join([*key.split(".")[:1], key.split(".")[1].lower(), *key.split(".")[2:]]): value
        for key, value in payload["state_dict"].items()
    }
    assert all(key.startswith(("layer.cax.", "layer.sax.", "layer.cac.", "layer.sac.")) for key in state)
    return dict(
        payload,
        format="kmtlib.KMeansTransformer/1",
        config={"builder": "trainable", "kwargs": dict(options, **kwargs)},
        state_dict=state,
    )


def _new_config(path: Path, block: dict | None = None, **fields) -> dict:
    """The payload of ``path`` (format 2) with fields of its layer configuration changed or added
    (``block``: changes to every block's fields)."""
    payload = _model_payload(path)
    config = dict(payload["config"], **fields)
    for name in ("CAX", "SAX", "CAC", "SAC"):
        config[name] = dict(config[name], **(block or {}))
    return dict(payload, config=config)


MODEL_DAMAGE = {
    "empty": (lambda p: p.write_bytes(b""), "the file is empty"),
    "truncated": (
        lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
        "truncated or damaged torch archive",
    ),
    "truncated to a few bytes": (lambda p: p.write_bytes(p.read_bytes()[:10]), "truncated or damaged torch archive"),
    "random bytes": (lambda p: p.write_bytes(b"\x13" + os.urandom(2000)), "not a torch file"),
    "text": (lambda p: p.write_text("these are not weights\n"), "not a torch file"),
    "damaged inside": (lambda p: p.write_bytes(_scribble(p.read_bytes())), "damaged"),
    "one flipped bit in a weight": (lambda p: _flip_a_weight_bit(p), "does not match its CRC-32 checksum"),
    "a plain tensor": (lambda p: torch.save(torch.zeros(3, 3), p), "it holds a tensor of shape (3, 3)"),
    "a dict without format": (lambda p: torch.save({"weights": torch.zeros(2)}, p), "no 'format' entry"),
    "a dict without config": (
        lambda p: torch.save({k: v for k, v in _model_payload(p).items() if k != "config"}, p),
        "the 'config' entry is missing",
    ),
    "a bare state dict": (lambda p: torch.save(_model_payload(p)["state_dict"], p), "no 'format' entry"),
    "another model's state dict": (
        lambda p: torch.save(dict(_model_payload(p), state_dict=KMeansTransformer.from_theorem(2, 3).state_dict()), p),
        "its weights do not fit the model its configuration describes: missing",
    ),
    # format 1 (builder and options; still read)
    "an old config with unknown keys": (
        lambda p: torch.save(dict(_old_payload(p), config=dict(_old_payload(p)["config"], wings=2)), p),
        "must have the keys 'builder' and 'kwargs'",
    ),
    "an old config with unknown options": (lambda p: torch.save(_old_payload(p, wings=2), p), "does not build a model"),
    "an old config with a placement option": (
        lambda p: torch.save(_old_payload(p, device="cpu"), p),
        "carries the option(s) device",
    ),
    "an old config of wrong shapes": (lambda p: torch.save(_old_payload(p, d=5), p), "wrong shape"),
    "an unknown builder": (
        lambda p: torch.save(dict(_old_payload(p), config={"builder": "save", "kwargs": {}}), p),
        "unknown builder 'save'",
    ),
    "an old state dict of unknown names": (
        lambda p: torch.save(
            dict(
                _old_payload(p),
                state_dict={k.replace("layer.cax.", "layer.cux."): v for k, v in _old_payload(p)["state_dict"].items()},
            ),
            p,
        ),
        "unexpected: layer.cux.",
    ),
    # format 2 (the layer configuration)
    "a config with unknown keys": (lambda p: torch.save(_new_config(p, wings=2), p), "unknown fields ['wings']"),
    "a config without a field": (
        lambda p: torch.save(
            dict(_model_payload(p), config={k: v for k, v in _model_payload(p)["config"].items() if k != "embedding"}),
            p,
        ),
        "missing fields ['embedding']",
    ),
    "a block with unknown fields": (
        lambda p: torch.save(_new_config(p, block={"wings": 2}), p),
        "block CAX has unknown fields ['wings']",
    ),
    "a block with an unknown score": (
        lambda p: torch.save(_new_config(p, block={"score": "cosine"}), p),
        "unknown attention score 'cosine'",
    ),
    "a block with an unknown map": (
        lambda p: torch.save(_new_config(p, block={"map": "maxout"}), p),
        "does not describe a layer",
    ),
    "a block that is not a mapping": (
        lambda p: torch.save(dict(_model_payload(p), config=dict(_model_payload(p)["config"], CAX=3)), p),
        "block CAX is not a mapping",
    ),
    "a config of an unknown embedding": (
        lambda p: torch.save(_new_config(p, embedding="binary"), p),
        "does not describe a layer",
    ),
    "a config of wrong shapes": (lambda p: torch.save(_new_config(p, d=5), p), "wrong shape"),
    "NaN weights": (
        lambda p: torch.save(
            dict(
                _model_payload(p), state_dict={k: v * float("nan") for k, v in _model_payload(p)["state_dict"].items()}
            ),
            p,
        ),
        "hold NaN or infinite values",
    ),
    "a +inf weight": (lambda p: torch.save(_one_weight(p, float("inf")), p), "hold NaN or infinite values"),
    "a -inf weight": (lambda p: torch.save(_one_weight(p, float("-inf")), p), "hold NaN or infinite values"),
    "a pickle a weights-only load refuses": (
        lambda p: torch.save({"obj": _Foreign()}, p),
        "a weights-only load refuses",
    ),
    "a plain pickle": (
        lambda p: p.write_bytes(pickle.dumps({"config": "x"}, protocol=4)),
        "a weights-only load refuses",
    ),
    "a training checkpoint": (lambda p: None, "it is a training checkpoint"),
}


def _one_weight(path: Path, value: float) -> dict:
    """The model file's payload with one weight (the first entry of its first tensor) set to
    ``value``, every other weight finite as saved."""
    payload = _model_payload(path)
    state = {k: v.clone() for k, v in payload["state_dict"].items()}
    first = next(iter(state))
    state[first].view(-1)[0] = value
    return dict(payload, state_dict=state)


def _flip_a_weight_bit(path: Path) -> None:
    """Flip one bit inside the stored bytes of the first tensor (torch.load itself would load
    the changed weight without a word)."""
    import struct
    import zipfile

    with zipfile.ZipFile(path) as archive:
        member = next(i for i in archive.infolist() if i.filename.endswith("/data/0"))
    data = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack("<HH", data[member.header_offset + 26 : member.header_offset + 30])
    data[member.header_offset + 30 + name_length + extra_length + 5] ^= 0x01
    path.write_bytes(bytes(data))


def _scribble(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes(b ^ 0x5A for b in data[middle : middle + 300]) + data[middle + 300 :]


@pytest.fixture(scope="module")
def saved(runs):
    return runs / "stopped"


@pytest.mark.parametrize("case", list(MODEL_DAMAGE), ids=list(MODEL_DAMAGE))
def test_load_model_names_the_file_and_the_problem(saved, tmp_path, case):
    damage, said = MODEL_DAMAGE[case]
    path = tmp_path / "model.pt"
    shutil.copy(saved / ("last.pt" if case == "a training checkpoint" else "best.pt"), path)
    damage(path)
    with pytest.raises(ModelFileError) as info:
        load_model(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and said in message, message
    assert "\n" not in message and len(message) < 400  # one readable line, not torch's page


def test_model_file_error_is_a_value_error_and_a_missing_file_names_itself(tmp_path):
    assert issubclass(kmtlib.ModelFileError, ValueError) and "ModelFileError" in kmtlib.__all__
    with pytest.raises(FileNotFoundError, match=f"{tmp_path / 'absent.pt'}: no such file"):
        load_model(tmp_path / "absent.pt")
    with pytest.raises(ModelFileError, match=f"{tmp_path}: not a kmtlib model file \\(it is a directory\\)"):
        load_model(tmp_path)


@pytest.mark.parametrize(
    "case", ["empty", "truncated", "random bytes", "a plain tensor", "a pickle a weights-only load refuses"]
)
def test_load_checkpoint_model_names_the_file_and_the_problem(saved, tmp_path, case):
    damage, said = MODEL_DAMAGE[case]
    path = tmp_path / "last.pt"
    shutil.copy(saved / "last.pt", path)
    assert load_checkpoint_model(path).k == 3  # (the undamaged checkpoint loads)
    damage(path)
    with pytest.raises(ModelFileError) as info:
        load_checkpoint_model(path)
    message = str(info.value)
    assert message.startswith(f"{path}: not a kmtlib training checkpoint") and said.split(" of shape")[0] in message, (
        message
    )
    shutil.copy(saved / "best.pt", path)
    with pytest.raises(ModelFileError, match="it is a model file"):
        load_checkpoint_model(path)


def test_saved_models_still_load_exactly(tmp_path):
    # The checks reject nothing that save() writes: theorem, variant and trainable models.
    for model in (
        KMeansTransformer.from_theorem(2, 3),
        KMeansTransformer.from_theorem(2, 3, attention="dot"),
        KMeansTransformer.from_variant("soft", 2, 3),
        KMeansTransformer.trainable(3, 2, embedding="data").double(),
    ):
        path = model.save(tmp_path / "m.pt")
        again = load_model(path)
        assert again.config == model.config
        _assert_same_weights(again.state_dict(), model.state_dict())


# ------------------------------------------------------------------ logs and shipped runs
LOG_DAMAGE = {
    "empty": ("", r"empty file"),
    "cut mid-line": ("HEADER\n0,,2.0,1.0,0.01,0.1\n5,3.0,0.9", r"line 3: cut short mid-line"),
    "another header": ("step,loss\n0,1\n", r"line 1: not the header of a training log"),
    "a short row": ("HEADER\n0,,2.0,1.0\n", r"line 2: 4 fields, expected 6"),
    "a word for a number": ("HEADER\n0,,2.0,one,0.01,0.1\n", r"line 2: val_log_objective is 'one', not a number"),
    "a repeated row": (
        "HEADER\n0,,2.0,1.0,0.01,0.1\n5,3.0,0.9,0.8,0.01,1.0\n5,3.0,0.9,0.8,0.01,1.0\n",
        r"line 4: step 5 after step 5",
    ),
    "NUL bytes": ("HEADER\n0,,2.0,1.0,0.01,0.1\n\0\0\0\n", r"line 3: "),
}


@pytest.mark.parametrize("case", list(LOG_DAMAGE), ids=list(LOG_DAMAGE))
def test_read_log_names_the_file_and_line(tmp_path, case):
    from kmtlib.training import LOG_COLUMNS

    text, said = LOG_DAMAGE[case]
    path = tmp_path / "log.csv"
    path.write_text(text.replace("HEADER", ",".join(LOG_COLUMNS)))
    with pytest.raises(RunFolderError, match=f"^{re.escape(str(path))}: {said}"):
        read_log(path)


def test_shipped_runs_name_a_damaged_manifest_or_model(saved, tmp_path):
    folder = tmp_path / "onehot_seed7"
    folder.mkdir()
    shutil.copy(saved / "best.pt", folder / "model.pt")
    shutil.copy(saved / "log.csv", folder / "log.csv")
    (folder / "manifest.json").write_text('{"config": {"embedding": "onehot", "seed": 7}, "se')
    with pytest.raises(RunFolderError, match=f"{re.escape(str(folder / 'manifest.json'))}: not a valid manifest"):
        shipped_runs("onehot", tmp_path)
    (folder / "manifest.json").write_text(json.dumps({"config": {"embedding": "onehot"}, "seed": "seven"}))
    with pytest.raises(RunFolderError, match="its seed is 'seven'"):
        shipped_runs("onehot", tmp_path)
    (folder / "manifest.json").write_text(json.dumps({"config": {"embedding": "onehot", "seed": 7}, "seed": 7}))
    (run,) = shipped_runs("onehot", tmp_path)
    assert run.load().k == 3 and run.log()[-1]["step"] == STOPPED_AT
    (folder / "model.pt").write_bytes(b"")
    with pytest.raises(
        ModelFileError, match=f"{re.escape(str(folder / 'model.pt'))}: not a kmtlib model file \\(the file is empty"
    ):
        run.load()
