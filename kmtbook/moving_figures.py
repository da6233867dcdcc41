"""The book's two figures under a slider, drawn frame by frame for :func:`kmtbook.html_figures.slider_html`.

- :func:`temperature_frames` (chapter 03): the paper's Fig. 3 task after one layer of the k-means
  transformer (Theorem 2.1) at a range of inverse temperatures gamma, up to the limit gamma = inf:
  the points coloured by their soft assignment (each point the mix of its clusters' colours, eq. of
  CAX), the centres the layer writes, and the objective after the layer against gamma.
- :func:`attention_frames` (chapter 09): a trained layer's four attention maps (CAX, SAX, CAC, SAC,
  the paper's Fig. 6) at successive steps of the layer on one task (the layer re-applied to its own
  centres, re-embedded each step as in Sec. 3).

Each returns the frames (small WebP images of one palette, with each frame's readout, meaning and text
alternative written from the numbers it was drawn from: :class:`kmtbook.html_figures.Frames`) and a
matplotlib figure of one of them, the still for print.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure

from .html_figures import FRAME_DPI, Frames, figure_frame, small_frames
from .plotting import cluster_colours

BLOCKS = ("CAX", "SAX", "CAC", "SAC")
"""The four blocks of the layer, in the paper's order."""

KEYS = {"CAX": ("points (queries)", "centres (keys)"), "SAX": ("points (queries)", "points (keys)"),
        "CAC": ("centres (queries)", "updated points (keys)"), "SAC": ("centres (queries)", "centres (keys)")}
"""What the rows and the columns of each block's attention map are."""


def gamma_text(gamma: float) -> str:
    """An inverse temperature as the book's code writes it: "10", "1e+04", "inf"."""
    return "inf" if math.isinf(gamma) else f"{gamma:g}"


_SUPERSCRIPTS = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")


def gamma_shown(gamma: float) -> str:
    """An inverse temperature as a figure or a reader's words write it: "10", "1 000", "10⁴", "∞"."""
    if math.isinf(gamma):
        return "∞"
    power = math.log10(gamma) if gamma > 0 else 0.5
    if gamma >= 1e4 and power == int(power):
        return "10" + str(int(power)).translate(_SUPERSCRIPTS)
    return f"{gamma:,g}".replace(",", "\u2009")  # a thin space between thousands


def _gamma_axis(gammas: Sequence[float]) -> np.ndarray:
    """Positions on a log axis for the gammas, the limit gamma = inf one decade after the largest finite one."""
    finite = [g for g in gammas if math.isfinite(g)]
    top = math.log10(max(finite)) + 1 if finite else 1.0
    return np.array([top if math.isinf(g) else math.log10(g) for g in gammas])


def _draw_temperature(fig: Figure, X: np.ndarray, C0: np.ndarray, runs: Mapping[float, object], lloyd,
                      index: int) -> None:
    gammas = list(runs)
    gamma = gammas[index]
    result = runs[gamma]
    k = C0.shape[0]
    colours = np.array(cluster_colours(k))[:, :3]
    weights = result.assignments[0].double().cpu().numpy()  # type: ignore[attr-defined]  # (n, k)
    centres = result.centers[0, 1].double().cpu().numpy()  # type: ignore[attr-defined]  # (k, d)
    ax, ax_obj = fig.subplots(1, 2)
    ax.scatter(X[:, 0], X[:, 1], s=3, c=np.clip(weights @ colours, 0, 1), rasterized=True)
    ax.scatter(C0[:, 0], C0[:, 1], marker="o", facecolors="none", edgecolors="k", s=60, label="initial centres")
    lloyd_centres = lloyd.centers[0, 1].double().cpu().numpy()
    ax.scatter(lloyd_centres[:, 0], lloyd_centres[:, 1], marker="x", c="k", s=50, label="one Lloyd step")
    ax.scatter(centres[:, 0], centres[:, 1], marker="^", c="crimson", edgecolors="k", s=70,
               label="after one layer")
    ax.set(xticks=[], yticks=[], aspect="equal", xlim=(-0.05, 1.05), ylim=(-0.05, 1.05))
    ax.set_title(f"one layer at γ = {gamma_shown(gamma)}\n(colour: each point's soft assignment)", fontsize=9)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=2, handletextpad=0.2,
              columnspacing=0.8, borderpad=0.3)
    where = _gamma_axis(gammas)
    objective = _temperature_objectives(runs)
    ax_obj.plot(where, objective, "-o", c="0.6", ms=4, label="transformer, one layer")
    ax_obj.plot(where[index], objective[index], "o", c="crimson", ms=9, label=f"γ = {gamma_shown(gamma)}")
    ax_obj.axhline(float(lloyd.objective[0, 1].log()), color="k", ls="--", lw=1, label="one Lloyd step")
    ax_obj.axhline(float(lloyd.objective[0, 0].log()), color="k", ls=":", lw=1, label="initial centres")
    ax_obj.set_xticks(where, [gamma_shown(g) for g in gammas], fontsize=8)
    ax_obj.tick_params(labelsize=8)
    ax_obj.set_xlabel("inverse temperature γ (log scale)", fontsize=9)
    ax_obj.set_ylabel("log(k-means objective)", fontsize=9)
    ax_obj.set_title("the objective after one layer", fontsize=9)
    ax_obj.legend(fontsize=8, loc="center right")


