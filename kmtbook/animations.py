"""Clustering runs in motion: step-through animations that read offline, and their still frames.

:func:`animate_runs` draws several runs on one task side by side (one panel per run: the points
coloured by their nearest current centre, the centres and their paths so far) and their
objectives beside them, one frame per step: Lloyd's algorithm against the k-means transformer of
Theorem 2.1 (the paper's Fig. 3), or the trained layer with and without re-embedding (Sec. 3,
Fig. 4a). :func:`self_contained_html` turns an animation into HTML with play and step controls
that needs neither a kernel nor the network (matplotlib's ``to_jshtml`` player, its frames small WebP images, with
its one stylesheet from the network removed and its icons replaced by characters), and
:func:`save_animation` writes it as a page of its own, with caption, source and licence.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from matplotlib.animation import FuncAnimation
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .html_figures import FRAME_DPI, SHOWN_PX_PER_INCH, data_uri, small_frame, standalone_page
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
        axes[1].set_title(f"{gap[0]} minus {gap[1]}", fontsize=10)
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
) -> tuple[FuncAnimation, Figure]:
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
    animation = FuncAnimation(fig, draw, frames=T + 1, interval=700, blit=False)
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


# matplotlib's controls use Font Awesome icons from a CDN; the page must read offline.
_ICONS = {"minus": "&minus;", "fast-backward": "&#x21E4;", "step-backward": "&#x2759;&#x25C0;",
          "play fa-flip-horizontal": "&#x25C0;", "pause": "&#x2759;&#x2759;", "play": "&#x25B6;",
          "step-forward": "&#x25B6;&#x2759;", "fast-forward": "&#x21E5;", "plus": "+"}
"""Characters for matplotlib's button icons: arrows and shapes that common fonts carry (the buttons
keep their titles, "First frame", "Play" and so on, for screen readers and tool tips)."""

CSS = """.animation { max-width: 100%; }
.animation img { max-width: 100%; height: auto; }
.animation .anim-slider { width: 100%; max-width: 100%; }
.animation .anim-buttons { display: flex; flex-wrap: wrap; gap: 2px; }
.animation .anim-buttons button { min-width: 2.2em; }"""
"""Style that keeps an animation inside a narrow window (its image scales, its buttons wrap)."""


def self_contained_html(animation: FuncAnimation) -> str:
    """The animation as HTML with play, pause and step controls, reading nothing from the network.
    Its frames are lossless WebP images of few colours (:func:`kmtbook.html_figures.small_frame`) at the
    figure's dpi, shown at 100 CSS pixels per inch (at most the width of the page)."""
    html = animation.to_jshtml(default_mode="once")
    html = re.sub(r"<link[^>]*font-awesome[^>]*>", "", html)
    for name, char in _ICONS.items():
        html = html.replace(f'<i class="fa fa-{name}"></i>', f'<span aria-hidden="true">{char}</span>')
    remote = re.findall(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//[^\"' >]+", html)
    if remote or 'class="fa' in html:
        raise RuntimeError(f"the animation's HTML still refers to the network or to icons it lacks: {remote[:3]}")
    frames = re.findall(r'"data:image/png;base64,([^"]+)"', html)
    for frame in frames:
        html = html.replace(f"data:image/png;base64,{frame}", data_uri(small_frame(base64.b64decode(frame))), 1)
    fig = animation._fig  # type: ignore[attr-defined]
    width, height = (round(size * SHOWN_PX_PER_INCH) for size in fig.get_size_inches())
    return html.replace("<img id=", f'<img width="{width}" height="{height}" id=', 1)


def save_animation(animation: FuncAnimation | str, path: Path | str, title: str, *, caption: str = "",
                   source: str = "") -> Path:
    """Write the animation (or its :func:`self_contained_html`, made once for the page and the file)
    as a page of its own, with its ``caption``, its ``source`` (the chapter it comes from) and the
    book's licence, and return its path."""
    path = Path(path)
    if path.suffix != ".html":
        raise ValueError(f"an animation is saved as .html, got {path.name!r}")
    body = animation if isinstance(animation, str) else self_contained_html(animation)
    page = standalone_page(body, title=title, caption=caption or title, source=source or "kmt-book", css=CSS)
    path.write_text(page, encoding="utf-8")
    return path


def runs_from(results: Mapping[str, object], task: int, style: Mapping[str, str] | None = None) -> list[Run]:
    """:class:`Run`s of one task from clustering results (``.centers (B, T+1, k, d)``, ``.objective (B, T+1)``),
    by name; the objective is drawn as its logarithm, as every figure of the book does."""
    style = style or {}
    return [Run(name, result.centers[task], result.objective[task].double().log(), style.get(name, "-o"))  # type: ignore[attr-defined]
            for name, result in results.items()]
