"""The book's two figures under a slider, drawn frame by frame for :func:`kmtbook.html_figures.slider_html`.

- :func:`temperature_frames` (chapter 03): the paper's Fig. 3 task after one layer of the k-means
  transformer (Theorem 2.1) at a range of inverse temperatures gamma, up to the limit gamma = inf:
  the points coloured by their soft assignment (each point the mix of its clusters' colours, eq. of
  CAX), the centres the layer writes, and the objective after the layer against gamma.
- :func:`attention_frames` (chapter 09): a trained layer's four attention maps (CAX, SAX, CAC, SAC,
  the paper's Fig. 6) at successive steps of the layer on one task (the layer re-applied to its own
  centres, re-embedded each step as in Sec. 3).

Each returns the frames (small WebP images) and a matplotlib figure of one of them, the still for print.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure

from .html_figures import FRAME_DPI, figure_frame
from .plotting import cluster_colours

BLOCKS = ("CAX", "SAX", "CAC", "SAC")
"""The four blocks of the layer, in the paper's order."""

KEYS = {"CAX": ("points (queries)", "centres (keys)"), "SAX": ("points (queries)", "points (keys)"),
        "CAC": ("centres (queries)", "updated points (keys)"), "SAC": ("centres (queries)", "centres (keys)")}
"""What the rows and the columns of each block's attention map are."""


def gamma_text(gamma: float) -> str:
    """An inverse temperature as the book writes it: "10", "1e+04", "inf"."""
    return "inf" if math.isinf(gamma) else f"{gamma:g}"


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
    ax.set_title(f"one layer at gamma = {gamma_text(gamma)}\n(colour: each point's soft assignment)", fontsize=9)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=2, handletextpad=0.2,
              columnspacing=0.8, borderpad=0.3)
    where = _gamma_axis(gammas)
    objective = np.array([float(runs[g].objective[0, 1].log()) for g in gammas])  # type: ignore[attr-defined]
    ax_obj.plot(where, objective, "-o", c="0.6", ms=4, label="transformer, one layer")
    ax_obj.plot(where[index], objective[index], "o", c="crimson", ms=9, label=f"gamma = {gamma_text(gamma)}")
    ax_obj.axhline(float(lloyd.objective[0, 1].log()), color="k", ls="--", lw=1, label="one Lloyd step")
    ax_obj.axhline(float(lloyd.objective[0, 0].log()), color="k", ls=":", lw=1, label="initial centres")
    ax_obj.set_xticks(where, [gamma_text(g) for g in gammas], fontsize=8)
    ax_obj.tick_params(labelsize=8)
    ax_obj.set_xlabel("inverse temperature gamma (log scale)", fontsize=9)
    ax_obj.set_ylabel("log(k-means objective)", fontsize=9)
    ax_obj.set_title("the objective after one layer", fontsize=9)
    ax_obj.legend(fontsize=8, loc="center right")


def temperature_frames(X: torch.Tensor, C0: torch.Tensor, runs: Mapping[float, object], lloyd, *,
                       still: int = 0, size: tuple[float, float] = (6.7, 3.4)) -> tuple[list[bytes], Figure]:
    """Frames of one task after one layer at each inverse temperature of ``runs`` (gamma -> the model's
    result on ``X (1, n, 2)`` from ``C0 (1, k, 2)``, one step, with ``.assignments``), beside one Lloyd
    step (``lloyd``, its result), and the figure of frame ``still``."""
    if X.ndim != 3 or X.shape[0] != 1 or X.shape[-1] != 2:
        raise ValueError(f"X must be one task of points in the plane, shape (1, n, 2), got {tuple(X.shape)}")
    if not runs or not 0 <= still < len(runs):
        raise ValueError(f"still must index one of the {len(runs)} runs, got {still}")
    points, centres = X[0].double().cpu().numpy(), C0[0].double().cpu().numpy()
    frames = []
    for index in range(len(runs)):
        fig = Figure(figsize=size, layout="constrained")
        FigureCanvasAgg(fig)
        _draw_temperature(fig, points, centres, runs, lloyd, index)
        frames.append(figure_frame(fig, FRAME_DPI))
    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    _draw_temperature(fig, points, centres, runs, lloyd, still)
    return frames, fig


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


def attention_frames(model, X: torch.Tensor, C0: torch.Tensor, steps: int, *, sample: int, seed: int = 0,
                     still: int = 0, size: tuple[float, float] = (6.7, 6.0)) -> tuple[list[bytes], Figure]:
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

    def figure(i: int) -> Figure:
        fig = Figure(figsize=size, layout="constrained")
        FigureCanvasAgg(fig)
        objective = float(kmeans_objective(X, centres[i]).log())
        _draw_attention(fig, X, centres[i], maps[i], i + 1, sample, seed, objective)
        return fig

    return [figure_frame(figure(i), FRAME_DPI) for i in range(steps)], figure(still)
