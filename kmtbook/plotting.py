"""Plotting helpers shared by the chapters (matplotlib; imported only by notebooks)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from .arguments import check_flag


def _np(t) -> np.ndarray:
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def plot_log_objective(
    ax,
    log_objective,
    *,
    label: str | None = None,
    xlabel: str = "# clustering steps",
    ylabel: str = "log(k-means objective)",
    **style,
):
    """One log-objective curve against the step number (entry 0 = initial centres)."""
    y = _np(log_objective)
    ax.plot(np.arange(len(y)), y, marker=style.pop("marker", "o"), label=label, **style)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    return ax


def plot_center_trajectories(
    ax, X, trajectory, *, point_colour: str = "0.75", center_color: str = "C3", max_points: int = 5000, seed: int = 0
):
    """2-D points (grey), initial centres (circles), later centres (triangles) joined by dotted lines.

    Args:
        X: (n, 2) points of one task; at most ``max_points`` of them are drawn (a fixed subsample).
        trajectory: (T+1, k, 2) centres after every step.
    """
    pts, traj = _np(X), _np(trajectory)
    if pts.shape[0] > max_points:
        pts = pts[np.random.default_rng(seed).choice(pts.shape[0], max_points, replace=False)]
    ax.scatter(pts[:, 0], pts[:, 1], s=2, c=point_colour, rasterized=True)
    for j in range(traj.shape[1]):
        ax.plot(traj[:, j, 0], traj[:, j, 1], ":", c=center_color, lw=1)
        ax.scatter(traj[1:, j, 0], traj[1:, j, 1], marker="^", c=center_color, s=22, zorder=3)
    ax.scatter(traj[0, :, 0], traj[0, :, 1], marker="o", facecolors="none", edgecolors="k", s=60, zorder=4)
    ax.set_aspect("equal")
    return ax


def cluster_colours(k: int) -> list:
    """``k`` distinct colours for clusters, none of them grey (grey is the colour of the background
    points in :func:`plot_center_trajectories`): seaborn's "Set2" without its grey for ``k <= 7``,
    matplotlib's "tab20" without its greys beyond."""
    import matplotlib

    set2_map, tab20_map = matplotlib.colormaps["Set2"], matplotlib.colormaps["tab20"]
    set2 = [set2_map(i) for i in range(set2_map.N) if i != 7]  # (Set2's last colour is grey)
    tab20 = [tab20_map(i) for i in range(tab20_map.N) if i not in (14, 15)]  # (tab20's greys)
    palette = set2 if k <= len(set2) else tab20
    return [palette[j % len(palette)] for j in range(k)]


def plot_assignments(ax, X, labels, *, k: int | None = None, max_points: int = 5000, seed: int = 0):
    """2-D points coloured by their cluster label (one colour per cluster, from :func:`cluster_colours`).

    Args:
        k: the number of clusters (default: the largest label + 1), so that every cluster keeps its colour.
    """
    pts, lab = _np(X), _np(labels).astype(int)
    n_clusters = int(k if k is not None else lab.max() + 1)
    if pts.shape[0] > max_points:
        keep = np.random.default_rng(seed).choice(pts.shape[0], max_points, replace=False)
        pts, lab = pts[keep], lab[keep]
    colours = np.asarray(cluster_colours(n_clusters))
    ax.scatter(pts[:, 0], pts[:, 1], c=colours[lab], s=3, rasterized=True)
    ax.set_aspect("equal")
    return ax


def plot_matrix(ax, W, *, title: str = "", cmap: str = "RdBu_r", symmetric: bool = True, colorbar: bool = True):
    """A weight or attention matrix as a heat map (symmetric colour scale around 0 by default)."""
    symmetric, colorbar = check_flag("symmetric", symmetric), check_flag("colorbar", colorbar)
    M = _np(W)
    vmax = float(np.abs(M).max()) or 1.0
    kwargs = dict(vmin=-vmax, vmax=vmax) if symmetric else {}
    im = ax.imshow(M, cmap=cmap, interpolation="nearest", **kwargs)
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return im


def plot_band(ax, x, median, low, high, *, label: str | None = None, colour: str | None = None, alpha: float = 0.25,
              **style):
    """A median line with a shaded band (for example min-max or inter-quartile over seeds); ``style``
    (line style, marker) goes to the median line."""
    x, median, low, high = map(_np, (x, median, low, high))
    (line,) = ax.plot(x, median, label=label, color=colour, **style)
    ax.fill_between(x, low, high, color=line.get_color(), alpha=alpha, lw=0)
    return line


def curves_table(curves: Mapping[str, Sequence[float]], steps: Sequence[int]):
    """A pandas table of selected steps of several curves (rows: curve names, columns: t = ...)."""
    import pandas as pd

    return pd.DataFrame(
        {name: [float(_np(c)[t]) for t in steps] for name, c in curves.items()}, index=[f"t={t}" for t in steps]
    ).T


