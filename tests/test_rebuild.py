"""Each release carries its environment (kmtbook.rebuild, kmtbook.sphinx_ext.rebuild): the reproducibility and
cite pages say, for the version built, the commands that fetch its source (at its tag, or at its commit),
rebuild it from its lock and rerun one chapter; the build publishes that lock beside its pages. A build that
knows no repository says so and invents no address."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _demo_chapter import demo_chapter

import kmtlib
from kmtbook import rebuild
from kmtbook.publish import LOCK_FILES, LOCK_FOLDER

ROOT = Path(__file__).resolve().parent.parent
REPOSITORY = "https://github.com/example/kmt-book"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
CHAPTER = ("jupytext --to ipynb book/01_x.md \\\n  && papermill book/01_x.ipynb 01_x-out.ipynb --cwd book \\\n"
           "  -p seed 0")


def _lines(script: str) -> list[str]:
    return [line for line in script.splitlines() if line and not line.startswith("#")]


def test_a_release_is_cloned_at_its_tag():
    script = rebuild.rebuild_script(rebuild.Source(REPOSITORY, "v0.1.0", COMMIT), "2.13.0+cpu", CHAPTER)
    assert _lines(script)[:2] == [f"git clone --branch v0.1.0 {REPOSITORY} kmt-book && cd kmt-book",
                                  rebuild.BOOK_COMMAND]
    assert "git checkout" not in script
    _, said = rebuild.source_lines(rebuild.Source(REPOSITORY, "v0.1.0", COMMIT))
    assert "release v0.1.0" in said and COMMIT in said


def test_a_development_version_is_cloned_then_checked_out_at_its_commit():
    script = rebuild.rebuild_script(rebuild.Source(REPOSITORY + ".git", None, COMMIT), "2.13.0", CHAPTER)
    assert _lines(script)[:3] == [f"git clone {REPOSITORY}.git kmt-book && cd kmt-book", f"git checkout {COMMIT}",
                                  rebuild.BOOK_COMMAND]
    _, said = rebuild.source_lines(rebuild.Source(REPOSITORY, None, COMMIT, modified=True))
    assert "uncommitted changes" in said


def test_the_chapter_is_rerun_from_the_lock_with_the_cpu_wheel_of_the_builds_torch():
    script = rebuild.rebuild_script(rebuild.Source(REPOSITORY, None, COMMIT), "2.13.0+cpu", CHAPTER)
    assert _lines(script)[3:] == [
        "python3 -m venv .venv && . .venv/bin/activate",
        "python3 -m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
        "python3 -m pip install --require-hashes -r requirements/book.txt && python3 -m pip install --no-deps -e .",
        *CHAPTER.splitlines()]
    # the lock the commands install is the one noxfile.py installs for the book session
    assert '"book": "requirements/book.txt"' in (ROOT / "noxfile.py").read_text()
    assert "# or one chapter" not in rebuild.rebuild_script(rebuild.Source(REPOSITORY, None, COMMIT), "2.13.0", None)


def test_without_a_repository_no_address_is_invented():
    source = rebuild.Source(None, "v0.1.0", COMMIT)
    script = rebuild.rebuild_script(source, "2.13.0", CHAPTER)
    assert "git clone" not in script and f"git checkout {COMMIT}" in script
    assert "://" not in script.replace(rebuild.TORCH_CPU_INDEX, "")
    _, said = rebuild.source_lines(source)
    assert "does not know the address of the repository" in said and "://" not in said
    fetch, said = rebuild.source_lines(rebuild.Source(REPOSITORY, None, None))
    assert fetch == [] and "no commit" in said


def test_the_book_command_is_the_readmes():
    readme = (ROOT / "README.md").read_text()
    first = re.findall(r"^(python3 -m pip install nox && python3 -m nox -s \"book\(.*)$", readme, re.M)[0]
    assert first.strip() == rebuild.BOOK_COMMAND


def test_the_release_tag_is_the_site_folder_or_a_tag_at_the_commit(tmp_path):
    assert rebuild.release_tag(tmp_path, "0.1.0", "v0.1.0") == "v0.1.0"
    assert rebuild.release_tag(tmp_path, "0.1.0", "dev") is None  # (not a git checkout: no tag either)
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    assert rebuild.release_tag(repo, "0.1.0", None) is None
    subprocess.run([*git, "tag", "v0.1.0"], check=True)
    assert rebuild.release_tag(repo, "0.1.0", None) == "v0.1.0"
    assert rebuild.release_tag(repo, "0.2.0", None) is None


# --------------------------------------------------------------------------- a small build


NOTEBOOK = demo_chapter("Demo chapter", seed=5)


def _site(tmp_path: Path, environ: dict[str, str]) -> tuple[subprocess.CompletedProcess, Path]:
    """A Sphinx project of the book's extension: a chapter and a page with the directive, built with -W."""
    src, out = tmp_path / "src", tmp_path / "html"
    src.mkdir(parents=True)
    (src / "conf.py").write_text('extensions = ["myst_nb", "kmtbook.sphinx_ext"]\nkmt_offline_mathjax = False\n'
                                 'root_doc = "index"\nnb_execution_mode = "off"\nhtml_theme = "sphinx_book_theme"\n')
    (src / "01_demo.md").write_text(NOTEBOOK)
    (src / "index.md").write_text("# Rebuild\n\n```{book-rebuild}\n```\n\n```{toctree}\n01_demo\n```\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KMT_", "GITHUB_"))}
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "-q", str(src), str(out)],
                          capture_output=True, text=True, timeout=300, env={**env, **environ})  # fmt: skip
    return proc, out


def _commit() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


@pytest.mark.skipif(subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode,
                    reason="not a git checkout: the build records no commit")
def test_a_release_build_states_its_commands_and_publishes_its_lock(tmp_path):
    import html as html_lib

    release = f"v{kmtlib.__version__}"
    proc, out = _site(tmp_path, {"KMT_BOOK_URL": "https://example.org/kmt-book", "KMT_BOOK_VERSION": release,
                                 "KMT_REPOSITORY_URL": REPOSITORY})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (out / "index.html").read_text()
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", page))
    assert f"git clone --branch {release} {REPOSITORY} kmt-book && cd kmt-book" in text
    assert rebuild.BOOK_COMMAND in text
    assert "papermill 01_demo.ipynb 01_demo-out.ipynb --cwd ." in text and "-p seed 5" in text
    assert "python3 -m pip install --require-hashes -r requirements/book.txt" in text
    for name in LOCK_FILES:
        published = out / LOCK_FOLDER / name
        assert published.read_bytes() == (ROOT / LOCK_FOLDER / name).read_bytes(), name
        assert f'href="{LOCK_FOLDER}/{name}"' in page
    assert "KMT_" not in text, "a published page names no build variable"

    proc, out = _site(tmp_path / "local", {})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", (out / "index.html").read_text()))
    assert "does not know the address of the repository" in text and "git clone" not in text
    assert f"git checkout {_commit()}" in text and "KMT_" not in text
