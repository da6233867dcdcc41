"""The run context every book chapter uses: device, seeded generators, output folder, figures, metrics.

A chapter's parameters cell holds plain literals (so papermill can override them); the cell after it
calls :func:`open_chapter`, which checks them against the chapter's spec
(:mod:`kmtbook.chapter_specs`), fills the sizes left at ``0`` from the chosen profile and returns a
:class:`Chapter`.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from kmtlib import __version__
from kmtlib.device import resolve_device

from .chapter_specs import SPECS
from .citation import BookCitation
from .figure_metadata import FigureCredit
from .parameters import ChapterSpec, ParameterError, check_passed_parameters, kernel_history, passed_parameters
from .repo_root import find_repo_root

SAVED_DPI = 150  # the PNG a reader cites; the page shows it at the figure's own size (its dpi)


def show_saved_png(fig, png: Path) -> None:
    """In a notebook kernel, close ``fig`` and display ``png`` (written from it at ``SAVED_DPI``) at
    the size the figure itself would take on the page. Elsewhere (a script, a test) do nothing."""
    try:
        from IPython import get_ipython
    except ImportError:  # the book's own environment has IPython; a bare script need not
        return
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return
    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    data = png.read_bytes()
    plt.close(fig)
    display(Image(data=data, format="png", width=round(_png_width(data) * fig.dpi / SAVED_DPI)))


def _png_width(data: bytes) -> int:
    """The pixel width of a PNG from its header (the IHDR chunk's first field)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG: the header's signature is missing")
    return int.from_bytes(data[16:20], "big")


def open_chapter(chapter: str | ChapterSpec, namespace: Mapping[str, Any]) -> Chapter:
    """Check a chapter's parameters against its spec and return its run context.

    The one call a chapter makes after its parameters cell::

        chapter = kmtbook.open_chapter("03_temperature", globals())

    ``chapter`` is a stem of :data:`kmtbook.chapter_specs.SPECS` (or a :class:`ChapterSpec`);
    ``namespace`` holds the values the parameters cell and papermill set (the notebook's globals;
    only the names the spec declares are read). A parameter that papermill passed but the chapter
    does not declare, a value of the wrong type or out of its bounds, or an unknown profile raises
    :class:`ParameterError` naming the parameter, before anything is written.
    """
    spec = SPECS[chapter] if isinstance(chapter, str) else chapter
    history = kernel_history()
    found = passed_parameters(history) if history is not None else None
    if found is not None:
        check_passed_parameters(*found)
    values, overridden = spec.resolve(namespace)
    sizes = {name: values[name] for name, p in spec.parameters.items() if p.is_size}
    return Chapter(
        spec.stem,
        device=values["device"],
        seed=values["seed"],
        profile=values["profile"],
        output_dir=values["output_dir"],
        sizes=sizes,
        overridden=overridden,
    )


class Chapter:
    """The run context of one chapter (made by :func:`open_chapter`, which checks the values first).

    Args:
        stem: the chapter's file stem, e.g. ``"01_kmeans_and_lloyd"`` (names the default output folder).
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (see :func:`kmtlib.resolve_device`).
        seed: the chapter's master seed (>= 0).
        profile: one of :data:`kmtbook.parameters.PROFILES`.
        output_dir: where figures and ``metrics.json`` go; empty = ``results/<stem>/``; a relative path
            is taken from the repository root.
        sizes: the size parameters, the profile's values filled in; ``chapter[name]`` reads one.
        overridden: the sizes the run set explicitly (printed by :meth:`describe`).
    """

    def __init__(
        self,
        stem: str,
        *,
        device: str,
        seed: int,
        profile: str,
        output_dir: str,
        sizes: Mapping[str, Any],
        overridden: Sequence[str] = (),
    ) -> None:
        self.started = time.perf_counter()
        self.stem = stem
        try:
            self.device = resolve_device(device)
        except (ValueError, RuntimeError, TypeError) as err:
            raise ParameterError(f"parameter device: {err}") from err
        self.seed = int(seed)
        self.profile = profile
        self.sizes = dict(sizes)
        self.overridden = sorted(overridden)
        self.root = find_repo_root()
        # A relative folder is taken from the repository root, where the printed commands are run
        # (chapters themselves run with cwd book/).
        self.output_dir = self.root / (output_dir or Path("results") / stem)
        try:
            self.output_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ParameterError(
                f"parameter output_dir: cannot create the folder {self.output_dir}: {err.strerror or err}"
            ) from err
        if not os.access(self.output_dir, os.W_OK):
            raise ParameterError(f"parameter output_dir: the folder {self.output_dir} is not writable")
        self.metrics: dict[str, Any] = {}
        self.figures: list[str] = []
        self.figure_problems: list[str] = []
        self._citation: BookCitation | None = None  # read when the first figure is saved
        self.figure_text_px: list[float | None] = []  # per figure: its smallest text on the page, CSS px
        # Names this run: printed by describe() into the executed notebook and stored in metrics.json,
        # so the book build can tell whether the files in output_dir belong to the page it renders.
        self.run_id = (
            f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}-{time.perf_counter_ns() % 10**6:06d}"
        )

    def __getitem__(self, name: str) -> Any:
        return self.sizes[name]

    def generator(self, offset: int = 0, device: torch.device | str | None = None) -> torch.Generator:
        """A fresh generator seeded with ``seed + offset`` on the chapter's device (or ``device``)."""
        g = torch.Generator(device=torch.device(device) if device is not None else self.device)
        g.manual_seed(self.seed + offset)
        return g

    def describe(self) -> str:
        """One line naming the profile, device, seed and sizes (printed at the top of every chapter)."""
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        extra = f" (overridden: {', '.join(self.overridden)})" if self.overridden else ""
        return (
            f"profile={self.profile}, device={self.device}, seed={self.seed}; {sizes}{extra}; "
            f"output_dir={self.shown_output_dir}; run={self.run_id}"
        )

    @property
    def shown_output_dir(self) -> str:
        """The output folder as the page prints it (see :meth:`shown_path`): ``results/<stem>``."""
        return self.shown_path(self.output_dir)

    def shown_path(self, path: Path | str) -> str:
        """A path as the page prints it: relative to the repository root when it lies inside it, so
        that a page names no folder of the machine that built it; else as given."""
        try:
            return Path(path).resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return str(path)

    def save_figure(self, fig, label: str, data: Any = None) -> None:
        """Write ``<label>.png`` and ``<label>.pdf`` into the output folder and, in a notebook, show
        that PNG as the cell's image (the page shows the very file a reader cites; the figure is
        closed, so it is not drawn a third time for the page).

        ``data``, where the figure's point is in its numbers, is what it plots (a pandas DataFrame or
        a mapping of column -> values; :func:`kmtbook.figure_data.plotted_data` reads a figure's
        lines and bars): written as ``<label>.csv`` beside the PNG, headed by ``# `` lines with the
        same title, text alternative, citation and licence as the PNG (:mod:`kmtbook.figure_data`).

        A figure with a template plural ("3 model(s)") is refused; a legend over plotted points, a
        label outside its panel or text under 9 px at the size the page shows the figure
        (:mod:`kmtbook.figure_checks`) is recorded in ``metrics.json`` under ``figure_problems``,
        which the chapters' tests read; ``figure_text_px`` holds each figure's smallest text. The
        figure then keeps the layout of the checks' draw (its layout engine is set to "none"): draw
        everything before saving."""
        if not label.startswith("fig-"):
            raise ValueError(f"figure labels start with 'fig-', got {label!r}")
        from .figure_checks import (  # matplotlib: only when drawing
            figure_problems,
            small_text,
            template_plurals,
            text_sizes_on_page,
        )

        plurals = template_plurals(fig)
        if plurals:
            raise ValueError(f"figure {label}: write the number's own form (kmtbook.figure_checks.plural), "
                             f"not a template plural: {plurals}")
        self.figure_problems += [f"{label}: {problem}" for problem in figure_problems(fig)]
        # The checks drew the figure, and its layout engine placed the panels. Keep that placement:
        # every later draw (the PNG, the PDF, the page's copy) would otherwise solve the same layout
        # again, which for a grid of panels costs more than drawing it.
        fig.set_layout_engine("none")
        png = self.output_dir / f"{label}.png"
        # Each file names itself: title, citation (version, commit, address), source page, licence.
        credit, authors = self.figure_credit(label)
        fig.savefig(png, dpi=SAVED_DPI, bbox_inches="tight", metadata=credit.png_metadata(authors))
        fig.savefig(self.output_dir / f"{label}.pdf", bbox_inches="tight", metadata=credit.pdf_metadata(authors))
        table = self.output_dir / f"{label}.csv"
        if data is not None:
            from .figure_data import write_figure_csv

            write_figure_csv(table, data, credit.text_lines(authors))
        else:
            table.unlink(missing_ok=True)  # a file of an earlier run would be published as this run's
        png_width = _png_width(png.read_bytes()[:24])
        sizes = text_sizes_on_page(fig, png_width, SAVED_DPI)
        self.figure_text_px.append(round(sizes[0][0], 2) if sizes else None)
        too_small = small_text(fig, png_width, SAVED_DPI)
        if too_small:
            self.figure_problems.append(f"{label}: {too_small}")
        self.figures.append(label)
        show_saved_png(fig, png)

    def figure_credit(self, label: str) -> tuple[FigureCredit, str]:
        """How figure ``label`` of this chapter is cited (:mod:`kmtbook.figure_metadata`), and the book's authors."""
        from .citation import read_citation
        from .figure_metadata import chapter_alternatives, chapter_captions, credit

        if self._citation is None:
            self._citation = read_citation(self.root, __version__, None, os.environ)
        source = self.root / "book" / f"{self.stem}.md"
        caption, alt = chapter_captions(source).get(label), chapter_alternatives(source).get(label)
        return credit(self._citation, self.stem, label, caption, alt), self._citation.authors

    def record(self, **values: Any) -> None:
        """Add key numbers to ``metrics.json`` (plain numbers, strings, lists of numbers).

        A NaN or infinite number is refused with the metric's name: JSON has no such numbers, and a
        missing value is recorded as ``None`` (``null``), which says so."""
        for name, value in values.items():
            if isinstance(value, Mapping):
                # metrics.json is flat (the chapter contract): readers and tests look numbers up by one name
                raise TypeError(f"metric {name!r} is a mapping; record one flat name per number or list")
            plain = _plain(value)
            where = _non_finite(plain)
            if where is not None:
                raise ValueError(
                    f"metric {name!r} is not a finite number{where}: {plain!r:.200}; "
                    "record None for a value that does not exist"
                )
            self.metrics[name] = plain

    def record_finite(self, **values: Any) -> None:
        """Record the values that are finite numbers (as floats) and leave out the others: a measure
        that is undefined for a model (NaN, e.g. of scratch coordinates it does not have)."""
        self.record(**{name: float(value) for name, value in values.items() if math.isfinite(value)})

    def write_metrics(self) -> Path:
        """Write ``metrics.json`` with the recorded numbers and the run's settings."""
        payload = {
            **self.metrics,
            "chapter": self.stem,
            "profile": self.profile,
            "device": str(self.device),
            "seed": self.seed,
            **{f"param_{k}": _plain(v) for k, v in self.sizes.items()},
            "figures": list(self.figures),
            "figure_problems": list(self.figure_problems),
            "figure_text_px": list(self.figure_text_px),
            "kmtlib_version": __version__,
            "torch_version": torch.__version__,
            "python_version": platform.python_version(),
            "wall_seconds": round(time.perf_counter() - self.started, 3),
            "run_id": self.run_id,
        }
        for name, value in payload.items():
            where = _non_finite(value)
            if where is not None:
                raise ValueError(f"metric {name!r} is not a finite number{where}")
        text = json.dumps(payload, indent=2, sort_keys=True, allow_nan=False) + "\n"
        path = self.output_dir / "metrics.json"
        # Written next to the target and renamed over it: a reader sees the old file or the new one,
        # never a part of one, whatever stops the chapter.
        fd, tmp = tempfile.mkstemp(prefix=".metrics-", suffix=".json.tmp", dir=self.output_dir)
        try:
            # mkstemp creates the file private (0600); give it the permissions of any new file (0644 under
            # the usual umask), as the figures beside it have.
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path


