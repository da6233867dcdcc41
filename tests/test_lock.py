"""The locked environments of the nox sessions (requirements/<session>.txt): every package at one version with
its hashes, no torch and nothing of CUDA in them, each satisfying its extra of pyproject.toml, and made from
the pyproject.toml of today (a change of its dependencies without new locks fails here)."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import sys
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
    for name in [*LOCK.LOCKS, LOCK.LAUNCH]:
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


# --------------------------------------------------------------------------- the launch button's environment


def test_the_launch_lock_follows_binder_and_pyproject():
    """requirements/launch.txt locks what binder/requirements.txt installs; a new line there (or a change of
    pyproject.toml's dependencies) without a new lock fails here, a comment does not."""
    pyproject, binder = (ROOT / "pyproject.toml").read_text(), (ROOT / LOCK.LAUNCH_SOURCE).read_text()
    digest = LOCK.launch_digest(pyproject, binder)
    assert LOCK.recorded_digest(ROOT / "requirements" / f"{LOCK.LAUNCH}.txt") == digest, (
        f"{LOCK.LAUNCH_SOURCE} or pyproject.toml changed since requirements/{LOCK.LAUNCH}.txt was made: run "
        "python scripts/lock_requirements.py")
    assert LOCK.launch_digest(pyproject, binder + "ipywidgets>=8\n") != digest
    assert LOCK.launch_digest(pyproject.replace('"numpy>=1.26"', '"numpy>=1.27"'), binder) != digest
    assert LOCK.launch_digest(pyproject, binder + "# a comment\n") == digest
    assert LOCK.launch_inputs("-c ../x.txt\n--extra-index-url https://e.invalid\ntorch==2.13.0\n-e .[nb,sweep]\n"
                              "jupytext>=1.16  # viewer\n") == (["nb", "sweep"], ["jupytext>=1.16"])


def test_the_launch_lock_pins_binder_with_hashes_and_no_cuda():
    pins = _pins(LOCK.LAUNCH)
    assert "torch" not in pins and not [p for p in pins if p.startswith("nvidia-") or p == "triton"]
    extras, others = LOCK.launch_inputs((ROOT / LOCK.LAUNCH_SOURCE).read_text())
    assert extras and others, f"{LOCK.LAUNCH_SOURCE} names the project's extras and jupytext"
    wanted = [r for extra in extras for r in _extra_requirements(extra)] + [Requirement(line) for line in others]
    for requirement in wanted:
        key = canonicalize_name(requirement.name)
        if key == "torch":
            continue
        assert key in pins, f"requirements/{LOCK.LAUNCH}.txt lacks {requirement}"
        assert requirement.specifier.contains(pins[key], prereleases=True), f"{key}=={pins[key]} vs {requirement}"


def _marker_environment() -> dict[str, str]:
    """The launch environment's platform: CPython 3.11 on Linux x86_64 (the locks' platform)."""
    from packaging.markers import default_environment

    env = dict(default_environment())
    env.update(python_version="3.11", python_full_version="3.11.0", sys_platform="linux", platform_system="Linux",
               platform_machine="x86_64", os_name="posix", platform_python_implementation="CPython",
               implementation_name="cpython")
    return env


def _installed_closure(roots: list[Requirement]) -> tuple[set[str], set[str]]:
    """Every package that installing ``roots`` brings, followed through the requirements of the installed
    distributions (the tests' environment: the locked versions); and those not installed here, whose own
    requirements cannot be read. torch's CUDA packages are left out (Binder installs the CPU wheel, which has
    none; a CUDA torch in the tests' environment would name them)."""
    from importlib import metadata

    env = _marker_environment()
    todo = [(canonicalize_name(r.name), extra) for r in roots for extra in ("", *sorted(r.extras))]
    done: set[tuple[str, str]] = set()
    unreadable: set[str] = set()
    while todo:
        name, extra = todo.pop()
        if (name, extra) in done or name.startswith("nvidia-") or name == "triton":
            continue
        done.add((name, extra))
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            unreadable.add(name)
            continue
        for line in requires:
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate({**env, "extra": extra}):
                continue
            child = canonicalize_name(requirement.name)
            todo += [(child, e) for e in ("", *sorted(requirement.extras))]
    return {name for name, _ in done}, unreadable


def test_every_package_the_launch_environment_installs_is_pinned():
    """What Binder installs (binder/requirements.txt: torch, the project with its extras, jupytext, and all they
    require, followed through the installed packages' own requirements) is pinned by requirements/constraints.txt,
    which that file applies with -c: no package of the launch environment is left to the newest release."""
    extras, others = LOCK.launch_inputs((ROOT / LOCK.LAUNCH_SOURCE).read_text())
    roots = [r for extra in extras for r in _extra_requirements(extra)] + [Requirement(line) for line in others]
    closure, unreadable = _installed_closure(roots)
    constraints = {canonicalize_name(p) for p in LOCK.pins(ROOT / "requirements" / LOCK.CONSTRAINTS)}
    assert len(closure) > 50
    # torch: pinned in binder/requirements.txt itself (the CPU wheel)
    assert sorted(closure - constraints - {"torch"}) == [], "installed by the launch environment, pinned by nothing"
    assert sorted(unreadable) == [], "not installed here, so what they require cannot be followed"
    assert re.search(r"(?m)^torch==\d", (ROOT / LOCK.LAUNCH_SOURCE).read_text())


def _fake_uv(folder: Path) -> Path:
    """A stand-in for uv on PATH: it records each call and whether the output file held the committed lock when
    called, and writes one hashed pin (no network)."""
    log = folder / "calls.jsonl"
    (folder / "uv").write_text(f"""#!{sys.executable}
import json, pathlib, sys
args = sys.argv[1:]
out = pathlib.Path(args[args.index("--output-file") + 1])
prefilled = out.is_file() and "==" in out.read_text()
with open({str(log)!r}, "a") as f:
    f.write(json.dumps({{"args": args, "prefilled": prefilled}}) + "\\n")
out.write_text("numpy==9.9.9 \\\n    --hash=sha256:" + "a" * 64 + "\\n")
""")
    (folder / "uv").chmod(0o755)
    return log


def _tree(folder: Path) -> dict[str, tuple[bytes, int]]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in files}