def _temperature_objectives(runs: Mapping[float, object]) -> np.ndarray:
    """The log k-means objective after one layer at each gamma of ``runs``."""
    return np.array([float(r.objective[0, 1].log()) for r in runs.values()])  # type: ignore[attr-defined]


def _temperature_words(X: np.ndarray, runs: Mapping[float, object], lloyd) -> tuple[list[str], list[str], list[str]]:
    """Each frame's readout, its meaning with its key numbers (the slider's valuetext) and its text alternative."""
    objective = _temperature_objectives(runs)
    lloyd_after, lloyd_before = float(lloyd.objective[0, 1].log()), float(lloyd.objective[0, 0].log())
    lloyd_centres = lloyd.centers[0, 1].double().cpu().numpy()
    positions, valuetexts, alts = [], [], []
    for (gamma, result), value in zip(runs.items(), objective):
        weights = result.assignments[0].double().cpu().numpy()  # type: ignore[attr-defined]  # (n, k)
        centres = result.centers[0, 1].double().cpu().numpy()  # type: ignore[attr-defined]  # (k, d)
        apart = float(np.linalg.norm(centres - lloyd_centres, axis=-1).mean())
        shown = gamma_shown(gamma)
        positions.append(f"γ = {shown}")
        valuetexts.append(f"γ = {shown}: the layer's log-objective {value:.2f}, one Lloyd step's {lloyd_after:.2f}")
        alts.append(f"Two panels at inverse temperature γ = {shown}. Left, scatter plot of {len(X):,} points coloured "
                    f"by their soft assignment to {weights.shape[1]} clusters (a point's largest weight "
                    f"{weights.max(1).mean():.2f} on average); the centres after one layer (triangles) lie "
                    f"{apart:.3f} on average from those after one Lloyd step (crosses). Right, line chart of the "
                    f"log k-means objective after one layer against γ, this γ marked: {value:.2f}; one Lloyd step "
                    f"{lloyd_after:.2f}, the initial centres {lloyd_before:.2f}.")
    return positions, valuetexts, alts


def temperature_frames(X: torch.Tensor, C0: torch.Tensor, runs: Mapping[float, object], lloyd, *,
                       still: int = 0, size: tuple[float, float] = (6.7, 3.4)) -> tuple[Frames, Figure]:
    """Frames of one task after one layer at each inverse temperature of ``runs`` (gamma -> the model's
    result on ``X (1, n, 2)`` from ``C0 (1, k, 2)``, one step, with ``.assignments``), beside one Lloyd
    step (``lloyd``, its result), and the figure of frame ``still``."""
    if X.ndim != 3 or X.shape[0] != 1 or X.shape[-1] != 2:
        raise ValueError(f"X must be one task of points in the plane, shape (1, n, 2), got {tuple(X.shape)}")
    if not runs or not 0 <= still < len(runs):
        raise ValueError(f"still must index one of the {len(runs)} runs, got {still}")
    points, centres = X[0].double().cpu().numpy(), C0[0].double().cpu().numpy()

    def figure(index: int) -> Figure:
        fig = Figure(figsize=size, layout="constrained")
        FigureCanvasAgg(fig)
        _draw_temperature(fig, points, centres, runs, lloyd, index)
        return fig

    images, text_px = [], math.inf
    for index in range(len(runs)):
        fig = figure(index)
        image, smallest = figure_frame(fig, FRAME_DPI)
        images.append(image)
        text_px = min(text_px, smallest)
    positions, valuetexts, alts = _temperature_words(points, runs, lloyd)
    return Frames(small_frames(images), positions, valuetexts, alts, text_px), figure(still)


def layer_steps(model, X: torch.Tensor, C0: torch.Tensor, steps: int) -> list:
    """The attention maps (:func:`kmtlib.analysis.inspect_layer.layer_maps`) of the model's layer at each
    of ``steps`` successive steps on ``(X, C0)``, each step from the centres the previous one wrote."""
    from kmtlib.analysis.inspect_layer import layer_maps

    maps, C = [], C0
    with torch.no_grad():
        for _ in range(steps):
            maps.append(layer_maps(model, X, C))
            C = maps[-1].centers
    return maps


