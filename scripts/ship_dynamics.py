"""Copy the logs of finished training-dynamics runs (runs/dynamics/) into data/training_dynamics/.

For chapter 08 (training dynamics, the paper's Figs. 9 and 10). Only ``log.csv`` and
``manifest.json`` of every finished run (``manifest.json`` present) are shipped, no weights, plus an
``index.json`` that lists every shipped run with its command, seed, steps, configuration,
versions, wall time and final validation numbers. A run that stopped because its loss became
non-finite (``kmtlib.train`` raises "training diverged"; the console log ``<run>.log`` beside the
folder says so) has no manifest; its ``log.csv`` is shipped too, with status ``diverged`` in the
index, so the chapter can count such runs. Runs still training or interrupted are skipped.

    python scripts/ship_dynamics.py [--runs runs/dynamics] [--out data/training_dynamics]

Rerunning it replaces the shipped copy of every run it finds and drops shipped runs that are no
longer in ``--runs`` (the index always describes exactly the folders beside it).
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
from pathlib import Path

SHIPPED = ("log.csv", "manifest.json")
INDEX_KEYS = ("command", "seed", "steps", "config", "kmtlib_version", "kmtlib_source_sha256", "git_commit",
              "torch_version", "python_version", "device", "threads", "wall_s", "wall_s_per_step",
              "final_val_rel_objective", "final_val_log_objective", "best_val_rel_objective", "best_step")
# How the source fingerprint was taken, and the fingerprint of the older scheme where a manifest
# was recomputed (scripts/recompute_source_fingerprints.py): copied when the manifest has them.
PROVENANCE_KEYS = ("kmtlib_source_sha256_scheme", "kmtlib_source_sha256_py_only")
DIVERGED_MARK = "training diverged"


def _last_row(log: Path) -> dict[str, str] | None:
    with open(log, newline="") as f:
        rows = list(csv.DictReader(f))
    return rows[-1] if rows else None


def _diverged(run: Path) -> bool:
    console = run.with_name(run.name + ".log")
    if not console.is_file():
        return False
    text = console.read_text(errors="replace")
    last_start = text.rfind(" start ")  # only the latest attempt counts (the script may have been rerun)
    return DIVERGED_MARK in text[max(last_start, 0):] or (last_start < 0 and DIVERGED_MARK in text)


def ship(runs_dir: Path, out: Path) -> dict:
    """Ship every finished (or diverged) run of ``runs_dir`` into ``out``; return the index."""
    out.mkdir(parents=True, exist_ok=True)
    runs, skipped = {}, []
    for run in sorted(p for p in runs_dir.glob("*_seed*") if p.is_dir()):
        manifest_path, log_path = run / "manifest.json", run / "log.csv"
        if manifest_path.is_file() and log_path.is_file():
            manifest = json.loads(manifest_path.read_text())
            entry = {k: manifest.get(k) for k in INDEX_KEYS}
            entry.update({k: manifest[k] for k in PROVENANCE_KEYS if k in manifest})
            entry["status"] = "finished"
            names = SHIPPED
        elif log_path.is_file() and _diverged(run):
            last = _last_row(log_path) or {}
            entry = {"status": "diverged", "steps": int(last.get("step") or 0), "seed": None, "config": None,
                     "note": "loss became non-finite; log.csv ends at the last finite evaluation"}
            entry.update(_config_of_unfinished(run))
            names = ("log.csv",)
        else:
            skipped.append(run.name)
            continue
        target = out / run.name
        if target.exists():
            shutil.rmtree(target)
        target.mkdir()
        for name in names:
            shutil.copyfile(run / name, target / name)
            (target / name).chmod(0o644)
        runs[run.name] = entry
        final = entry.get("final_val_rel_objective")
        print(f"shipped {run.name} ({entry['status']}, {entry['steps']} steps"
              + (f", final relative validation objective {final:.4f})" if final is not None else ")"))
    for stale in sorted(p for p in out.glob("*_seed*") if p.is_dir() and p.name not in runs):
        shutil.rmtree(stale)
        print(f"removed {stale.name} (no longer a finished run in {runs_dir})")
    index = {
        "description": "Training logs for chapter 08 (training dynamics); one folder per run with log.csv and "
                       "manifest.json (no weights). Made by scripts/train_dynamics.sh and scripts/ship_dynamics.py.",
        "source": str(runs_dir),
        "runs": runs,
        "skipped_unfinished": skipped,
    }
    (out / "index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    (out / "README.md").write_text(_readme(index))
    print(f"{sum(e['status'] == 'finished' for e in runs.values())} finished, "
          f"{sum(e['status'] == 'diverged' for e in runs.values())} diverged, {len(skipped)} unfinished (skipped)")
    return index


def _readme(index: dict) -> str:
    """data/training_dynamics/README.md: provenance, written from the index so it never goes stale."""
    runs = index["runs"]
    finished = [e for e in runs.values() if e["status"] == "finished"]
    diverged = sorted(name for name, e in runs.items() if e["status"] == "diverged")
    seeds = sorted({e["seed"] for e in finished})
    steps = sorted({e["steps"] for e in finished})
    versions = sorted({f"kmtlib {e.get('kmtlib_version')}, torch {e.get('torch_version')}" for e in finished})
    configs = sorted({(e["config"]["d"], e["config"]["k"], e["config"]["loss_inv_temp"]) for e in finished})
    hours = sum(e.get("wall_s") or 0 for e in finished) / 3600
    lines = [
        "# data/training_dynamics/",
        "",
        "Training logs behind chapter 08 (training dynamics; the paper's Figs. 9 and 10). One folder per",
        "run, `d<d>_k<k>_li<inverse loss temperature>_<embedding>_seed<seed>/`, holding `log.csv` (training",
        "loss averaged over the 50 steps before each evaluation, validation objective relative to one Lloyd",
        "step, learning rate, wall time, every 50 steps) and `manifest.json` (exact command, configuration,",
        "derived seeds, versions, wall time, final numbers). No weights. `index.json` lists every run.",
        "",
        "**Shortened.** The paper trains every run for 10 000 steps over 10 seeds. These runs were trained",
        f"for {', '.join(map(str, steps)) or '-'} steps, for the seeds {', '.join(map(str, seeds)) or '-'},",
        "on a 2-core CPU (one thread per run); every other setting is the paper's "
        "(n = 512, batch 32, Adam 0.01, gamma 1,",
        "dropout 0.01, evaluation every 50 steps on 10 x 32 validation tasks, ReduceLROnPlateau 0.5 / 5).",
        "The k = 10 column of the k sweep is not here: the chapter takes it from the paper-length runs in",
        "`data/weights/` (d = 32, k = 10, inverse loss temperature 10), truncated to the sweep length.",
        "",
        f"This copy: {len(finished)} finished runs over {len(configs)} (d, k, inverse temperature) configurations",
        f"and two token widths, {hours:.1f} CPU-hours of training; {', '.join(versions) or '-'}.",
    ]
    if diverged:
        lines += [
            "",
            f"Runs whose loss became non-finite (log only, status `diverged` in the index): {', '.join(diverged)}.",
        ]
    lines += [
        "",
        "Made with",
        "",
        "```bash",
        "scripts/train_dynamics.sh          # trains into runs/dynamics/ (resumable; STEPS, SEEDS, NWORKERS)",
        "python scripts/ship_dynamics.py    # copies log.csv + manifest.json of finished runs here",
        "```",
        "",
        "For the paper's length, `STEPS=10000 OUT=runs/dynamics_full scripts/train_dynamics.sh` and run the",
        "chapter with `-p logs_dir runs/dynamics_full` (or ship them here with `--runs runs/dynamics_full`).",
        "",
    ]
    return "\n".join(lines)


def _config_of_unfinished(run: Path) -> dict:
    """Seed and configuration of a run without a manifest, from its checkpoint ``last.pt``."""
    if not (run / "last.pt").is_file():
        return {}
    import torch

    config = torch.load(run / "last.pt", map_location="cpu", weights_only=True).get("config") or {}
    return {"seed": config.get("seed"), "config": dict(config)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="runs/dynamics")
    parser.add_argument("--out", default="data/training_dynamics")
    args = parser.parse_args()
    ship(Path(args.runs), Path(args.out))


if __name__ == "__main__":
    main()
