"""The pre-commit hooks (.pre-commit-config.yaml) run what ``nox -s lint`` runs: the same ruff and mypy
commands, from the environment (local hooks, no download), the versions the lint extra pins."""

from __future__ import annotations

import ast
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def _nox_lint_commands() -> list[list[str]]:
    """The ``session.run(...)`` commands of noxfile.py's lint session, ``*LINTED`` spelt out."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    constants = {target.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                 for target in node.targets if isinstance(target, ast.Name) and target.id.isupper()
                 and isinstance(node.value, ast.List)}
    lint = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "lint")
    commands = []
    for call in ast.walk(lint):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "run":
            words: list[str] = []
            for arg in call.args:
                words += constants[arg.value.id] if isinstance(arg, ast.Starred) else [ast.literal_eval(arg)]
            commands.append(words)
    return commands


def _hooks() -> list[dict]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    return [hook for repo in config["repos"] for hook in repo["hooks"]]


def test_the_hooks_run_the_lint_sessions_commands():
    hooks = _hooks()
    assert [shlex.split(hook["entry"]) for hook in hooks] == _nox_lint_commands() == [
        ["ruff", "check", "kmtlib", "kmtbook", "tests", "benchmarks", "noxfile.py", "scripts"], ["mypy"]]
    for hook in hooks:  # the environment's tools on the whole project, as the session runs them
        assert hook["language"] == "system" and hook["pass_filenames"] is False, hook["id"]
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    assert [repo["repo"] for repo in config["repos"]] == ["local"]


def test_the_lint_extra_pins_the_tools_and_holds_pre_commit():
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["lint"]
    assert {"ruff==0.17.6", "mypy==2.4.1"} <= set(lint)
    assert any(req.startswith("pre-commit") for req in lint)


def test_pre_commit_reads_the_config():
    beside = Path(sys.executable).parent / "pre-commit"
    program = str(beside) if beside.is_file() else shutil.which("pre-commit")
    if program is None:
        pytest.skip("pre-commit is not installed (the lint extra installs it)")
    proc = subprocess.run([program, "validate-config", ".pre-commit-config.yaml"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
