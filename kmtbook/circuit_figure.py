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

import textwrap
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
                     r"Lloyd: assign, $a_i = \mathrm{argmin}_j\, \|x_i - c_j\|^2$; writes the one-hot of $a_i$"),
    "SAX": BlockText("SAX", 2, "self-attention of the points (residual reset)",
                     r"$Q_2 = K_2 = I^{:d}$,  $V_2 = -I^{d+1:}$",
                     r"erase the old assignment: writes $-y_i^{(t)}$"),
    "CAC": BlockText("CAC", 3, "cross-attention: centres over updated points",
                     r"$Q_3 = K_3 = I^{d+1:}$ (scratch),  $V_3 = +I^{:d}$ (data)",
                     r"Lloyd: average, writes the mean of $\{x_i : a_i = j\}$"),
    "SAC": BlockText("SAC", 4, "self-attention of the centres (residual reset)",
                     r"$Q_4 = K_4 = I^{d+1:}$,  $V_4 = -I^{:d}$",
                     r"erase the old centre: writes $-c_j^{(t)}$"),
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
        extra = ("scratch", r"$y_i$", "k scratch: the new assignment" if after else
                 "k scratch: the assignment (0 at first)")
    else:
        extra = ("scratch", r"$e_j$", "k scratch: the cluster's id")
    return [data, extra]


# The figure is drawn in inches (the axes span the figure, one unit an inch). It is wide (width over
# height above kmtbook.sphinx_ext.assets.WIDE_FIGURE), so that a phone shows it at a readable width in a
# box of its own. A 1280 px window shows it 672 px wide, about 0.95 px a point: words are SMALL points,
# and a text with sub- or superscripts is MATH points, since mathtext draws a script at 0.7 of its
# text (kmtbook.figure_checks.drawn_size); no text has a script of a script (0.49). Every glyph is then
# at least 9 px tall on the page.
WIDTH_IN, HEIGHT_IN = 9.6, 4.92
SMALL = 10.0  # points: every label in words
MATH = 14.4  # points: every text with a sub- or superscript
BAND_H = 2.24  # inches: the height of one sequence's band
BLOCK_X, BLOCK_W, BLOCK_H = 2.2, 4.9, 0.62  # the blocks' left edge, width and height
FORK_X, CROSS_X, PLUS_X, OUT_X, BAR_W = 1.7, 1.98, 7.48, 7.84, 0.36
TOKEN_LABEL = 14  # characters per line of a token part's label


def _token(ax, x: float, residual: float, kind: str, scratch: bool, symbol: str, after: bool = False
           ) -> tuple[float, float]:
    """Draw one token as a stacked bar at ``x`` around the ``residual`` line's height (its data part
    above, its scratch part below), ``symbol`` above it; return its (bottom, top)."""
    parts = token_parts(kind, scratch, after)
    heights = {"data": 0.47, "scratch": 0.53}
    top = residual + heights["data"] if len(parts) > 1 else residual + 0.25
    y = top
    for colour, part, what in parts:
        h = heights[colour] if len(parts) > 1 else 0.5
        ax.add_patch(Rectangle((x, y - h), BAR_W, h, facecolor=COLOURS[colour], edgecolor=COLOURS["edge"], lw=1))
        ax.text(x + BAR_W / 2, y - h / 2, part, ha="center", va="center", fontsize=MATH)
        label = textwrap.fill(what, TOKEN_LABEL)
        # beside its part; a one-part token has the residual line at its middle: the label under the line
        ax.text(x + BAR_W + 0.06, y - h / 2 - (0 if len(parts) > 1 else 0.05), label, ha="left",
                va="center" if len(parts) > 1 else "top", fontsize=SMALL, color="0.2", linespacing=1.1)
        y -= h
    ax.text(x, top + 0.04, symbol, ha="left", va="bottom", fontsize=MATH)
    return y, top


