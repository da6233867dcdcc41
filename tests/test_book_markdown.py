"""The chapters' Markdown says what its author meant: no sentence turned into a list by a line break."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")


def accidental_lists(text: str) -> list[tuple[int, str]]:
    """Lines that start an ordered list in the middle of a paragraph: in CommonMark a line "1. ..."
    (or "1) ...") interrupts the paragraph above it, so a sentence wrapped before "1." becomes a list."""
    found, fence, previous = [], None, ""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        marker = re.match(r"^(`{3,}|~{3,}|:{3,})", stripped)
        if marker and (fence is None or marker.group(1)[0] == fence[0]):
            fence = None if fence is not None else marker.group(1)
            previous = ""
            continue
        if fence is None and re.match(r"^1[.)]\s", line) and previous.strip() and not LIST_ITEM.match(previous) \
                and not previous.startswith((" ", "#", "|", ">", "$$", "(")):
            found.append((number, line))
        previous = line if fence is None else ""
    return found


def test_the_check_finds_a_sentence_broken_before_one():
    assert accidental_lists("and it rounds to\n1. So whether\n") == [(2, "1. So whether")]
    assert not accidental_lists("Exercises\n\n1. First\n2. Second\n")
    assert not accidental_lists("```python\nx = 1\n1. not markdown\n```\n")


def test_no_chapter_breaks_a_sentence_into_a_list():
    found = {p.name: accidental_lists(p.read_text()) for p in sorted((ROOT / "book").glob("*.md"))}
    assert not {name: lines for name, lines in found.items() if lines}
