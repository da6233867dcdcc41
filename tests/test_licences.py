"""One licence story: text and figures under CC BY 4.0, code under MIT, each in its own file, said the
same way by the README, the cite and figures pages, CITATION.cff (the repository's and the build's,
both valid Citation File Format 1.2.0) and the figure files (tests/test_figure_metadata.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import kmtlib
from kmtbook.citation import read_cff, read_citation

ROOT = Path(__file__).resolve().parent.parent


def test_each_licence_has_its_own_file():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    cc = (ROOT / "LICENSE-CC-BY-4.0").read_text()
    assert "Creative Commons Attribution 4.0 International" in cc
    assert "https://creativecommons.org/licenses/by/4.0/legalcode" in cc and "MIT" in cc


@pytest.mark.parametrize("page", ["README.md", "book/cite.md", "book/figures.md"])
def test_the_pages_say_which_licence_applies_to_what(page):
    text = " ".join((ROOT / page).read_text().split())
    assert "CC BY 4.0" in text and "MIT" in text
    assert "released under the MIT licence: you may copy" not in text  # the old story, code licence for figures


def _check_cff(path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.citation-file-format",
                           str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cffconvert = shutil.which("cffconvert") or str(Path(sys.executable).parent / "cffconvert")
    if Path(cffconvert).is_file():  # the reference validator, where installed (it pins jsonschema < 4)
        proc = subprocess.run([cffconvert, "--validate", "-i", str(path)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_repositorys_citation_file_is_valid_and_names_both_licences():
    cff = read_cff(ROOT)
    assert cff["license"] == ["CC-BY-4.0", "MIT"]
    _check_cff(ROOT / "CITATION.cff")


def test_the_builds_citation_file_is_valid_and_names_its_version(tmp_path):
    environ = {"KMT_BOOK_URL": "https://readers.invalid/kmt-book", "KMT_REPOSITORY_URL": "https://git.invalid/o/r",
               "KMT_BOOK_VERSION": f"v{kmtlib.__version__}"}
    citation = read_citation(ROOT, kmtlib.__version__, None, environ)
    data = citation.cff(read_cff(ROOT))
    assert data["url"] == f"https://readers.invalid/kmt-book/v{kmtlib.__version__}/"
    assert data["license"] == ["CC-BY-4.0", "MIT"] and data["repository-code"] == "https://git.invalid/o/r"
    path = tmp_path / "CITATION.cff"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    _check_cff(path)
