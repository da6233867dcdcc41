"""Figures a reader can move, in HTML that needs neither a kernel nor the network.

A figure under a slider is a handful of frames drawn beforehand by matplotlib (one per slider
position), embedded in the page as image data and swapped by an ``<input type="range">`` with a few
lines of JavaScript: :func:`slider_html`. A step-through animation (:mod:`kmtbook.animations`) is the
same player with play and step buttons. The frames are lossless WebP images of few colours, one
palette for the whole set (:func:`small_frames`), drawn at twice the resolution they are shown at, and
stored as layers: the first frame whole, every later one as an overlay of only the pixels that changed
since the frame before (:func:`frame_layers`), the player showing frame i by stacking the first i + 1
layers, so that chapter 05's 21 frames weigh well under half a megabyte. :func:`standalone_page` writes such a figure as
a page of its own, with its caption, its source and the licence.

Every reader can use the player: the slider is named and says, in words, what each frame shows and
its key numbers (``aria-valuetext``), the image's text alternative follows the frame, the buttons are
buttons with names, the keys (arrows, Home, End, space for play) are said beside the controls,
nothing plays by itself, and on a phone the controls wrap within the screen while a "Full size"
button shows the frame at the size it was drawn for (its text at least 9 CSS pixels), to pan across.

Why not a plotting library that writes interactive HTML: plotly's self-contained page inlines its
3.5 MB script, and matplotlib's ``to_jshtml`` player names neither its slider nor its frames. The
frames here are drawn by the same matplotlib code as the figure's still for print, so the page and
the printed figure agree.
"""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np
from matplotlib.figure import Figure

SHOWN_PX_PER_INCH = 100
"""CSS pixels per inch of a figure on the page (the size the book shows its saved figures at)."""

FRAME_DPI = 2 * SHOWN_PX_PER_INCH
"""Pixels per inch of a frame: twice the shown size, sharp on a screen of twice the density."""

LICENCE = "Licence: text and figures CC BY 4.0, code MIT."
"""The book's licence, as a figure's own page states it."""


@dataclass(frozen=True)
class Frames:
    """The frames of a moving figure and what each shows, in words written from the data drawn in them.

    ``images``: the frames (PNG or WebP); ``positions``: the readout beside the slider ("γ = 100");
    ``valuetexts``: the slider's ``aria-valuetext``, the frame's meaning and its key numbers;
    ``alts``: the frame's text alternative (the kind of figure and what this frame shows);
    ``text_px``: the height in the frame's pixels of its smallest font (for the size the page shows it at)."""

    images: list[bytes]
    positions: list[str]
    valuetexts: list[str]
    alts: list[str]
    text_px: float

    def __post_init__(self) -> None:
        counts = {len(self.images), len(self.positions), len(self.valuetexts), len(self.alts)}
        if len(counts) != 1 or not self.images:
            raise ValueError("frames need as many positions, valuetexts and alts as images, and at least one; got "
                             f"{len(self.images)}, {len(self.positions)}, {len(self.valuetexts)}, {len(self.alts)}")
        if any(not text.strip() for text in (*self.positions, *self.valuetexts, *self.alts)):
            raise ValueError("every frame needs a position, a valuetext and an alt that say something")


