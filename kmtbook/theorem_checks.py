"""Tasks and counts for checking the theorems' limit models against Lloyd's algorithm.

Chapters 2 and 4 state that the limit models of Theorems 2.1 and 2.2 are Lloyd's algorithm on
tie-free tasks; :func:`exactness_tasks` draws tasks that reach the edge cases (uniform data,
starts outside the data, an empty cluster), :func:`assignment_margin` tells how close a task comes
to a tie. :func:`fig3_tasks` and :func:`assignment_counts` are the recipe and the one-hot counts of
the paper's Fig. 3; :func:`fig3_survey` places the paper's printed values among many draws of the
recipe and :func:`fig3_layer1_reading` says what that placement rules out.
"""

from __future__ import annotations

import torch

import kmtlib

from .arguments import check_flag

F64 = torch.float64

COUNT_NAMES = {"exact": "exactly one-hot", "int_cast": "one-hot after a cast to int", "near_1e6": "one-hot up to 1e-6"}
"""The three ways :func:`assignment_counts` reads an assignment as one-hot, as the tables name them."""


def assignment_margin(X: torch.Tensor, centers: torch.Tensor) -> torch.Tensor:
    """Smallest gap ``(B,)`` between the two smallest squared point-centre distances, over all points
    and all steps of a trajectory ``centers`` ``(B, T+1, k, d)``: how close the task comes to a tie."""
    B, T1, k, d = centers.shape
    D = kmtlib.squared_distances(X.repeat_interleave(T1, 0), centers.reshape(B * T1, k, d))
    two = D.topk(2, dim=-1, largest=False).values
    return (two[..., 1] - two[..., 0]).view(B, -1).amin(dim=1)


def exactness_tasks(B: int, n: int, d: int, k: int, generator: torch.Generator, *, device: torch.device | str = "cpu"):
    """``B`` tasks in float64 for an exactness check: every other task the paper's clustered
    generator, the others uniform in the unit cube; initial centres, in turn, ``k`` data points, a
    box around the data, or that box with the last centre far outside (it loses its cluster).

    ``generator`` must live on ``device``. Returns ``X`` ``(B, n, d)`` and ``C0`` ``(B, k, d)``."""
    clustered = kmtlib.sample_tasks(B, n, d, k, generator=generator, dtype=F64)
    assert isinstance(clustered, torch.Tensor)  # (no mixture asked for)
    uniform = torch.rand(B, n, d, generator=generator, dtype=F64, device=device)
    X = torch.where((torch.arange(B, device=device) % 2 == 0).view(B, 1, 1), clustered, uniform)
    at_points = kmtlib.init_centers(X, k, generator=generator)
    box = torch.rand(B, k, d, generator=generator, dtype=F64, device=device) * 1.6 - 0.3
    far = box.clone()
    far[:, -1] += 5.0
    which = (torch.arange(B, device=device) % 3).view(B, 1, 1)
    return X, torch.where(which == 0, at_points, torch.where(which == 1, box, far))


def fig3_tasks(
    B: int,
    n: int,
    k: int,
    generator: torch.Generator,
    d: int = 2,
    std: float = 0.1,
    *,
    device: torch.device | str = "cpu",
    scaled: bool = True,
):
    """The recipe of the paper's Fig. 3, batched: ``n // k`` points around each of ``k`` uniform
    means (isotropic, ``std``), min-max scaled per task and dimension (unless ``scaled`` is false),
    randomly permuted; the initial centres are the first ``k`` points. Float64; returns ``X`` and
    ``C0``."""
    scaled = check_flag("scaled", scaled)
    per = n // k
    means = torch.rand(B, k, d, generator=generator, dtype=F64, device=device)
    noise = torch.randn(B, per * k, d, generator=generator, dtype=F64, device=device)
    X = means.repeat_interleave(per, dim=1) + std * noise
    if scaled:
        lo, hi = X.amin(dim=1, keepdim=True), X.amax(dim=1, keepdim=True)
        X = (X - lo) / (hi - lo)
    order = torch.rand(B, per * k, generator=generator, device=device).argsort(dim=1)
    X = torch.gather(X, 1, order.unsqueeze(-1).expand_as(X))
    return X, X[:, :k].clone()


PAPER_FIG3 = (6.44, 5.78, 5.47, 4.96, 4.69, 4.61, 4.59, 4.59, 4.59, 4.59, 4.59)
"""The transformer's log-objectives per layer that the authors' Fig. 3 notebook prints for its draw
(n = 10 000, d = 2, k = 5, 10 layers)."""


def fig3_survey(B: int, generator: torch.Generator, n: int = 10_000, k: int = 5, layers: int = 10,
                *, device: torch.device | str = "cpu") -> dict[str, float]:  # fmt: skip
    """Where the paper's Fig. 3 values lie among ``B`` draws of its recipe (Lloyd's algorithm, which
    the limit model and the authors' gamma = 1e4 model follow on this recipe), summarised by
    :func:`summarise_fig3_survey`; for the alternative that the data were not min-max scaled, the
    median final value of ``B`` unscaled draws is added."""
    X, C0 = fig3_tasks(B, n, k, generator, device=device)
    curves = kmtlib.lloyd(X, C0, layers, empty="mean").log_objective().cpu()
    Xu, Cu = fig3_tasks(B, n, k, generator, device=device, scaled=False)
    unscaled = kmtlib.lloyd(Xu, Cu, layers, empty="mean").log_objective().cpu()
    return {**summarise_fig3_survey(curves), "unscaled_median_final": float(unscaled[:, -1].median())}


