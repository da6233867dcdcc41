"""The book's figures under a slider and its animations (kmtbook.moving_figures, kmtbook.animations,
kmtbook.html_figures), moved in headless Chromium as every reader would.

Each page is opened from a file (no server, no kernel) and driven with the keyboard: the slider is named,
says each frame's meaning in words (``aria-valuetext``), the frame's text alternative follows it, the
buttons have names, space plays an animation, nothing plays by itself (reduced motion asked for or not),
and at 390 px the controls fit the screen while "Full size" shows the frame with its text at least 9 CSS
pixels tall. Nothing may be fetched from the network and nothing written to the console. The pages are
built here from small inputs; where tests/test_notebooks.py has run chapters 02, 03, 05 and 09
(``_build/quick``), their own pages are driven too and photographed into ``$KMT_SHOTS`` (when set).
"""

from __future__ import annotations

import base64
import io
import itertools
import math
import os
import re
import time
from pathlib import Path

import _book_site as site
import matplotlib
import pytest
import torch

matplotlib.use("Agg")

import kmtlib
from kmtbook.animations import animate_runs, runs_from, save_animation
from kmtbook.figure_checks import MIN_TEXT_PX
from kmtbook.html_figures import (
    Frames,
    data_uri,
    figure_frame,
    frame_layers,
    image_size,
    slider_html,
    small_frame,
    small_frames,
    stacked,
    standalone_page,
)
from kmtbook.moving_figures import attention_frames, gamma_shown, temperature_frames

BOOK_FIGURES = site.ROOT / "_build" / "cpu" / "_build" / "html" / "figures"  # the book command's published files


def _chapter_page(stem: str, name: str) -> Path:
    """A chapter's page of its own: from the quick run of tests/test_notebooks.py when there is one, else
    as the book command (`nox -s book`, run before the tests in CI) published it beside the figures."""
    quick = site.QUICK / stem / "results" / name
    return quick if quick.is_file() or not (BOOK_FIGURES / name).is_file() else BOOK_FIGURES / name


CHAPTER_PAGES = {"gamma-slider": _chapter_page("03_temperature", "fig-gamma-slider.html"),
                 "attention-steps": _chapter_page("09_inside_the_layer", "fig-inside-attention-steps.html"),
                 "fig3-motion": _chapter_page("02_kmeans_transformer", "fig-fig3-motion.html"),
                 "trained-motion": _chapter_page("05_training", "fig-trained-motion.html")}
ANIMATIONS = {"fig3-motion", "trained-motion", "motion"}

PHONE = 390
"""A phone's width in CSS pixels."""


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


GAMMAS = [1.0, 100.0, 1e3, 1e4, math.inf]
"""The slider's inverse temperatures here: the large ones are those whose frames once lost their greys."""


def _temperature(style: bool = True):
    """Frames of a small task of chapter 03's kind, drawn in the chapters' seaborn theme, and the runs."""
    import seaborn as sns

    g = torch.Generator().manual_seed(0)
    X = kmtlib.sample_tasks(1, 300, 2, 3, generator=g).double()
    C0 = kmtlib.init_centers(X, 3, generator=g)
    with torch.no_grad():
        runs = {gm: kmtlib.KMeansTransformer.from_theorem(2, 3, gamma=gm, self_attention="identity").double()(
            X, C0, steps=1) for gm in GAMMAS}
    with matplotlib.rc_context(sns.axes_style("whitegrid") if style else {}):
        frames, _ = temperature_frames(X, C0, runs, kmtlib.lloyd(X, C0, 1, empty="mean"))
    return frames, runs


@pytest.fixture(scope="module")
def temperature():
    return _temperature()


