"""The whole book as one PDF, printed by Chromium from a single-page build of the same execution.

The book command (``nox -s book``) first builds the HTML; this module then builds the book once more
with Sphinx's ``singlehtml`` builder into the same output folder, so Jupyter Book finds every chapter
in the execution cache the HTML build filled (no chapter runs again), and prints that one page with
headless Chromium after MathJax has typeset it (``--virtual-time-budget`` lets the page's scripts
finish before printing). The PDF lands beside the HTML as ``kmt-book.pdf``, linked from the book's
first page. Chromium is already what the browser tests use; a TeX installation would be far larger.

Without Chromium the HTML is still built and one line says how to get the PDF; under CI (``CI`` set)
a missing Chromium or a failed print is an error::

    python -m kmtbook.book_pdf --out _build/cpu          # after the HTML build into _build/cpu
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

PDF_NAME = "kmt-book.pdf"
ROOT_PAGE = "book/index.html"  # where the singlehtml builder writes the book's one page
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium() -> str | None:
    """``$KMT_CHROMIUM``, else the first Chromium on the PATH."""
    named = os.environ.get("KMT_CHROMIUM")
    if named:
        return named if Path(named).is_file() else None
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


def build_single_page(root: Path, out: Path, timeout: float = 600) -> Path:
    """The book as one HTML page (``singlehtml``) under ``out``, from the execution cache there.

    The builder writes the links of that page as seen from its output folder's root, so the page is
    copied there (``print.html``) before it is printed."""
    exe = Path(sys.executable).parent / "jupyter-book"
    cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(root), "--builder", "singlehtml",
           "--path-output", str(out), "--keep-going"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    single = out / "_build" / "singlehtml"
    page = single / ROOT_PAGE
    if proc.returncode != 0 or not page.is_file():
        raise RuntimeError(f"the single-page build failed (rc={proc.returncode}, {page} "
                           f"{'written' if page.is_file() else 'missing'}):\n{proc.stdout[-3000:]}\n"
                           f"{proc.stderr[-2000:]}")
    printable = single / "print.html"
    shutil.copyfile(page, printable)
    return printable


def print_pdf(page: Path, pdf: Path, chromium: str, budget_ms: int = 120_000, timeout: float = 600) -> Path:
    """Print ``page`` to ``pdf`` with headless Chromium, after its scripts (MathJax) have run."""
    pdf.parent.mkdir(parents=True, exist_ok=True)
    pdf.unlink(missing_ok=True)
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
           "--disable-background-networking", "--no-pdf-header-footer", f"--virtual-time-budget={budget_ms}",
           f"--print-to-pdf={pdf}", page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if not pdf.is_file() or pdf.stat().st_size == 0:
        raise RuntimeError(f"Chromium printed no PDF (rc={proc.returncode}): {proc.stderr[-2000:]}")
    return pdf


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kmtbook.book_pdf", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the book build's --path-output (e.g. _build/cpu)")
    parser.add_argument("--root", type=Path, default=Path("."), help="the book's folder (default: here)")
    args = parser.parse_args(argv)
    html = args.out / "_build" / "html"
    chromium = find_chromium()
    if chromium is None:
        print(f"kmt: no PDF of the book: Chromium is not installed (Debian: apt-get install chromium); the HTML is "
              f"in {html}; then run python -m kmtbook.book_pdf --out {args.out}")
        return 1 if os.environ.get("CI") else 0
    started = time.perf_counter()
    page = build_single_page(args.root, args.out)
    built = time.perf_counter()
    pdf = print_pdf(page, html / PDF_NAME, chromium)
    done = time.perf_counter()
    print(f"kmt: {pdf} ({pdf.stat().st_size / 1e6:.1f} MB): single-page build {built - started:.0f} s, "
          f"print {done - built:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