def _block(ax, y: float, block: BlockText, scratch: bool, reset: bool) -> None:
    """One block as a box (lower edge at ``y``) with its name, role and weights; the Lloyd step
    beside it (above a writing block, below a reset)."""
    ax.add_patch(FancyBboxPatch((BLOCK_X, y), BLOCK_W, BLOCK_H, boxstyle="round,pad=0.01,rounding_size=0.05",
                                facecolor=COLOURS["reset" if reset else "block"], edgecolor=COLOURS["edge"], lw=1.2))
    ax.text(BLOCK_X + 0.07, y + 0.45, f"{block.name}", ha="left", va="center", fontsize=12, weight="bold")
    role = block.role if scratch else block.role.replace(" (residual reset)", "")  # a learned block need not reset
    ax.text(BLOCK_X + 0.66, y + 0.45, f"block {block.mu}: {role}", ha="left", va="center", fontsize=SMALL)
    weights = block.weights if scratch else LEARNED_WEIGHTS.replace("mu", str(block.mu))
    ax.text(BLOCK_X + 0.07, y + 0.17, weights, ha="left", va="center", fontsize=MATH)
    if scratch:
        ax.text(BLOCK_X + 0.07, y + (BLOCK_H + 0.17 if not reset else -0.17), block.lloyd, ha="left", va="center",
                fontsize=MATH, color=COLOURS["lloyd"], style="italic")


def _arrow(ax, start, end, *, colour: str = "0.25", style: str = "-|>", ls: str = "-", rad: float = 0.0) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=11, color=colour, lw=1.2,
                                 linestyle=ls, connectionstyle=f"arc3,rad={rad}", shrinkA=0, shrinkB=0))


def _plus(ax, x: float, y: float) -> None:
    ax.add_patch(Circle((x, y), 0.14, facecolor="white", edgecolor=COLOURS["edge"], lw=1.2, zorder=3))
    ax.text(x, y, "+", ha="center", va="center", fontsize=12, zorder=4)


def _band(ax, y0: float, label: str) -> None:
    """The dashed frame of one sequence (lower edge ``y0``), its name at the top left."""
    ax.add_patch(Rectangle((0.03, y0), WIDTH_IN - 0.06, BAND_H, facecolor="none", edgecolor="0.7", lw=0.8,
                           ls=(0, (4, 3))))
    ax.text(0.12, y0 + BAND_H - 0.05, label, ha="left", va="top", fontsize=SMALL, color="0.35", linespacing=1.1)


def _cross_label(ax, x: float, y: float, words: str, symbol: str, ha: str) -> None:
    """What a cross-attention reads, under a token whose bottom is at ``y``: ``words``, and under them
    the tokens' ``symbol`` (it has a script: MATH size)."""
    ax.text(x, y - 0.04, words, ha=ha, va="top", fontsize=SMALL, color=COLOURS["cross"])
    ax.text(x, y - 0.23, symbol, ha=ha, va="top", fontsize=MATH, color=COLOURS["cross"])


def _sequence(ax, band_y: float, blocks: tuple[str, str], kind: str, scratch: bool, symbols: tuple[str, str]
              ) -> tuple[tuple[float, float], tuple[float, float], float]:
    """One sequence's half of the layer in its band (lower edge ``band_y``): input tokens, the writing
    block and its reset, the residual, the sum and the output tokens. Returns the (bottom, top) of the
    input and of the output token and the residual line's height."""
    top = band_y + BAND_H
    write_y = top - 0.36 - BLOCK_H
    reset_y = write_y - 0.34 - BLOCK_H
    residual = write_y - 0.22
    token_in = _token(ax, 0.12, residual, kind, scratch, symbols[0])
    token_out = _token(ax, OUT_X, residual, kind, scratch, symbols[1], after=True)
    _block(ax, write_y, BLOCKS[blocks[0]], scratch, reset=False)
    _block(ax, reset_y, BLOCKS[blocks[1]], scratch, reset=True)
    # queries from the input tokens into both blocks
    _arrow(ax, (FORK_X, residual), (BLOCK_X, write_y + 0.15), rad=-0.25)
    _arrow(ax, (FORK_X, residual), (BLOCK_X, reset_y + 0.4), rad=0.25)
    ax.text(BLOCK_X + 0.05, residual + 0.02, "queries", ha="left", va="bottom", fontsize=SMALL, color="0.3")
    # the residual: the input tokens themselves go to the sum
    ax.plot([0.12 + BAR_W, FORK_X], [residual, residual], color="0.25", lw=1.2)
    _arrow(ax, (FORK_X, residual), (PLUS_X - 0.14, residual))
    ax.text(BLOCK_X + BLOCK_W - 0.6, residual + 0.02, "residual", ha="center", va="bottom", fontsize=SMALL,
            color="0.3")
    _arrow(ax, (BLOCK_X + BLOCK_W, write_y + BLOCK_H / 2), (PLUS_X, residual + 0.14), rad=-0.3)
    _arrow(ax, (BLOCK_X + BLOCK_W, reset_y + BLOCK_H / 2), (PLUS_X, residual - 0.14), rad=0.3)
    _plus(ax, PLUS_X, residual)
    _arrow(ax, (PLUS_X + 0.14, residual), (OUT_X, residual))
    return token_in, token_out, residual