_DESCRIBE = re.compile(
    r"profile=(?P<profile>\w+), device=(?P<device>[^,]+), seed=(?P<seed>\d+); (?P<sizes>.*?); "
    r"output_dir=(?P<output_dir>.*?)(?:; run=(?P<run>\S+))?$"
)


def parse_describe(text: str) -> dict[str, str] | None:
    """Read back the line :meth:`Chapter.describe` printed (the first one in ``text`` that matches).

    The book build uses it to tell which profile, device, seed and sizes produced a page and where
    that run wrote its figures; ``None`` when ``text`` holds no such line.
    """
    for line in text.splitlines():
        match = _DESCRIBE.search(line.strip())
        if match:
            found = {k: (v or "") for k, v in match.groupdict().items()}
            found["sizes"] = found["sizes"].split(" (overridden:")[0]
            return found
    return None


def _plain(value: Any) -> Any:
    """Turn tensors, numpy values and nested containers into JSON-friendly Python values."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return value.item() if value.ndim == 0 else value.tolist()
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _non_finite(value: Any, path: str = "") -> str | None:
    """Where in ``value`` (a plain value) a NaN or infinity sits: ``""`` for the value itself,
    ``" at [3]"`` for an element of a list; ``None`` when every number is finite."""
    if isinstance(value, float) and not math.isfinite(value):
        return f" at {path}" if path else ""
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _non_finite(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None
