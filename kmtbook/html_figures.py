"""Figures a reader can move, in HTML that needs neither a kernel nor the network.

A figure under a slider is a handful of frames drawn beforehand by matplotlib (one per slider
position), embedded in the page as image data and swapped by an ``<input type="range">`` with a few
lines of JavaScript: :func:`slider_html`. The frames are lossless WebP images of few colours
(:func:`small_frame`), drawn at twice the resolution they are shown at, so that a page of ten frames stays far under a
megabyte. :func:`standalone_page` writes such a figure (or a step-through animation,
:mod:`kmtbook.animations`) as a page of its own, with its caption, its source and the licence.

Why not a plotting library that writes interactive HTML: plotly's self-contained page inlines its
3.5 MB script, and matplotlib's ``to_jshtml`` labels its slider with the frame's index and brings
play buttons that a slider over a parameter has no use for. The frames here are drawn by the same
matplotlib code as the figure's still for print, so the page and the printed figure agree.
"""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Sequence
from html import escape

from matplotlib.figure import Figure

SHOWN_PX_PER_INCH = 100
"""CSS pixels per inch of a figure on the page (the size the book shows its saved figures at)."""

FRAME_DPI = 2 * SHOWN_PX_PER_INCH
"""Pixels per inch of a frame: twice the shown size, sharp on a screen of twice the density."""

LICENCE = "Licence: text and figures CC BY 4.0, code MIT."
"""The book's licence, as a figure's own page states it."""


def small_frame(data: bytes, colours: int = 32) -> bytes:
    """An image (PNG or other) as a frame for a page: at most ``colours`` colours (no dithering: flat
    areas stay flat; a figure's few colours and their anti-aliased edges survive), stored as lossless
    WebP, which holds such a frame in about three quarters of the bytes of the same palette as PNG
    (the scattered points of a clustering task compress poorly as PNG). Every current browser shows WebP."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        palette = _palette(image, colours)
    out = io.BytesIO()
    palette.save(out, format="webp", lossless=True, quality=100, method=5)
    return out.getvalue()


def _palette(image, colours: int):
    from PIL import Image

    return image.convert("RGB").quantize(colors=colours, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)


def figure_frame(fig: Figure, dpi: float = FRAME_DPI, colours: int = 32) -> bytes:
    """The figure drawn at ``dpi`` as a small frame (:func:`small_frame`)."""
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=dpi)
    return small_frame(out.getvalue(), colours)


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


def slider_html(frames: Sequence[bytes], positions: Sequence[str], *, name: str, label: str, alt: str,
                start: int = 0, dpi: float = FRAME_DPI) -> str:
    """HTML of a figure under a slider: the ``frames`` (PNG or WebP images, drawn at ``dpi``, shown at
    :data:`SHOWN_PX_PER_INCH`, at most the width of their container) and a range input of one step per
    frame, labelled ``label`` and showing the frame's entry of ``positions``. ``name`` makes the ids of
    the page unique; ``alt`` describes the figure for a reader who cannot see it."""
    if not frames or len(frames) != len(positions):
        raise ValueError(f"frames and positions must be as many and at least one, got {len(frames)} and "
                         f"{len(positions)}")
    if not 0 <= start < len(frames):
        raise ValueError(f"start must index a frame (0 to {len(frames) - 1}), got {start}")
    if not re.fullmatch(r"[a-z][a-z0-9-]*", name):
        raise ValueError(f"name must be lower-case letters, digits and hyphens, got {name!r}")
    width, height = image_size(frames[start])
    shown = round(width * SHOWN_PX_PER_INCH / dpi)
    # the starting frame is stored once, as the image's own source, which the script reads back
    uris = json.dumps([None if i == start else data_uri(f) for i, f in enumerate(frames)])
    values = json.dumps(list(positions))
    return (
        f'<div class="kmt-slider-figure" id="{name}">\n'
        f'<img id="{name}-frame" src="{data_uri(frames[start])}" alt="{escape(alt)}" width="{shown}" '
        f'height="{round(height * shown / width)}" style="max-width: 100%; height: auto;">\n'
        f'<div style="display: flex; gap: 0.6em; align-items: center; max-width: {shown}px;">'
        f'<label for="{name}-slider" style="white-space: nowrap;">{escape(label)}</label>'
        f'<input type="range" id="{name}-slider" min="0" max="{len(frames) - 1}" step="1" value="{start}" '
        f'style="flex: 1;" aria-valuetext="{escape(positions[start])}">'
        f'<output id="{name}-value" for="{name}-slider" style="min-width: 4em;">{escape(positions[start])}</output>'
        "</div>\n"
        "<script>(function () {\n"
        f'  var frames = {uris};\n  var values = {values};\n'
        f'  var slider = document.getElementById("{name}-slider");\n'
        f'  var image = document.getElementById("{name}-frame");\n'
        f"  frames[{start}] = image.src;\n"
        f'  var value = document.getElementById("{name}-value");\n'
        '  slider.addEventListener("input", function () {\n'
        "    var i = Number(slider.value);\n"
        "    image.src = frames[i]; value.textContent = values[i];\n"
        '    slider.setAttribute("aria-valuetext", values[i]);\n'
        "  });\n})();</script>\n</div>"
    )


CSS = """body { font-family: sans-serif; max-width: 60em; margin: 1em auto; padding: 0 1em; line-height: 1.4; }
p.kmt-caption { font-size: 0.95em; }
p.kmt-source { font-size: 0.85em; color: #444; }"""


def standalone_page(body: str, *, title: str, caption: str, source: str, css: str = "") -> str:
    """A page of its own for an interactive figure: ``body`` (its HTML), then its ``caption``, its
    ``source`` (which chapter of the book it comes from) and the book's licence."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<style>{CSS}\n{css}</style></head>\n<body>\n<h1>{escape(title)}</h1>\n{body}\n"
            f'<p class="kmt-caption">{escape(caption)}</p>\n'
            f'<p class="kmt-source">Source: {escape(source)}. {escape(LICENCE)}</p>\n</body></html>\n')