@pytest.fixture(scope="module")
def pages(tmp_path_factory, temperature):
    """The three kinds of moving figure as pages of their own: a slider over gamma, a slider over steps
    (attention maps), an animation with play buttons."""
    folder = tmp_path_factory.mktemp("moving")
    frames, _ = temperature
    body = slider_html(frames, name="gamma-slider", label="Inverse temperature γ")
    (folder / "gamma.html").write_text(standalone_page(body, title="t", caption="c", source="s"))

    g = torch.Generator().manual_seed(1)
    X = kmtlib.sample_tasks(1, 60, 4, 3, generator=g)
    C0 = kmtlib.init_centers(X, 3, generator=g)
    torch.manual_seed(0)
    model = kmtlib.KMeansTransformer.trainable(4, 3)
    steps, _ = attention_frames(model, X, C0, 3, sample=20)
    body = slider_html(steps, name="attention-steps", label="Step of the layer shown")
    (folder / "steps.html").write_text(standalone_page(body, title="t", caption="c", source="s"))

    animation, _ = _animation(steps=4)
    save_animation(animation, folder / "motion.html", "t", caption="c", source="s")
    return {"gamma-slider": folder / "gamma.html", "attention-steps": folder / "steps.html",
            "motion": folder / "motion.html"}


def _animation(steps: int, name: str = "transformer, gamma = 10000"):
    """An animation of chapter 02's kind: Lloyd and a transformer whose name is as long as the chapter's was."""
    g = torch.Generator().manual_seed(3)
    X = kmtlib.sample_tasks(1, 60, 2, 3, generator=g).double()
    C0 = kmtlib.init_centers(X, 3, generator=g)
    lloyd = kmtlib.lloyd(X, C0, steps, empty="mean")
    with torch.no_grad():
        model = kmtlib.KMeansTransformer.from_theorem(2, 3, gamma=1e4, self_attention="identity").double()
        transformer = model(X, C0, steps=steps)
    runs = runs_from({"Lloyd": lloyd, name: transformer}, 0, style={"Lloyd": "-s"})
    return animate_runs(X[0], runs, title="Fig. 3 task", dpi=100, gap=(name, "Lloyd"))


_STATE = """
const root = document.getElementById(arguments[0]);
const img = root.querySelector('img'), slider = root.querySelector('input[type=range]');
const out = root.querySelector('output');
const layers = [...root.querySelectorAll('img.kmt-moving-layer')]
  .map(l => getComputedStyle(l).visibility === 'visible');
return {layers: layers, src: img.src, alt: img.alt, value: slider.value,
        valuetext: slider.getAttribute('aria-valuetext'), readout: out.textContent,
        shown: img.complete && img.naturalWidth > 0,
        fetched: performance.getEntriesByType('resource').map(e => e.name)};
"""


def _state(driver, name: str) -> dict:
    return driver.execute_script(_STATE, name)


def _open(driver, page: Path, reduced_motion: bool = False) -> None:
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [
        {"name": "prefers-reduced-motion", "value": "reduce" if reduced_motion else ""}]})
    driver.get(page.as_uri())
    driver.get_log("browser")  # (empty the console's log of earlier pages)


