"""The held-out evaluation of a layer trained for the estimator's use, and the results file that
chapter 13 reads (data/estimator_layer/results.json).

    python scripts/estimator_layer.py measure --layer learned --name shipped
    python scripts/estimator_layer.py measure --layer runs/estimator_layer/codes_anyk_estimator_seed153476998/model.pt \
        --name estimator_trained
    python scripts/estimator_layer.py results --run runs/estimator_layer/codes_anyk_estimator_seed153476998 \
        --cpu-seconds 1293

``measure`` runs kmtbook.estimator_layer.heldout_evaluation for one layer on the held-out sets of
data/estimator_layer/heldout.json and writes data/estimator_layer/heldout_<name>.csv (one row per
set and random state); it prints nothing of the results (they are looked at once, by ``results``).
``results`` reads both files, applies the ship rule and writes results.json with the per-set table
of both layers, the summaries, the verdict and the provenance (commands, commits, CPU seconds).
Run with OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
import warnings
from pathlib import Path

import pandas as pd

from kmtbook.estimator_layer import heldout_definition, heldout_evaluation, heldout_summary, heldout_table

FOLDER = Path("data") / "estimator_layer"
LAYERS = ("shipped", "estimator_trained")


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def _heldout_commit() -> str:
    """The commit that fixed the held-out definition (the first that added heldout.json)."""
    out = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H", "--", str(FOLDER / "heldout.json")],
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    return out[-1] if out else ""


def measure(layer: str, name: str) -> None:
    warnings.filterwarnings("ignore", message="n_clusters=.* lies beyond")
    start = time.process_time()
    runs = heldout_evaluation(layer)
    runs.to_csv(FOLDER / f"heldout_{name}.csv", index=False)
    meta = dict(layer=layer, commit=_commit(), cpu_seconds=time.process_time() - start,
                command=f"python scripts/estimator_layer.py measure --layer {layer} --name {name}")  # fmt: skip
    (FOLDER / f"heldout_{name}.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {FOLDER / f'heldout_{name}.csv'} ({len(runs)} rows)")


def results(run: Path, cpu_seconds: float) -> None:
    definition = heldout_definition()
    manifest = json.loads((run / "manifest.json").read_text())
    layers = {}
    for name in LAYERS:
        runs = pd.read_csv(FOLDER / f"heldout_{name}.csv")
        table = heldout_table(runs).reset_index()
        layers[name] = dict(summary=heldout_summary(runs, definition["arm_tolerance"]),
                            per_set=table.to_dict(orient="records"),
                            measured=json.loads((FOLDER / f"heldout_{name}.json").read_text()))  # fmt: skip
    new = layers["estimator_trained"]["summary"]
    out = dict(
        about="Chapter 13, 'A layer trained for the job it does': the held-out result of a layer trained for the "
        "estimator's use against the shipped layer (scripts/estimator_layer.py).",
        heldout_definition=str(FOLDER / "heldout.json"),
        heldout_fixed_in_commit=_heldout_commit(),
        training=dict(command=manifest["command"], script="scripts/train_estimator_layer.sh",
                      git_commit=manifest.get("git_commit"), kmtlib_source_sha256=manifest.get("kmtlib_source_sha256"),
                      steps=manifest["steps"], wall_seconds=manifest["wall_s"], cpu_seconds=cpu_seconds,
                      cpu_budget_seconds=45 * 60, threads=manifest["threads"],
                      first_val_rel_objective=_first_validation(run),
                      final_val_rel_objective=manifest["final_val_rel_objective"],
                      best_val_rel_objective=manifest["best_val_rel_objective"], best_step=manifest["best_step"],
                      cpu_seconds_note="both runs: the first (stopped) and the second (measured); read from /proc "
                      "every 5 s while they ran"),
        first_run=_first_run(FOLDER / "first_run_log.csv"),
        layers=layers,
        ship_rule=definition["ship_rule"],
        ships=bool(new["passes_ship_rule"]),
        results_commit=_commit(),
    )  # fmt: skip
    (FOLDER / "results.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({name: layer["summary"] for name, layer in layers.items()}, indent=2))
    print("ships:", out["ships"])


def _first_run(log_file: Path) -> dict:
    """The first run (the loss on the relative gap, learning rate 0.002), stopped when it diverged."""
    log = pd.read_csv(log_file)
    return dict(log=str(log_file), lr=float(log.lr.iloc[0]), steps=int(log.step.iloc[-1]),
                first_val_rel_objective=float(log.val_rel_objective.iloc[0]),
                last_val_rel_objective=float(log.val_rel_objective.iloc[-1]),
                loss="s softplus(g / s) of the relative gap g = J / J_Lloyd - 1 (the second run: g = ln(J / J_Lloyd))")


def _first_validation(run: Path) -> float:
    log = pd.read_csv(run / "log.csv")
    return float(log.val_rel_objective.iloc[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--layer", required=True, help="'learned' (the shipped layer) or a model file")
    m.add_argument("--name", required=True, choices=LAYERS)
    r = sub.add_parser("results")
    r.add_argument("--run", required=True, type=Path, help="the finished training run folder")
    r.add_argument("--cpu-seconds", required=True, type=float, help="the training's CPU seconds (measured)")
    args = parser.parse_args()
    if args.command == "measure":
        measure(args.layer, args.name)
    else:
        results(args.run, args.cpu_seconds)


if __name__ == "__main__":
    main()