def small_frames(images: Sequence, colours: int = 32, flat: int = 2) -> list[bytes]:
    """Images (PNG or other, or PIL images) of one moving figure as frames for a page: ``colours`` colours
    each (no dithering: flat areas stay flat), stored as lossless WebP, which holds such a frame in
    about three quarters of the bytes of the same palette as PNG. Every frame keeps, exactly, the ``flat``
    colours that cover the most pixels over all frames (in the book's theme the
    white ground and the grey of the axes' frame, grid and legend boxes); the rest of its palette is its
    own. Quantised alone, a frame of many data colours traded the greys away (chapter 03's frames at
    gamma = 1 000, 1e4 and inf lost their frames, grid and legend boxes), so the picture jumped. Each colour
    kept costs bytes: chapter 05's 21 frames, 761 KB of page with none kept, 817 KB with two; one palette
    shared by all frames cost more (893 KB).

    A pixel drawn alike in a frame and the frame before it is stored alike too: it keeps the colour it was
    given before (a colour of that frame's palette), so a frame holds its own colours where it differs from
    the one before and may hold more than ``colours`` in all. Quantised on its own, such a pixel took the
    nearest colour of each frame's palette, which moved from frame to frame: the picture flickered where
    nothing changed, and the layers of :func:`frame_layers` carried it (20 steps of chapter 05's kind,
    1120 x 1060 pixels: 122 KB of layers with each frame on its own, 55 KB steady)."""
    from PIL import Image

    if not images or not 0 <= flat < colours <= 256:
        raise ValueError(f"need at least one image and 0 <= flat < colours <= 256, got {len(images)}, {flat}, "
                         f"{colours}")
    opened: list[Image.Image] = []
    for data in images:
        if isinstance(data, Image.Image):
            opened.append(data.convert("RGB"))
            continue
        with Image.open(io.BytesIO(data)) as read:
            opened.append(read.convert("RGB"))
    packed = [_packed(np.asarray(image, dtype=np.int64)) for image in opened]  # each (h * w,): 0xRRGGBB
    seen, counts = np.unique(np.concatenate(packed), return_counts=True)
    kept = _unpacked(seen[np.argsort(-counts, kind="stable")[:flat]])  # the colours of the most pixels
    frames: list[bytes] = []
    before: tuple[tuple[int, int], np.ndarray, np.ndarray] | None = None  # the frame before: size, drawn, stored
    for frame, pixels in zip(opened, packed):
        own = frame.quantize(colors=colours - flat, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
        palette = np.concatenate([np.reshape(np.asarray(own.getpalette() or [], dtype=np.int64), (-1, 3))
                                  [: colours - flat], kept])
        indexed = np.array(own)
        for entry, colour in enumerate(_packed(kept[None]), start=colours - flat):
            indexed[(pixels == colour).reshape(indexed.shape)] = entry  # kept exactly, in every frame
        stored = palette[indexed].astype(np.uint8)  # (h, w, 3)
        if before is not None and before[0] == frame.size:
            same = (pixels == before[1]).reshape(indexed.shape)  # drawn alike: stored alike (steady, and light)
            stored[same] = before[2][same]
        before = frame.size, pixels, stored
        out = io.BytesIO()
        Image.fromarray(stored, "RGB").save(out, format="webp", lossless=True, quality=100, method=5)
        frames.append(out.getvalue())
    return frames


def _packed(pixels: np.ndarray) -> np.ndarray:
    """RGB pixels ``(h, w, 3)`` as one integer each, 0xRRGGBB, ``(h * w,)``."""
    return (pixels[..., 0] << 16 | pixels[..., 1] << 8 | pixels[..., 2]).reshape(-1)


def _unpacked(colours: np.ndarray) -> np.ndarray:
    """Colours packed as 0xRRGGBB back to ``(m, 3)``."""
    return np.stack([colours >> 16, colours >> 8 & 255, colours & 255], axis=-1)


def small_frame(data: bytes, colours: int = 32) -> bytes:
    """One image as a frame for a page (:func:`small_frames` of one)."""
    return small_frames([data], colours)[0]


def frame_layers(images: Sequence[bytes], margin: int = 8) -> list[bytes]:
    """The frames of a moving figure as layers to stack: the first frame whole, then for every later frame an
    overlay of the pixels that differ from the frame before it and those within ``margin`` pixels of them,
    opaque, and transparent elsewhere (lossless WebP, which holds a transparent area in almost nothing).
    Frame ``i`` is the first layer with the overlays ``1`` to ``i`` drawn over it in order (:func:`stacked`),
    which a browser does by showing those ``<img>`` one over the other: random access without a script that
    paints. One frame to the next of a step-through animation or a slider changes a few per cent of the
    pixels. The margin is for the page, which shows the frames scaled down: there an overlay's edge is
    blended with the layers under it, and cut at the changed pixels themselves it let the earlier frame
    show through as a ghost (the last frame of a slider of chapter 03's kind at half size in Chromium:
    3 138 of its 227 800 screen pixels off by more than 2 levels against the frame shown whole; 95 with
    the margin)."""
    from PIL import Image

    if not images or margin < 0:
        raise ValueError(f"need at least one frame and a margin of 0 or more, got {len(images)}, {margin}")
    layers = [images[0]]
    before = _rgb(images[0])
    for data in images[1:]:
        pixels = _rgb(data)
        if pixels.shape != before.shape:
            raise ValueError(f"the frames differ in size: {before.shape[1::-1]} and {pixels.shape[1::-1]}")
        changed = _grown(np.any(pixels != before, axis=-1), margin)
        overlay = np.zeros((*changed.shape, 4), dtype=np.uint8)
        overlay[changed, :3] = pixels[changed]
        overlay[changed, 3] = 255
        out = io.BytesIO()
        Image.fromarray(overlay, "RGBA").save(out, format="webp", lossless=True, quality=100, method=5)
        layers.append(out.getvalue())
        before = pixels
    return layers


def _grown(mask: np.ndarray, margin: int) -> np.ndarray:
    """A mask grown by ``margin`` pixels every way (a square's dilation)."""
    grown = mask.copy()
    for axis in (0, 1):
        spread = grown.copy()
        for shift in range(1, margin + 1):
            if shift >= grown.shape[axis]:
                break
            ahead = [slice(None)] * 2
            behind = [slice(None)] * 2
            ahead[axis], behind[axis] = slice(shift, None), slice(None, -shift)
            spread[tuple(ahead)] |= grown[tuple(behind)]
            spread[tuple(behind)] |= grown[tuple(ahead)]
        grown = spread
    return grown


def stacked(layers: Sequence[bytes], frame: int):
    """Frame ``frame`` of :func:`frame_layers` as the browser shows it: the first layer with the overlays up to
    ``frame`` alpha-composited over it, as an RGB PIL image."""
    from PIL import Image

    with Image.open(io.BytesIO(layers[0])) as first:
        image = first.convert("RGBA")
    for data in layers[1 : frame + 1]:
        with Image.open(io.BytesIO(data)) as overlay:
            image.alpha_composite(overlay.convert("RGBA"))
    return image.convert("RGB")


def _rgb(image: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(image)) as opened:
        return np.asarray(opened.convert("RGB"))


def drawn_texts(fig: Figure) -> list:
    """The figure drawn once on its canvas, and the text artists that draw put on it (not, say, the labels of
    ticks outside the axes' view, which matplotlib keeps but does not draw), each once."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not hasattr(fig.canvas, "get_renderer"):
        FigureCanvasAgg(fig)
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    drawn: dict[int, object] = {}
    draw_text = renderer.draw_text

    def record(gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if mtext is not None and s.strip():
            drawn[id(mtext)] = mtext
        return draw_text(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)

    renderer.draw_text = record
    try:
        fig.draw(renderer)
    finally:
        del renderer.draw_text
    return list(drawn.values())


def texts_cut(fig: Figure, texts: Sequence | None = None) -> list[str]:
    """The texts of the figure that reach outside it (a title cut at the figure's edge); ``texts``: those
    of a draw just made (:func:`drawn_texts`; default: draw it now)."""
    texts = drawn_texts(fig) if texts is None else texts
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    page = fig.bbox
    cut = []
    for text in texts:
        box = text.get_window_extent(renderer)
        if box.x0 < page.x0 - 1 or box.x1 > page.x1 + 1 or box.y0 < page.y0 - 1 or box.y1 > page.y1 + 1:
            cut.append(text.get_text())
    return cut


def figure_frame(fig: Figure, dpi: float = FRAME_DPI):
    """The figure drawn once at ``dpi`` (its own dpi set to it): its image, for :func:`small_frames`, and the
    height in pixels of the smallest font it draws. A ValueError if a text of it is cut at its edge."""
    from PIL import Image

    if fig.dpi != dpi:
        fig.set_dpi(dpi)
    texts = drawn_texts(fig)
    cut = texts_cut(fig, texts)
    if cut:
        raise ValueError(f"texts cut at the figure's edge: {cut}")
    if not texts:
        raise ValueError("the figure has no text")
    image = Image.frombuffer("RGBA", fig.canvas.get_width_height(physical=True),
                             fig.canvas.buffer_rgba()).convert("RGB")  # type: ignore[attr-defined]
    return image, min(float(t.get_fontsize()) for t in texts) * dpi / 72


def data_uri(image: bytes) -> str:
    """A PNG or WebP image as a ``data:`` address."""
    return f"data:image/{_image_format(image)};base64," + base64.b64encode(image).decode("ascii")


def _image_format(image: bytes) -> str:
    if image[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if image[:4] == b"RIFF" and image[8:12] == b"WEBP":
        return "webp"
    raise ValueError("not a PNG or WebP image: its header's signature is missing")


def image_size(image: bytes) -> tuple[int, int]:
    """Width and height of a PNG or WebP image."""
    from PIL import Image

    _image_format(image)
    with Image.open(io.BytesIO(image)) as opened:
        return opened.size


PLAYER_CSS = """.kmt-moving { max-width: 100%; margin: 0.5em 0; }
.kmt-moving-stack { position: relative; width: fit-content; max-width: 100%; }
.kmt-moving-stack img { display: block; max-width: 100%; height: auto; }
.kmt-moving-stack img.kmt-moving-layer { position: absolute; left: 0; top: 0; width: 100%; height: 100%; }
.kmt-moving-stack img.kmt-moving-top { position: relative; z-index: 1; }
.kmt-moving-controls { display: flex; flex-wrap: wrap; align-items: center; gap: 0.3em 0.6em; max-width: 100%; }
.kmt-moving-controls label { flex: 1 0 100%; }
.kmt-moving-controls input[type="range"] { flex: 1 1 8em; min-width: 0; margin: 0; }
.kmt-moving-controls output { flex: 0 1 auto; min-width: 5em; font-variant-numeric: tabular-nums; }
.kmt-moving-buttons { display: flex; flex-wrap: wrap; gap: 0.3em; }
.kmt-moving-buttons button { min-width: 2.75em; min-height: 2.2em; }
.kmt-moving-keys { flex: 1 0 100%; margin: 0; font-size: 0.85em; }
.kmt-moving :focus-visible { outline: 2px solid currentColor; outline-offset: 2px; }
.kmt-moving.kmt-full { position: fixed; inset: 0; z-index: 2000; margin: 0; padding: 0.5em; box-sizing: border-box;
  display: flex; flex-direction: column; gap: 0.4em; max-width: none;
  background: var(--pst-color-background, #fff); color: var(--pst-color-text-base, #000); }
.kmt-moving.kmt-full .kmt-moving-frame { flex: 1 1 auto; min-height: 0; overflow: auto; }
.kmt-moving.kmt-full .kmt-moving-stack, .kmt-moving.kmt-full .kmt-moving-stack img { max-width: none; }"""
"""The player's own style (its class names begin with ``kmt-moving``; nothing of the book's theme):
the image (the layers of :func:`frame_layers`, stacked) at most as wide as its column, the controls
wrapping within it, a visible focus ring, and
the full-size view, which fills the window and shows the frame at the size it was drawn for."""

_BUTTONS = (("first", "First frame", "&#x21E4;"), ("previous", "Previous step", "&#x25C0;"),
            ("play", "Play", "&#x25B6;"), ("next", "Next step", "&#x25B6;&#x25B6;"), ("last", "Last frame", "&#x21E5;"))
"""The animation's buttons: what each does, its name, its sign (hidden from screen readers, which read the name)."""

_SCRIPT = """(function () {
  var root = document.getElementById(%(name)s), data = %(data)s;
  var slider = root.querySelector("input[type=range]"), image = document.getElementById(%(name)s + "-frame");
  var readout = root.querySelector("output"), full = root.querySelector("[data-do=full]");
  var play = root.querySelector("[data-do=play]"), timer = null;
  var layers = Array.prototype.slice.call(root.querySelectorAll("img.kmt-moving-layer"));
  layers[%(start)d].src = image.src;  // the frame shown first is stored once, as the visible image's source
  data.frames = layers.map(function (layer) { return layer.src; });
  function show(i) {
    i = Math.max(0, Math.min(data.frames.length - 1, i));
    layers.forEach(function (layer, k) { layer.style.visibility = k <= i ? "visible" : "hidden"; });
    slider.value = i; image.src = data.frames[i]; image.alt = data.alts[i];
    slider.setAttribute("aria-valuetext", data.valuetexts[i]); readout.textContent = data.positions[i];
  }
  function stop() {
    if (timer === null) return;
    clearInterval(timer); timer = null;
    play.setAttribute("aria-label", "Play"); play.firstChild.innerHTML = "&#x25B6;";
    readout.setAttribute("aria-live", "polite");
  }
  function toggle() {
    if (!play) return;
    if (timer !== null) { stop(); return; }
    if (Number(slider.value) >= data.frames.length - 1) show(0);
    readout.setAttribute("aria-live", "off");  // no announcement every frame while it plays
    play.setAttribute("aria-label", "Pause"); play.firstChild.innerHTML = "&#x2759;&#x2759;";
    timer = setInterval(function () {
      var i = Number(slider.value) + 1;
      if (i >= data.frames.length) { stop(); return; }
      show(i);
      if (i === data.frames.length - 1) stop();
    }, %(interval)d);
  }
  var moves = {first: function () { return 0; }, previous: function (i) { return i - 1; },
               next: function (i) { return i + 1; }, last: function () { return data.frames.length - 1; }};
  root.querySelectorAll(".kmt-moving-buttons button").forEach(function (button) {
    button.addEventListener("click", function () {
      var what = button.getAttribute("data-do");
      if (what === "play") { toggle(); return; }
      stop(); show(moves[what](Number(slider.value)));
    });
  });
  slider.addEventListener("input", function () { stop(); show(Number(slider.value)); });
  root.addEventListener("keydown", function (event) {
    if (event.key === " " && play && event.target.tagName !== "BUTTON") { event.preventDefault(); toggle(); }
    if (event.key === "Escape" && root.classList.contains("kmt-full")) { full.click(); }
  });
  full.addEventListener("click", function () {
    var on = root.classList.toggle("kmt-full");
    full.setAttribute("aria-pressed", on ? "true" : "false");
  });
})();"""


def slider_html(frames: Frames, *, name: str, label: str, start: int = 0, dpi: float = FRAME_DPI,
                play_interval: int | None = None) -> str:
    """HTML of a figure under a slider: the ``frames`` (drawn at ``dpi``, shown at :data:`SHOWN_PX_PER_INCH`, at
    most the width of their container) and a range input of one step per frame, named ``label`` (what it
    moves: "Inverse temperature γ"), the frame's position beside it and its meaning as the slider's
    ``aria-valuetext``, the image's alt the frame's own. ``play_interval`` (milliseconds per frame) adds
    play and step buttons (an animation); nothing plays until the reader asks. ``name`` makes the ids of
    the page unique."""
    if not 0 <= start < len(frames.images):
        raise ValueError(f"start must index a frame (0 to {len(frames.images) - 1}), got {start}")
    if not re.fullmatch(r"[a-z][a-z0-9-]*", name):
        raise ValueError(f"name must be lower-case letters, digits and hyphens, got {name!r}")
    if not label.strip():
        raise ValueError("label must name what the slider moves")
    width, height = image_size(frames.images[start])
    shown, tall = round(width * SHOWN_PX_PER_INCH / dpi), round(height * SHOWN_PX_PER_INCH / dpi)
    layers = [data_uri(layer) for layer in frame_layers(frames.images)]
    # the visible image (on top, its size the stack's) shows the last layer of the frame: the frame shown first
    # is its own source (stored once: the script gives it to its layer too); the layers under it are hidden
    # from assistive technology, and those above the frame from everyone
    under = []
    for k, uri in enumerate(layers):
        source = "" if k == start else f' src="{uri}"'
        hidden = ' style="visibility: hidden"' if k > start else ""
        under.append(f'<img class="kmt-moving-layer"{source} alt="" aria-hidden="true" width="{shown}" '
                     f'height="{tall}"{hidden}>')
    data = {"positions": frames.positions, "valuetexts": frames.valuetexts, "alts": frames.alts}
    buttons = "".join(f'<button type="button" data-do="{what}" aria-label="{title}"><span aria-hidden="true">'
                      f"{sign}</span></button>" for what, title, sign in _BUTTONS) if play_interval else ""
    keys = "Keys: ← → step, Home/End first/last" + (", space play/pause" if play_interval else "") + "."
    script = _SCRIPT % {"name": json.dumps(name), "data": json.dumps(data, ensure_ascii=False), "start": start,
                        "interval": play_interval or 0}
    return (
        f'<div class="kmt-moving" id="{name}" role="group" aria-label="{escape(label)}: interactive figure">\n'
        f"<style>{PLAYER_CSS}</style>\n"
        f'<div class="kmt-moving-frame"><div class="kmt-moving-stack">'
        f'<img id="{name}-frame" src="{layers[start]}" alt="{escape(frames.alts[start])}" width="{shown}" '
        f'height="{tall}" data-text-px="{frames.text_px:.2f}" data-dpi="{dpi:g}" class="kmt-moving-top">'
        f'{"".join(under)}</div></div>\n'
        f'<div class="kmt-moving-controls" style="max-width: {shown}px;">'
        f'<label for="{name}-slider">{escape(label)}</label>'
        f'<input type="range" id="{name}-slider" min="0" max="{len(frames.images) - 1}" step="1" value="{start}" '
        f'aria-valuetext="{escape(frames.valuetexts[start])}">'
        f'<output id="{name}-value" for="{name}-slider" aria-live="polite">{escape(frames.positions[start])}</output>'
        f'<div class="kmt-moving-buttons">{buttons}'
        '<button type="button" data-do="full" aria-pressed="false">Full size</button></div>'
        f'<p class="kmt-moving-keys">{keys}</p>'
        "</div>\n"
        f"<script>{script}</script>\n</div>"
    )


CSS = """body { font-family: sans-serif; max-width: 60em; margin: 1em auto; padding: 0 1em; line-height: 1.4; }
p.kmt-caption { font-size: 0.95em; }
p.kmt-source { font-size: 0.85em; color: #444; }"""


def standalone_page(body: str, *, title: str, caption: str, source: str, css: str = "") -> str:
    """A page of its own for an interactive figure: ``body`` (its HTML), then its ``caption``, its
    ``source`` (which chapter of the book it comes from) and the book's licence."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<style>{CSS}\n{css}</style></head>\n<body>\n<main>\n<h1>{escape(title)}</h1>\n{body}\n"
            f'<p class="kmt-caption">{escape(caption)}</p>\n'
            f'<p class="kmt-source">Source: {escape(source)}. {escape(LICENCE)}</p>\n</main>\n</body></html>\n')
