"""Copy finished training runs (runs/paper/<embedding>_seed<S>/) into data/weights/ for the book.

Only the final weights (model.pt, what the paper evaluates), the training log (log.csv) and the
manifest (command, seed, steps, library version, wall time, final validation numbers) are shipped;
the full training checkpoints stay in runs/. Unfinished runs (no manifest.json) are skipped.
``index.json`` lists every run under --out: the runs shipped now, and those shipped before whose
folders are still there (so runs of another folder, e.g. the paper's other seeds trained by
``python -m kmtbook.paper_sweep``, can be added to the first ones).

    python scripts/ship_weights.py [--runs runs/paper] [--out data/weights]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

SHIPPED = ("model.pt", "log.csv", "manifest.json")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="runs/paper")
    parser.add_argument("--out", default="data/weights")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index = _shipped_before(out)
    for run in sorted(Path(args.runs).glob("*_seed*")):
        if not run.is_dir() or not (run / "manifest.json").is_file():
            continue
        manifest = json.loads((run / "manifest.json").read_text())
        target = out / run.name
        target.mkdir(exist_ok=True)
        for name in SHIPPED:
            shutil.copyfile(run / name, target / name)
            (target / name).chmod(0o644)
        index[run.name] = {k: manifest[k] for k in ("command", "seed", "steps", "kmtlib_version", "torch_version",
                                                    "threads", "wall_s", "final_val_rel_objective",
                                                    "final_val_log_objective", "best_val_rel_objective")}
        print(f"shipped {run.name}: final relative validation objective {manifest['final_val_rel_objective']:.4f}")
    (out / "index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def _shipped_before(out: Path) -> dict:
    """The entries of ``out/index.json`` whose run folders are still under ``out``."""
    path = out / "index.json"
    if not path.is_file():
        return {}
    try:
        index = json.loads(path.read_text())
    except ValueError as err:
        raise SystemExit(f"{path} is damaged ({err}); delete it to rebuild it from the runs shipped now") from err
    return {name: entry for name, entry in index.items() if (out / name / "manifest.json").is_file()}


if __name__ == "__main__":
    main()
