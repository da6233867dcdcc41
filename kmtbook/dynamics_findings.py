"""Chapter 8's findings beside the paper's claims, computed from the training runs of a build.

:func:`findings` reads the final values of the runs (:func:`kmtbook.dynamics.summarise_final`), the
temperature table of the chapter (median r early and at the end per d, width and temperature) and
the runs stopped by a non-finite loss, and returns one statement per claim of the paper (Figs. 9
and 10) and of its follow-up, each with its numbers, and the counts the chapter records.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .dynamics import seed_bands, steps_to_reach

WIDTHS = {"onehot": "d+k", "data": "d"}
"""Token widths by embedding name, as the chapter writes them."""


@dataclass
class Findings:
    """The statements (``lines``, the paper's claim first, then ours), the counts behind them
    (``metrics``: flat numbers for ``chapter.record``) and the readings of a claim that the pages
    quote (``strings``, recorded too)."""

    lines: list[str] = field(default_factory=list)
    metrics: dict[str, int] = field(default_factory=dict)
    strings: dict[str, str] = field(default_factory=dict)  # readings the pages quote (also recorded)

    def text(self) -> str:
        return "\n".join(self.lines)

    def markdown(self) -> str:
        """The statements as the page renders them: a numbered list (one item per claim, the paper's
        first), our numbers as the items' bullets, wrapped by the page like the prose around it."""
        out = []
        for line in self.lines:
            if line.startswith(" "):
                out.append("   - " + line.strip().replace("*", "\\*"))
            else:
                out.append(line.replace("*", "\\*"))
        return "\n".join(out)


def median_end(finals: pd.DataFrame, d: int, k: int, inv_temp: float, embedding: str) -> float:
    """Median end value r of one configuration and width over its seeds (NaN if it has no run)."""
    same = (finals.d == d) & (finals.k == k) & (finals.loss_inv_temp == inv_temp)
    sel = finals[same & (finals.embedding == embedding)]
    return float(sel["median"].iloc[0]) if len(sel) else float("nan")


def _fmt(values: Sequence[float]) -> str:
    return ", ".join("-" if v != v else f"{v:.3f}" for v in values)


def _temperature(out: Findings, finals: pd.DataFrame, inv_temps: Sequence[float], steps: int) -> None:
    out.lines.append("1. Paper: a smaller loss temperature (larger inverse temperature) gives a better layer but "
                     "converges more slowly.")  # fmt: skip
    monotone = tested = 0
    for d in (4, 32):
        for e, w in WIDTHS.items():
            vals = [median_end(finals, d, 6, li, e) for li in inv_temps]
            if any(v != v for v in vals):
                out.lines.append(f"   d={d}, width {w}: not every temperature has runs yet ({_fmt(vals)}).")
                continue
            tested += 1
            falls = all(a >= b for a, b in itertools.pairwise(vals))
            monotone += falls
            best = inv_temps[int(np.argmin(vals))]
            spread = max(vals[1:]) - min(vals[1:])
            out.lines.append(
                f"   d={d}, width {w}: median r after {steps} steps at inverse temperature "
                f"{', '.join(f'{v:g}' for v in inv_temps)}: {_fmt(vals)}; best at {best:g}; "
                f"{'falls' if falls else 'does not fall'} monotonically as the inverse temperature grows; "
                f"inverse temperature 1 is {vals[0] - min(vals[1:]):+.3f} from the best of the others, which lie "
                f"within {spread:.3f} of each other."
            )
    out.metrics.update(temperature_monotone=monotone, temperature_tested=tested)


def _speed(out: Findings, temp_table: pd.DataFrame, inv_temps: Sequence[float], early: int) -> None:
    """Early in training, does inverse temperature 1 lie below inverse temperature 10? (rows of
    ``temp_table`` sorted by lambda: inverse temperature 10 first, 1 last)."""
    if not len(temp_table):
        return
    column = f"median r at step {early}"
    complete = [g for _, g in temp_table.groupby(level=["d", "width"]) if len(g) == len(inv_temps)]
    ahead = int(sum(g[column].iloc[-1] < g[column].iloc[0] for g in complete))
    if complete:
        out.lines.append(f"   Speed: early in training (step {early}) the inverse temperature 1 curve lies below the "
                         f"inverse temperature 10 curve in {ahead} of {len(complete)} (d, width) combinations that "
                         "have all four temperatures; the steps to come within 10% of the end value are in the table "
                         "above.")  # fmt: skip
    else:
        out.lines.append("   Speed: no (d, width) combination has runs at all four temperatures in this build.")
    out.metrics.update(early_hot_ahead=ahead, early_tested=len(complete))


def loose_bound_reading(below: int, tested: int, below_any: int, configurations: int) -> str:
    """What the inverse-temperature-1 runs say about the paper's claim that at that temperature the
    bound is too loose to beat Lloyd: ``below`` of ``tested`` such runs end below one Lloyd step,
    and ``below_any`` of ``configurations`` (every d, k, temperature and width of the sweeps) do.
    The claim is about converged runs, so it is tested only where some configuration reaches one
    Lloyd step at the sweeps' length; where none does, the inverse temperature 1 runs stay above it
    like all the others and say nothing about the claim."""
    if tested == 0:
        return "not tested: no inverse temperature 1 runs"
    if below_any == 0:
        return (f"not a test of the claim: no configuration at any temperature ends below one Lloyd step at this "
                f"length (0 of {configurations})")
    if below == 0:
        return (f"consistent with the claim: none of the {tested} inverse temperature 1 runs ends below one Lloyd "
                f"step, while {below_any} of {configurations} configurations do")
    return f"against the claim: {below} of {tested} inverse temperature 1 runs end below one Lloyd step"


def _loose_bound(out: Findings, finals: pd.DataFrame, steps: int) -> None:
    out.lines.append("2. Paper: at inverse temperature 1 the bound is too loose to beat Lloyd (after full training).")
    have = {(d, e): median_end(finals, d, 6, 1.0, e) for d in (4, 32) for e in WIDTHS}
    have = {key: v for key, v in have.items() if v == v}
    ends = finals["median"].dropna()
    below_any = int((ends < 1).sum())
    below = sum(v < 1 for v in have.values())
    reading = loose_bound_reading(below, len(have), below_any, len(ends))
    out.metrics.update(inv_temp1_below_lloyd=below, inv_temp1_tested=len(have), sweep_configs_below_lloyd=below_any,
                       sweep_configs=len(ends))  # fmt: skip
    out.strings.update(inv_temp1_reading=reading)
    if not have:
        out.lines.append("   no inverse temperature 1 runs in this build.")
        return
    out.lines.append(f"   After {steps} steps, inverse temperature 1: " + "; ".join(
        f"d={d} width {WIDTHS[e]} r = {v:.3f} (inverse temperature 10: {median_end(finals, d, 6, 10.0, e):.3f})"
        for (d, e), v in have.items()) + f". {below} of {len(have)} are below one Lloyd step; at any temperature, "
        f"{below_any} of {len(ends)} configurations are.")  # fmt: skip
    out.lines.append(f"   Reading: {reading}.")


def _width(out: Findings, finals: pd.DataFrame) -> None:
    out.lines.append("3. Paper: tokens of width d (no scratch coordinates) train to a worse layer than width d+k.")
    configs = sorted({(int(r.d), int(r.k), float(r.loss_inv_temp)) for r in finals.itertuples()})
    pairs = [c for c in configs if all(median_end(finals, *c, e) == median_end(finals, *c, e) for e in WIDTHS)]
    worse = [c for c in pairs if median_end(finals, *c, "data") > median_end(finals, *c, "onehot")]
    rest = sorted(set(pairs) - set(worse))
    out.lines.append(f"   Width d ends above width d+k in {len(worse)} of {len(pairs)} configurations with both widths"
                     + (f"; not in: {', '.join(f'd={a} k={b} inv.temp {c:g}' for a, b, c in rest)}." if rest else "."))
    out.metrics.update(width_d_worse=len(worse), width_pairs=len(pairs))


def _clusters_and_dimension(out: Findings, finals: pd.DataFrame, diverged: pd.DataFrame, ks: Sequence[int],
                            ds: Sequence[int]) -> None:  # fmt: skip
    out.lines.append("4. Follow-up paper: at inverse temperature 10 the layer beats one Lloyd step at every k "
                     f"({', '.join(map(str, ks))}) after full training; the soft-max bound loosens as k grows. Ours "
                     "(d=32), median r at the end of the sweep:")  # fmt: skip
    for e, w in WIDTHS.items():
        out.lines.append(f"   width {w}: k = {', '.join(map(str, ks))}: "
                         f"{_fmt([median_end(finals, 32, k, 10.0, e) for k in ks])}")  # fmt: skip
    gone = diverged[(diverged.d == 32) & (diverged.loss_inv_temp == 10.0)] if len(diverged) else diverged
    stopped = ", ".join(f"k={r.k} {r.embedding} seed {r.seed} at step {r.steps}" for r in gone.itertuples())
    out.lines.append("   Runs stopped by a non-finite loss (no gradient clipping, as in the paper): "
                     + (stopped or "none") + " (the follow-up paper: 3 of 10 seeds at k = 25, width d+k, over 10 000 "
                     "steps).")  # fmt: skip
    out.lines.append("5. Dimension (k=6, inverse temperature 10), median r at the end: " + "; ".join(
        f"width {w}: d = {', '.join(map(str, ds))}: {_fmt([median_end(finals, d, 6, 10.0, e) for d in ds])}"
        for e, w in WIDTHS.items()))  # fmt: skip


def early_step(sweep_length: int) -> int:
    """An early step of a sweep: a fifth of its length, on the 50-step grid of the logs (at least 50)."""
    return max(50, (sweep_length // 5) // 50 * 50)


def curve_facts(logs: pd.DataFrame, early: int) -> dict[str, dict[str, float]]:
    """Per token width of the runs ``logs`` (one configuration): seeds, median r at step ``early``,
    at the end, the end step, and the first step at which the median curve comes within 10 % of
    its final value."""
    facts = {}
    for e in WIDTHS:
        part = logs[logs.embedding == e]
        if part.empty:
            continue
        med = seed_bands(part, "val_rel_objective", by=["embedding"]).set_index("step")["median"]
        final = float(med.iloc[-1])
        facts[e] = dict(seeds=part.seed.nunique(), early=float(med.get(early, np.nan)), final=final,
                        last_step=int(med.index[-1]),
                        settle=steps_to_reach(med.index, med.to_numpy(), 1.1 * final))  # fmt: skip
    return facts


def temperature_table(logs: pd.DataFrame, inv_temps: Sequence[float], early: int, k: int = 6) -> pd.DataFrame:
    """The temperature sweeps (d = 4 and 32, ``k`` clusters) read off their validation curves: per d,
    width and lambda (= 1 / inverse temperature) the seeds, the median r at step ``early`` and at
    the end, the end step and the step within 10 % of the end value."""
    rows = []
    for d in (4, 32):
        for li in inv_temps:
            sel = logs[(logs.d == d) & (logs.k == k) & (logs.loss_inv_temp == li)]
            for e, f in curve_facts(sel, early).items():
                rows.append({"d": d, "lambda": round(1 / li, 2), "inverse temperature": li, "width": WIDTHS[e],
                             "seeds": f["seeds"], f"median r at step {early}": f["early"],
                             "median r at the end": f["final"], "end step": f["last_step"],
                             "step within 10% of the end value": f["settle"]})  # fmt: skip
    table = pd.DataFrame(rows)
    return table.set_index(["d", "width", "lambda"]).sort_index() if len(table) else table


def findings(
    finals: pd.DataFrame,
    temp_table: pd.DataFrame,
    diverged: pd.DataFrame,
    sweeps: Mapping[str, tuple[Mapping[str, float], str, Sequence[float]]],
    steps: int,
    early: int,
) -> Findings:
    """The chapter's findings: ``finals`` from :func:`~kmtbook.dynamics.summarise_final` by
    (d, k, loss_inv_temp, embedding); ``temp_table`` the chapter's temperature table (index d,
    width, lambda; a column ``median r at step {early}``); ``diverged`` the runs stopped by a
    non-finite loss (columns d, k, loss_inv_temp, embedding, seed, steps); ``sweeps`` the
    chapter's ``SWEEPS`` (the values of ``temperature_d4``, ``k`` and ``d`` are read); ``steps``
    the sweep length."""
    out = Findings()
    inv_temps = list(sweeps["temperature_d4"][2])
    _temperature(out, finals, inv_temps, steps)
    _speed(out, temp_table, inv_temps, early)
    _loose_bound(out, finals, steps)
    _width(out, finals)
    ks, ds = [int(k) for k in sweeps["k"][2]], [int(d) for d in sweeps["d"][2]]
    _clusters_and_dimension(out, finals, diverged, ks, ds)
    return out


__all__ = ["WIDTHS", "Findings", "curve_facts", "early_step", "findings", "loose_bound_reading", "median_end",
           "temperature_table"]
