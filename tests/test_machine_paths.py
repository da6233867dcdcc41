"""No reader-facing file, and no chapter's output, holds an absolute path of the machine that made it."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MACHINE_PATH = re.compile(r"(?<![\w.~])(?:/work/|/home/|/root/|/Users/|[A-Za-z]:\\\\)")
"""The beginnings of absolute paths on the machines that build the book (a home or work folder; a
Windows drive). A page may name a temporary folder in an example command (``-p output_dir
/tmp/ch01``); an output may not name this machine's (:func:`_this_machines_paths`)."""


def _this_machines_paths() -> list[str]:
    """The folders of this machine that an output must not name whatever they are called: the
    repository, the home folder and the temporary folder (where a kernel's cells are compiled)."""
    return sorted({str(p) for p in (ROOT, Path.home(), Path(tempfile.gettempdir())) if len(str(p)) > 1}, key=len)
READER_FACING = re.compile(
    r"^(book/[^/]+\.(md|bib)|README[^/]*|CONTRIBUTING\.md|CITATION\.cff|references\.bib|_config\.yml"
    r"|data/.+\.(json|md|csv|cff)|kmtlib/pretrained/.+\.md|kmtlib/.+README\.md)$"
)


def _hits(text: str, this_machine: bool = False) -> list[str]:
    """The places in ``text`` that name a machine's absolute path; ``this_machine``: also any of
    this machine's own folders (:func:`_this_machines_paths`), whatever they are called."""
    found = {m.start(): m.end() for m in MACHINE_PATH.finditer(text)}
    for folder in _this_machines_paths() if this_machine else ():
        for m in re.finditer(r"(?<![\w.~/])" + re.escape(folder) + r"(?![\w.-])", text):
            found.setdefault(m.start(), m.end())
    return [text[max(0, start - 40) : end + 40] for start, end in sorted(found.items())]


def test_the_pattern_finds_machine_paths_and_nothing_else():
    assert _hits("--out /work/runs/x") and _hits('"C:\\\\Users\\\\me"') and _hits("at /home/me/repo")
    assert not _hits("--out runs/x data/weights_any_k/index.json https://example.org/home/x")


def test_no_committed_reader_facing_file_holds_a_machine_path():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    checked = [f for f in files if READER_FACING.match(f)]
    assert any(f.startswith("data/") for f in checked) and "kmtlib/pretrained/README.md" in checked
    found = {f: _hits((ROOT / f).read_text(errors="replace")) for f in checked}
    assert not {f: h for f, h in found.items() if h}


def stderr_outputs(nb: dict) -> list[str]:
    """The texts an executed notebook printed to stderr (a raw warning, a log line): a page shows
    them as they are, so a chapter catches what it expects and says it in words instead.
    tests/test_notebooks.py asks it of every chapter it runs."""
    return ["".join(out.get("text", "")) for cell in nb.get("cells", []) for out in cell.get("outputs", [])
            if out.get("output_type") == "stream" and out.get("name") == "stderr"]


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
    return _hits("\n".join(texts), this_machine=True)


def test_the_output_check_reads_printed_text_and_tables():
    nb = {"cells": [{"outputs": [{"text": ["command: train --out runs/a\n"]},
                                 {"data": {"text/html": ["<td>/home/me/repo/runs/a</td>"]}}]}]}
    found = machine_paths_in_outputs(nb)
    assert len(found) == 1 and "<td>/home/me/repo/runs/a</td>" in found[0]


def test_the_output_check_finds_this_machines_folders_and_stderr():
    # (chapter 07 printed the layers' raw warning: stderr, beginning with the repository's absolute path)
    warning = {"output_type": "stream", "name": "stderr",
               "text": [f"{ROOT}/kmtbook/shared_results.py:108: UserWarning: the trained layer was trained on ...\n"]}
    printed = {"output_type": "stream", "name": "stdout", "text": ["results in results/07_generalization\n"]}
    nb = {"cells": [{"outputs": [printed, warning]}]}
    assert stderr_outputs(nb) == ["".join(warning["text"])] and not stderr_outputs({"cells": [{"outputs": [printed]}]})
    assert machine_paths_in_outputs(nb) and not machine_paths_in_outputs({"cells": [{"outputs": [printed]}]})
    for folder in (ROOT, Path.home(), Path(tempfile.gettempdir())):
        assert len(_hits(f"see {folder}/x.py, line 3", this_machine=True)) == 1, folder
    assert _hits("File /tmp/ipykernel_4242/123.py:5", this_machine=True) == ["File /tmp/ipykernel_4242/123.py:5"]
    assert not _hits("a rate of 3/tmp/s, in tmp/x", this_machine=True)
