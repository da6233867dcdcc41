"""kmtbook.circuit_figure: the drawing of one layer says what Theorem 2.1's weights do, and its text fits."""

from __future__ import annotations

import itertools

import matplotlib
import matplotlib.pyplot
import pytest
import torch

matplotlib.use("Agg")

import kmtlib
from kmtbook.circuit_figure import BLOCKS, plot_layer_circuit, token_parts


def _texts(fig):
    renderer = fig.canvas.get_renderer()
    return [(t.get_text(), t.get_window_extent(renderer)) for t in fig.findobj(matplotlib.text.Text)
            if t.get_text().strip()]


def _figure(scratch: bool):
    return plot_layer_circuit(scratch=scratch)  # a pyplot figure (Agg, see above)


def test_the_blocks_are_the_theorems_in_its_order():
    """Names, the paper's index mu and the sign of each value map agree with kmtlib.theorem_weights."""
    assert list(BLOCKS) == ["CAX", "SAX", "CAC", "SAC"] and [b.mu for b in BLOCKS.values()] == [1, 2, 3, 4]
    d, k = 2, 3
    weights = kmtlib.theorem_weights(d, k)
    for name, block in BLOCKS.items():
        value = torch.as_tensor(weights[name]["V"])
        sign = "+" if value.sum() > 0 else "-"
        assert f"V_{block.mu} = {sign}I" in block.weights, (name, block.weights)
        # the value writes the scratch part (points) or the data part (centres), as the text says
        writes_scratch = bool(value[d:, d:].abs().sum() > 0) and not bool(value[:d, :d].abs().sum() > 0)
        assert ("I^{d+1:}" in block.weights.split("V_")[1]) == writes_scratch, name


def test_tokens_have_scratch_coordinates_only_in_the_theorems_layer():
    assert [p[0] for p in token_parts("point", True)] == ["data", "scratch"]
    assert [p[0] for p in token_parts("centre", False)] == ["data"]
    with pytest.raises(ValueError, match="kind"):
        token_parts("query", True)


@pytest.mark.parametrize("scratch", [True, False])
def test_the_figure_names_blocks_widths_and_lloyd_steps(scratch):
    fig = _figure(scratch)
    text = " ".join(t for t, _ in _texts(fig))
    for name in BLOCKS:
        assert name in text
    assert ("width d + k" in text) == scratch and "width d" in text
    assert ("Lloyd: assign" in text) == scratch and ("Lloyd: average" in text) == scratch
    assert "residual" in text and "keys, values" in text
    matplotlib.pyplot.close(fig)


@pytest.mark.parametrize("scratch", [True, False])
def test_no_text_leaves_the_figure_or_overlaps_another(scratch):
    fig = _figure(scratch)
    texts = _texts(fig)
    page = fig.bbox
    outside = [t for t, box in texts if box.x0 < page.x0 - 1 or box.x1 > page.x1 + 1 or box.y0 < page.y0 - 1
               or box.y1 > page.y1 + 1]
    assert not outside, f"text outside the figure: {outside}"
    overlapping = [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(texts, 2)
                   if box_a.overlaps(box_b) and a != "+" and b != "+"]
    assert not overlapping, f"overlapping text: {overlapping[:5]}"
    matplotlib.pyplot.close(fig)


@pytest.mark.parametrize("flag", ["False", "True", 0, 1, None], ids=repr)
def test_a_flag_that_is_not_a_boolean_is_refused(flag):
    """``scratch="False"`` is true as a Python value: it would draw the width d + k layer."""
    with pytest.raises(TypeError, match=r"scratch must be True or False"):
        plot_layer_circuit(scratch=flag)
    with pytest.raises(TypeError, match=r"scratch must be True or False"):
        token_parts("point", flag)
    with pytest.raises(TypeError, match=r"after must be True or False"):
        token_parts("point", True, after=flag)


@pytest.mark.parametrize("scratch", [True, False])
def test_the_figure_is_wide_and_its_text_readable_on_the_page(scratch, tmp_path):
    """Saved as the book saves it, the figure is wide (a phone shows it at a readable width in a box
    of its own) and its smallest text is at least 9 px tall where a 1280 px window shows it."""
    from kmtbook.chapter import SAVED_DPI
    from kmtbook.figure_checks import small_text
    from kmtbook.sphinx_ext.assets import WIDE_FIGURE

    fig = _figure(scratch)
    png = tmp_path / "circuit.png"
    fig.savefig(png, dpi=SAVED_DPI, bbox_inches="tight")
    head = png.read_bytes()[:24]
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    assert width / height >= WIDE_FIGURE, (width, height)
    assert small_text(fig, width, SAVED_DPI) is None
    matplotlib.pyplot.close(fig)


def test_mathtext_scripts_are_measured_at_the_size_they_are_drawn():
    from matplotlib.figure import Figure

    from kmtbook.figure_checks import drawn_size

    ax = Figure().add_subplot()
    assert drawn_size(ax.text(0, 0, "plain", fontsize=10)) == 10
    assert drawn_size(ax.text(0, 0, r"$Q_1 = K_1$", fontsize=10)) == pytest.approx(7.0)  # a script: 0.7
    assert drawn_size(ax.text(0, 0, "k scratch:\n" + r"$e_{a_i}$", fontsize=10)) == pytest.approx(4.9)  # 0.7 * 0.7
    assert drawn_size(ax.text(0, 0, r"costs $5 or $6", fontsize=10, parse_math=False)) == 10


@pytest.mark.parametrize("scratch", [True, False])
def test_every_script_of_the_circuit_is_readable_on_the_page(scratch, tmp_path):
    """Every glyph of the figure, the mathtext scripts included (figure_checks.drawn_size), is at least
    9 px tall where a 1280 px window shows the figure."""
    from kmtbook.chapter import SAVED_DPI
    from kmtbook.figure_checks import MIN_TEXT_PX, drawn_size, shown_width, texts

    fig = _figure(scratch)
    png = tmp_path / "circuit.png"
    fig.savefig(png, dpi=SAVED_DPI, bbox_inches="tight")
    width = int.from_bytes(png.read_bytes()[16:20], "big")
    scale = shown_width(width, fig.dpi, SAVED_DPI) / width * SAVED_DPI / 72
    small = sorted((drawn_size(t) * scale, t.get_text()) for t in texts(fig) if drawn_size(t) * scale < MIN_TEXT_PX)
    matplotlib.pyplot.close(fig)
    assert not small, small[:3]


@pytest.mark.parametrize("scratch", [True, False])
def test_the_closing_sentence_sits_under_the_frames(scratch):
    """The sentence under the circuit does not touch the dashed frames (no face) of the two sequences."""
    fig = _figure(scratch)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frames = [p.get_window_extent(renderer) for p in fig.axes[0].patches
              if isinstance(p, matplotlib.patches.Rectangle) and p.get_facecolor()[3] == 0]
    assert len(frames) == 2
    note = [box for text, box in _texts(fig) if "Lloyd iteration" in text or "no construction" in text]
    assert len(note) == 1 and note[0].y1 < min(frame.y0 for frame in frames), (note, frames)
    matplotlib.pyplot.close(fig)
