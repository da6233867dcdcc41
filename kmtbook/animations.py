"""Clustering runs in motion: step-through animations that read offline, and their still frames.

:func:`animate_runs` draws several runs on one task side by side (one panel per run: the points
coloured by their nearest current centre, the centres and their paths so far) and their
objectives beside them, one frame per step: Lloyd's algorithm against the k-means transformer of
Theorem 2.1 (the paper's Fig. 3), or the trained layer with and without re-embedding (Sec. 3,
Fig. 4a). :func:`self_contained_html` turns an animation into HTML with play and step controls
that needs neither a kernel nor the network (the book's player, :func:`kmtbook.html_figures.slider_html`: its
frames small WebP images of one palette, each with its own text alternative and its numbers in words, written
from the runs it was drawn from), and :func:`save_animation` writes it as a page of its own, with caption, source
and licence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from matplotlib.animation import FuncAnimation
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .html_figures import FRAME_DPI, Frames, figure_frame, slider_html, small_frames, standalone_page
from .plotting import cluster_colours


@dataclass(frozen=True)
class Run:
    """One run on one task: centres after every step ``(T+1, k, d)`` and the objective ``(T+1,)``."""

    name: str
    centres: torch.Tensor
    objective: torch.Tensor
    style: str = "-o"


def nearest_centre(X: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
    """Label of each point's nearest centre at every step: ``X (n, d)``, ``centres (T+1, k, d)`` -> ``(T+1, n)``."""
    return torch.cdist(X.unsqueeze(0).expand(centres.shape[0], -1, -1), centres).argmin(-1)


