"""Checks of a drawn figure that a reader would otherwise catch: template plurals, a legend over the
data, a label outside its panel, text too small to read at the size the page shows the figure.
:meth:`kmtbook.chapter.Chapter.save_figure` runs them on every figure of the book.

A figure's words are read from its text artists (titles, labels, tick labels, legends, annotations);
the data from its lines and scatter points, in display coordinates after a draw.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

import numpy as np
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.transforms import Bbox

TEMPLATE_PLURAL = re.compile(r"\b[A-Za-z][\w-]*\((?:s|es)\)")
"""A word written for one and many at once: "model(s)", "task(s)"."""


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` and the noun in the number it needs: ``plural(1, "model")`` is "1 model",
    ``plural(3, "model")`` "3 models"; ``nouns`` gives an irregular plural."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


def counts_phrase(counts: dict[str, int], noun: str, nouns: str | None = None) -> str:
    """The counts of named groups in words: ``counts_phrase({"width d": 10, "width d + k": 10}, "seed")``
    is "10 seeds each" (not "10 and 10 seeds"), ``{"width d": 9, "width d + k": 10}`` gives
    "9 seeds (width d) and 10 (width d + k)"."""
    if not counts:
        raise ValueError("counts is empty")
    values = list(counts.values())
    if len(set(values)) == 1:
        return plural(values[0], noun, nouns) + (" each" if len(values) > 1 else "")
    parts = [f"{plural(n, noun, nouns) if i == 0 else n} ({group})" for i, (group, n) in enumerate(counts.items())]
    return ", ".join(parts[:-1]) + f" and {parts[-1]}"


def texts(fig: Figure) -> Iterator[Text]:
    """Every visible text artist of the figure with some text."""
    for artist in fig.findobj(Text):
        if artist.get_visible() and artist.get_text().strip():
            yield artist


def template_plurals(fig: Figure) -> list[str]:
    """The texts of the figure that say "model(s)" for "1 model" or "3 models"."""
    return [t.get_text() for t in texts(fig) if TEMPLATE_PLURAL.search(t.get_text())]


def _data_points(ax) -> np.ndarray:
    """The axes' plotted points (markers and the vertices of lines, scatter offsets), in pixels."""
    points = []
    for line in ax.get_lines():
        if not isinstance(line, Line2D) or not line.get_visible():
            continue
        xy = np.asarray(line.get_xydata(), dtype=float)
        if not xy.size:
            continue
        pixels = line.get_transform().transform(xy)  # data, or axes coordinates (axhline)
        if line.get_linestyle() not in ("None", "", " ") and len(pixels) > 1:
            # a drawn line covers its segments, not only its vertices: 16 points per segment
            steps = np.linspace(0, 1, 16, endpoint=False)[None, :, None]
            pixels = np.concatenate([(pixels[:-1, None] + steps * (pixels[1:] - pixels[:-1])[:, None]).reshape(-1, 2),
                                     pixels[-1:]])
        points.append(pixels)
    for collection in ax.collections:
        if isinstance(collection, PathCollection) and collection.get_visible():
            offsets = np.asarray(collection.get_offsets(), dtype=float)
            if offsets.size:
                points.append(collection.get_offset_transform().transform(offsets))
    if not points:
        return np.empty((0, 2))
    every = np.concatenate(points)
    return every[np.isfinite(every).all(axis=1)]


