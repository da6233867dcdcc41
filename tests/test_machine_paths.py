"""No reader-facing file, and no chapter's output, holds an absolute path of the machine that made it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MACHINE_PATH = re.compile(r"(?<![\w.~])(?:/work/|/home/|/root/|/Users/|[A-Za-z]:\\\\)")
READER_FACING = re.compile(
    r"^(book/[^/]+\.(md|bib)|README[^/]*|CONTRIBUTING\.md|CITATION\.cff|references\.bib|_config\.yml"
    r"|data/.+\.(json|md|csv|cff)|kmtlib/pretrained/.+\.md|kmtlib/.+README\.md)$"
)


def _hits(text: str) -> list[str]:
    return [text[max(0, m.start() - 40) : m.end() + 40] for m in MACHINE_PATH.finditer(text)]


def test_the_pattern_finds_machine_paths_and_nothing_else():
    assert _hits("--out /work/runs/x") and _hits('"C:\\\\Users\\\\me"') and _hits("at /home/me/repo")
    assert not _hits("--out runs/x data/weights_any_k/index.json https://example.org/home/x")


def test_no_committed_reader_facing_file_holds_a_machine_path():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    checked = [f for f in files if READER_FACING.match(f)]
    assert any(f.startswith("data/") for f in checked) and "kmtlib/pretrained/README.md" in checked
    found = {f: _hits((ROOT / f).read_text(errors="replace")) for f in checked}
    assert not {f: h for f, h in found.items() if h}


def machine_paths_in_outputs(nb: dict) -> list[str]:
    """What an executed notebook's outputs (printed text, HTML, plain text) show of machine paths.
    tests/test_notebooks.py asks it of every chapter it runs."""
    texts = []
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            texts.append("".join(out.get("text", "")))
            for kind, value in out.get("data", {}).items():
                if kind.startswith("text/"):
                    texts.append("".join(value))
    return _hits("\n".join(texts))


def test_the_output_check_reads_printed_text_and_tables():
    nb = {"cells": [{"outputs": [{"text": ["command: train --out runs/a\n"]},
                                 {"data": {"text/html": ["<td>/home/me/repo/runs/a</td>"]}}]}]}
    found = machine_paths_in_outputs(nb)
    assert len(found) == 1 and "<td>/home/me/repo/runs/a</td>" in found[0]