def _drive(driver, page: Path, name: str, shots: tuple[Path, Path] | None = None) -> None:
    """Open the page, name the slider, step it with → and End, and see the frame, its alternative, the
    readout and the valuetext change together; Home brings back the first frame."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    _open(driver, page)
    figure = driver.find_element(By.ID, name)
    slider = driver.find_element(By.ID, f"{name}-slider")
    assert slider.accessible_name.strip() and slider.accessible_name != "range", f"{page.name}: the slider has no name"
    image = driver.find_element(By.ID, f"{name}-frame")
    assert image.accessible_name.strip() and not re.search(r"\.(png|webp)|data:", image.accessible_name), \
        f"{page.name}: the frame has no alternative of its own"
    if shots:
        figure.screenshot(str(shots[0]))
    slider.send_keys(Keys.HOME)
    seen = [_state(driver, name)]
    slider.send_keys(Keys.ARROW_RIGHT)
    seen.append(_state(driver, name))
    slider.send_keys(Keys.END)
    seen.append(_state(driver, name))
    if shots:
        figure.screenshot(str(shots[1]))
    assert all(s["shown"] for s in seen), f"{page.name}: a frame did not load"
    for state in seen:  # frame i: the first layer and the overlays 1 to i, no more
        value = int(state["value"])
        assert state["layers"] == [k <= value for k in range(len(state["layers"]))], \
            f"{page.name}: at frame {value} the layers shown are {state['layers']}"
    assert seen[1]["value"] == "1" and seen[2]["value"] == slider.get_attribute("max")
    for before, after in itertools.pairwise(seen):
        for key in ("src", "alt", "valuetext", "readout"):
            assert after[key] != before[key], f"{page.name}: the slider moved and the {key} stayed: {after[key]!r}"
    assert seen[2]["valuetext"] == slider.get_attribute("aria-valuetext")
    assert driver.find_element(By.CSS_SELECTOR, f"#{name} .kmt-moving-keys").is_displayed()
    slider.send_keys(Keys.HOME)
    assert _state(driver, name)["alt"] == seen[0]["alt"]
    assert not seen[-1]["fetched"], f"{page.name}: fetched {seen[-1]['fetched'][:3]}"
    assert not driver.get_log("browser"), f"{page.name}: the console has messages"


@pytest.mark.parametrize("name", ["gamma-slider", "attention-steps", "motion"])
def test_the_slider_is_named_says_each_frame_and_moves_by_keys(driver, pages, name):
    _drive(driver, pages[name], name)


def test_the_animation_buttons_are_named_and_space_plays(driver, pages):
    """Every button is a <button> with a name; space (on the slider) plays from the start and pauses; the
    play button's name says what it will do."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    _open(driver, pages["motion"])
    buttons = driver.find_elements(By.CSS_SELECTOR, "#motion button")
    names = [b.accessible_name for b in buttons]
    assert {"Play", "Next step", "Previous step", "First frame", "Last frame", "Full size"} <= set(names), names
    assert all(b.tag_name == "button" for b in buttons)
    slider = driver.find_element(By.ID, "motion-slider")
    slider.send_keys(Keys.END)
    slider.send_keys(Keys.SPACE)  # at the last frame, play starts again from the first
    play = driver.find_element(By.CSS_SELECTOR, "#motion [data-do=play]")
    assert play.accessible_name == "Pause"
    time.sleep(1.6)  # two frames at 700 ms
    playing = int(_state(driver, "motion")["value"])
    assert 1 <= playing < 4, f"space did not play from the start (frame {playing})"
    slider.send_keys(Keys.SPACE)
    paused = _state(driver, "motion")["value"]
    time.sleep(1.0)
    assert _state(driver, "motion")["value"] == paused and play.accessible_name == "Play"
    driver.find_element(By.CSS_SELECTOR, "#motion [data-do=next]").click()
    assert int(_state(driver, "motion")["value"]) == int(paused) + 1


_SHOT = """
const img = document.getElementById(arguments[0]), whole = document.createElement('img');
whole.id = 'whole'; whole.src = arguments[1]; whole.width = img.width; whole.height = img.height;
whole.style.display = 'block'; document.body.prepend(whole);
return whole.decode().then(() => true);
"""


def test_the_stacked_layers_look_as_the_frame_does(driver, pages, temperature):
    """Shown at half the size they are drawn at, the stacked layers of the last frame look as that frame
    shown whole: no ghost of an earlier frame at the edge of what changed (the overlays reach a margin
    past it, where the layers under them show the same pixels): under 0.1 % of the pixels differ by more
    than 2 levels."""
    import numpy as np
    from PIL import Image
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    frames, _ = temperature
    _open(driver, pages["gamma-slider"])
    driver.find_element(By.ID, "gamma-slider-slider").send_keys(Keys.END)
    assert driver.execute_script(_SHOT, "gamma-slider-frame", data_uri(frames.images[-1]))
    shots = []
    for element in (driver.find_element(By.CSS_SELECTOR, "#gamma-slider .kmt-moving-stack"),
                    driver.find_element(By.ID, "whole")):
        shots.append(np.asarray(Image.open(io.BytesIO(element.screenshot_as_png)).convert("RGB"), dtype=int))
    assert shots[0].shape == shots[1].shape
    difference = np.abs(shots[0] - shots[1]).max(axis=-1)
    off = int((difference > 2).sum())  # (without the margin 1.4 %; with it 0.04 %, lone pixels of the scaling)
    assert off < 0.001 * difference.size, f"{off} of {difference.size} pixels differ, by up to {difference.max()}"


