"""kmtbook.figure_checks: the faults a reader saw in the book's figures are found by a test."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from kmtbook.figure_checks import (
    counts_phrase,
    figure_problems,
    labels_outside_panels,
    legends_over_data,
    plural,
    template_plurals,
)


def test_plural_says_the_number_in_words_that_agree():
    assert plural(1, "model") == "1 model" and plural(3, "model") == "3 models" and plural(0, "task") == "0 tasks"
    assert plural(2, "run", "runs") == "2 runs" and plural(2, "matrix", "matrices") == "2 matrices"


def test_counts_of_groups_say_each_where_they_agree():
    # (chapter 06 printed "medians over 10 and 10 seeds")
    assert counts_phrase({"width d": 10, "width d + k": 10}, "seed") == "10 seeds each"
    assert counts_phrase({"width d": 9, "width d + k": 10}, "seed") == "9 seeds (width d) and 10 (width d + k)"
    assert counts_phrase({"a": 1}, "seed") == "1 seed"


def test_template_plurals_are_found_in_titles_legends_and_labels():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label="3 trained model(s)")
    ax.legend()
    ax.set_title("4 task(s) each")
    assert len(template_plurals(fig)) == 2
    ax.set_title(plural(4, "task") + " each")
    ax.get_legend().get_texts()[0].set_text(plural(3, "trained model"))
    assert not template_plurals(fig)
    plt.close(fig)


def test_a_legend_over_the_lines_is_found_and_one_beside_them_is_not():
    # the fault of Fig. 10.4: a legend placed over the curves it explains
    x = np.linspace(0, 1, 50)
    fig, ax = plt.subplots(figsize=(4, 3))
    for level in np.linspace(0.1, 0.9, 6):
        ax.plot(x, np.full_like(x, level), label=f"level {level:.1f}")
    ax.legend(loc="center")
    assert legends_over_data(fig)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1))  # outside the panel
    assert not legends_over_data(fig)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(x, x ** 4, label="a curve low on the left")
    ax.legend(loc="upper left")
    assert not legends_over_data(fig)
    plt.close(fig)


def test_a_legend_over_bars_is_found():
    # the fault of Fig. 12.1: the legend in the upper left corner covered the first seed's bars
    import pandas as pd

    fig, ax = plt.subplots(figsize=(7, 3.6))
    bars = pd.DataFrame({"as trained": [4.9, 5.0, 4.8], "renumbered": [5.1, 5.2, 5.0], "averaged": [5.3, 5.2, 5.2]},
                        index=["seed 0", "seed 1", "seed 2"])
    bars.plot.bar(ax=ax, rot=0)
    ax.set_ylim(4.6, 5.4)  # (as Fig. 12.1: the tallest bars reach the top of the panel)
    ax.legend(loc="upper left")
    found = legends_over_data(fig)
    assert len(found) == 1 and "legend over" in found[0] and "bar" in found[0] and "points" not in found[0]
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.02), ncols=3, borderaxespad=0)  # above the panel
    assert not legends_over_data(fig)
    ax.set_ylim(4.6, 8.0)  # or room above the bars
    ax.legend(loc="upper left")
    assert not legends_over_data(fig)
    plt.close(fig)


def test_a_figure_made_without_pyplot_is_checked():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], label="a line")
    ax.legend(loc="center")
    assert legends_over_data(fig) and not labels_outside_panels(fig)


def test_a_label_outside_its_panel_is_found():
    # the fault of Fig. 11.1: "1.9x" written past the end of its bar, outside the panel
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.barh([0, 1], [1.0, 1.9])
    ax.set_xlim(0, 2)
    ax.text(1.95, 1, "1.9x", va="center")
    assert labels_outside_panels(fig)
    ax.set_xlim(0, 2.4)
    assert not labels_outside_panels(fig) and not figure_problems(fig)
    plt.close(fig)


def test_save_figure_refuses_a_template_plural(tmp_path):
    from kmtbook.chapter import Chapter

    chapter = Chapter("01_kmeans_and_lloyd", device="cpu", seed=0, profile="quick", output_dir=str(tmp_path),
                      sizes={})
    fig, ax = plt.subplots()
    ax.set_title("3 model(s)")
    with pytest.raises(ValueError, match="template plural"):
        chapter.save_figure(fig, "fig-demo")
    ax.set_title("3 models")
    ax.plot([0, 1], [0, 1], label="a line")
    ax.legend(loc="center")
    chapter.save_figure(fig, "fig-demo")
    (problem,) = chapter.figure_problems
    assert problem.startswith("fig-demo: 3 models: legend over")
    plt.close(fig)


def test_save_figure_keeps_the_layout_its_checks_drew(tmp_path):
    """The PNG, the PDF and the page's copy reuse the constrained layout solved for the checks: the
    panels stay where a fresh constrained draw of the same figure puts them."""
    from kmtbook.chapter import Chapter

    def grid():
        fig, axes = plt.subplots(2, 3, figsize=(7, 4), layout="constrained")
        for i, ax in enumerate(axes.flat):
            im = ax.imshow(np.arange(16.0).reshape(4, 4) * i)
            ax.set_title(f"panel {i}\nsecond line")
        fig.colorbar(im, ax=axes, label="value")
        return fig

    chapter = Chapter("01_kmeans_and_lloyd", device="cpu", seed=0, profile="quick", output_dir=str(tmp_path),
                      sizes={})
    saved, fresh = grid(), grid()
    chapter.save_figure(saved, "fig-grid")
    fresh.canvas.draw()
    assert (tmp_path / "fig-grid.png").stat().st_size > 0 and (tmp_path / "fig-grid.pdf").stat().st_size > 0
    assert not saved.get_constrained_layout()
    for a, b in zip(saved.axes, fresh.axes):
        assert np.allclose(a.get_position().bounds, b.get_position().bounds)
    plt.close(saved)
    plt.close(fresh)


def test_save_figure_shows_the_saved_png_in_a_notebook(tmp_path, monkeypatch):
    """In a kernel the page gets the PNG just written, at the figure's own size, and the figure is
    closed (no second image from the inline backend); outside one nothing is displayed."""
    import IPython
    import IPython.display

    from kmtbook.chapter import Chapter

    chapter = Chapter("01_kmeans_and_lloyd", device="cpu", seed=0, profile="quick", output_dir=str(tmp_path),
                      sizes={})
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [1, 0])
    chapter.save_figure(fig, "fig-script")  # no kernel: a script or a test
    assert shown == [] and plt.fignum_exists(fig.number)
    plt.close(fig)

    class Kernel:
        kernel = object()

    monkeypatch.setattr(IPython, "get_ipython", lambda: Kernel())
    fig, ax = plt.subplots(figsize=(4, 3), dpi=80)
    ax.plot([0, 1], [1, 0])
    chapter.save_figure(fig, "fig-page")
    (image,) = shown
    png = (tmp_path / "fig-page.png").read_bytes()
    assert image.data == png
    assert image.width == round(int.from_bytes(png[16:20], "big") * 80 / 150)
    assert not plt.fignum_exists(fig.number)


def test_text_size_on_the_page_follows_the_display_scale():
    from kmtbook.figure_checks import PAGE_COLUMN_PX, shown_width, small_text, text_sizes_on_page

    # a figure narrower than the column is shown at its own size: 10 pt at 100 px per inch is 13.9 px
    fig, ax = plt.subplots(figsize=(5, 3), dpi=100)
    ax.set_title("title", fontsize=10)
    ax.tick_params(labelsize=7)
    fig.canvas.draw()
    assert shown_width(750, 100, 150) == 500
    sizes = dict((text, size) for size, text in text_sizes_on_page(fig, 750, 150))
    assert sizes["title"] == pytest.approx(10 * 100 / 72)
    assert min(sizes.values()) == pytest.approx(7 * 100 / 72) and small_text(fig, 750, 150) is None
    # twice as wide as the column: shown at the column's width, its text scaled down with it
    assert shown_width(3000, 100, 150) == PAGE_COLUMN_PX
    problem = small_text(fig, 3000, 150)
    assert problem is not None and "px tall on the page" in problem
    plt.close(fig)


def test_save_figure_names_a_figure_with_unreadable_text(tmp_path):
    from kmtbook.chapter import Chapter

    chapter = Chapter("01_kmeans_and_lloyd", device="cpu", seed=0, profile="quick", output_dir=str(tmp_path),
                      sizes={})
    wide, ax = plt.subplots(figsize=(14, 3))
    ax.set_title("a wide row of panels", fontsize=9)
    chapter.save_figure(wide, "fig-wide")
    narrow, ax = plt.subplots(figsize=(6, 3))
    ax.set_title("the same words", fontsize=9)
    chapter.save_figure(narrow, "fig-narrow")
    (problem,) = chapter.figure_problems
    assert problem.startswith("fig-wide: smallest text")
    assert chapter.figure_text_px[0] < 9 <= chapter.figure_text_px[1]
    plt.close("all")


def test_a_script_too_small_on_the_page_fails_the_text_check():
    """A label at a readable font size whose subscript is drawn at 0.7 of it (6.3 px here) fails the
    check Chapter.save_figure runs; the same label without the script passes."""
    from kmtbook.figure_checks import small_text, text_sizes_on_page

    fig, ax = plt.subplots(figsize=(5, 3), dpi=72)
    ax.set_xticks([])
    ax.set_yticks([])
    label = ax.set_title("$a$", fontsize=9)  # shown at its own size: 1 pt is 1 px
    fig.canvas.draw()
    assert small_text(fig, 360, 72) is None
    label.set_text("$a_i$")
    size, text = text_sizes_on_page(fig, 360, 72)[0]
    assert text == "$a_i$" and size == pytest.approx(9 * 0.7, abs=0.05)
    problem = small_text(fig, 360, 72)
    assert problem is not None and "'$a_i$' is 6.3 px tall on the page" in problem


# --------------------------------------------------------------------------- colour


def test_series_told_apart_by_colour_alone_are_found():
    """Four solid lines in the default colours differ by colour alone; with a line style and a marker
    each they do not, though two pairs of those colours still merge under a colour-vision deficiency
    (green and red under deuteranopia, orange and green under protanopia)."""
    from kmtbook.figure_checks import colour_only_series

    fig, ax = plt.subplots()
    for i in range(4):
        ax.plot([0, 1], [i, i + 1], color=f"C{i}", label=f"series {i}")
    ax.legend()
    problems = colour_only_series(fig)
    assert problems[0] == ("(untitled panel): 'series 0', 'series 1', 'series 2' and 'series 3' differ by colour "
                           "alone (add a line style, marker, hatch or direct label)")
    assert len(problems) == 3 and all(" apart under " in p for p in problems[1:])
    for line, style, marker in zip(ax.get_lines(), ("-", "--", ":", "-."), "os^D"):
        line.set_linestyle(style)
        line.set_marker(marker)
    ax.legend()
    problems = colour_only_series(fig)
    assert [p.split(":")[1].strip() for p in problems] == ["'series 1' and 'series 2'", "'series 2' and 'series 3'"]
    assert "under protanomaly" in problems[0] and "under deuteranomaly" in problems[1]
    plt.close(fig)


def test_a_colour_blind_safe_palette_with_distinct_marks_passes():
    """The Okabe-Ito colours of lines, bars, a hatched bar, points and a band, each with its own marks,
    pass; so does one colour used twice with two line styles, and lines of one style labelled where they
    are drawn."""
    from kmtbook.figure_checks import colour_only_series, figure_problems

    colours = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000", "#999999"]
    fig, (ax, other) = plt.subplots(1, 2)
    for i, (style, marker) in enumerate(zip(("-", "--", ":"), "os^")):
        ax.plot([0, 1], [i, i + 1], style, marker=marker, color=colours[i], label=f"line {i}")
    ax.bar([3], [1], color=colours[3], label="bar")
    ax.bar([4], [1], color=colours[4], hatch="//", label="hatched bar")
    ax.scatter([5], [1], color=colours[5], marker="v", label="points")
    ax.fill_between([0, 1], [5, 5], [6, 6], color=colours[8], alpha=0.4, label="band")
    ax.legend(loc="upper left", bbox_to_anchor=(0, -0.1))
    other.plot([0, 1], [0, 1], color="k", label="mean")
    other.plot([0, 1], [0, 2], "--", color="k", label="median")
    other.plot([0, 1], [1, 2], color=colours[0], label="random")
    other.plot([0, 1], [2, 3], color=colours[1], label="k-means++")
    other.text(0.2, 1.4, "random", fontsize=8)
    other.text(0.2, 2.4, "k-means++", fontsize=8)
    other.legend(loc="upper left", bbox_to_anchor=(0, -0.1))
    assert colour_only_series(fig) == []
    assert not figure_problems(fig)
    plt.close(fig)


def test_look_alike_series_and_a_figure_legend_are_checked():
    from kmtbook.figure_checks import colour_distances, colour_only_series, simulate_cvd

    fig, (a, b) = plt.subplots(1, 2)
    a.plot([0, 1], [0, 1], color="#1f77b4", label="trained layer")
    b.plot([0, 1], [0, 1], color="#2077b5", label="Lloyd")
    fig.legend()
    problems = colour_only_series(fig)
    assert any(p.startswith("figure legend: 'trained layer' and 'Lloyd' look alike") for p in problems), problems
    plt.close(fig)
    # the simulation itself: red and green, far apart with full colour vision, near under deuteranopia
    red, green = (0.84, 0.15, 0.16), (0.17, 0.63, 0.17)
    distances = colour_distances(red, green)
    assert distances["normal"] > 40 and distances["deuteranomaly"] < 10
    assert np.allclose(simulate_cvd((0.5, 0.5, 0.5), "deuteranomaly"), 0.5, atol=0.01), "greys stay grey"


def test_save_figure_records_series_told_apart_by_colour_alone(tmp_path):
    from kmtbook.chapter import Chapter

    chapter = Chapter("01_kmeans_and_lloyd", device="cpu", seed=0, profile="quick", output_dir=str(tmp_path),
                      sizes={})
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], color="C0", label="random starts")
    ax.plot([0, 1], [1, 2], color="C1", label="k-means++ starts")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1))
    chapter.save_figure(fig, "fig-demo")
    assert chapter.figure_problems == ["fig-demo: (untitled panel): 'random starts' and 'k-means++ starts' differ "
                                       "by colour alone (add a line style, marker, hatch or direct label)"]
    plt.close(fig)


def test_the_book_style_tells_six_default_lines_apart():
    """Six lines drawn without a style of their own: under seaborn's plain theme they differ by colour
    alone (and some colours merge under a deficiency); under the book's style they do not."""
    import matplotlib as mpl
    import seaborn as sns

    from kmtbook.figure_checks import colour_only_series
    from kmtbook.plotting import set_book_style

    def six_lines():
        fig, ax = plt.subplots()
        for i in range(6):
            ax.plot([0, 1, 2], [i, i + 1, i], label=f"series {i}")
        ax.legend()
        problems = colour_only_series(fig)
        plt.close(fig)
        return problems

    with mpl.rc_context():
        sns.set_theme(style="whitegrid", context="notebook")
        assert any("differ by colour alone" in p for p in six_lines())
        set_book_style()
        assert six_lines() == []
