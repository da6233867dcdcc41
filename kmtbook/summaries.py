"""Summaries over seeds and tasks that the chapters print: means, "mean ± spread" cells, size bins.

Chapter 9 measures every shipped layer on the same tasks and reports each measure as its mean
over the seeds with the standard deviation beside it; these helpers format such numbers, so that
every table of the chapter writes them one way.
"""

from __future__ import annotations

import numpy as np
import torch

from .arguments import check_flag


def nanmean(values: torch.Tensor) -> float:
    """The mean of ``values`` in float64, leaving out NaN entries (undefined measures)."""
    return float(torch.nanmean(values.double()))


def mean_pm_table(grouped, digits: int, *, missing_spread_as_zero: bool = True):
    """``"mean ± std"`` text for every group and column of a pandas ``groupby`` selection, both
    rounded to ``digits``; the spread is the population standard deviation (``ddof=0``). A spread
    that is undefined (NaN) is shown as 0 unless ``missing_spread_as_zero`` is false."""
    spread = grouped.std(ddof=0)
    if check_flag("missing_spread_as_zero", missing_spread_as_zero):
        spread = spread.fillna(0)
    return grouped.mean().round(digits).astype(str) + " ± " + spread.round(digits).astype(str)


def mean_pm_text(values, digits: int = 2) -> str:
    """``"mean ± std"`` of a pandas series (population standard deviation), with ``digits`` decimals."""
    return f"{values.mean():.{digits}f} ± {values.std(ddof=0):.{digits}f}"


def binned_by_size(
    counts: torch.Tensor, values: torch.Tensor, edges: np.ndarray, mean_size: float, stat: str = "mean"
) -> np.ndarray:
    """``values`` per cluster summarised in bins of the cluster size relative to ``mean_size``.

    ``counts`` and ``values`` hold one number per cluster (any shape, the same); empty clusters and
    non-finite values are left out. Bin ``b`` covers ``edges[b] <= size / mean_size < edges[b + 1]``;
    its entry is the mean (or, with ``stat="median"``, the median) of its values, NaN when it holds
    fewer than 5."""
    bins = np.arange(len(edges) - 1)
    rel = (counts / mean_size).flatten().cpu().numpy()
    v = values.flatten().double().cpu().numpy()
    keep = (counts.flatten().cpu().numpy() > 0) & np.isfinite(v)
    idx = np.digitize(rel[keep], edges) - 1
    out = np.full(len(bins), np.nan)
    for b in bins:
        sel = v[keep][idx == b]
        if sel.size >= 5:
            out[b] = np.median(sel) if stat == "median" else sel.mean()
    return out


def whole_numbers(table):
    """A pandas table of counts for display, every whole number written as an integer (a median of
    285.0 as "285", of 285.5 as "285.5"): the cells become text, as a table printed for reading."""
    return table.map(lambda v: str(int(v)) if float(v).is_integer() else str(v))


PRINT_WIDTH = 76
"""Characters of a printout's line that fit the book's content column at a 1280 px window (about 80
there; the column shows fewer on a narrower screen, where the output box scrolls by itself)."""


def wrap_lines(*parts: object, width: int = PRINT_WIDTH, sep: str = " ") -> str:
    """The text ``print(*parts, sep=sep)`` would write, with every line longer than ``width`` folded at
    spaces, so that a printout stays inside the book's content column; a folded line's continuation is
    indented two spaces past its own indent."""
    import textwrap

    text = sep.join(str(part) for part in parts)
    out = []
    for line in text.split("\n"):
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        out.append(textwrap.fill(line, width, subsequent_indent=indent) if len(line) > width else line)
    return "\n".join(out)


def one_header_row(table):
    """``table`` (a DataFrame) with the name of its row labels in its one header row: pandas writes
    the index's name in a second header row under the column names, so a reader sees two label rows
    above the table. A row index of several levels keeps its first level as the row labels and the
    others as columns."""
    if table.index.nlevels > 1:
        table = table.reset_index(level=list(range(1, table.index.nlevels)))
    return table.rename_axis(index=None, columns=table.index.name)