def plot_layer_circuit(scratch: bool = True) -> Figure:
    """One layer of the k-means transformer: tokens, blocks, residuals, cross-attention, Lloyd's step.

    ``scratch=True`` draws Theorem 2.1's layer (tokens of width d + k, the construction's weights,
    the Lloyd step of each block); ``scratch=False`` the ablation's layer of width d (learned weights;
    no construction is known, so no Lloyd step is written). Returns the figure; drawing needs no data."""
    scratch = check_flag("scratch", scratch)
    width = "d + k" if scratch else "d"
    import matplotlib.pyplot as plt

    # a pyplot figure: a notebook shows it at the end of the cell, as every other figure of the book
    fig = plt.figure(figsize=(WIDTH_IN, HEIGHT_IN))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, WIDTH_IN)
    ax.set_ylim(0, HEIGHT_IN)
    ax.axis("off")

    # The two sequences: the encoder's n point tokens (top) and the decoder's k centre tokens (below),
    # the closing sentence under both.
    encoder_y = HEIGHT_IN - 0.03 - BAND_H
    decoder_y = encoder_y - 0.1 - BAND_H
    _band(ax, encoder_y, f"encoder: n point\ntokens, width {width}")
    _band(ax, decoder_y, f"decoder: k centre\ntokens, width {width}")
    (_, _), (x_out_lo, _), x_residual = _sequence(ax, encoder_y, ("CAX", "SAX"), "point", scratch,
                                         (r"$\bar X^{(t)}$", r"$\bar X^{(t+1)}$"))
    (_, c_hi), (_, _), _ = _sequence(ax, decoder_y, ("CAC", "SAC"), "centre", scratch,
                                     (r"$\bar C^{(t)}$", r"$\bar C^{(t+1)}$"))

    # Encoder-decoder cross-attention: keys and values of CAX are the centre tokens, those of CAC
    # the updated point tokens (the centre update reads X^(t+1), Theorem 2.1's layer equation).
    cax_keys = encoder_y + BAND_H - 0.36 - 0.15
    ax.plot([0.12 + BAR_W, CROSS_X, CROSS_X], [c_hi - 0.05, c_hi - 0.05, cax_keys], color=COLOURS["cross"], lw=1.2,
            ls="--")
    _arrow(ax, (CROSS_X, cax_keys), (BLOCK_X, cax_keys), colour=COLOURS["cross"], ls="--")
    # the labels of both cross-attentions under the point tokens (and under a one-part token's label)
    below_tokens = x_out_lo if scratch else x_residual - 0.42
    _cross_label(ax, CROSS_X - 0.08, below_tokens, "keys, values:", r"$\bar C^{(t)}$", "right")
    cac_top, cac_keys_x = decoder_y + BAND_H - 0.36, BLOCK_X + BLOCK_W - 0.1
    between = (encoder_y + decoder_y + BAND_H) / 2  # the gap between the two bands
    out_x = OUT_X + BAR_W / 2
    ax.plot([out_x, out_x, cac_keys_x, cac_keys_x], [x_out_lo, between, between, cac_top + 0.25],
            color=COLOURS["cross"], lw=1.2, ls="--")
    _arrow(ax, (cac_keys_x, cac_top + 0.25), (cac_keys_x, cac_top), colour=COLOURS["cross"], ls="--")
    _cross_label(ax, out_x + 0.1, below_tokens, "keys, values:", r"$\bar X^{(t+1)}$", "left")

    if scratch:
        note = (r"In the limit $\gamma\to\infty$ one layer is one Lloyd iteration: the new assignment and the "
                "new centres. The same weights serve every layer.")
    else:
        note = ("Without scratch coordinates a token is its data alone: the assignment has nowhere to go,"
                " and no construction of Lloyd's step is known.")
    ax.text(WIDTH_IN / 2, 0.03, note, ha="center", va="bottom", fontsize=SMALL, color="0.2", linespacing=1.4)
    return fig
