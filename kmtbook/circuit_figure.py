"""The circuit of one layer, drawn: tokens, the four attention blocks and their residual resets.

:func:`plot_layer_circuit` draws one layer of the k-means transformer as the paper describes it
(Theorem 2.1, Sec. 2; the circuit of its overview figure): the encoder's point tokens
:math:`\\bar X^{(t)} = [X; Y^{(t)}]` and the decoder's centre tokens :math:`\\bar C^{(t)} = [C^{(t)}; I_k]`
with their widths, the blocks CAX and SAX on the points and CAC and SAC on the centres with their
queries, keys and values, the residual connections, the encoder-decoder cross-attention (the centres
read the *updated* point tokens :math:`\\bar X^{(t+1)}`) and, beside each block, the part of one
Lloyd step it performs. With ``scratch=False`` it draws the ablation's layer of width ``d``
(no scratch coordinates, learned weights, no construction).

Everything is drawn by matplotlib from the tables :data:`BLOCKS` and :func:`token_parts`, so the
figure is rebuilt with the book and restyled with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle

from .arguments import check_flag


@dataclass(frozen=True)
class BlockText:
    """What the figure writes in and beside one block of Theorem 2.1 (Sec. 2, the table of weights)."""

    name: str  # the authors' code name
    mu: int  # the paper's index of (Q_mu, K_mu, V_mu)
    role: str  # what the block does, in words
    weights: str  # its query, key and value maps (mathtext)
    lloyd: str  # the part of one Lloyd step it performs (mathtext)


BLOCKS: dict[str, BlockText] = {
    "CAX": BlockText("CAX", 1, "cross-attention: each point over the centres",
                     r"$Q_1 = K_1 = I^{:d}$ (data),  $V_1 = +I^{d+1:}$ (scratch)",
                     r"Lloyd: assign, $a_i = \arg\min_j\, \|x_i - c_j\|^2$; writes $+e_{a_i}$"),
    "SAX": BlockText("SAX", 2, "self-attention of the points (residual reset)",
                     r"$Q_2 = K_2 = I^{:d}$,  $V_2 = -I^{d+1:}$",
                     r"erase the old assignment: writes $-y_i^{(t)}$, so $y_i^{(t+1)} = e_{a_i}$"),
    "CAC": BlockText("CAC", 3, "cross-attention: centres over updated points",
                     r"$Q_3 = K_3 = I^{d+1:}$ (scratch),  $V_3 = +I^{:d}$ (data)",
                     r"Lloyd: average, writes $\frac{1}{m_j}\sum_{i:\,a_i = j} x_i$"),
    "SAC": BlockText("SAC", 4, "self-attention of the centres (residual reset)",
                     r"$Q_4 = K_4 = I^{d+1:}$,  $V_4 = -I^{:d}$",
                     r"erase the old centre: writes $-c_j^{(t)}$, so $c_j^{(t+1)}$ = the mean"),
}
"""The four blocks in the paper's order mu = 1, 2, 3, 4 (Theorem 2.1's weights, Sec. 2)."""

LEARNED_WEIGHTS = r"$Q_{mu}, K_{mu}, V_{mu}$ learned ($d \times d$, with biases)"

COLOURS = {"data": "#9ecae1", "scratch": "#fdd0a2", "block": "#f0f0f0", "reset": "#e5e5e5",
           "lloyd": "#238b45", "cross": "#d94801", "edge": "0.25"}


def token_parts(kind: str, scratch: bool, after: bool = False) -> list[tuple[str, str, str]]:
    """The parts of a token, top to bottom: (colour key, symbol, what it holds).

    ``kind`` is "point" (encoder token :math:`[x_i; y_i]`) or "centre" (decoder token :math:`[c_j; e_j]`);
    ``after``: the token after the layer (what Theorem 2.1's layer has written into it)."""
    if kind not in ("point", "centre"):
        raise ValueError(f"kind must be 'point' or 'centre', got {kind!r}")
    scratch, after = check_flag("scratch", scratch), check_flag("after", after)
    data = ("data", r"$x_i$", "d data coordinates") if kind == "point" else \
        ("data", r"$c_j$", "d: the new centre" if after and scratch else "d coordinates of the centre")
    if not scratch:
        return [data]
    if kind == "point":
        extra = ("scratch", r"$y_i$", r"k scratch: $e_{a_i}$" if after else "k scratch: the assignment (0 at first)")
    else:
        extra = ("scratch", r"$e_j$", "k scratch: the cluster's id")
    return [data, extra]


def _token(ax, x: float, y_top: float, kind: str, scratch: bool, title: str, after: bool = False
           ) -> tuple[float, float]:
    """Draw one token as a stacked bar at ``x`` from ``y_top`` down; return its (bottom, top)."""
    heights = {"data": 0.9, "scratch": 0.7}
    parts = token_parts(kind, scratch, after)
    y = y_top
    for colour, symbol, what in parts:
        h = heights[colour]
        ax.add_patch(Rectangle((x, y - h), 0.42, h, facecolor=COLOURS[colour], edgecolor=COLOURS["edge"], lw=1))
        ax.text(x + 0.21, y - h / 2, symbol, ha="center", va="center", fontsize=11)
        if len(parts) > 1:  # beside its part; a one-part token has the residual line at its middle
            ax.text(x + 0.5, y - h / 2, what, ha="left", va="center", fontsize=7.5, color="0.2")
        else:
            ax.text(x, y - h - 0.08, what, ha="left", va="top", fontsize=7.5, color="0.2")
        y -= h
    ax.text(x - 0.05, y_top + 0.12, title, ha="left", va="bottom", fontsize=10)
    return y, y_top


def _block(ax, x: float, y: float, block: BlockText, scratch: bool, reset: bool) -> None:
    """One block as a box (x, y: lower left; 4.3 x 0.95) with its name, role and weights; the Lloyd step
    beside it (above a writing block, below a reset)."""
    ax.add_patch(FancyBboxPatch((x, y), 4.3, 0.95, boxstyle="round,pad=0.02,rounding_size=0.08",
                                facecolor=COLOURS["reset" if reset else "block"], edgecolor=COLOURS["edge"], lw=1.2))
    ax.text(x + 0.1, y + 0.7, f"{block.name}", ha="left", va="center", fontsize=11, weight="bold")
    role = block.role if scratch else block.role.replace(" (residual reset)", "")  # a learned block need not reset
    ax.text(x + 0.85, y + 0.7, f"block {block.mu}: {role}", ha="left", va="center", fontsize=8)
    weights = block.weights if scratch else LEARNED_WEIGHTS.replace("mu", str(block.mu))
    ax.text(x + 0.1, y + 0.27, weights, ha="left", va="center", fontsize=9)
    if scratch:
        ax.text(x + 0.1, y + (1.2 if not reset else -0.25), block.lloyd, ha="left", va="center", fontsize=8.5,
                color=COLOURS["lloyd"], style="italic")


def _arrow(ax, start, end, *, colour: str = "0.25", style: str = "-|>", ls: str = "-", rad: float = 0.0) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=12, color=colour, lw=1.2,
                                 linestyle=ls, connectionstyle=f"arc3,rad={rad}", shrinkA=0, shrinkB=0))


