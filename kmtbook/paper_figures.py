"""Which figure or table of the paper each figure of the book reproduces: the one place that says so.

The figures page (``{figure-list}`` of :mod:`kmtbook.sphinx_ext`) shows it in its column
"reproduces"; a labelled figure of the book without an entry here (outside the chapters that go
beyond the paper as a whole) is a build warning (an error under ``-W``), so that a new figure is
placed on purpose. Figure numbers are the paper's (arXiv
2506.19125); where the sources do not fix a number, the entry says so rather than guess.
"""

from __future__ import annotations

BEYOND = "beyond the paper"
"""A figure with no counterpart in the paper (a baseline, a check, a measurement of this book)."""

BEYOND_CHAPTERS: frozenset[str] = frozenset({"12_any_k", "13_your_data"})
"""Chapters that go beyond the paper as a whole: each of their figures is :data:`BEYOND` without an entry."""

REPRODUCES: dict[str, str] = {
    # 01: the task generator, Lloyd's algorithm and its seeding
    "fig-task-families": BEYOND,
    "fig-lloyd-trajectory": BEYOND,
    "fig-seeding": BEYOND,
    # 02: Theorem 2.1
    "fig-layer-circuit": ("the circuit of the paper's overview figure (probably its Fig. 1, panel B; "
                          "the figure's number is not certain)"),
    "fig-theorem21-weights": BEYOND,
    "fig-empty-and-tie": BEYOND,
    "fig-numerical-validation": "Fig. 3",
    "fig-fig3-motion": "Fig. 3, step by step (a still of its animation)",
    # 03: finite temperature
    "fig-gamma-sweep": "the parameter-sweep heat maps (probably Fig. 8; the number is not certain)",
    "fig-gap-vs-gamma": BEYOND,
    "fig-gamma-slider": "Fig. 3's task under one layer, gamma from 1 to infinity (a still of its slider)",
    # 04: Theorem 2.2
    "fig-theorem22-weights": BEYOND,
    "fig-dot-validation": BEYOND,
    # 05: training, the main result
    "fig-smoothed-bound": BEYOND,
    "fig-live-training": BEYOND,
    "fig-live-multistep": BEYOND,
    "fig-shipped-training": BEYOND,
    "fig-main-result": "Fig. 4a",
    "fig-trained-motion": BEYOND,
    # 06: tokens of width d
    "fig-ablation-multistep": "Fig. 4b",
    "fig-ablation-training": BEYOND,
    # 07: generalisation
    "fig-generalization-kmeanspp": "Fig. 4c",
    "fig-generalization-n": "Fig. 4d",
    "fig-generalization-families": "Fig. 11",
    # 08: training dynamics (the sweeps on shortened runs)
    "fig-dynamics-main": BEYOND,
    "fig-dynamics-temperature-d4": "the beginning of Fig. 9a (shortened runs)",
    "fig-dynamics-temperature-d32": "the beginning of Fig. 9b (shortened runs)",
    "fig-dynamics-k": "the beginning of Fig. 10a (shortened runs)",
    "fig-dynamics-d": "the beginning of Fig. 10b (shortened runs)",
    "fig-dynamics-live": BEYOND,
    # 09: inside the learned layer
    "fig-inside-weights": "Fig. 5",
    "fig-inside-attention": "Fig. 6",
    "fig-inside-attention-steps": "Fig. 6, step by step (a still of its slider)",
    "fig-inside-softness": BEYOND,
    "fig-inside-moves": BEYOND,
    "fig-inside-gain": BEYOND,
    # 10: the circuit variants (the paper names them; it prints no numbers or figures of them)
    "fig-variant-soft": BEYOND,
    "fig-variant-spherical": BEYOND,
    "fig-variant-trimmed": BEYOND,
    "fig-variant-robust": BEYOND,
    "fig-variant-kmedoids": BEYOND,
    "fig-variant-comparison": BEYOND,
    # 11: speed and memory
    "fig-perf-training-sweeps": BEYOND,
    "fig-perf-lloyd": BEYOND,
}
"""Figure label -> the paper's figure or table it reproduces, or :data:`BEYOND`."""


def reproduces(chapter: str, label: str) -> str | None:
    """What the figure ``label`` of the chapter ``chapter`` (its file stem) reproduces; None if not stated."""
    return BEYOND if chapter in BEYOND_CHAPTERS else REPRODUCES.get(label)
