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
    """The two rows of one panel column: training loss (running mean) and relative validation
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
            plot_band(ax, b.step, b["median"], b.q25, b.q75, label=label, colour=COLOUR[embedding])
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
    """The paper's Fig. 9/10 layout for one sweep: two rows (loss, relative objective), one column
    per value.

    ``sweep`` is ``(fixed, field, values)``: the configuration fields held fixed, the one that
    varies and its values. ``diverged`` (runs stopped by a non-finite loss) and ``borrowed`` (runs
    taken from the shipped paper-length runs) are named in the panel titles. Returns the figure and
    the seed counts per value and width."""
    import matplotlib.pyplot as plt

    fixed, field, values = sweep
    fig, axes = plt.subplots(2, len(values), figsize=(3.2 * len(values), 6.4), sharex=True, sharey="row", squeeze=False)
    counts = {}
    longest = 0
    for col, value in enumerate(values):
        sel = logs[(logs[field] == value) & np.logical_and.reduce([logs[f] == v for f, v in fixed.items()])]
        longest = max(longest, int(sel.step.max()) if len(sel) else 0)
        counts[value] = draw_bands(axes[0, col], axes[1, col], sel)
        t = panel_title(value)
        gone = diverged[
            (diverged[field] == value) & np.logical_and.reduce([diverged[f] == v for f, v in fixed.items()])
        ]
        if len(gone):
            t += f"\n({plural(len(gone), 'run')} diverged)"
        if len(sel) and sel.run.isin(borrowed.run).any():
            t += "\n(first steps of the main runs)"
        axes[0, col].set_title(t, fontsize=10)
        axes[1, col].set_xlabel("training step")
        if counts[value]:
            axes[0, col].legend(fontsize=7, loc="upper right")
    axes[0, 0].set_ylabel(f"training loss\n(mean of {window} steps)")
    axes[1, 0].set_ylabel("relative validation\nobjective")
    fig.suptitle(f"{title}\n{longest:,} training steps per run shown (the paper: {PAPER_STEPS:,})", fontsize=11)
    fig.tight_layout()
    return fig, counts