def _plus(ax, x: float, y: float) -> None:
    ax.add_patch(Circle((x, y), 0.2, facecolor="white", edgecolor=COLOURS["edge"], lw=1.2, zorder=3))
    ax.text(x, y, "+", ha="center", va="center", fontsize=13, zorder=4)


def _band(ax, y0: float, y1: float, label: str) -> None:
    ax.add_patch(Rectangle((0.05, y0), 13.9, y1 - y0, facecolor="none", edgecolor="0.7", lw=0.8, ls=(0, (4, 3))))
    ax.text(13.85, y1 - 0.12, label, ha="right", va="top", fontsize=9, color="0.35")


def plot_layer_circuit(scratch: bool = True) -> Figure:
    """One layer of the k-means transformer: tokens, blocks, residuals, cross-attention, Lloyd's step.

    ``scratch=True`` draws Theorem 2.1's layer (tokens of width d + k, the construction's weights,
    the Lloyd step of each block); ``scratch=False`` the ablation's layer of width d (learned weights;
    no construction is known, so no Lloyd step is written). Returns the figure; drawing needs no data."""
    scratch = check_flag("scratch", scratch)
    width = "d + k" if scratch else "d"
    import matplotlib.pyplot as plt

    # a pyplot figure: a notebook shows it at the end of the cell, as every other figure of the book
    fig = plt.figure(figsize=(13, 8.2))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 14)
    ax.set_ylim(0, 8.8)
    ax.axis("off")

    # The two sequences: the encoder's n point tokens (top) and the decoder's k centre tokens (bottom).
    _band(ax, 4.5, 8.75, f"encoder: n point tokens, width {width}")
    _band(ax, 0.05, 4.3, f"decoder: k centre tokens, width {width}")
    top = (7.35, 2.95) if scratch else (7.0, 2.6)  # the middle of a token at the residual's height
    x_lo, x_hi = _token(ax, 0.3, top[0], "point", scratch, r"$\bar X^{(t)}$, one token per point")
    c_lo, c_hi = _token(ax, 0.3, top[1], "centre", scratch, r"$\bar C^{(t)}$, one token per centre")
    xo_lo, xo_hi = _token(ax, 11.45, top[0], "point", scratch, r"$\bar X^{(t+1)}$", after=True)
    co_lo, co_hi = _token(ax, 11.45, top[1], "centre", scratch, r"$\bar C^{(t+1)}$", after=True)
    x_mid, c_mid = (x_lo + x_hi) / 2, (c_lo + c_hi) / 2

    # Blocks: the writing block above, its reset below, both reading the same input tokens.
    block_x = 4.5
    _block(ax, block_x, 7.0, BLOCKS["CAX"], scratch, reset=False)
    _block(ax, block_x, 5.35, BLOCKS["SAX"], scratch, reset=True)
    _block(ax, block_x, 2.6, BLOCKS["CAC"], scratch, reset=False)
    _block(ax, block_x, 0.95, BLOCKS["SAC"], scratch, reset=True)

    plus_x = 10.4
    for mid, top_y, low_y, out_lo, out_hi in ((x_mid, 7.0, 5.35, xo_lo, xo_hi), (c_mid, 2.6, 0.95, co_lo, co_hi)):
        # queries from the input tokens into both blocks
        _arrow(ax, (2.9, mid), (block_x, top_y + 0.35), rad=-0.15)
        _arrow(ax, (2.9, mid), (block_x, low_y + 0.6), rad=0.15)
        # the residual: the input tokens themselves go to the sum
        ax.plot([0.72, 2.9], [mid, mid], color="0.25", lw=1.2)
        _arrow(ax, (2.9, mid), (plus_x - 0.2, mid))
        ax.text(8.9, mid + 0.09, "residual", ha="center", va="bottom", fontsize=8, color="0.3")
        _arrow(ax, (block_x + 4.3, top_y + 0.45), (plus_x, mid + 0.2), rad=-0.2)
        _arrow(ax, (block_x + 4.3, low_y + 0.45), (plus_x, mid - 0.2), rad=0.2)
        _plus(ax, plus_x, mid)
        _arrow(ax, (plus_x + 0.2, mid), (11.45, (out_lo + out_hi) / 2))

    # Encoder-decoder cross-attention: keys and values of CAX are the centre tokens, those of CAC
    # the updated point tokens (the centre update reads X^(t+1), Theorem 2.1's layer equation).
    ax.plot([0.72, 3.6, 3.6], [c_hi - 0.05, c_hi - 0.05, 7.2], color=COLOURS["cross"], lw=1.2, ls="--")
    _arrow(ax, (3.6, 7.2), (block_x, 7.2), colour=COLOURS["cross"], ls="--")
    ax.text(3.5, 4.0, "keys, values:\n" + r"centres $\bar C^{(t)}$", ha="right", va="center", fontsize=8,
            color=COLOURS["cross"])
    ax.plot([11.66, 11.66, 8.4, 8.4], [xo_lo, 4.4, 4.4, 3.9], color=COLOURS["cross"], lw=1.2, ls="--")
    _arrow(ax, (8.4, 3.9), (8.4, 3.55), colour=COLOURS["cross"], ls="--")
    ax.text(8.55, 3.95, "keys, values: updated\n" + r"points $\bar X^{(t+1)}$", ha="left", va="center", fontsize=8,
            color=COLOURS["cross"])
    ax.text(3.0, x_mid - 0.28, "queries", ha="left", va="top", fontsize=8, color="0.3")
    ax.text(3.0, c_mid - 0.28, "queries", ha="left", va="top", fontsize=8, color="0.3")

    if scratch:
        note = (r"In the limit $\gamma\to\infty$ one layer is one Lloyd iteration: "
                r"$\bar X^{(t+1)} = [X;\, Y^{(t+1)}]$ holds the new assignment, $\bar C^{(t+1)} = [C^{(t+1)};\, I_k]$ "
                "the new centres. The same weights serve every layer.")
    else:
        note = ("Without scratch coordinates a token is its data alone: the assignment has nowhere to be "
                "written, and no construction of Lloyd's step is known for this width.")
    fig.text(0.5, 0.003, note, ha="center", va="bottom", fontsize=9, color="0.2")
    return fig
