"""The figures of the training-dynamics chapter: training curves as seed bands, the paper's Fig. 9/10 layout.

Every panel shows, for the two token widths, the median over training seeds and the
inter-quartile band (:func:`kmtbook.dynamics.seed_bands`) of the training loss (a running mean)
and of the relative validation objective against one Lloyd step, on base-2 log axes as in the
paper's appendix figures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .dynamics import seed_bands
from .figure_checks import plural
from .plotting import plot_band

WIDTH = {"onehot": "$d_{emb}=d+k$", "data": "$d_{emb}=d$"}
"""The token width of each embedding, as the legends name it."""
PAPER_STEPS = 10_000
"""The length of the paper's training runs (its Figs. 9 and 10 show 10 000 steps)."""
COLOUR = {"onehot": "C0", "data": "C1"}
"""The colour of each embedding in every figure of the chapter."""
LINE_STYLE = {"onehot": "-", "data": "--"}
"""The line style of each embedding, so that the two widths differ by more than colour."""


def config_mask(frame, **values) -> np.ndarray:
    """The rows of ``frame`` whose columns equal all the given ``values`` (``d=32, k=10``)."""
    return np.logical_and.reduce([frame[f] == v for f, v in values.items()])


def log2_axis(ax) -> None:
    """Base-2 log y-axis with plain tick labels, as in the paper's appendix figures."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_locator(LogLocator(base=2, subs=(1.0, 1.5)))  # ticks at 1, 1.5, 2, 3, 4, 6, ...
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def draw_bands(ax_loss, ax_rel, data) -> dict[str, int]:
    """The two panels of one configuration: training loss (running mean) and relative validation
    objective, median and inter-quartile band over seeds, one curve per token width. Returns the
    seed count per width."""
    seeds = {}
    for embedding in ("onehot", "data"):
        part = data[data.embedding == embedding]
        if part.empty:
            continue
        n_seeds = part.seed.nunique()
        seeds[embedding] = n_seeds
        label = f"{WIDTH[embedding]} ({n_seeds} seed{'s' if n_seeds != 1 else ''})"
        for ax, value in ((ax_loss, "train_loss_window"), (ax_rel, "val_rel_objective")):
            b = seed_bands(part, value, by=["embedding"])
            plot_band(ax, b.step, b["median"], b.q25, b.q75, label=label, colour=COLOUR[embedding],
                      linestyle=LINE_STYLE[embedding])
    ax_rel.axhline(1, ls=":", c="k", lw=1)
    for ax in (ax_loss, ax_rel):
        log2_axis(ax)
        if not seeds:
            ax.text(0.5, 0.5, "no runs yet", transform=ax.transAxes, ha="center", va="center", color="0.4")
    return seeds


def sweep_figure(
    logs,
    sweep: tuple[Mapping[str, Any], str, Sequence[Any]],
    title: str,
    panel_title: Callable[[Any], str],
    *,
    window: int,
    diverged,
    borrowed,
):
    """The panels of the paper's Fig. 9/10 for one sweep, one row per value: the training loss on
    the left, the relative validation objective on the right (the paper puts the values side by
    side; a row each lets every panel take the page's width at a readable size).

    ``sweep`` is ``(fixed, field, values)``: the configuration fields held fixed, the one that
    varies and its values. ``diverged`` (runs stopped by a non-finite loss) and ``borrowed`` (runs
    taken from the shipped paper-length runs) are named in the row titles. Every panel has the same
    step axis and each column the same y-axis (:func:`same_limits`), so that rows compare at a
    glance. Returns the figure and the seed counts per value and width."""
    import matplotlib.pyplot as plt

    fixed, field, values = sweep
    # the last row also holds the x tick labels and the x-axis label: it is taller by their height
    row_in, axis_in = 2.3, 0.45
    fig = plt.figure(figsize=(7.6, row_in * len(values) + axis_in + 0.8), layout="constrained")
    heights = [row_in] * (len(values) - 1) + [row_in + axis_in]
    rows = np.atleast_1d(np.asarray(fig.subfigures(len(values), 1, height_ratios=heights), dtype=object))
    counts = {}
    longest = 0
    columns: tuple[list, list] = ([], [])
    for i, (row, value) in enumerate(zip(rows, values)):
        ax_loss, ax_rel = row.subplots(1, 2)
        columns[0].append(ax_loss)
        columns[1].append(ax_rel)
        sel = logs[(logs[field] == value) & config_mask(logs, **fixed)]
        longest = max(longest, int(sel.step.max()) if len(sel) else 0)
        counts[value] = draw_bands(ax_loss, ax_rel, sel)
        gone = diverged[(diverged[field] == value) & config_mask(diverged, **fixed)]
        row.suptitle(_row_title(panel_title(value), gone, len(sel) > 0 and bool(sel.run.isin(borrowed.run).any())),
                     fontsize=11)
        ax_loss.set_ylabel(f"training loss\n(mean of {window} steps)")
        ax_rel.set_ylabel("relative validation\nobjective")
        last = i == len(values) - 1
        for ax in (ax_loss, ax_rel):
            ax.tick_params(labelbottom=last)
            if last:
                ax.set_xlabel("training step")
        if counts[value]:
            ax_loss.legend(fontsize=11, loc="best")  # d_{emb}: its script at 0.7, 9 px on the page
    same_limits(columns[0] + columns[1], "x")
    for column in columns:
        same_limits(column, "y")
    fig.suptitle(f"{title}\n{longest:,} training steps per run shown (the paper: {PAPER_STEPS:,})", fontsize=12)
    return fig, counts


def same_limits(axes: Sequence, axis: str) -> None:
    """Give ``axes`` the limits that sharing their ``axis`` ("x" or "y") would: each is autoscaled on
    the union of their data. The rows of a sweep figure are subfigures, and matplotlib redraws the
    whole figure at every limit change of an axis shared across subfigures; sharing a grid of panels
    that way costs many full draws of it."""
    from matplotlib.transforms import Bbox

    boxes = [ax.dataLim for ax in axes if np.isfinite(ax.dataLim.get_points()).all()]
    if not boxes:
        return
    union = Bbox.union(boxes)
    lo, hi = (union.x0, union.x1) if axis == "x" else (union.y0, union.y1)
    for ax in axes:  # (only this axis of the corners is read: the other keeps the panel's own data)
        ax.update_datalim([(lo, lo), (hi, hi)], updatex=axis == "x", updatey=axis == "y")
        ax.autoscale_view(scalex=axis == "x", scaley=axis == "y")


def _row_title(title: str, gone, borrowed: bool) -> str:
    """A sweep row's title: the value, then how many of its runs diverged and whether its runs are
    the first steps of the main runs."""
    notes = ([f"{plural(len(gone), 'run')} diverged"] if len(gone) else []) + (
        ["first steps of the main runs"] if borrowed else [])
    return title + (f" ({'; '.join(notes)})" if notes else "")