def summarise_fig3_survey(curves: torch.Tensor, paper: tuple[float, ...] = PAPER_FIG3) -> dict[str, float]:
    """Where the values ``paper`` (layer 0, layer 1, ..., final) lie among the log-objective curves
    ``curves`` ``(B, T+1)`` of ``B`` draws: the share of draws at or above the paper's value at
    layer 0 (the initial centres) and at layer 1, the share at or below its final value, the median
    per layer; and, to test whether a start as poor as the paper's explains its layer-1 value, the
    draws that start at or above the paper's layer 0 ("high starts"), how many of them reach the
    paper's layer-1 value after one layer, and the largest layer-1 value of any draw and of a high
    start (NaN when there is none)."""
    if curves.ndim != 2 or curves.shape[1] < 2:
        raise ValueError(f"curves must be (draws, layers + 1) with at least two layers, got {tuple(curves.shape)}")
    curves = curves.double()
    high = curves[:, 0] >= paper[0]
    layer1_high = curves[high, 1]
    return {
        "draws": curves.shape[0],
        "share_layer0_at_or_above_paper": float(high.double().mean()),
        "share_layer1_at_or_above_paper": float((curves[:, 1] >= paper[1]).double().mean()),
        "share_final_at_or_below_paper": float((curves[:, -1] <= paper[-1]).double().mean()),
        "median_layer0": float(curves[:, 0].median()),
        "median_layer1": float(curves[:, 1].median()),
        "median_final": float(curves[:, -1].median()),
        "max_layer1": float(curves[:, 1].max()),
        "high_start_draws": int(high.sum()),
        "high_start_layer1_at_or_above_paper": int((layer1_high >= paper[1]).sum()),
        "high_start_max_layer1": float(layer1_high.max()) if len(layer1_high) else float("nan"),
    }


def fig3_layer1_reading(survey: dict[str, float], paper: tuple[float, ...] = PAPER_FIG3) -> str:
    """What a survey of :func:`fig3_survey` says about the paper's layer-1 value: whether a start as
    poor as the paper's reproduces it (not in the survey when draws start that high and none of them
    reaches the paper's layer-1 value; untested when no draw starts that high), what stays open,
    and the reader's test that would tell the rest apart."""
    high, reached = int(survey["high_start_draws"]), int(survey["high_start_layer1_at_or_above_paper"])
    draws = int(survey["draws"])
    if high == 0:
        verdict = (f"None of the {draws} draws starts at or above the paper's {paper[0]:.2f}, so the survey cannot "
                   "tell whether a start as poor as the paper's explains its layer-1 value.")
    elif reached == 0:
        closest = survey["high_start_max_layer1"]
        verdict = (f"A poor start alone does not reproduce it in this survey: {high} of the {draws} draws start at "
                   f"or above the paper's {paper[0]:.2f}, and none of them reaches {paper[1]:.2f} after one layer (at "
                   f"most {closest:.2f}, {paper[1] - closest:.2f} below; median of all draws "
                   f"{survey['median_layer1']:.2f}), so the paper's draw would have to be rarer than every one of "
                   "ours.")
    else:
        verdict = (f"A poor start can explain it: {reached} of the {high} draws that start at or above the paper's "
                   f"{paper[0]:.2f} reach {paper[1]:.2f} after one layer.")
    open_part = ("Still open: the authors' draw may come from another task generator (one whose first Lloyd step "
                 "gains less), or their notebook may plot another quantity after the first layer; the final "
                 f"value ({paper[-1]:.2f}, median of our draws {survey['median_final']:.2f}) fits the recipe either "
                 "way.")
    test = ("A reader can test it: run Lloyd's algorithm from the initial centres of the authors' own draw "
            "(their notebook, github.com/rithram/kmeans-trf) and print its objective after one iteration. If it "
            f"is near {paper[1]:.2f}, the draw itself is unusual (another generator); if it is well below, the printed "
            "layer-1 value is not Lloyd's objective after one iteration (another quantity, or a model that does "
            "not follow Lloyd at that layer).")
    return " ".join((verdict, open_part, test)) if reached == 0 else " ".join((verdict, test))


def assignment_counts(A: torch.Tensor) -> dict[str, int]:
    """How many points hold an exactly one-hot assignment, one that the authors' cast to integers
    reads as one-hot, and one that is one-hot up to 1e-6 (``A``: ``(n, k)``); keys of :data:`COUNT_NAMES`."""
    exact = ((A == 0) | (A == 1)).all(-1) & (A == 1).sum(-1).eq(1)
    as_int = A.to(torch.int64)  # truncation towards zero, as a cast to int does
    int_cast = (as_int == 1).sum(-1).eq(1) & (as_int == 0).sum(-1).eq(A.shape[-1] - 1)
    near = ((A - A.round()).abs() <= 1e-6).all(-1) & (A.round() == 1).sum(-1).eq(1)
    return {"exact": int(exact.sum()), "int_cast": int(int_cast.sum()), "near_1e6": int(near.sum())}