def tidy_log_axis(ax):
    """Plain numbers on a log y-axis; label the minor ticks too when it spans less than a decade."""
    from matplotlib.ticker import FormatStrFormatter

    lo, hi = ax.get_ylim()
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    if hi / lo < 10:
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))


def token_coordinate_names(d: int, k: int, extra: Sequence[str] = ()) -> list[str]:
    """Axis labels for the coordinates of a token: ``x_1..x_d`` (data), ``y_1..y_k`` (scratch or
    cluster id), then ``extra`` (e.g. the norm coordinates of Theorem 2.2)."""
    return [f"$x_{i + 1}$" for i in range(d)] + [f"$y_{j + 1}$" for j in range(k)] + list(extra)


def plot_block_weights(weights: Mapping, names: Sequence[str], blocks: Sequence[str] = ("CAX", "SAX", "CAC", "SAC")):
    """One row per block: its ``Q``, ``K``, ``V`` and ``Q^T K`` (``weights[block]["Q"]``, ...) as heat
    maps on one colour scale from -1 to 1, coordinates labelled by ``names``. Returns the figure."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(blocks), 4, figsize=(7.5, 2.1 * len(blocks)), layout="constrained")
    for row, name in zip(axes, blocks):
        W = weights[name]
        panels = {"Q": W["Q"], "K": W["K"], "V": W["V"], "Q^T K": W["Q"].T @ W["K"]}
        for ax, (title, M) in zip(row, panels.items()):
            im = ax.imshow(M.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
            # a script is drawn at 0.7 of its text: 11 and 10.5 pt keep the scripts 9 px on the page
            ax.set_title(f"{name}: ${title}$", fontsize=11)
            ax.set_xticks(range(len(names)), names, fontsize=10.5)
            ax.set_yticks(range(len(names)), names, fontsize=10.5)
            ax.grid(False)
    fig.colorbar(im, ax=axes, fraction=0.025, pad=0.01)
    return fig


def _overlapping(ax, axis: str = "x", pad_px: float = 4.0) -> bool:
    """Whether neighbouring tick labels of ``ax`` overlap as drawn (with ``pad_px`` between them)."""
    renderer = ax.figure.canvas.get_renderer()
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    boxes = sorted((t.get_window_extent(renderer) for t in labels if t.get_visible() and t.get_text()),
                   key=lambda b: b.x0 if axis == "x" else b.y0)
    if axis == "x":
        return any(a.x1 + pad_px > b.x0 for a, b in itertools.pairwise(boxes))
    return any(a.y1 + pad_px > b.y0 for a, b in itertools.pairwise(boxes))


def fit_tick_labels(ax) -> str:
    """Keep the x tick labels of ``ax`` apart: as they are if they fit, else each broken into lines
    at its spaces, else turned upright. Returns which ("as is", "wrapped" or "turned").

    Call it after everything that changes the figure's layout is set (the figure is drawn to measure
    the labels), e.g. for categories such as ``seed 153476998`` under narrow bars."""
    ax.figure.canvas.draw()
    if not _overlapping(ax):
        return "as is"
    texts = [t.get_text() for t in ax.get_xticklabels()]
    ax.set_xticks(ax.get_xticks(), [s.replace(" ", "\n") for s in texts])
    ax.figure.canvas.draw()
    if not _overlapping(ax):
        return "wrapped"
    ax.set_xticks(ax.get_xticks(), texts, rotation=90)
    return "turned"


OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
"""The Okabe-Ito colours (blue, orange, green, vermillion, reddish purple, sky blue, yellow, black),
drawn for readers with a colour-vision deficiency: every pair is at least 10.9 CAM02-UCS apart under
simulated deuteranopia, protanopia and tritanopia (seaborn's "colorblind" palette has a pair at 5.8)."""

BOOK_LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)), (0, (8, 2)), (0, (3, 1, 1, 1)))


def set_book_style() -> None:
    """The book's look: seaborn's whitegrid theme at notebook scale, the :data:`OKABE_ITO` colours,
    and a property cycle that changes the line style with the colour, so that lines drawn without a
    style of their own differ by more than their colour (:func:`kmtbook.figure_checks.colour_only_series`).
    Markers are not cycled: a line of hundreds of points would become a band of markers, and
    ``markevery`` cannot join the cycle (``fill`` and ``stackplot`` polygons refuse it); a figure of
    few points sets its markers itself."""
    import matplotlib as mpl
    import seaborn as sns
    from cycler import cycler

    sns.set_theme(style="whitegrid", context="notebook", palette=list(OKABE_ITO))
    mpl.rcParams["axes.prop_cycle"] = cycler(color=list(OKABE_ITO)) + cycler(linestyle=list(BOOK_LINESTYLES))