@pytest.mark.parametrize("name", ["motion", "gamma-slider"])
def test_nothing_plays_by_itself_under_reduced_motion(driver, pages, name):
    _open(driver, pages[name], reduced_motion=True)
    assert driver.execute_script("return matchMedia('(prefers-reduced-motion: reduce)').matches")
    before = _state(driver, name)
    time.sleep(1.6)
    assert _state(driver, name)["src"] == before["src"], "the figure moved by itself"


_FIT = """
const root = document.getElementById(arguments[0]), img = root.querySelector('img');
const width = document.documentElement.clientWidth;
const beyond = [...root.querySelectorAll('label, input, output, button, p, .kmt-moving-controls')]
  .filter(e => e.getBoundingClientRect().right > width + 0.5 || e.getBoundingClientRect().left < -0.5)
  .map(e => e.tagName + ' ' + (e.id || e.className) + ' ' + Math.round(e.getBoundingClientRect().right));
const out = root.querySelector('output').getBoundingClientRect();
return {beyond: beyond, readout: [out.left, out.right], scroll: document.documentElement.scrollWidth, width: width,
        text: img.getBoundingClientRect().width / img.naturalWidth * Number(img.dataset.textPx)};
"""


def _on_a_phone(driver, page: Path, name: str, shots: Path | None = None) -> dict:
    """At 390 px: controls and readout within the screen; "Full size" shows the frame's smallest text at
    least 9 CSS pixels tall (its rendered width over its pixel width, times the font's height in pixels at the
    frame's dpi), its controls still within the screen; Escape brings the page back."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    site.as_phone(driver, PHONE)
    try:
        _open(driver, page)
        inline = driver.execute_script(_FIT, name)
        if shots:
            driver.save_screenshot(str(shots.with_name(shots.stem + "-inline.png")))
        assert not inline["beyond"], f"{page.name}: beyond the {PHONE}-px screen: {inline['beyond']}"
        assert inline["scroll"] <= PHONE, f"{page.name}: the page scrolls sideways ({inline['scroll']} px)"
        full = driver.find_element(By.CSS_SELECTOR, f"#{name} [data-do=full]")
        full.click()
        assert full.get_attribute("aria-pressed") == "true"
        zoomed = driver.execute_script(_FIT, name)
        if shots:
            driver.save_screenshot(str(shots.with_name(shots.stem + "-full.png")))
        assert zoomed["text"] >= MIN_TEXT_PX, f"{page.name}: full size, smallest text {zoomed['text']:.1f} px"
        assert not zoomed["beyond"], f"{page.name}: full size, beyond the screen: {zoomed['beyond']}"
        driver.find_element(By.ID, f"{name}-slider").send_keys(Keys.ESCAPE)
        assert full.get_attribute("aria-pressed") == "false"
        return {"inline": inline, "full": zoomed}
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@pytest.mark.parametrize("name", ["gamma-slider", "attention-steps", "motion"])
def test_on_a_phone_the_controls_fit_and_the_frame_can_be_read(driver, pages, name):
    _on_a_phone(driver, pages[name], name)


@pytest.mark.parametrize("name", sorted(CHAPTER_PAGES))
def test_the_chapters_moving_pages(driver, name):
    """Each moving figure's page of its own (run by tests/test_notebooks.py) is under 1 MB, cited, and works
    with the keyboard and on a phone, as the small pages above do."""
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
    measured = _on_a_phone(driver, page, name, Path(shots) / f"{name}-{PHONE}.png" if shots else None)
    print(f"{name} at {PHONE} px: readout x = {measured['inline']['readout'][0]:.0f}-"
          f"{measured['inline']['readout'][1]:.0f}, frame text {measured['inline']['text']:.1f} px inline, "
          f"{measured['full']['text']:.1f} px full size")
    shown = int(re.search(r'<img id="[^"]+" src="[^"]+" alt="[^"]*" width="(\d+)"', text).group(1))
    frame = base64.b64decode(re.search(r'data:image/webp;base64,([^"]+)"', text).group(1))
    assert image_size(frame)[0] >= 2 * shown, "frames drawn at twice the size they are shown at"


def test_the_numbers_in_words_are_the_frames_own(temperature):
    """Each frame's valuetext and alternative carry its gamma and the objectives it was drawn from, and no two
    frames share one."""
    frames, runs = temperature
    lloyd_words = frames.valuetexts[0].split("one Lloyd step's ")[1]
    for gamma, valuetext, alt in zip(runs, frames.valuetexts, frames.alts):
        layer = float(runs[gamma].objective[0, 1].log())
        assert valuetext == f"γ = {gamma_shown(gamma)}: the layer's log-objective {layer:.2f}, one Lloyd step's " \
                            f"{lloyd_words}"
        assert f"γ = {gamma_shown(gamma)}" in alt and f"{layer:.2f}" in alt and alt.startswith("Two panels")
    assert len(set(frames.alts)) == len(frames.alts) and len(set(frames.valuetexts)) == len(frames.valuetexts)
    assert gamma_shown(1e4) == "10⁴" and gamma_shown(math.inf) == "∞" and gamma_shown(1000.0) == "1\u2009000"


def test_the_frames_keep_the_figures_greys(temperature):
    """The flat colours kept in every frame: the axes' frame, the grid and the legend's box (the
    theme's grey) and the white ground are in every frame, in about the same number of pixels (the frames do
    not jump). The old 32-colour palette of each frame on its own lost them at gamma = 1 000, 10^4 and inf."""
    import seaborn as sns
    from matplotlib.colors import to_rgb
    from PIL import Image

    frames, _ = temperature
    theme = sns.axes_style("whitegrid")
    greys = {tuple(round(255 * c) for c in to_rgb(theme[key])) for key in ("axes.edgecolor", "grid.color")}
    counts = []
    for gamma, frame in zip(GAMMAS, frames.images):
        with Image.open(io.BytesIO(frame)) as image:
            colours = {colour: count for count, colour in image.convert("RGB").getcolors(1 << 24)}
        counts.append([colours.get(grey, 0) for grey in sorted(greys)])
        assert all(counts[-1]) and colours.get((255, 255, 255), 0), f"gamma = {gamma}: the greys are lost"
    for column in zip(*counts):
        assert max(column) <= 1.25 * min(column), f"the greys' pixels jump from frame to frame: {column}"


def test_small_frames_keep_the_colours_of_most_pixels():
    from PIL import Image

    red, blue = (Image.new("RGB", (20, 10), colour) for colour in ("red", "blue"))
    frames = small_frames([red, blue], colours=4, flat=2)
    palettes = []
    for frame in frames:
        with Image.open(io.BytesIO(frame)) as image:
            palettes.append({c for _, c in image.convert("RGB").getcolors()})
    assert palettes == [{(255, 0, 0)}, {(0, 0, 255)}]
    with pytest.raises(ValueError, match="flat"):
        small_frames([red], colours=4, flat=4)


def _layers_in(html: str) -> list[bytes]:
    """The layers of a player's HTML, in order: the visible image's source stands for its own layer's."""
    top = re.search(r'<img id="[^"]+" src="data:image/webp;base64,([^"]+)"', html)
    layers = re.findall(r'<img class="kmt-moving-layer"( src="data:image/webp;base64,[^"]+")?', html)
    return [base64.b64decode(re.sub(r'^ src="data:image/webp;base64,|"$', "", layer) or top.group(1))
            for layer in layers]


