"""The launch button's environment, built as Binder would build it and run as a reader would run it.

Binder (repo2docker) reads the repository's ``binder/`` folder: it installs ``binder/requirements.txt``
from the repository's root, runs ``binder/postBuild``, and opens the chapter's ``.md`` in JupyterLab.
Here a local clone stands in for the repository's address: a bare virtual environment (no site
packages) installs what that folder names from the clone, then one chapter runs in it in the quick
profile, on its own kernel. papermill, installed after the environment is built, stands in for the
reader's "Run all" (it injects the quick profile as the chapter's parameters). Needs the package
registries (CI reaches them).

``binder/requirements.txt`` names PyTorch's CPU-wheel index beside PyPI, so that Binder installs the
CPU build of torch rather than PyPI's CUDA build. Where that index cannot be reached (CI reaches the
package registries only), pip would wait on it for every package, for minutes: the test then installs
the same file without that one line, and torch comes from the machine's own CPU wheel, as it does in
every nox session here. Everything else Binder reads is used as it is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from chapter_cases import CASES

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "01_kmeans_and_lloyd"
EXTRA_INDEX = "--extra-index-url "


def _reachable(url: str, timeout: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return True
    except urllib.error.HTTPError:  # it answered
        return True
    except (urllib.error.URLError, OSError):
        return False


def binder_requirements(clone: Path) -> tuple[str, list[str]]:
    """The requirements file pip is given (relative to the clone), and the index lines left out of it:
    ``binder/requirements.txt`` itself, or, where its extra index cannot be reached, a copy beside it
    (``-c`` paths in it stay valid) without the unreachable ``--extra-index-url`` lines."""
    path = clone / "binder" / "requirements.txt"
    lines = path.read_text().splitlines()
    dropped = [ln for ln in lines if ln.startswith(EXTRA_INDEX) and not _reachable(ln[len(EXTRA_INDEX):].strip())]
    if not dropped:
        return "binder/requirements.txt", []
    copy = path.with_name("requirements-reachable.txt")
    copy.write_text("\n".join(ln for ln in lines if ln not in dropped) + "\n")
    return str(copy.relative_to(clone)), dropped


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 1500) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.notebook
def test_binder_environment_runs_a_chapter(tmp_path):
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: there is no repository to clone")
    clone = tmp_path / "repository"
    _run(["git", "clone", "--quiet", str(ROOT), str(clone)], tmp_path, dict(os.environ))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "MPLBACKEND")}
    env["JUPYTER_DATA_DIR"] = str(tmp_path / "jupyter")  # no kernel of another environment is found
    env["JUPYTER_CONFIG_DIR"] = str(tmp_path / "jupyter-config")
    env["HOME"] = str(tmp_path / "home")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    python = str(venv / "bin" / "python")
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    # what Binder does: the requirements from the repository's root, then postBuild
    requirements, dropped = binder_requirements(clone)
    assert all("download.pytorch.org/whl/cpu" in line for line in dropped), dropped
    if dropped:
        print(f"not reachable from here, left out of binder/requirements.txt: {dropped}")
    _run([python, "-m", "pip", "install", "--quiet", "-r", requirements], clone, env)
    _run(["bash", "binder/postBuild"], clone, env)
    viewers = json.loads((tmp_path / "jupyter-config" / "labconfig" / "default_setting_overrides.json").read_text())
    assert "Jupytext Notebook" in json.dumps(viewers), viewers
    found = _run([python, "-c", "import kmtlib, kmtbook, jupytext; print(kmtlib.__file__, kmtbook.__file__)"],
                 tmp_path, env)
    assert str(clone) in found, f"the project was not installed from the clone: {found}"
    # the reader's "Run all", in the quick profile
    _run([python, "-m", "pip", "install", "--quiet", "papermill"], tmp_path, env)
    _run([python, "-m", "ipykernel", "install", "--prefix", str(venv), "--name", "python3"], tmp_path, env)
    out = tmp_path / "run"
    parameters, check = CASES[f"{CHAPTER}.md"]
    script = (
        "import sys, jupytext, papermill as pm\n"
        f"nb = jupytext.read({str(clone / 'book' / (CHAPTER + '.md'))!r})\n"
        f"pm.execute_notebook(nb, {str(out / (CHAPTER + '.ipynb'))!r}, kernel_name='python3', "
        f"cwd={str(clone / 'book')!r}, progress_bar=False, parameters={{'profile': 'quick', 'device': 'cpu', "
        f"'seed': 11, 'output_dir': {str(out / 'results')!r}, **{parameters!r}}})\n"
    )
    out.mkdir()
    _run([python, "-c", script], tmp_path, env)
    metrics = json.loads((out / "results" / "metrics.json").read_text())
    assert metrics["profile"] == "quick" and metrics["chapter"] == CHAPTER
    check(metrics)
    print(f"launch environment: {found.strip()}; {CHAPTER} quick: {metrics['wall_seconds']} s, "
          f"figures {metrics['figures']}")
