"""kmtbook.animations: runs in motion, as HTML with controls that reads nothing from the network."""

from __future__ import annotations

import math
import re

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

import kmtlib
from kmtbook.animations import (
    Run,
    animate_runs,
    nearest_centre,
    projection,
    runs_from,
    save_animation,
    self_contained_html,
    show_step,
)


def _task(d: int = 2, steps: int = 3):
    g = torch.Generator().manual_seed(3)
    X = kmtlib.sample_tasks(1, 60, d, 3, generator=g).double()
    C0 = kmtlib.init_centers(X, 3, generator=g)
    return X, kmtlib.lloyd(X, C0, steps, empty="mean")


def test_nearest_centre_and_projection():
    X = torch.tensor([[0.0, 0.0], [1.0, 1.0], [0.9, 1.2]], dtype=torch.float64)
    centres = torch.tensor([[[0.0, 0.1], [1.0, 1.0]], [[1.0, 1.0], [0.0, 0.1]]], dtype=torch.float64)
    assert nearest_centre(X, centres).tolist() == [[0, 1, 1], [1, 0, 0]]
    mean, P = projection(X)
    assert torch.equal(P, torch.eye(2, dtype=X.dtype)) and not mean.any()  # d = 2 is drawn as it is
    Y = torch.randn(50, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mean, P = projection(Y)
    assert P.shape == (5, 2) and torch.allclose(P.T @ P, torch.eye(2, dtype=Y.dtype), atol=1e-12)


def test_the_html_has_a_frame_per_step_controls_and_no_network():
    X, result = _task(steps=3)
    animation, _ = animate_runs(X[0], runs_from({"Lloyd": result}, 0), title="t", dpi=30)
    html = self_contained_html(animation, name="m")
    assert len(re.findall(r"data:image/webp;base64", html)) == 4  # steps 0..3, as small WebP frames
    assert "data:image/png" not in html
    assert not re.search(r"https?://", html), "the page must read offline"
    for name in ("First frame", "Previous step", "Play", "Next step", "Last frame"):
        assert f'aria-label="{name}"' in html
    assert 'aria-label="Step shown"' not in html and '<label for="m-slider">Step shown</label>' in html
    assert "space play/pause" in html


def test_each_frame_says_its_numbers_in_words():
    """The readout, valuetext and alternative of every step come from the runs drawn: each run's
    log-objective at that step, the gap, and how many drawn points changed centre."""
    X, result = _task(steps=3)
    other = kmtlib.lloyd(X, result.centers[:, 0] + 0.05, 3, empty="mean")
    runs = runs_from({"a": other, "Lloyd": result}, 0)
    animation, _ = animate_runs(X[0], runs, title="t", dpi=30, gap=("a", "Lloyd"))
    for t in range(4):
        a, lloyd = float(runs[0].objective[t]), float(runs[1].objective[t])
        assert animation.positions[t] == f"step {t} of 3"
        assert animation.valuetexts[t] == (f"step {t} of 3: log k-means objective a: {a:.3f}; Lloyd: {lloyd:.3f}; "
                                           f"a minus Lloyd: {a - lloyd:+.3f}")
        assert animation.alts[t].startswith(f"t, step {t} of 3. Scatter plots of 60 points")
    assert "changed their nearest centre" in animation.alts[1] and len(set(animation.alts)) == 4


def test_no_title_is_cut_at_any_step():
    """A long run name (chapter 02's "transformer, gamma = 10000") in a panel's title and in the gap's title
    stays within the figure at every step (it was cut to "transformer, gamma = 10000 minus")."""
    from kmtbook.html_figures import texts_cut

    X, result = _task(steps=2)
    name = "transformer, gamma = 10000"
    runs = runs_from({"Lloyd": result, name: result}, 0)
    animation, fig = animate_runs(X[0], runs, title="Fig. 3 task, n = 10000", dpi=50, gap=(name, "Lloyd"))
    for step in range(3):
        show_step(animation, step)
        assert not texts_cut(fig), f"step {step}: cut {texts_cut(fig)}"


def test_a_still_is_the_frame_of_its_step(tmp_path):
    X, result = _task(d=5, steps=2)
    animation, fig = animate_runs(X[0], runs_from({"a": result, "b": result}, 0), title="t", dpi=30, panels=1)
    assert len(fig.axes) == 2  # one panel of points, the objective
    show_step(animation, 1)
    fig.canvas.draw()  # a later draw (savefig) keeps the still
    assert fig._suptitle.get_text().endswith("step 1 of 2")
    with pytest.raises(ValueError, match="step"):
        show_step(animation, 3)
    page = save_animation(animation, tmp_path / "motion.html", "a title")
    assert page.read_text().startswith("<!DOCTYPE html>") and "a title" in page.read_text()
    html = self_contained_html(animation)
    assert html in save_animation(html, tmp_path / "again.html", "a title").read_text()
    with pytest.raises(ValueError, match=r"\.html"):
        save_animation(animation, tmp_path / "motion.gif", "a title")


def test_bad_runs_are_refused():
    X, result = _task()
    runs = runs_from({"Lloyd": result}, 0)
    with pytest.raises(ValueError, match="one task"):
        animate_runs(X, runs, title="t")
    with pytest.raises(ValueError, match="same T"):
        animate_runs(X[0], [*runs, Run("short", result.centers[0, :2], result.objective[0, :2])], title="t")
    with pytest.raises(ValueError, match="panels"):
        animate_runs(X[0], runs, title="t", panels=2)


def test_what_cannot_be_drawn_is_refused_naming_the_argument():
    """NaN or infinite centres or points, zero frames, zero centres, points of one dimension or of
    the wrong shape: a ValueError naming X or the run, before anything is drawn."""
    X, result = _task(steps=2)
    points, centres, objective = X[0], result.centers[0], result.objective[0].log()

    def drawn(points=points, centres=centres, objective=objective):
        return animate_runs(points, [Run("Lloyd", centres, objective)], title="t", dpi=30)

    for bad in (math.nan, math.inf, -math.inf):
        broken = centres.clone()
        broken[1, 0, 0] = bad
        with pytest.raises(ValueError, match=r"run 'Lloyd': centres must be finite"):
            drawn(centres=broken)
        broken = points.clone()
        broken[5, 1] = bad
        with pytest.raises(ValueError, match=r"X must be finite"):
            drawn(points=broken)
    with pytest.raises(ValueError, match=r"run 'Lloyd': centres must hold at least one step"):
        drawn(centres=centres[:0], objective=objective[:0])
    with pytest.raises(ValueError, match=r"run 'Lloyd': centres must hold .* at least one centre"):
        drawn(centres=centres[:, :0])
    with pytest.raises(ValueError, match=r"X must be the \(n, d\) points .* d >= 2 .* got \(60, 1\)"):
        drawn(points=points[:, :1], centres=centres[..., :1])
    with pytest.raises(ValueError, match=r"X must be the \(n, d\) points .* got \(60,\)"):
        drawn(points=points[:, 0], centres=centres[..., :1])
    with pytest.raises(ValueError, match=r"X must be the \(n, d\) points .* got \(0, 2\)"):
        drawn(points=points[:0])
    animation, _ = drawn()
    for step in (True, 1.5):
        with pytest.raises(ValueError, match="step must be an integer"):
            show_step(animation, step)

def test_the_page_is_light_sharp_and_says_where_it_comes_from(tmp_path):
    """Twenty steps (chapter 05's run) at twice the shown resolution weigh under a megabyte, and the
    page carries its caption, source and licence; the gap panel shows one run minus another."""
    import base64

    from kmtbook.html_figures import image_size

    X, result = _task(steps=20)
    other = kmtlib.lloyd(X, result.centers[:, 0] + 0.02, 20, empty="mean")
    runs = runs_from({"a": other, "Lloyd": result}, 0)
    animation, fig = animate_runs(X[0], runs, title="t", gap=("a", "Lloyd"))
    assert fig.axes[-1].get_title() == "a\nminus Lloyd"
    page = save_animation(animation, tmp_path / "motion.html", "a title", caption="the caption", source="chapter 5")
    text = page.read_text()
    assert page.stat().st_size < 1_000_000
    assert "the caption" in text and "chapter 5" in text and "CC BY 4.0" in text and "MIT" in text
    frames = re.findall(r'"data:image/webp;base64,([^"]+)"', text)
    width, height = image_size(base64.b64decode(frames[0]))
    shown = int(re.search(r'<img id="[^"]+" src="[^"]+" alt="[^"]*" width="(\d+)"', text).group(1))
    # twice the pixels per shown pixel, and over four times the pixels of the old 678 x 240 frames
    assert width >= 2 * shown and width * height >= 4 * 678 * 240
    with pytest.raises(ValueError, match="gap"):
        animate_runs(X[0], runs, title="t", gap=("a", "b"))
