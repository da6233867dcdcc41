"""A figure's numbers as a CSV file beside its PNG and PDF (``<label>.csv``).

Where the point of a figure is in its numbers (curves, bars, a small matrix), a reader who cannot see
it, and a student who wants to plot it again, gets the numbers it plots:
``chapter.save_figure(fig, label, data=...)`` writes them (:meth:`kmtbook.chapter.Chapter.save_figure`).

The format: UTF-8 text; first, lines that begin with ``# `` and carry what the PNG's metadata carries
(the figure's label and title, its text alternative, the citation line, the source page, the
authors, the licence, version and commit); then one header row of column names and the rows, comma
separated, numbers written in full precision (``repr`` of a float). Read it back with
``pandas.read_csv(path, comment="#")`` (no column name or value of the book's CSVs holds a ``#``) or
any CSV reader that skips the leading comment lines.

``data`` is a :class:`pandas.DataFrame` or a mapping of column name -> values (a list, array or
tensor; all of one length, or a single value repeated). :func:`plotted_data` gives, for a figure of
lines and bars, every plotted series in long form (panel, series, x, y): the numbers exactly as drawn.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

COLUMNS = ("panel", "series", "x", "y")


def _values(value: Any) -> list[Any]:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu()
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_cell(v) for v in value]
    return [_cell(value)]


def _cell(value: Any) -> Any:
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, (list, tuple)):
        raise ValueError(f"a CSV cell holds one value, got a sequence {value!r:.80}")
    return value


def as_columns(data: Any) -> tuple[list[str], list[list[Any]]]:
    """Column names and rows of ``data`` (a DataFrame, or a mapping of column -> values)."""
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # a pandas DataFrame
        frame = data
        if not (frame.index.name is None and list(frame.index) == list(range(len(frame)))):
            frame = frame.reset_index()
        data = {str(name): frame[name].tolist() for name in frame.columns}
    if not isinstance(data, Mapping) or not data:
        raise TypeError("figure data is a pandas DataFrame or a non-empty mapping of column name -> values")
    columns = {str(name): _values(values) for name, values in data.items()}
    length = max(len(v) for v in columns.values())
    for name, values in columns.items():
        if len(values) == 1 and length > 1:
            columns[name] = values * length
        elif len(values) != length:
            raise ValueError(f"figure data: column {name!r} has {len(values)} values, another {length}")
    names = list(columns)
    for name in names:
        if "#" in name:
            raise ValueError(f"figure data: a column name holds '#' (the CSV's comment mark): {name!r}")
    return names, [[columns[name][i] for name in names] for i in range(length)]


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    text = str(value)
    if "#" in text:
        raise ValueError(f"figure data: a value holds '#' (the CSV's comment mark): {text!r}")
    return text


def figure_csv(data: Any, header: Iterable[str]) -> str:
    """The CSV text: ``# `` lines of ``header``, the column names, the rows."""
    names, rows = as_columns(data)
    out = io.StringIO()
    for line in header:
        out.write("# " + " ".join(str(line).split()) + "\n")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(names)
    for row in rows:
        writer.writerow([_text(v) for v in row])
    return out.getvalue()


def write_figure_csv(path: Path, data: Any, header: Iterable[str]) -> Path:
    """Write :func:`figure_csv` to ``path`` (UTF-8)."""
    Path(path).write_text(figure_csv(data, header), encoding="utf-8")
    return Path(path)


def _panel_name(ax, index: int) -> str:
    title = ax.get_title() or ax.get_title(loc="left") or ax.get_ylabel()
    return " ".join(title.split()) or f"panel {index + 1}"


