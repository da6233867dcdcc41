"""The spread of a result over training seeds, set against the paper's error bars (Fig. 4).

The paper's Fig. 4 draws, per step, the median over its 10 training seeds of the task-averaged log
k-means objective, with a ribbon from the smallest to the largest seed (its plotting code,
``plot_eval_ood_gen.py``: quantiles 0 and 1 over seeds); it prints no width of that ribbon, only
the values after 20 steps (about 5.0 for the trained layer, 5.26 for Lloyd). With ``n`` seeds of
our own, :func:`spread_against_paper` says how wide our min-max range is, how wide a min-max over
the paper's 10 seeds would be if its seeds spread as ours do (the expected range of ``n`` normal
draws is ``d2(n)`` standard deviations, Tippett's constants), and where the paper's value lies
against our median and that width.

``python -m kmtbook.seed_spread`` prints the shipped runs of ``data/weights`` (final validation
numbers and wall time per seed and width, from ``index.json``) and their medians over the first
three seeds and over all of them.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .arguments import finite_number

D2 = {2: 1.128, 3: 1.693, 4: 2.059, 5: 2.326, 6: 2.534, 7: 2.704, 8: 2.847, 9: 2.970, 10: 3.078}
"""Tippett's d2(n): the expected range of n independent standard normal draws."""

PAPER_SEEDS = 10


def spread_against_paper(per_seed: Sequence[float], paper_value: float) -> dict[str, Any]:
    """Our values ``per_seed`` (one per training seed, e.g. the task-averaged log-objective after 20
    steps) against the paper's median ``paper_value`` over its 10 seeds.

    Returns the seed count, our median, min, max and range (the paper's error bar is this min-max
    over its seeds), the standard deviation over seeds estimated from the range (range / d2(n)),
    the range ten seeds would span at that spread (``expected_range_10``), the paper's value minus
    our median, and whether the paper's value lies inside our range and within half the expected
    ten-seed range of our median (``paper_within_expected_ribbon``). One seed gives no spread: the
    spread entries are then NaN and the comparisons false. A value that is not a finite number (NaN,
    an infinity, text, a flag) is a ValueError naming it."""
    values = [finite_number(f"per_seed[{i}]", v) for i, v in enumerate(per_seed)]
    paper_value = finite_number("paper_value", paper_value)
    n = len(values)
    if n == 0:
        raise ValueError("per_seed: need at least one seed's value")
    if n > max(D2):
        raise ValueError(f"per_seed: at most {max(D2)} seeds (Tippett's constants tabulated here), got {n}")
    median = statistics.median(values)
    low, high = min(values), max(values)
    sd = (high - low) / D2[n] if n >= 2 else math.nan
    expected_10 = sd * D2[PAPER_SEEDS]
    offset = paper_value - median
    return {
        "n_seeds": n,
        "median": median,
        "min": low,
        "max": high,
        "range": high - low,
        "sd_from_range": sd,
        "expected_range_10": expected_10,
        "paper": paper_value,
        "paper_minus_median": offset,
        "paper_within_range": bool(n >= 2 and low <= paper_value <= high),
        "paper_within_expected_ribbon": bool(n >= 2 and abs(offset) <= expected_10 / 2),
    }


def spread_reading(name: str, s: dict[str, Any]) -> str:
    """One sentence of :func:`spread_against_paper`'s result for the quantity ``name``."""
    if s["n_seeds"] < 2:
        return (f"{name}: one seed ({s['median']:.3f}), no spread over seeds to set against the paper's "
                f"{s['paper']:.2f}.")
    where = "inside" if s["paper_within_expected_ribbon"] else "outside"
    head = (f"{name}: median {s['median']:.3f} over {s['n_seeds']} seeds, range {s['min']:.3f} to {s['max']:.3f} "
            f"({s['range']:.3f})")
    offset = f"the paper's {s['paper']:.2f} lies {abs(s['paper_minus_median']):.3f} from our median, {where}"
    if s["n_seeds"] == PAPER_SEEDS:
        return f"{head}, over as many seeds as the paper's ribbon; {offset} half that range."
    return (f"{head}; ten seeds spreading alike would span about {s['expected_range_10']:.3f}, and {offset} half "
            "that width.")


