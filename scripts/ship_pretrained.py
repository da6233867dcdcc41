"""Copy a finished training run's layer into kmtlib/pretrained/ as the layer of
TransformerKMeans(model="learned"), and write the README there from the run's manifest.

Usage: python scripts/ship_pretrained.py data/weights_any_k_broad/<run folder>
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "kmtlib" / "pretrained"


def _describe_tasks(config: dict) -> str:
    if config.get("tasks", "paper") == "broad":
        return (
            "the broad family of `kmtlib.domain.broad_tasks.sample_broad_tasks` (unequal cluster sizes and\n"
            "  spreads, elongated clusters, heavy tails, stray points in half of the tasks, 1 to 32 filled\n"
            "  coordinates; every task shifted and scaled as `TransformerKMeans` maps data), n = "
            f"{config['n']} points"
        )
    return (
        f"tasks of n = {config['n']} points from the paper's generator (`family=\"{config['family']}\"`, "
        f"`scale={config['scale']}`,\n  every task min-max rescaled to [0, 1] per dimension)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a finished run folder (model.pt, manifest.json)")
    parser.add_argument("--name", default="any_k_broad.pt", help="file name in kmtlib/pretrained (default %(default)s)")
    args = parser.parse_args()
    run = args.run.resolve()
    manifest = json.loads((run / "manifest.json").read_text())
    config = manifest["config"]
    for old in TARGET.glob("*.pt"):
        if old.name != args.name:
            old.unlink()
    shutil.copyfile(run / "model.pt", TARGET / args.name)
    sha = hashlib.sha256((TARGET / args.name).read_bytes()).hexdigest()
    steps = int(manifest["steps"])
    source = f"`{manifest['kmtlib_source_sha256']}`"
    if "kmtlib_source_sha256_py_only" in manifest:  # (recomputed: scripts/recompute_source_fingerprints.py)
        source += (f" over every file under kmtlib/ at its commit; `{manifest['kmtlib_source_sha256_py_only']}` "
                   "over kmtlib/*.py alone, as recorded at training")  # fmt: skip
    warm = ""
    if config.get("init_from"):
        warm = (
            f"- started from the weights of `{config['init_from']}` (SHA-256 `{manifest['init_from_sha256']}`),"
            " not from a random initialisation;\n"
        )
    relative = run.relative_to(ROOT) if run.is_relative_to(ROOT) else run
    text = f"""# Pretrained layers shipped with kmtlib

## `{args.name}`

The trained layer that `kmtlib.TransformerKMeans(model="learned")` loads (`kmtlib.load_model`, then
`.eval()`): a copy of `model.pt` of the run `{relative}` of the kmt-book source
repository (the book this package comes with; a pip install holds the layer only, not the run's log
and manifest).

What it is:

- the trainable single layer (gamma = {config["gamma"]}, dropout {config["dropout"]}) of d = {config["d"]} with
  random cluster codes of width {config["code_width"]} (`embedding="codes"`, `kmtlib.embedding.CodeEmbedding`):
  tokens of width {config["d"] + config["code_width"]} whatever k, so it runs on any number of clusters;
- trained on {_describe_tasks(config)}, with k drawn per batch from {config["k_min"]}..{config["k_max"]} except
  the held-out {config["k_held_out"] or "none"}; {steps} steps, batch {config["batch"]}, learning rate
  {config["lr"]} (halved on a plateau), loss inverse temperature {config["loss_inv_temp"]};
{warm}- made by (from the root of the kmt-book repository, which `--out` is relative to)

  ```
  {manifest["command"]}
  ```

  (kmtlib {manifest["kmtlib_version"]}, torch {manifest["torch_version"]}, {manifest["threads"]} CPU thread(s),
  {manifest["wall_s"]:.0f} s; source SHA-256 {source}); its final validation
  objective after one step was {manifest["final_val_rel_objective"]:.3f} times that of one Lloyd step, on
  validation tasks of its training family at the training k;
- SHA-256 `{sha}`.

Chapter 13 of the book measures it on real data sets against scikit-learn's `KMeans`. To replace it,
run, in a clone of the kmt-book repository, `python scripts/ship_pretrained.py RUN_FOLDER` with another
finished run (any layer with `config.reads_any_k` and `config.trainable` works; its `d` is the dimension
of the model's domain) and set `kmtlib.estimator.PRETRAINED_ANY_K` to the file's name.
"""
    (TARGET / "README.md").write_text(text)
    print(f"{TARGET / args.name}: SHA-256 {sha}")


if __name__ == "__main__":
    main()