@pytest.mark.parametrize("start", [0, 2])
def test_the_stacked_layers_are_the_frames_pixel_for_pixel(start):
    """The page stores the first frame whole and every later one as an overlay of what changed since the frame
    before; the first layer with the overlays up to frame i composited over it (as the browser stacks them) is
    frame i exactly, a pixel drawn alike in two frames in a row is stored alike, and the layers weigh less than
    the frames."""
    import numpy as np
    from PIL import Image

    animation, fig = _animation(steps=4)
    images = []
    for step in range(animation.steps):
        animation._func(step)
        images.append(figure_frame(fig, 100)[0])
    frames = Frames(small_frames(images), animation.positions, animation.valuetexts, animation.alts, 20.0)
    html = slider_html(frames, name="motion", label="Step", start=start, dpi=100, play_interval=500)
    layers = _layers_in(html)
    assert layers == frame_layers(frames.images) and html.count("data:image/") == len(layers)
    for i, frame in enumerate(frames.images):
        with Image.open(io.BytesIO(frame)) as image:
            assert np.array_equal(np.asarray(stacked(layers, i)), np.asarray(image.convert("RGB"))), f"frame {i}"
    stored = []
    for frame in frames.images:
        with Image.open(io.BytesIO(frame)) as image:
            stored.append(np.asarray(image.convert("RGB")))
    for k in range(1, len(images)):  # drawn alike in a frame and the one before: stored alike (no flicker)
        same = np.all(np.asarray(images[k]) == np.asarray(images[k - 1]), axis=-1)
        assert same.mean() > 0.5 and np.array_equal(stored[k][same], stored[k - 1][same]), f"frame {k}"
    assert all(len(layer) < len(frame) for layer, frame in zip(layers[1:], frames.images[1:]))
    assert sum(map(len, layers)) < 0.7 * sum(map(len, frames.images))
    with pytest.raises(ValueError, match="size"):
        frame_layers([frames.images[0], small_frame(_one_png())])


