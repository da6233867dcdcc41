"""The bibliography reads as text: no LaTeX command that the book's renderer (pybtex) would print raw."""

from __future__ import annotations

import re
from pathlib import Path

BIB = Path(__file__).resolve().parent.parent / "references.bib"
# \emph{...}, \textit{...}: pybtex's plain style shows them as they are typed ("\emph Pygoscelis").
LATEX_COMMAND = re.compile(r"\\(?:emph|textit|textbf|textsc|mathrm|it|bf)\b")


def test_the_check_finds_a_raw_command():
    assert LATEX_COMMAND.search(r"title = {Penguins (Genus \emph{Pygoscelis})}")
    assert not LATEX_COMMAND.search(r"title = {Penguins (Genus {Pygoscelis})}")


def test_no_reference_holds_a_latex_command():
    found = [line.strip() for line in BIB.read_text(encoding="utf-8").splitlines() if LATEX_COMMAND.search(line)]
    assert not found, found
