"""What Colab does with a chapter's notebook, done offline: the notebook the Colab button opens (the page's
download, made by the build's own code: kmtbook.install_cell) runs top to bottom in a bare Python.

A local clone of this repository stands in for GitHub, at a release tag made in it: the install cell's
repository is the clone. A bare virtual environment (no site packages) stands in for Colab's runtime: it has a
torch already (the pinned CPU wheel, as Colab has its own) and a kernel (ipykernel; papermill drives it as a
reader's "Run all"), nothing else. The notebook runs from a folder outside the repository, in the quick
profile: its first cell must fetch the book from the clone, install it and run the chapter on it; run again in
the copy it fetched, the cell must do nothing; run after a restart of the runtime from the folder the
notebook is in, it must find the copy, install nothing and work in the copy's book/ folder. Needs the package
registry (the chapters' packages); a few minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jupytext
import nbformat
import pytest
from chapter_cases import CASES

from kmtbook.install_cell import install_cell, torch_requirement, with_install_cell

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "06_ablation_d_only"  # reads the shipped weights under data/: the install must bring them
NOWHERE = "a repository that is not there"


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 900) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


def _bare_environment(tmp_path: Path, pip_cache: Path) -> tuple[str, dict[str, str]]:
    """A virtual environment without site packages, with torch and a kernel, as Colab's runtime has; its
    python and the environment its processes run with (no path of this project, Jupyter's folders in tmp)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "MPLBACKEND")}
    env.update(JUPYTER_DATA_DIR=str(tmp_path / "jupyter"), JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"),
               HOME=str(tmp_path / "home"), PIP_CACHE_DIR=str(pip_cache), PIP_DISABLE_PIP_VERSION_CHECK="1")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    python = str(venv / "bin" / "python")
    torch, _ = torch_requirement(ROOT)
    _run([python, "-m", "pip", "install", "--quiet", "--no-compile", torch, "ipykernel", "papermill"], tmp_path, env)
    _run([python, "-m", "ipykernel", "install", "--prefix", str(venv), "--name", "python3"], tmp_path, env)
    return python, env


def _colab_notebook(clone: Path, ref: str, folder: Path) -> Path:
    """The chapter's notebook as the build offers it: its install cell first (the build's own code)."""
    notebook = jupytext.read(ROOT / "book" / f"{CHAPTER}.md")
    notebook = with_install_cell(notebook, install_cell(str(clone), ref, *torch_requirement(ROOT)))
    folder.mkdir()
    path = folder / f"{CHAPTER}.ipynb"
    nbformat.write(notebook, path)
    return path


@pytest.mark.notebook
def test_a_chapter_notebook_runs_as_colab_would_run_it(tmp_path, tmp_path_factory):
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: there is no repository to clone")
    start = time.monotonic()
    clone = tmp_path / "repository"  # stands in for the repository on GitHub
    _run(["git", "clone", "--quiet", str(ROOT), str(clone)], tmp_path, dict(os.environ))
    version = _run([sys.executable, "-c", "import kmtlib; print(kmtlib.__version__)"], ROOT, dict(os.environ))
    tag = f"v{version.strip()}"
    _run(["git", "-C", str(clone), "tag", "--force", tag], tmp_path, dict(os.environ))
    python, env = _bare_environment(tmp_path, tmp_path_factory.getbasetemp() / "colab-pip-cache")
    prepared = time.monotonic()
    # the reader's "Run all", from the folder the notebook was opened in, outside the repository
    opened = tmp_path / "content"
    notebook = _colab_notebook(clone, tag, opened)
    out = tmp_path / "run"
    parameters, check = CASES[f"{CHAPTER}.md"]
    parameters = {"profile": "quick", "device": "cpu", "seed": 11, "output_dir": str(out / "results"), **parameters}
    script = (f"import papermill as pm\npm.execute_notebook({str(notebook)!r}, {str(out / 'ran.ipynb')!r}, "
              f"kernel_name='python3', cwd={str(opened)!r}, progress_bar=False, parameters={parameters!r})\n")
    out.mkdir()
    _run([python, "-c", script], opened, env, timeout=1200)
    ran = time.monotonic()

    # the install cell fetched the tag from the clone and installed it: the project imports from the copy
    fetched = opened / f"kmt-book-{tag}"
    said = "".join(o.get("text", "") for o in nbformat.read(out / "ran.ipynb", as_version=4).cells[0].outputs)
    assert f"Fetching kmt-book {tag} from {clone}" in said and "Keeping the installed torch" in said, said
    found = _run([python, "-c", "import kmtlib, kmtbook; print(kmtlib.__file__); print(kmtbook.__file__)"],
                 tmp_path, env).split()
    assert all(Path(f).is_relative_to(fetched) for f in found), f"not installed from the fetched copy: {found}"
    head = _run(["git", "-C", str(fetched), "rev-parse", "HEAD"], tmp_path, env)
    assert head == _run(["git", "-C", str(clone), "rev-parse", f"{tag}^{{commit}}"], tmp_path, env)
    # the chapter ran on it, in the quick profile, and its numbers pass the chapter's check
    metrics = json.loads((out / "results" / "metrics.json").read_text())
    assert metrics["profile"] == "quick" and metrics["chapter"] == CHAPTER
    check(metrics)

    # run again in the copy (or after a restart, from the notebook's folder): nothing fetched, nothing installed
    cell = nbformat.read(notebook, as_version=4).cells[0].source + "\nimport os\nprint('cwd', os.getcwd())\n"
    frozen = _run([python, "-m", "pip", "freeze"], tmp_path, env)
    quiet = {**env, "KMT_BOOK_REPOSITORY": str(tmp_path / NOWHERE), "PIP_NO_INDEX": "1"}  # a fetch would fail
    again = _run([python, "-c", cell], fetched / "book", quiet)
    assert "nothing to install" in again and f"cwd {fetched / 'book'}" in again, again
    restarted = _run([python, "-c", cell], opened, quiet)
    assert f"installed from {fetched}" in restarted and f"cwd {fetched / 'book'}" in restarted, restarted
    assert "Fetching" not in again + restarted and "Installing" not in again + restarted
    assert _run([python, "-m", "pip", "freeze"], tmp_path, env) == frozen
    assert _run(["git", "-C", str(fetched), "rev-parse", "HEAD"], tmp_path, env) == head
    print(f"colab notebook: {CHAPTER} quick, chapter {metrics['wall_seconds']} s; environment "
          f"{prepared - start:.0f} s, notebook (install cell and chapter) {ran - prepared:.0f} s, "
          f"whole test {time.monotonic() - start:.0f} s")


# --------------------------------------------------------------------------- the cell's parts, in this process


def _repository_with_a_tag(tmp_path: Path) -> tuple[Path, str]:
    """A small repository standing in for the book's (the files the cell looks for), tagged v9.9.9; its commit."""
    repo = tmp_path / "origin"
    for folder in ("kmtlib", "data", "book"):
        (repo / folder).mkdir(parents=True)
        (repo / folder / "README.md").write_text(folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    for command in (["init", "--quiet"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit",
                    "--quiet", "-m", "one"], ["tag", "v9.9.9"]):
        _run(["git", "-C", str(repo), *command], tmp_path, env)
    return repo, _run(["git", "-C", str(repo), "rev-parse", "HEAD"], tmp_path, env).strip()


def test_the_cell_fetches_a_tag_or_a_commit_and_says_what_went_wrong(tmp_path, monkeypatch, capsys):
    from kmtbook import install_cell as cell

    repo, commit = _repository_with_a_tag(tmp_path)
    for ref in ("v9.9.9", commit):  # a release's tag; a development build's commit
        folder = tmp_path / f"kmt-book-{ref[:12]}"
        cell.fetch(str(repo), ref, folder)
        assert (folder / "data" / "README.md").read_text() == "data"
        assert _run(["git", "-C", str(folder), "rev-parse", "HEAD"], tmp_path, dict(os.environ)).strip() == commit
        cell.fetch(str(repo), ref, folder)  # again, in the same folder: fetched again, nothing in the way
    assert f"Fetching kmt-book {commit} from {repo}" in capsys.readouterr().out
    with pytest.raises(RuntimeError, match=r"Could not fetch v0\.0\.0 from .*KMT_BOOK_REPOSITORY") as err:
        cell.fetch(str(repo), "v0.0.0", tmp_path / "missing-tag")
    assert "v0.0.0" in str(err.value).split("\n", 1)[1], "git's own words follow"
    (tmp_path / "occupied").mkdir()
    (tmp_path / "occupied" / "notes.txt").write_text("mine")
    with pytest.raises(RuntimeError, match="exists and is not a copy of the book"):
        cell.fetch(str(repo), "v9.9.9", tmp_path / "occupied")
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs-here"))
    with pytest.raises(RuntimeError, match=r"git is not installed.*install git"):
        cell.fetch(str(repo), "v9.9.9", tmp_path / "no-git")


def test_the_cell_asks_for_a_restart_when_it_changed_a_package_in_use(monkeypatch):
    from kmtbook import install_cell as cell

    loaded = cell.loaded_versions()
    assert loaded.get("pytest") == cell.metadata.version("pytest")  # this process has imported pytest
    cell.check_loaded(loaded)  # nothing changed: nothing said
    monkeypatch.setattr(cell.metadata, "version", lambda name: "0.0.1" if name == "pytest" else "same")
    with pytest.raises(RuntimeError, match=r"pytest .* -> 0\.0\.1.*Restart it \(in Colab: Runtime > Restart"):
        cell.check_loaded({"pytest": "8.0.0"})


def test_inside_the_repository_the_cell_does_nothing(tmp_path, monkeypatch, capsys):
    """Here kmtlib imports from this checkout, which holds data/ and book/: no fetch, no install, no move."""
    from kmtbook import install_cell as cell

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KMT_BOOK_REPOSITORY", str(tmp_path / NOWHERE))
    assert cell.installed_book() == ROOT
    cell.install_book("https://github.com/owner/kmt-book", "v0.1.0", "torch==2.13.0", "https://x.invalid/")
    assert capsys.readouterr().out == f"kmt-book is installed from {ROOT}: nothing to install.\n"
    assert Path.cwd() == tmp_path and not list(tmp_path.iterdir())
