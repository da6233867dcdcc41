"""kmtbook.plotting: tick labels that would overlap are kept apart."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from kmtbook.plotting import _overlapping, fit_tick_labels


def _bars(width: float, labels: list[str]):
    fig, ax = plt.subplots(figsize=(width, 2))
    ax.bar(range(len(labels)), [1] * len(labels))
    ax.set_xticks(range(len(labels)), labels)
    return fig, ax


def test_tick_labels_that_fit_are_left_alone():
    fig, ax = _bars(8, ["a", "b", "c"])
    assert fit_tick_labels(ax) == "as is" and [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    plt.close(fig)


def test_overlapping_tick_labels_are_wrapped_or_turned():
    labels = ["seed 153476998", "seed 205084180", "seed 235510766"]
    fig, ax = _bars(2.2, labels)
    fig.canvas.draw()
    assert _overlapping(ax)  # the rendering fault of Fig. 12.1 at the book profile's three seeds
    assert fit_tick_labels(ax) in ("wrapped", "turned")
    fig.canvas.draw()
    assert not _overlapping(ax)
    plt.close(fig)
    fig, ax = _bars(1.0, ["a long word", "another long word", "a third long word"])
    assert fit_tick_labels(ax) == "turned"
    fig.canvas.draw()
    assert not _overlapping(ax)
    plt.close(fig)
