"""The locked environments of the nox sessions (requirements/<session>.txt): every package at one version with
its hashes, no torch and nothing of CUDA in them, each satisfying its extra of pyproject.toml, and made from
the pyproject.toml of today (a change of its dependencies without new locks fails here)."""

from __future__ import annotations

import ast
import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("lock_requirements", ROOT / "scripts" / "lock_requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOCK = _script()
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def _pins(name: str) -> dict[str, str]:
    """The packages of requirements/<name>.txt and their versions; each must be pinned and carry hashes."""
    text = (ROOT / "requirements" / f"{name}.txt").read_text()
    pins: dict[str, str] = {}
    for block in re.split(r"\n(?=[^\s#])", text):
        first = block.lstrip().split("\n", 1)[0]
        if not first or first.startswith("#"):
            continue
        match = PIN.match(first)
        assert match, f"requirements/{name}.txt: {first!r} is not pinned (name==version)"
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", block), f"requirements/{name}.txt: {first} has no hash"
        pins[canonicalize_name(match[1])] = match[2]
    return pins


def _extra_requirements(extra: str) -> list[Requirement]:
    """What an extra of pyproject.toml asks for, its references to kmtlib's other extras followed."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    seen: set[str] = set()
    wanted: list[Requirement] = [Requirement(r) for r in project["dependencies"]]
    todo = [extra]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for line in project["optional-dependencies"][name]:
            requirement = Requirement(line)
            if requirement.name == project["name"]:
                todo += sorted(requirement.extras)
            else:
                wanted.append(requirement)
    return wanted


@pytest.mark.parametrize("name", sorted(LOCK.LOCKS))
def test_each_lock_follows_pyproject(name):
    digest = LOCK.dependency_digest((ROOT / "pyproject.toml").read_text())
    assert LOCK.recorded_digest(ROOT / "requirements" / f"{name}.txt") == digest, (
        f"pyproject.toml's dependencies changed since requirements/{name}.txt was made: run "
        "python scripts/lock_requirements.py")


def test_the_digest_sees_a_dependency_change_and_nothing_else():
    text = (ROOT / "pyproject.toml").read_text()
    digest = LOCK.dependency_digest(text)
    assert '"numpy>=1.26"' in text
    assert LOCK.dependency_digest(text.replace('"numpy>=1.26"', '"numpy>=1.27"')) != digest
    assert LOCK.dependency_digest(text.replace('description = "', 'description = "Another ')) == digest


@pytest.mark.parametrize("name", sorted(LOCK.LOCKS))
def test_each_lock_pins_its_extra_with_hashes_and_no_cuda(name):
    pins = _pins(name)
    assert "torch" not in pins  # installed before the lock: the CPU wheel, or a CUDA build of the user's
    assert not [p for p in pins if p.startswith("nvidia-") or p == "triton"], "a CUDA package in the lock"
    for requirement in _extra_requirements(LOCK.LOCKS[name]):
        key = canonicalize_name(requirement.name)
        if key == "torch":
            continue
        assert key in pins, f"requirements/{name}.txt lacks {requirement}"
        assert requirement.specifier.contains(pins[key], prereleases=True), f"{key}=={pins[key]} vs {requirement}"


def test_the_same_version_in_every_lock():
    versions: dict[str, set[str]] = {}
    for name in LOCK.LOCKS:
        for package, version in _pins(name).items():
            versions.setdefault(package, set()).add(version)
    assert {p: v for p, v in versions.items() if len(v) > 1} == {}


def test_the_sessions_install_the_locks():
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    locks = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "LOCKS" for t in node.targets))
    assert locks == {extra: f"requirements/{name}.txt" for name, extra in LOCK.LOCKS.items()}
    assert '"--require-hashes", "-r", lock' in (ROOT / "noxfile.py").read_text()


def test_conda_and_binder_follow_the_locks():
    """environment.yml and binder/requirements.txt install the project editable, which pip's hash-checking mode
    forbids: they hold every package to the locks' versions with requirements/constraints.txt (pip -c)."""
    import yaml

    assert (ROOT / "requirements" / LOCK.CONSTRAINTS).read_text() == LOCK.constraints_text()
    constraints = {canonicalize_name(p): v for p, v in LOCK.pins(ROOT / "requirements" / LOCK.CONSTRAINTS).items()}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    binder = (ROOT / "binder" / "requirements.txt").read_text().splitlines()
    for folder, lines in ((ROOT, conda), (ROOT / "binder", binder)):
        given = [line.split(None, 1)[1] for line in lines if line.startswith("-c ")]
        assert [(folder / path).resolve() for path in given] == [ROOT / "requirements" / LOCK.CONSTRAINTS]
        for line in lines:
            if line.startswith(("-", "#")) or not line.strip():
                continue
            requirement = Requirement(line)
            key = canonicalize_name(requirement.name)
            if key in ("torch", "nox"):  # torch: the CPU wheel, pinned in the file; nox: the task runner
                continue
            assert key in constraints, f"{line}: not in the locks"
            assert requirement.specifier.contains(constraints[key], prereleases=True), (line, constraints[key])