def _line_rows(ax) -> list[tuple[str, Any, Any]]:
    """(series, x, y) of every line of ``ax``; a reference line across the axes gives one row."""
    from matplotlib.container import ErrorbarContainer

    named: dict[int, str] = {}  # errorbar: the container has the label; its caps are the bars' ends
    for container in ax.containers:
        label = container.get_label()
        if isinstance(container, ErrorbarContainer) and label and not label.startswith("_"):
            data_line, caps, _ = container.lines
            if data_line is not None:
                named[id(data_line)] = label
            for cap in caps:
                named[id(cap)] = f"{label} (error bar end)"
    rows: list[tuple[str, Any, Any]] = []
    for n, line in enumerate(ax.get_lines()):
        label = named.get(id(line), line.get_label())
        series = label if label and not label.startswith("_") else f"line {n + 1}"
        xs, ys = (list(map(float, v)) for v in line.get_data(orig=False))
        across = line.get_transform() != ax.transData and len(xs) == 2
        if across and xs == [0.0, 1.0] and ys[0] == ys[1]:  # axhline
            rows.append((series, None, ys[0]))
        elif across and ys == [0.0, 1.0] and xs[0] == xs[1]:  # axvline
            rows.append((series, xs[0], None))
        else:
            rows += [(series, x, y) for x, y in zip(xs, ys, strict=True)]
    return rows


def _category_ticks(axis) -> dict[float, str]:
    """position -> label of the ticks of an axis of categories (a label that is not its own position's
    number); empty for an axis of numbers, where a bar is named by its centre."""
    ticks = {round(float(t), 9): label.get_text()
             for t, label in zip(axis.get_majorticklocs(), axis.get_majorticklabels(), strict=False)}

    def number(text: str) -> float | None:
        try:
            return float(text.replace("\N{MINUS SIGN}", "-").replace("$", ""))
        except ValueError:
            return None

    numeric = all(number(text) is not None and math.isclose(number(text) or 0.0, t, abs_tol=1e-9)
                  for t, text in ticks.items() if text)
    return {} if numeric else ticks


def _bar_rows(ax) -> list[tuple[str, Any, Any]]:
    """(series, category, length) of every bar of ``ax``; the category is the nearest tick's label
    on an axis of categories (pandas draws grouped bars beside their tick), else the bar's centre. A
    horizontal bar's category is on the y axis and its length its width."""
    from matplotlib.container import BarContainer

    rows: list[tuple[str, Any, Any]] = []
    for n, container in enumerate(c for c in ax.containers if isinstance(c, BarContainer)):
        label = container.get_label()
        if (not label or label.startswith("_")) and container.patches:  # ax.hist labels its first bar
            label = str(container.patches[0].get_label())
        series = label if label and not label.startswith("_") else f"bars {n + 1}"
        horizontal = getattr(container, "orientation", "vertical") == "horizontal"
        axis = ax.yaxis if horizontal else ax.xaxis
        ticks = _category_ticks(axis)
        for patch in container.patches:
            if horizontal:
                centre, length = round(patch.get_y() + patch.get_height() / 2, 9), patch.get_width()
            else:
                centre, length = round(patch.get_x() + patch.get_width() / 2, 9), patch.get_height()
            near = sorted((abs(t - centre), t) for t in ticks if abs(t - centre) < 0.5)
            named = ticks[near[0][1]] if near and ticks[near[0][1]] else None
            rows.append((series, named if named is not None else centre, float(length)))
    return rows


def plotted_data(fig, axes: Sequence[int] | None = None, *, bars: bool = True) -> dict[str, list[Any]]:
    """Every line (and bar) a figure draws, in long form: columns ``panel`` (the axes' title, else its
    y label, else "panel N"), ``series`` (the legend label, else "line N"), ``x``, ``y``.

    ``axes`` picks panels by their index in ``fig.axes`` (default: all). An error bar's line takes the
    errorbar's label, its caps (the ends of the bars) "<label> (error bar end)". A horizontal reference line
    (``axhline``) has an empty ``x``, a vertical one (``axvline``) an empty ``y``; a bar gives its
    category (tick label) or position as ``x`` and its height as ``y``. Scatter plots, filled bands
    and images are not read: pass their numbers as columns of their own."""
    columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    for index, ax in enumerate(fig.axes):
        if axes is not None and index not in axes:
            continue
        panel = _panel_name(ax, index)
        for row in _line_rows(ax) + (_bar_rows(ax) if bars else []):
            for name, value in zip(COLUMNS, (panel, *row), strict=True):
                columns[name].append(value)
    if not columns["panel"]:
        raise ValueError("the figure draws no line or bar to read; pass its numbers as columns")
    return columns