def _draw_attention(fig: Figure, X: torch.Tensor, C: torch.Tensor, maps, step: int, sample: int, seed: int,
                    objective: float) -> None:
    from kmtlib.lloyd import lloyd_step

    _, labels, _ = lloyd_step(X, C, empty="keep")  # each point's nearest current centre: the order of the rows
    order = torch.argsort(labels[0], stable=True)
    pick = torch.sort(torch.randperm(X.shape[1], generator=torch.Generator().manual_seed(seed))[:sample]).values
    shown = order[pick]
    panels = {"CAX": maps.CAX[0][shown], "SAX": maps.SAX[0][order][:, order], "CAC": maps.CAC[0][:, shown],
              "SAC": maps.SAC[0]}
    norm = PowerNorm(gamma=0.4, vmin=0.0, vmax=1.0)
    axes = fig.subplots(2, 2)
    for ax, name in zip(axes.flat, BLOCKS):
        image = ax.imshow(panels[name].float().cpu().numpy(), cmap="inferno_r", norm=norm, aspect="auto",
                          interpolation="nearest")
        ax.set_title(name, fontsize=10)
        ax.set_ylabel(KEYS[name][0], fontsize=9)
        ax.set_xlabel(KEYS[name][1], fontsize=9)
        ax.set_xticks([]), ax.set_yticks([])
    fig.colorbar(image, ax=axes, fraction=0.04, pad=0.02).set_label("attention weight", fontsize=9)
    fig.suptitle(f"step {step}: log(k-means objective) {objective:.3f} of the centres the step reads", fontsize=10)


def _attention_words(maps, objectives: Sequence[float]) -> tuple[list[str], list[str], list[str]]:
    """Each step's readout, its meaning (the slider's valuetext) and its text alternative: how much of each
    query's weight the block puts on its heaviest key, on average, and the objective of the centres it reads."""
    steps = len(maps)
    positions, valuetexts, alts = [], [], []
    for step, (layer_map, objective) in enumerate(zip(maps, objectives), start=1):
        peaks = ", ".join(f"{name} {float(getattr(layer_map, name)[0].max(-1).values.mean()):.2f}" for name in BLOCKS)
        positions.append(f"step {step} of {steps}")
        valuetexts.append(f"step {step} of {steps}: log k-means objective {objective:.3f} of the centres it reads")
        alts.append(f"Four heat maps of the trained layer's attention weights (CAX, SAX, CAC, SAC; rows: queries, "
                    f"columns: keys) at step {step} of {steps}. The weight on each query's heaviest key, on average: "
                    f"{peaks} (1: hard attention). Log k-means objective of the centres the step reads: "
                    f"{objective:.3f}.")
    return positions, valuetexts, alts


def attention_frames(model, X: torch.Tensor, C0: torch.Tensor, steps: int, *, sample: int, seed: int = 0,
                     still: int = 0, size: tuple[float, float] = (6.7, 6.0)) -> tuple[Frames, Figure]:
    """Frames of the four attention maps of the model's layer at steps 1..``steps`` on one task
    (``X (1, n, d)``, ``C0 (1, k, d)``); rows of points sorted by their nearest current centre, CAX and CAC
    on ``sample`` of the points (drawn with ``seed``, the same in every frame); and the figure of frame
    ``still``."""
    from kmtlib.objective import kmeans_objective

    if X.ndim != 3 or X.shape[0] != 1:
        raise ValueError(f"X must be one task, shape (1, n, d), got {tuple(X.shape)}")
    if steps < 1 or not 0 <= still < steps:
        raise ValueError(f"steps must be at least 1 and still index one of them, got {steps} and {still}")
    maps = layer_steps(model, X, C0, steps)
    centres = [C0] + [m.centers for m in maps[:-1]]  # the centres each step reads
    objectives = [float(kmeans_objective(X, c).log()) for c in centres]

    def figure(i: int) -> Figure:
        fig = Figure(figsize=size, layout="constrained")
        FigureCanvasAgg(fig)
        _draw_attention(fig, X, centres[i], maps[i], i + 1, sample, seed, objectives[i])
        return fig

    images, text_px = [], math.inf
    for i in range(steps):
        fig = figure(i)
        image, smallest = figure_frame(fig, FRAME_DPI)
        images.append(image)
        text_px = min(text_px, smallest)
    positions, valuetexts, alts = _attention_words(maps, objectives)
    return Frames(small_frames(images), positions, valuetexts, alts, text_px), figure(still)