def _renderer(fig: Figure):
    """The figure drawn once, and its renderer (a figure made without pyplot gets an Agg canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not hasattr(fig.canvas, "get_renderer"):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()  # type: ignore[attr-defined]


def _bars_under(ax, box, panel, renderer) -> int:
    """How many of the axes' bars (the rectangles of ``ax.bar``, ``DataFrame.plot.bar``, histograms)
    the box ``box`` covers, each bar taken as far as it shows inside the panel ``panel``."""
    covered = 0
    for container in ax.containers:
        if not isinstance(container, BarContainer):
            continue
        for bar in container.patches:
            if not bar.get_visible():
                continue
            shown = Bbox.intersection(bar.get_window_extent(renderer), panel)
            if shown is None or shown.width < 1 or shown.height < 1:
                continue
            overlap = Bbox.intersection(shown, box)
            if overlap is not None and overlap.width >= 1 and overlap.height >= 1:
                covered += 1
    return covered


def legends_over_data(fig: Figure, renderer=None) -> list[str]:
    """Panels whose legend (inside the panel) covers plotted points or bars: "<panel title>: n points"
    (or "n bars"). ``renderer``: that of a draw of ``fig`` made just before (default: draw it now)."""
    renderer = renderer or _renderer(fig)
    problems = []
    for ax in fig.axes:
        legend = ax.get_legend()
        if not isinstance(legend, Legend) or not legend.get_visible():
            continue
        box = legend.get_window_extent(renderer)
        panel = ax.get_window_extent(renderer)
        if not panel.overlaps(box):
            continue  # a legend placed outside the panel covers nothing of it
        points = _data_points(ax)
        inside = (points[:, 0] > box.x0) & (points[:, 0] < box.x1) & (points[:, 1] > box.y0) & (points[:, 1] < box.y1)
        if inside.any():
            problems.append(f"{ax.get_title() or '(untitled panel)'}: legend over {int(inside.sum())} plotted points")
        bars = _bars_under(ax, box, panel, renderer)
        if bars:
            problems.append(f"{ax.get_title() or '(untitled panel)'}: legend over {plural(bars, 'bar')}")
    return problems


def labels_outside_panels(fig: Figure, renderer=None) -> list[str]:
    """A panel's annotations (``ax.text``, ``ax.annotate``) that reach outside the panel.
    ``renderer``: that of a draw of ``fig`` made just before (default: draw it now)."""
    renderer = renderer or _renderer(fig)
    problems = []
    for ax in fig.axes:
        panel = ax.get_window_extent(renderer)
        for text in ax.texts:
            if not text.get_visible() or not text.get_text().strip():
                continue
            box = text.get_window_extent(renderer)
            if box.x0 < panel.x0 - 1 or box.x1 > panel.x1 + 1 or box.y0 < panel.y0 - 1 or box.y1 > panel.y1 + 1:
                problems.append(f"{ax.get_title() or '(untitled panel)'}: {text.get_text()!r} outside the panel")
    return problems


PAGE_COLUMN_PX = 672
"""Width in CSS pixels of the book's content column in a 1280 px window: a figure wider than this is
shown scaled down to it (its image has ``max-width: 100%``)."""

MIN_TEXT_PX = 9.0
"""The smallest font size, in CSS pixels at the size the page shows a figure, that the book accepts."""


def shown_width(png_width: int, fig_dpi: float, saved_dpi: float, column: float = PAGE_COLUMN_PX) -> float:
    """CSS pixels a saved PNG ``png_width`` pixels wide takes on the page: the figure's own size (the PNG
    at ``saved_dpi`` shown at the figure's ``fig_dpi``, as :func:`kmtbook.chapter.show_saved_png` does),
    at most the content column."""
    return min(float(column), png_width * fig_dpi / saved_dpi)


@functools.cache
def _math_parser():
    """One mathtext parser for every measure (it caches what it has parsed)."""
    from matplotlib.mathtext import MathTextParser

    return MathTextParser("path")


def drawn_size(text: Text) -> float:
    """The smallest size, in points, at which ``text`` draws a glyph: its font size, or for mathtext
    (``$...$``) the size of its smallest glyph, as matplotlib's mathtext parser lays it out (a sub- or
    superscript is drawn at 0.7 of the size around it, a script of a script at 0.49).
    :func:`text_sizes_on_page` measures every text with it, so a script is checked as drawn."""
    size = float(text.get_fontsize())
    if text.get_usetex() or not text.get_parse_math():
        return size
    from matplotlib import cbook

    parser = _math_parser()
    glyphs = []
    for line in text.get_text().split("\n"):  # (matplotlib lays out each line of a text on its own)
        if cbook.is_math_text(line):
            glyphs += parser.parse(line, dpi=72, prop=text.get_fontproperties()).glyphs
    return min((float(glyph[1]) for glyph in glyphs), default=size)


def text_sizes_on_page(fig: Figure, png_width: int, saved_dpi: float,
                       column: float = PAGE_COLUMN_PX) -> list[tuple[float, str]]:
    """Every text of the figure as (the height of its smallest glyph in CSS pixels on the page, the text),
    smallest first: a mathtext script counts at the size it is drawn (:func:`drawn_size`).

    A glyph of ``s`` points is ``s * saved_dpi / 72`` pixels tall in the PNG, which the page scales by
    its shown width over ``png_width``."""
    scale = shown_width(png_width, fig.dpi, saved_dpi, column) / png_width
    sizes = [(drawn_size(t) * saved_dpi / 72 * scale, t.get_text()) for t in texts(fig)]
    return sorted(sizes, key=lambda size: size[0])


def small_text(fig: Figure, png_width: int, saved_dpi: float, column: float = PAGE_COLUMN_PX,
               minimum: float = MIN_TEXT_PX) -> str | None:
    """The problem, in words, if the figure's smallest text is under ``minimum`` CSS pixels on the page
    (shown at most ``column`` wide); None if every text is readable."""
    sizes = text_sizes_on_page(fig, png_width, saved_dpi, column)
    if not sizes or sizes[0][0] >= minimum:
        return None
    size, text = sizes[0]
    shown = shown_width(png_width, fig.dpi, saved_dpi, column)
    return (f"smallest text {text.splitlines()[0][:40]!r} is {size:.1f} px tall on the page (at least "
            f"{minimum:g}; the figure is shown {shown:.0f} px wide)")


def figure_problems(fig: Figure) -> list[str]:
    """Everything the checks above find, one line each (the figure is drawn once for all of them)."""
    renderer = _renderer(fig)
    return ([f"template plural in {t!r}" for t in template_plurals(fig)] + legends_over_data(fig, renderer)
            + labels_outside_panels(fig, renderer))