def task_noise_reading(layer: dict[str, Any], lloyd: dict[str, Any], tasks_per_seed: int) -> str:
    """What part of the layer's spread over seeds the tasks alone explain: Lloyd's algorithm has no
    training seed, so its range over the same seed slots (each slot evaluated on its own
    ``tasks_per_seed`` tasks, the same tasks as the layer of that slot) is the range the task sample
    makes by itself. ``layer`` and ``lloyd`` are :func:`spread_against_paper` results."""
    if layer["n_seeds"] < 2:
        return "One seed: no spread over seeds to take apart."
    head = (f"Lloyd has no training seed, yet its values range over {lloyd['range']:.3f} across the same "
            f"{lloyd['n_seeds']} seed slots: each slot has its own {tasks_per_seed} tasks, and that range is the "
            f"task sample's alone. The layer's range is {layer['range']:.3f}")
    if layer["range"] <= lloyd["range"]:
        return (head + ", no wider: at this number of tasks per seed the tasks, not the training seeds, set the "
                "spread, and the comparison with the paper's ribbon (320 tasks per seed) says little about "
                "seed-to-seed variation.")
    return (head + f", {layer['range'] / max(lloyd['range'], 1e-12):.1f} times that: the training seeds add a "
            "spread of their own to the task sample's.")


INDEX_FIELDS: dict[str, type] = {"seed": int, "final_val_log_objective": float, "final_val_rel_objective": float,
                                 "steps": int, "wall_s": float}  # fmt: skip
"""The fields of a run in ``index.json`` that the table reads, with their types."""


def _index_field(name: str, run: dict[str, Any], field: str) -> Any:
    """``run[field]``, an int or a finite number as :data:`INDEX_FIELDS` says; a ValueError naming
    the run and the field otherwise."""
    if field not in run:
        raise ValueError(f"run {name!r} has no field {field!r}")
    value = run[field]
    if INDEX_FIELDS[field] is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"run {name!r}: field {field!r} must be an integer, got {type(value).__name__} {value!r}")
    return finite_number(f"run {name!r}: field {field!r}", value)


def shipped_table(index: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of a ``data/weights/index.json`` as rows: width, seed, final validation numbers,
    steps and wall time (minutes), in the order of the file; a ValueError naming the run and the
    field for a value of the wrong type or not finite."""
    if not isinstance(index, dict):
        raise ValueError(f"not a JSON object of runs (it holds a {type(index).__name__})")
    rows = []
    for name, run in index.items():
        if not isinstance(run, dict):
            raise ValueError(f"run {name!r} is not a JSON object")
        seen = {field: _index_field(name, run, field) for field in INDEX_FIELDS}
        embedding = name.split("_seed")[0]
        rows.append({"width": "d" if embedding in ("none", "data") else "d+k", "seed": int(seen["seed"]),
                     "final_val_log_objective": seen["final_val_log_objective"],
                     "final_val_rel_objective": seen["final_val_rel_objective"], "steps": int(seen["steps"]),
                     "wall_min": seen["wall_s"] / 60})  # fmt: skip
    return rows


def _median_rows(rows: list[dict[str, Any]], order: Sequence[int]) -> list[str]:
    out = []
    for width in ("d+k", "d"):
        mine = sorted((r for r in rows if r["width"] == width), key=lambda r: list(order).index(r["seed"])
                      if r["seed"] in order else len(order))  # fmt: skip
        for label, part in (("first 3 seeds", mine[:3]), (f"all {len(mine)} seeds", mine)):
            if part:
                out.append(f"width {width}, {label}: median final validation log-objective "
                           f"{statistics.median(r['final_val_log_objective'] for r in part):.3f}, relative "
                           f"{statistics.median(r['final_val_rel_objective'] for r in part):.3f}")
    return out


def main(argv: list[str] | None = None) -> int:
    from .paper_sweep import PAPER_SEEDS as SEED_ORDER

    parser = argparse.ArgumentParser(prog="python -m kmtbook.seed_spread", description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", default="data/weights/index.json", help="the shipped runs' index")
    args = parser.parse_args(argv)
    path = Path(args.index)
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
        rows = shipped_table(index)
    except OSError as err:
        raise SystemExit(f"error: cannot read {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise SystemExit(f"error: {path} is damaged: {err}") from None
    print("| width | seed | final val. log-objective | final val. relative | steps | wall time (min) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['width']} | {r['seed']} | {r['final_val_log_objective']:.4f} | {r['final_val_rel_objective']:.4f} "
              f"| {r['steps']} | {r['wall_min']:.1f} |")
    print()
    print("\n".join(_median_rows(rows, SEED_ORDER)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