def test_a_scratch_lock_is_written_beside_requirements_never_into_it(tmp_path, monkeypatch):
    """--upgrade-into FOLDER resolves every package afresh (uv's --upgrade, no committed pin preferred) into FOLDER
    and leaves requirements/ as it was; requirements/ itself is refused as FOLDER. Without it, a new resolution of
    the committed locks starts from their pins."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = _fake_uv(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    before = _tree(ROOT / "requirements")
    scratch = tmp_path / "upgrade" / "lock"
    assert LOCK.main(["--upgrade-into", str(scratch), "--find-links", ""]) == 0
    assert _tree(ROOT / "requirements") == before
    names = sorted([*LOCK.LOCKS, LOCK.LAUNCH])
    assert sorted(p.name for p in scratch.iterdir()) == sorted([f"{n}.txt" for n in names] + [LOCK.CONSTRAINTS])
    assert LOCK.pins(scratch / LOCK.CONSTRAINTS) == {"numpy": "9.9.9"}
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == len(names)
    for call in calls:
        assert "--upgrade" in call["args"] and not call["prefilled"]
    with pytest.raises(SystemExit, match="scratch folder, not requirements/"):
        LOCK.main(["--upgrade-into", str(ROOT / "requirements")])
    assert _tree(ROOT / "requirements") == before

    # the committed locks' own update (on a copy of the repository's files): it starts from their pins
    copy = tmp_path / "repo"
    (copy / "binder").mkdir(parents=True)
    shutil.copytree(ROOT / "requirements", copy / "requirements")
    for name in ("pyproject.toml", LOCK.LAUNCH_SOURCE):
        shutil.copy(ROOT / name, copy / name)
    monkeypatch.setattr(LOCK, "ROOT", copy)
    log.unlink()
    assert LOCK.main(["--find-links", ""]) == 0
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == len(names) and all(c["prefilled"] and "--upgrade" not in c["args"] for c in calls)
    assert LOCK.pins(copy / "requirements" / LOCK.CONSTRAINTS) == {"numpy": "9.9.9"}