def projection(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and the two leading principal directions ``(d, 2)`` of the points (the identity for d = 2)."""
    mean = X.mean(0)
    if X.shape[-1] == 2:
        return mean * 0, torch.eye(2, dtype=X.dtype, device=X.device)
    _, _, V = torch.linalg.svd(X - mean, full_matrices=False)
    return mean, V[:2].T


def _check_runs(X: torch.Tensor, runs: Sequence[Run]) -> int:
    """What can be drawn, checked once at the entry: finite points ``X (n, d)`` with n >= 1 and d >= 2
    (drawn in a plane), and runs of finite centres ``(T+1, k, d)`` (T >= 0, k >= 1) with objectives
    ``(T+1,)``; a ValueError naming the argument otherwise. Returns T."""
    if not isinstance(X, torch.Tensor) or X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 2:
        shape = tuple(X.shape) if isinstance(X, torch.Tensor) else type(X).__name__
        raise ValueError(f"X must be the (n, d) points of one task, n >= 1 and d >= 2 (drawn in a plane), got {shape}")
    if not bool(torch.isfinite(X).all()):
        raise ValueError("X must be finite: it holds NaN or infinite coordinates")
    if not runs:
        raise ValueError("runs must hold at least one run")
    steps = {tuple(r.centres.shape[:1]) + tuple(r.objective.shape) for r in runs}
    if len(steps) != 1 or any(r.centres.ndim != 3 or r.centres.shape[-1] != X.shape[-1] for r in runs):
        shapes = [(tuple(r.centres.shape), tuple(r.objective.shape)) for r in runs]
        raise ValueError("every run needs centres (T+1, k, d) with the points' d and an objective (T+1,), "
                         f"the same T for all; got {shapes}")
    for run in runs:
        if run.centres.shape[0] < 1 or run.centres.shape[1] < 1:
            raise ValueError(f"run {run.name!r}: centres must hold at least one step (T+1 >= 1 frames) of at least "
                             f"one centre, got shape {tuple(run.centres.shape)}")
        if not bool(torch.isfinite(run.centres).all()):
            raise ValueError(f"run {run.name!r}: centres must be finite: they hold NaN or infinite coordinates")
    return runs[0].centres.shape[0] - 1


def _curve_panels(axes, objectives: list, runs: Sequence[Run], gap: tuple[str, str] | None, step_name: str,
                  objective_label: str) -> list:
    """Draw the faint whole curves (every run's objective; the gap) and return the (line, curve) pairs that
    each frame fills up to its step."""
    names = [r.name for r in runs]
    T = len(objectives[0]) - 1
    curves = [(axes[0], objectives, [r.style for r in runs], names, objective_label)]
    if gap is not None:
        one, reference = (objectives[names.index(name)] for name in gap)
        curves.append((axes[1], [one - reference], ["-o"], [f"{gap[0]} minus {gap[1]}"],
                       "log-objective difference"))
        axes[1].axhline(0.0, color="0.5", lw=0.8)
        axes[1].set_title(f"{gap[0]}\nminus {gap[1]}", fontsize=10)  # (one line is wider than its panel)
    markers = []
    for ax, values, styles, labels, ylabel in curves:
        for i, (curve, style, name) in enumerate(zip(values, styles, labels)):
            # a later run drawn dashed and hollow, so that a run equal to an earlier one stays visible
            style, hollow = (style.replace("-", "--", 1), dict(mfc="none")) if i else (style, {})
            ax.plot(np.arange(T + 1), curve, style, c=f"C{i}", alpha=0.25, ms=4, **hollow)
            markers.append((ax.plot([], [], style, c=f"C{i}", ms=5, label=name, **hollow)[0], curve))
        ax.set_xlabel(f"# {step_name}s", fontsize=10)
        ax.set_ylabel(ylabel, fontsize=10)
        ax.tick_params(labelsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    # under the panels of curves: over no curve in any frame
    axes[0].get_figure().legend(*axes[0].get_legend_handles_labels(), fontsize=9, loc="outside lower center",
                                ncol=len(runs))
    return markers


class RunsAnimation(FuncAnimation):
    """An animation of runs (:func:`animate_runs`), with what each frame shows in words, written from the runs:
    ``positions`` (the readout: "step 3 of 10"), ``valuetexts`` (the frame's numbers) and ``alts`` (its text
    alternative); ``steps`` frames, the slider named ``label``."""

    def __init__(self, fig: Figure, draw, steps: int, words: tuple[list[str], list[str], list[str]], label: str):
        super().__init__(fig, draw, frames=steps, interval=700, blit=False)
        self.steps = steps
        self.positions, self.valuetexts, self.alts = words
        self.label = label


def _frame_words(runs: Sequence[Run], objectives: list, labels: list, title: str, step_name: str,
                 gap: tuple[str, str] | None, plane: str) -> tuple[list[str], list[str], list[str]]:
    """Each frame's readout, its numbers in words and its text alternative: every run's log-objective at the
    step (and the gap), and how many of the drawn points changed their nearest centre at that step."""
    names = [r.name for r in runs]
    T = len(objectives[0]) - 1
    positions, valuetexts, alts = [], [], []
    for t in range(T + 1):
        values = "; ".join(f"{name}: {curve[t]:.3f}" for name, curve in zip(names, objectives))
        difference = ""
        if gap is not None:
            one, reference = (objectives[names.index(name)][t] for name in gap)
            difference = f"; {gap[0]} minus {gap[1]}: {one - reference:+.3f}"
        positions.append(f"{step_name} {t} of {T}")
        valuetexts.append(f"{step_name} {t} of {T}: log k-means objective {values}{difference}")
        moved = "" if t == 0 else " Points that changed their nearest centre at this step: " + "; ".join(
            f"{name}: {int((label[t] != label[t - 1]).sum())}" for name, label in zip(names, labels)) + "."
        alts.append(f"{title}, {step_name} {t} of {T}. Scatter plots of {len(labels[0][t]):,} points{plane} for "
                    f"{'; '.join(names[:len(labels)])}, each point coloured by its nearest current centre; "
                    f"triangles: the centres, circles: the initial ones, dotted: their paths.{moved} Below, line "
                    f"chart of the log k-means objective up to this step: {values}{difference}.")
    return positions, valuetexts, alts


def animate_runs(
    X: torch.Tensor,
    runs: Sequence[Run],
    *,
    title: str,
    step_name: str = "step",
    objective_label: str = "log(k-means objective)",
    max_points: int = 1500,
    panel_size: float = 2.8,
    dpi: int = FRAME_DPI,
    seed: int = 0,
    panels: int | None = None,
    gap: tuple[str, str] | None = None,
) -> tuple[RunsAnimation, Figure]:
    """One frame per step t = 0..T: each run's points (coloured by their nearest centre after t steps),
    its centres (triangles; circles: the initial ones) and their paths so far, and every run's
    objective up to t. For d > 2 everything is drawn in the plane of the points' two leading principal
    directions. ``panels``: how many of the runs (the first ones) get a panel of points; the others
    appear in the objective only (default: all). ``gap``: the names of two runs, ``(run, reference)``,
    whose difference of objectives gets a panel of its own (a difference that the objective's scale
    hides). The points' panels form the top row, the curves the bottom one; ``dpi``: pixels per inch of
    the frames (the page shows them at 100 CSS pixels per inch). Returns the animation and its figure
    (for a still, :func:`show_step`, then save the figure)."""
    T = _check_runs(X, runs)
    panels = len(runs) if panels is None else panels
    if not 1 <= panels <= len(runs):
        raise ValueError(f"panels must be between 1 and the number of runs ({len(runs)}), got {panels}")
    names = [r.name for r in runs]
    if gap is not None and (len(gap) != 2 or any(name not in names for name in gap)):
        raise ValueError(f"gap must name two of the runs {names}, got {gap!r}")
    X = X.detach().double().cpu()
    mean, P = projection(X)
    keep = np.random.default_rng(seed).choice(X.shape[0], min(max_points, X.shape[0]), replace=False)
    shown = ((X[keep] - mean) @ P).numpy()
    labels = [nearest_centre(X, r.centres.detach().double().cpu())[:, keep].numpy() for r in runs[:panels]]
    paths = [((r.centres.detach().double().cpu() - mean) @ P).numpy() for r in runs[:panels]]
    objectives = [r.objective.detach().double().cpu().numpy() for r in runs]
    k = runs[0].centres.shape[1]
    colours = np.array(cluster_colours(k))

    curve_panels = 2 if gap is not None else 1
    columns = max(panels, curve_panels)
    fig = Figure(figsize=(panel_size * columns, panel_size * 1.75 + 0.4), dpi=dpi, layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1, 0.75])  # type: ignore[misc]  # (an array of two)
    point_axes = np.atleast_1d(top.subplots(1, panels))
    curve_axes = np.atleast_1d(bottom.subplots(1, curve_panels))
    scatters, trails, heads = [], [], []
    for ax, run, path in zip(point_axes, runs, paths):
        scatters.append(ax.scatter(shown[:, 0], shown[:, 1], s=4, c=colours[labels[0][0]], rasterized=True,
                                   antialiased=False))  # (hard-edged dots: frames of fewer colours, lighter)
        ax.scatter(path[0, :, 0], path[0, :, 1], marker="o", facecolors="none", edgecolors="k", s=40, zorder=4)
        trails.append([ax.plot([], [], ":", c="k", lw=0.8)[0] for _ in range(k)])
        heads.append(ax.scatter(path[0, :, 0], path[0, :, 1], marker="^", c="k", s=30, zorder=5))
        ax.set_title(run.name, fontsize=10)
        ax.set_xticks([]), ax.set_yticks([])
        # the view is the points' (a centre that runs away leaves it), the same in every frame
        low, high = shown.min(0), shown.max(0)
        pad = 0.08 * (high - low).max()
        ax.set(xlim=(low[0] - pad, high[0] + pad), ylim=(low[1] - pad, high[1] + pad))
        ax.set_aspect("equal", adjustable="box")
    markers = _curve_panels(curve_axes, objectives, runs, gap, step_name, objective_label)
    caption = fig.suptitle("", fontsize=11)

    def draw(t: int):
        for i in range(panels):
            scatters[i].set_facecolors(colours[labels[i][t]])
            for j, line in enumerate(trails[i]):
                line.set_data(paths[i][: t + 1, j, 0], paths[i][: t + 1, j, 1])
            heads[i].set_offsets(paths[i][t])
        for marker, curve in markers:
            marker.set_data(np.arange(t + 1), curve[: t + 1])
        caption.set_text(f"{title}: {step_name} {t} of {T}")
        return [*scatters, *heads, *(marker for marker, _ in markers), caption,
                *(line for lines in trails for line in lines)]

    FigureCanvasAgg(fig)
    d = X.shape[-1]
    plane = "" if d == 2 else f" (projected from {d} dimensions onto their two leading principal directions)"
    words = _frame_words(runs, objectives, labels, title, step_name, gap, plane)
    animation = RunsAnimation(fig, draw, T + 1, words, label=f"{step_name.capitalize()} shown")
    # An animation draws its first frame at the figure's first draw; drawing once here spends that,
    # so that a still set by show_step stays what later draws (savefig) show.
    fig.canvas.draw()
    return animation, fig


def show_step(animation: FuncAnimation, step: int) -> None:
    """Set the animation's figure to the frame of ``step`` (a still for print: save the figure next)."""
    frames = animation._save_count if animation._save_count is not None else None  # type: ignore[attr-defined]
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise ValueError(f"step must be an integer, got {type(step).__name__} {step!r}")
    if step < 0 or (frames is not None and step >= frames):
        raise ValueError(f"step must be between 0 and {frames - 1 if frames else '?'}, got {step}")
    animation._func(step)  # type: ignore[attr-defined]


def self_contained_html(animation: RunsAnimation, *, name: str = "motion", label: str | None = None) -> str:
    """The animation as HTML with play, pause and step controls (:func:`kmtbook.html_figures.slider_html`),
    reading nothing from the network. Its frames are lossless WebP images of one palette at the
    figure's dpi, shown at 100 CSS pixels per inch (at most the width of the page), each with its text
    alternative; the slider is named ``label`` (default: the animation's) and ``name`` makes the page's ids
    unique. Drawing the frames leaves the figure at the last one."""
    fig = animation._fig  # type: ignore[attr-defined]
    images, text_px = [], math.inf
    for step in range(animation.steps):
        animation._func(step)  # type: ignore[attr-defined]
        image, smallest = figure_frame(fig, fig.dpi)
        images.append(image)
        text_px = min(text_px, smallest)
    frames = Frames(small_frames(images), animation.positions, animation.valuetexts, animation.alts, text_px)
    return slider_html(frames, name=name, label=label or animation.label, dpi=fig.dpi,
                       play_interval=int(animation._interval))  # type: ignore[attr-defined]


def save_animation(animation: RunsAnimation | str, path: Path | str, title: str, *, caption: str = "",
                   source: str = "") -> Path:
    """Write the animation (or its :func:`self_contained_html`, made once for the page and the file)
    as a page of its own, with its ``caption``, its ``source`` (the chapter it comes from) and the
    book's licence, and return its path."""
    path = Path(path)
    if path.suffix != ".html":
        raise ValueError(f"an animation is saved as .html, got {path.name!r}")
    body = animation if isinstance(animation, str) else self_contained_html(animation)
    page = standalone_page(body, title=title, caption=caption or title, source=source or "kmt-book")
    path.write_text(page, encoding="utf-8")
    return path


def runs_from(results: Mapping[str, object], task: int, style: Mapping[str, str] | None = None) -> list[Run]:
    """:class:`Run`s of one task from clustering results (``.centers (B, T+1, k, d)``, ``.objective (B, T+1)``),
    by name; the objective is drawn as its logarithm, as every figure of the book does."""
    style = style or {}
    return [Run(name, result.centers[task], result.objective[task].double().log(), style.get(name, "-o"))  # type: ignore[attr-defined]
            for name, result in results.items()]
