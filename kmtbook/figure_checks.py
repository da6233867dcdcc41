"""Checks of a drawn figure that a reader would otherwise catch: template plurals, a legend over the
data, a label outside its panel, text too small to read at the size the page shows the figure, and
series that only a reader with full colour vision can tell apart.
:meth:`kmtbook.chapter.Chapter.save_figure` runs them on every figure of the book.

A figure's words are read from its text artists (titles, labels, tick labels, legends, annotations);
the data from its lines and scatter points, in display coordinates after a draw; its series from
the entries of its legends (the lines, bars, bands and scatter points a legend names).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from matplotlib.collections import Collection, PathCollection
from matplotlib.colors import to_rgba
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
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


# --------------------------------------------------------------------------- colour


CVD_TYPES = ("deuteranomaly", "protanomaly", "tritanomaly")
"""The colour-vision deficiencies simulated (Machado, Oliveira and Fernandes 2009, as colorspacious
implements them), each at :data:`CVD_SEVERITY`: at 100 the anomalies are deuteranopia, protanopia and
tritanopia, the strongest of each kind."""

CVD_SEVERITY = 100

MIN_COLOUR_DISTANCE = 10.0
"""The smallest difference, in CAM02-UCS (colorspacious' ``deltaE``), between the colours of two series
of one legend, with full colour vision and under each of :data:`CVD_TYPES`. One unit is about the
smallest difference seen between two large patches side by side; a thin line or a small marker
needs far more. The Okabe-Ito palette, drawn for colour-blind readers, passes it (its closest pair,
orange and reddish purple, 11.0 apart under tritanopia); matplotlib's first four default colours fail
it under deuteranopia (green and red, 5.2) and protanopia (orange and green, 1.6)."""


@dataclass(frozen=True)
class LegendEntry:
    """One series as a legend shows it: its label, its colour (RGB, 0 to 1, over a white page) and its
    look apart from colour (the kind of mark, line style, marker, fill and hatch)."""

    label: str
    colour: tuple[float, float, float] | None
    look: tuple


def _over_white(rgba) -> tuple[float, float, float] | None:
    r, g, b, a = (float(x) for x in to_rgba(rgba))
    if a == 0:
        return None
    return (r * a + 1 - a, g * a + 1 - a, b * a + 1 - a)


def _line_entry(handle: Line2D) -> tuple[tuple[float, float, float] | None, tuple]:
    style, marker = handle.get_linestyle(), str(handle.get_marker())
    drawn = style not in ("None", "", " ")
    has_marker = marker not in ("None", "", " ", "none")
    face = handle.get_markerfacecolor()
    filled = has_marker and not (isinstance(face, str) and face.lower() == "none")
    colour = _over_white(handle.get_color()) if drawn else _over_white(
        face if filled else handle.get_markeredgecolor())
    # a dash pattern of its own (a tuple line style) reads "--" from get_linestyle(): compare the pattern
    dashes = getattr(handle, "_unscaled_dash_pattern", (None, None))[1]
    look_style = (style, tuple(dashes) if dashes else None) if drawn else None
    return colour, ("line", look_style, marker if has_marker else None, filled)


def _patch_entry(handle: Patch) -> tuple[tuple[float, float, float] | None, tuple]:
    face = _over_white(handle.get_facecolor()) if handle.get_fill() else None
    colour = face if face is not None else _over_white(handle.get_edgecolor())
    return colour, ("patch", handle.get_hatch() or None, face is not None, handle.get_linestyle())


def _collection_entry(handle: Collection) -> tuple[tuple[float, float, float] | None, tuple]:
    faces, edges = handle.get_facecolor(), handle.get_edgecolor()
    colour = _over_white(faces[0]) if len(faces) else None
    if colour is None and len(edges):
        colour = _over_white(edges[0])
    paths = handle.get_paths() if isinstance(handle, PathCollection) else []
    shape = tuple(np.round(np.asarray(paths[0].vertices, dtype=float), 2).ravel().tolist()) if paths else None
    return colour, ("points", shape, colour is not None and len(faces) > 0, handle.get_hatch() or None)


def legend_entries(legend: Legend) -> list[LegendEntry]:
    """The entries of ``legend`` that name a series: a line, a patch (bar, band) or a collection (scatter)."""
    entries = []
    for handle, text in zip(legend.legend_handles, legend.get_texts()):
        label = text.get_text().strip()
        if not label or handle is None or not text.get_visible():
            continue
        if isinstance(handle, Line2D):
            colour, look = _line_entry(handle)
        elif isinstance(handle, Patch):
            colour, look = _patch_entry(handle)
        elif isinstance(handle, Collection):
            colour, look = _collection_entry(handle)
        else:
            continue
        entries.append(LegendEntry(label, colour, look))
    return entries


def simulate_cvd(rgb: tuple[float, float, float], cvd_type: str, severity: float = CVD_SEVERITY) -> np.ndarray:
    """``rgb`` (sRGB, 0 to 1) as a reader with the colour-vision deficiency ``cvd_type`` sees it."""
    from colorspacious import cspace_convert

    space = {"name": "sRGB1+CVD", "cvd_type": cvd_type, "severity": severity}
    return np.clip(cspace_convert(np.asarray(rgb, dtype=float), space, "sRGB1"), 0, 1)


def colour_distances(a: tuple[float, float, float], b: tuple[float, float, float]) -> dict[str, float]:
    """The CAM02-UCS difference of two colours with full colour vision (``"normal"``) and under each of
    :data:`CVD_TYPES`."""
    from colorspacious import deltaE

    distances = {"normal": float(deltaE(a, b, input_space="sRGB1"))}
    for cvd in CVD_TYPES:
        distances[cvd] = float(deltaE(simulate_cvd(a, cvd), simulate_cvd(b, cvd), input_space="sRGB1"))
    return distances


def _direct_labels(fig: Figure) -> set[str]:
    """Texts written in the panels (``ax.text``, ``ax.annotate``): a series labelled where it is drawn."""
    return {t.get_text().strip() for ax in fig.axes for t in ax.texts if t.get_visible()}


def _pair_problem(a: LegendEntry, b: LegendEntry, minimum: float) -> str | None:
    """What keeps a reader from telling the colours of series ``a`` and ``b`` apart, in words; None if nothing.
    Two series of one look (:func:`_one_look`) with distinct colours are reported there, not here."""
    if a.colour is None or b.colour is None:
        return None
    distances = colour_distances(a.colour, b.colour)
    if distances["normal"] < minimum:
        if a.look == b.look:
            return (f"{a.label!r} and {b.label!r} look alike (colours {distances['normal']:.1f} apart, "
                    f"at least {minimum:g}; the same line, marker and fill)")
        return None  # one colour on purpose: the series differ by their marks
    worst = min(CVD_TYPES, key=lambda cvd: distances[cvd])
    if distances[worst] < minimum:
        return (f"{a.label!r} and {b.label!r}: colours {distances[worst]:.1f} apart under {worst} "
                f"(at least {minimum:g}; {distances['normal']:.1f} with full colour vision)")
    return None


def _one_look(entries: list[LegendEntry], labelled: set[str]) -> list[list[str]]:
    """Groups of two or more series of one legend that look the same but for their colour and are not
    labelled where they are drawn: told apart by colour alone."""
    groups: dict[tuple, list[str]] = {}
    for entry in entries:
        if entry.colour is not None and entry.label not in labelled:
            groups.setdefault(entry.look, []).append(entry.label)
    return [labels for labels in groups.values() if len(labels) > 1]


def colour_only_series(fig: Figure, minimum: float = MIN_COLOUR_DISTANCE) -> list[str]:
    """Series of one legend that a reader cannot tell apart: series told apart by colour alone (the
    same line style, marker, fill and hatch, no direct label: one line per such group), and pairs of
    colours under ``minimum`` apart with the same marks or under a colour-vision deficiency
    (:data:`CVD_TYPES`: one line per pair). Each line starts with the panel's title (or "figure legend")."""
    legends = [(ax.get_title() or "(untitled panel)", ax.get_legend()) for ax in fig.axes]
    legends += [("figure legend", legend) for legend in fig.legends]
    labelled = _direct_labels(fig)
    problems = []
    for where, legend in legends:
        if not isinstance(legend, Legend) or not legend.get_visible():
            continue
        entries = legend_entries(legend)
        for group in _one_look(entries, labelled):
            names = [repr(label) for label in group]
            problems.append(f"{where}: {', '.join(names[:-1])} and {names[-1]} differ by colour alone "
                            "(add a line style, marker, hatch or direct label)")
        for a, b in itertools.combinations(entries, 2):
            problem = _pair_problem(a, b, minimum)
            if problem:
                problems.append(f"{where}: {problem}")
    return problems


def figure_problems(fig: Figure) -> list[str]:
    """Everything the checks above find, one line each (the figure is drawn once for all of them)."""
    renderer = _renderer(fig)
    return ([f"template plural in {t!r}" for t in template_plurals(fig)] + legends_over_data(fig, renderer)
            + labels_outside_panels(fig, renderer) + colour_only_series(fig))
