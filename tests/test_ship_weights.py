"""scripts/ship_weights.py adds runs to data/weights/ and keeps the index of those shipped before."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _ship():
    spec = importlib.util.spec_from_file_location("ship_weights", ROOT / "scripts" / "ship_weights.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def _run(folder: Path, seed: int) -> None:
    folder.mkdir(parents=True)
    (folder / "model.pt").write_bytes(b"weights")
    (folder / "log.csv").write_text("step\n0\n")
    manifest = {"command": "python -m kmtlib.train", "seed": seed, "steps": 10_000, "kmtlib_version": "0.1.0",
                "torch_version": "2.13.0", "threads": 1, "wall_s": 1500.0, "final_val_rel_objective": 0.9,
                "final_val_log_objective": 5.4, "best_val_rel_objective": 0.89}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_runs_of_a_second_folder_join_those_shipped_before(tmp_path):
    ship, out = _ship(), tmp_path / "weights"
    _run(tmp_path / "first" / "onehot_seed153476998", 153476998)
    ship(["--runs", str(tmp_path / "first"), "--out", str(out)])
    _run(tmp_path / "second" / "onehot_seed129959864", 129959864)
    (tmp_path / "second" / "none_seed129959864").mkdir()  # unfinished: no manifest, skipped
    ship(["--runs", str(tmp_path / "second"), "--out", str(out)])
    index = json.loads((out / "index.json").read_text())
    assert sorted(index) == ["onehot_seed129959864", "onehot_seed153476998"]
    assert index["onehot_seed129959864"]["seed"] == 129959864 and (out / "onehot_seed153476998" / "model.pt").is_file()