def test_a_cut_text_is_refused():
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 1), layout="constrained")
    ax = fig.subplots()
    ax.tick_params(labelsize=8)
    ax.set_title("a title far wider than the figure it sits on, cut at both of its edges", fontsize=7)
    with pytest.raises(ValueError, match="cut"):
        figure_frame(fig, 50)
    ax.set_title("short", fontsize=7)
    image, text_px = figure_frame(fig, 50)
    assert image.size == (100, 50) and text_px == pytest.approx(7 * 50 / 72)  # the title's 7 points at 50 dpi


def test_slider_html_refuses_what_it_cannot_show():
    frame = small_frame(_one_png())
    assert image_size(frame) == (40, 30) and data_uri(frame).startswith("data:image/webp;base64,")
    with pytest.raises(ValueError, match="PNG or WebP"):
        data_uri(b"GIF89a")
    with pytest.raises(ValueError, match="as many"):
        Frames([frame], ["a", "b"], ["a", "b"], ["a", "b"], 20.0)
    with pytest.raises(ValueError, match="say something"):
        Frames([frame], ["a"], ["a"], [" "], 20.0)
    frames = Frames([frame, frame], ["a", "b"], ["the a", "the b"], ["frame a", "frame b"], 20.0)
    with pytest.raises(ValueError, match="start"):
        slider_html(frames, name="x", label="x", start=2)
    with pytest.raises(ValueError, match="name"):
        slider_html(frames, name="X y", label="x")
    with pytest.raises(ValueError, match="label"):
        slider_html(frames, name="x", label=" ")
    html = slider_html(frames, name="x", label="the value")
    assert 'type="range"' in html and 'width="20"' in html  # drawn at twice the size it is shown at
    assert html.count("data:image/") == 2, "each frame is stored once (the first as the image's own source)"
    assert 'alt="frame a"' in html and 'aria-valuetext="the a"' in html and "<button" in html
    assert "[data-do=play]" in html and 'data-do="play"' not in html  # a slider has no play button
    assert 'data-do="play"' in slider_html(frames, name="x", label="x", play_interval=500)


def _one_png() -> bytes:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(0.4, 0.3))
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    return out.getvalue()
