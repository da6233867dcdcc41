"""TransformerKMeans() with its defaults against KMeans() with its defaults (issue 26, item 6).

    python scripts/defaults_vs_defaults.py                  # the tuning sets, 10 random states
    python scripts/defaults_vs_defaults.py --sets held-out  # the held-out sets (look once, at the end)
    python scripts/defaults_vs_defaults.py --sets all --polish false   # an option other than the default

Writes results/defaults_vs_defaults/<sets>[_<options>].csv (one row per set and random_state) and
.json (the summary per set, the geometric mean of the mean ratios, and the goal: geometric mean at
most 1.00, every set at most 1.05). Run it with OMP_NUM_THREADS=1 for the times of one thread.

The tuning sets are chapter 13's (kmtbook.real_data.REAL_DATASETS) and the synthetic sets of
kmtbook.real_data.SYNTHETIC_SETS. The held-out sets below were fixed before any measurement and are
not used to choose the read-out, the polish or any default.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import numpy as np
from sklearn import datasets as sk

from kmtbook.real_data import (
    REAL_DATASETS,
    SYNTHETIC_SETS,
    RealDataset,
    defaults_summary,
    defaults_vs_defaults,
    geometric_mean_ratio,
    load_real_dataset,
    synthetic_dataset,
)


def _held_out() -> list[RealDataset]:
    """The four held-out sets, fixed before any measurement (fixed seeds)."""
    X1, y1 = sk.make_blobs(3000, n_features=6, centers=12, cluster_std=np.linspace(0.5, 2.5, 12), random_state=101)
    X2, y2 = sk.make_classification(2000, n_features=20, n_informative=8, n_classes=3, n_clusters_per_class=3,
                                    random_state=102)  # fmt: skip
    X3 = sk.load_diabetes().data
    X4, y4 = sk.make_blobs(1500, n_features=8, centers=6, random_state=103)
    X4 = X4 @ np.random.default_rng(103).normal(size=(8, 8))  # a random linear map: elongated, correlated clusters
    return [RealDataset("heldout_blobs12", X1, y1, "make_blobs", 12),
            RealDataset("heldout_classification9", X2, y2, "make_classification", 9),
            RealDataset("heldout_diabetes5", X3, None, "load_diabetes", 5),
            RealDataset("heldout_linear6", X4, y4, "make_blobs, linear map", 6)]  # fmt: skip


def _sets(which: str) -> list[RealDataset]:
    tuning = [load_real_dataset(n) for n in REAL_DATASETS] + [synthetic_dataset(n) for n in SYNTHETIC_SETS]
    return {"tuning": tuning, "held-out": _held_out(), "all": tuning + _held_out()}[which]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", choices=("tuning", "held-out", "all"), default="tuning")
    parser.add_argument("--only", default="", help="comma-separated set names (default: all of --sets)")
    parser.add_argument("--states", type=int, default=10, help="random states 0..states-1")
    parser.add_argument("--polish", choices=("auto", "true", "false"), default="auto")
    parser.add_argument("--readout", choices=("means", "layer"), default="means")
    parser.add_argument("--out", default="results/defaults_vs_defaults")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="n_clusters=.* lies beyond")  # (the many-cluster sets: k > 32)
    options: dict[str, object] = {}
    if args.polish != "auto":
        options["polish"] = args.polish == "true"
    if args.readout != "means":
        options["readout"] = args.readout
    sets = _sets(args.sets)
    if args.only:
        sets = [s for s in sets if s.name in args.only.split(",")]
    runs = defaults_vs_defaults(sets, range(args.states), {"learned (default)": options})
    summary = defaults_summary(runs)
    gmean = geometric_mean_ratio(summary)
    tag = args.sets + "".join(f"_{k}-{v}" for k, v in options.items())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs.to_csv(out / f"{tag}.csv", index=False)
    report = dict(sets=args.sets, options={k: str(v) for k, v in options.items()}, states=args.states,
                  geometric_mean_ratio=gmean, worst_set_ratio=float(summary.ratio.max()),
                  goal_met=bool(gmean <= 1.0 and summary.ratio.max() <= 1.05),
                  summary=summary.reset_index().to_dict(orient="records"))  # fmt: skip
    (out / f"{tag}.json").write_text(json.dumps(report, indent=1))
    print(summary.droplevel("method").round(4).to_string())
    print(
        f"geometric mean of the mean ratios: {gmean:.4f}; worst set: {summary.ratio.max():.4f}; "
        f"goal met: {report['goal_met']}; written to {out / tag}.csv/.json"
    )


if __name__ == "__main__":
    main()
