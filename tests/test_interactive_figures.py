"""The book's figures under a slider (kmtbook.moving_figures, kmtbook.html_figures), moved in headless Chromium.

Each page is opened from a file (no server, no kernel), its slider driven with the keyboard as a reader
would, and the figure must change: another frame, another value beside the slider. Nothing may be
fetched from the network and nothing written to the console. The pages are built here from small
inputs; where tests/test_notebooks.py has run chapters 03 and 09 (``_build/quick``), their own pages
are driven too and photographed at two slider positions into ``$KMT_SHOTS`` (when set).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import _book_site as site
import matplotlib
import pytest
import torch

matplotlib.use("Agg")

import kmtlib
from kmtbook.html_figures import data_uri, image_size, slider_html, small_frame, standalone_page
from kmtbook.moving_figures import attention_frames, gamma_text, temperature_frames

BOOK_FIGURES = site.ROOT / "_build" / "cpu" / "_build" / "html" / "figures"  # the book command's published files


def _chapter_page(stem: str, name: str) -> Path:
    """A chapter's page of its own: from the quick run of tests/test_notebooks.py when there is one, else
    as the book command (`nox -s book`, run before the tests in CI) published it beside the figures."""
    quick = site.QUICK / stem / "results" / name
    return quick if quick.is_file() or not (BOOK_FIGURES / name).is_file() else BOOK_FIGURES / name


CHAPTER_PAGES = {"gamma-slider": _chapter_page("03_temperature", "fig-gamma-slider.html"),
                 "attention-steps": _chapter_page("09_inside_the_layer", "fig-inside-attention-steps.html")}


@pytest.fixture(scope="module")
def driver():
    reason = site.browser_missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"the browser check must run in CI: {reason}")
        pytest.skip(reason)
    with site.chromium() as browser:
        browser.set_window_size(1280, 1000)
        yield browser


def _temperature_page(folder: Path) -> Path:
    g = torch.Generator().manual_seed(0)
    X = kmtlib.sample_tasks(1, 300, 2, 3, generator=g).double()
    C0 = kmtlib.init_centers(X, 3, generator=g)
    gammas = [1.0, 100.0, math.inf]
    with torch.no_grad():
        runs = {gm: kmtlib.KMeansTransformer.from_theorem(2, 3, gamma=gm, self_attention="identity").double()(
            X, C0, steps=1) for gm in gammas}
    frames, _ = temperature_frames(X, C0, runs, kmtlib.lloyd(X, C0, 1, empty="mean"))
    body = slider_html(frames, [gamma_text(gm) for gm in gammas], name="gamma-slider", label="gamma", alt="a task")
    page = folder / "gamma.html"
    page.write_text(standalone_page(body, title="t", caption="c", source="s"))
    return page


def _attention_page(folder: Path) -> Path:
    g = torch.Generator().manual_seed(1)
    X = kmtlib.sample_tasks(1, 60, 4, 3, generator=g)
    C0 = kmtlib.init_centers(X, 3, generator=g)
    torch.manual_seed(0)
    model = kmtlib.KMeansTransformer.trainable(4, 3)
    frames, _ = attention_frames(model, X, C0, 3, sample=20)
    body = slider_html(frames, ["1", "2", "3"], name="attention-steps", label="layer step", alt="maps")
    page = folder / "steps.html"
    page.write_text(standalone_page(body, title="t", caption="c", source="s"))
    return page


def _state(driver, name: str) -> dict:
    return driver.execute_script(
        "const img = document.getElementById(arguments[0] + '-frame');"
        "return {src: img.src, value: document.getElementById(arguments[0] + '-value').textContent,"
        " shown: img.complete && img.naturalWidth > 0,"
        " fetched: performance.getEntriesByType('resource').map(e => e.name)};", name)


def _drive(driver, page: Path, name: str, shots: tuple[Path, Path] | None = None) -> None:
    """Open the page, move its slider from its start to its last position, see the figure change."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.get(page.as_uri())
    driver.get_log("browser")  # (empty the console's log of earlier pages)
    before = _state(driver, name)
    figure = driver.find_element(By.ID, name)
    if shots:
        figure.screenshot(str(shots[0]))
    slider = driver.find_element(By.ID, f"{name}-slider")
    slider.send_keys(Keys.END)
    after = _state(driver, name)
    if shots:
        figure.screenshot(str(shots[1]))
    assert before["shown"] and after["shown"], f"{page.name}: a frame did not load"
    assert after["src"] != before["src"], f"{page.name}: the slider moved and the image stayed"
    assert after["value"] != before["value"], f"{page.name}: the value beside the slider did not change"
    assert after["value"] == slider.get_attribute("aria-valuetext")
    assert not after["fetched"], f"{page.name}: fetched {after['fetched'][:3]}"
    assert not driver.get_log("browser"), f"{page.name}: the console has messages"


