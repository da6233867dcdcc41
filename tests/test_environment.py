"""environment.yml and pyproject.toml must name the same dependencies."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def _pyproject_requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in ("nb", "variants", "book", "test", "bench"):
        reqs += [r for r in project["optional-dependencies"][extra] if not r.startswith("kmtlib")]
    return {Requirement(r).name.lower(): Requirement(r) for r in reqs}


def _environment_requirements() -> tuple[dict[str, Requirement], list[str]]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    options = [line for line in pip_section if line.startswith("-")]
    reqs = [Requirement(line) for line in pip_section if not line.startswith("-")]
    return {r.name.lower(): r for r in reqs}, options


def test_same_dependencies():
    py = _pyproject_requirements()
    env, _ = _environment_requirements()
    extra_tools = {"nox"}  # the task runner: installed by the README's command, not a dependency
    assert set(env) - extra_tools == set(py), (
        f"only in environment.yml: {sorted(set(env) - extra_tools - set(py))}; "
        f"only in pyproject.toml: {sorted(set(py) - set(env))}"
    )
    for name, req in py.items():
        if name == "torch":
            continue
        assert str(env[name].specifier) == str(req.specifier), f"{name}: {env[name]} vs {req}"


def test_torch_pin_satisfies_the_range():
    py = _pyproject_requirements()
    env, _ = _environment_requirements()
    pinned = next(iter(env["torch"].specifier)).version
    assert pyproject_torch_ok(py["torch"], pinned)
    # pyproject keeps a range so CUDA users can bring their own torch build.
    assert not any(s.operator == "==" for s in py["torch"].specifier)


def pyproject_torch_ok(req: Requirement, version: str) -> bool:
    return req.specifier.contains(version)


def test_environment_installs_the_project_and_python():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    _, options = _environment_requirements()
    assert "-e . --no-deps" in options
    assert "python=3.11" in env["dependencies"]


def test_jupyter_book_is_pinned_to_1x():
    py = _pyproject_requirements()
    assert str(py["jupyter-book"].specifier).startswith("==1."), "Jupyter Book 2.x cannot build this book"