def test_the_temperature_slider_moves_the_figure(driver, tmp_path):
    _drive(driver, _temperature_page(tmp_path), "gamma-slider")


def test_the_layer_step_slider_moves_the_figure(driver, tmp_path):
    _drive(driver, _attention_page(tmp_path), "attention-steps")


@pytest.mark.parametrize("name", sorted(CHAPTER_PAGES))
def test_the_chapters_slider_pages(driver, name):
    page = CHAPTER_PAGES[name]
    if not page.is_file():
        pytest.skip(f"{page.name}: run the chapter first (tests/test_notebooks.py) or build the book")
    assert page.stat().st_size < 1_000_000, f"{page.name}: {page.stat().st_size} bytes"
    text = page.read_text()
    assert "CC BY 4.0" in text and "MIT" in text and "Source: kmt-book, chapter" in text
    shots = os.environ.get("KMT_SHOTS")
    pair = None
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        pair = (Path(shots) / f"{name}-at-start.png", Path(shots) / f"{name}-at-end.png")
    _drive(driver, page, name, pair)


def test_slider_html_refuses_what_it_cannot_show():
    frame = small_frame(_one_png())
    assert image_size(frame) == (40, 30) and data_uri(frame).startswith("data:image/webp;base64,")
    with pytest.raises(ValueError, match="PNG or WebP"):
        data_uri(b"GIF89a")
    with pytest.raises(ValueError, match="as many"):
        slider_html([frame], ["a", "b"], name="x", label="x", alt="x")
    with pytest.raises(ValueError, match="start"):
        slider_html([frame], ["a"], name="x", label="x", alt="x", start=1)
    with pytest.raises(ValueError, match="name"):
        slider_html([frame], ["a"], name="X y", label="x", alt="x")
    html = slider_html([frame, frame], ["a", "b"], name="x", label="the value", alt="x")
    assert 'type="range"' in html and 'width="20"' in html  # drawn at twice the size it is shown at
    assert html.count("data:image/") == 2, "each frame is stored once (the first as the image's own source)"


def _one_png() -> bytes:
    import io

    from matplotlib.figure import Figure

    fig = Figure(figsize=(0.4, 0.3))
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    return out.getvalue()


ANIMATION_PAGES = [_chapter_page("02_kmeans_transformer", "fig-fig3-motion.html"),
                   _chapter_page("05_training", "fig-trained-motion.html")]


@pytest.mark.parametrize("page", ANIMATION_PAGES, ids=lambda p: p.stem)
def test_the_chapters_animation_pages_are_light_sharp_and_cited(page):
    """Each step-through page of the chapters (run by tests/test_notebooks.py) is under 1 MB, its frames
    at twice the size they are shown at, with caption, source and licence."""
    import base64
    import re

    if not page.is_file():
        pytest.skip(f"{page.name}: run the chapter first (tests/test_notebooks.py) or build the book")
    assert page.stat().st_size < 1_000_000, f"{page.name}: {page.stat().st_size} bytes"
    text = page.read_text()
    assert "CC BY 4.0" in text and "MIT" in text and "Source: kmt-book, chapter" in text
    shown = int(re.search(r'<img width="(\d+)"', text).group(1))
    frame = base64.b64decode(re.search(r'"data:image/webp;base64,([^"]+)"', text).group(1))
    assert image_size(frame)[0] >= 2 * shown
