"""environment.yml and pyproject.toml must name the same dependencies."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def _pyproject_requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in ("nb", "variants", "book", "sweep", "test", "bench", "lint"):
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


# ----------------------------------------------------------------------------- each extra suffices
# Each nox session installs one extra (`.[book]` for the book build, `.[test]` for the tests,
# `.[bench]` for the benchmarks). A module that a session imports but that its extra does not pull
# in passes every test run in a richer environment and fails on a newcomer's machine, so the
# imports of each session's code are checked against the requirements its extra reaches.

LOCAL_MODULES = {
    "kmtlib",
    "kmtbook",
    "benchmarks",
    "tests",
    "conftest",
    "noxfile",
    # and every module of tests/ (a test may import a helper or another test's checks)
    *(path.stem for path in Path(__file__).resolve().parent.glob("*.py")),
}


def _imported_modules(source: str) -> set[str]:
    import ast

    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def _chapter_code(path: Path) -> str:
    import jupytext

    cells = [c.source for c in jupytext.read(path).cells if c.cell_type == "code"]
    # IPython magics and shell lines (at the start of a line) are not Python
    return "\n".join(line for cell in cells for line in cell.splitlines() if not line.startswith(("%", "!")))


def _session_imports(session: str) -> dict[str, set[str]]:
    """Third-party top-level modules -> the files that import them, for one nox session."""
    import sys

    files = {p: p.read_text(encoding="utf-8") for p in sorted((ROOT / "kmtlib").rglob("*.py"))}
    if session in ("book", "test", "lint"):  # (lint: what mypy reads, kmtlib and kmtbook)
        files |= {p: p.read_text(encoding="utf-8") for p in sorted((ROOT / "kmtbook").rglob("*.py"))}
    files |= {p: p.read_text(encoding="utf-8") for p in sorted((ROOT / "benchmarks").rglob("*.py"))}
    if session in ("book", "test"):
        files |= {
            p: _chapter_code(p)
            for p in sorted((ROOT / "book").glob("*.md"))
            if p.read_text(encoding="utf-8").startswith("---\njupytext:")
        }
    if session == "test":
        files |= {p: p.read_text(encoding="utf-8") for p in sorted((ROOT / "tests").glob("*.py"))}
    modules: dict[str, set[str]] = {}
    for path, source in files.items():
        for module in _imported_modules(source) - set(sys.stdlib_module_names) - LOCAL_MODULES - {"__future__"}:
            modules.setdefault(module, set()).add(str(path.relative_to(ROOT)))
    if session == "book":  # the Sphinx extensions that _config.yml loads
        config = yaml.safe_load((ROOT / "_config.yml").read_text())
        for ext in config["sphinx"]["extra_extensions"]:
            if ext.split(".")[0] not in LOCAL_MODULES:
                modules.setdefault(ext.split(".")[0], set()).add("_config.yml")
    return modules


def _reachable_distributions(requirement: str) -> set[str]:
    """The distributions that installing ``requirement`` installs, from the installed metadata."""
    import importlib.metadata

    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = [Requirement(requirement)]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        key = name + "[" + ",".join(sorted(req.extras)) + "]"
        if key in seen:
            continue
        seen.add(key)
        if name == "kmtlib":  # this checkout's own list, not the metadata of an older install
            project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
            requires = list(project["dependencies"]) + [
                f"{r}; extra == '{e}'" for e, rs in project["optional-dependencies"].items() for r in rs
            ]
        else:
            try:
                requires = importlib.metadata.distribution(name).requires or []
            except importlib.metadata.PackageNotFoundError:
                continue  # not installed here: then nothing of it is imported either
        for line in requires:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                todo.append(sub)
    return {key.split("[")[0] for key in seen}


@pytest.mark.parametrize("session, extra", [("book", "book"), ("test", "test"), ("bench", "bench"), ("lint", "lint")])
def test_each_sessions_extra_holds_what_the_session_imports(session, extra):
    import importlib.metadata

    from packaging.utils import canonicalize_name

    providers = importlib.metadata.packages_distributions()
    reachable = _reachable_distributions(f"kmtlib[{extra}]")
    missing = []
    for module, users in sorted(_session_imports(session).items()):
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        if not dists:
            missing.append(f"{module} (imported by {', '.join(sorted(users))}) is not installed at all")
        elif not dists & reachable:
            missing.append(f"{module} from {'/'.join(sorted(dists))} (imported by {', '.join(sorted(users))})")
    assert not missing, f"the {extra!r} extra does not install: " + "; ".join(missing)


def test_the_extra_check_sees_a_missing_requirement():
    """The check above would have caught the book extra without papermill."""
    assert "papermill" in _session_imports("book")
    reachable = _reachable_distributions("kmtlib[nb]")
    assert "papermill" not in reachable and "torch" in reachable and "entmax" in reachable


def test_the_library_never_imports_the_book_tooling():
    """kmtlib is the library: it imports nothing of kmtbook (the book's tooling) and names none of
    the repository's folders or the book's files."""
    offenders = []
    for path in sorted((ROOT / "kmtlib").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if "kmtbook" in _imported_modules(source):
            offenders.append(f"{path.relative_to(ROOT)} imports kmtbook")
        for name in ("_config.yml", "_toc.yml", "data/weights", "find_repo_root"):
            if name in source:
                offenders.append(f"{path.relative_to(ROOT)} names {name}")
    assert not offenders, offenders


CIRCUIT_MODULES = (
    "kmtlib.variants",
    "kmtlib.constructions",
    "kmtlib.theorems",
    "kmtlib.learned",
    "kmtlib.transformer",
    "kmtlib.layer",
    "kmtlib.kernels",
    "kmtlib.fast",
    "kmtlib.embedding",
)
"""The circuits (the transformer, its one layer class, its tokens, the layer's speed kernels and
its variants) that the reference algorithms check."""


def _absolute_imports(source: str, package: str) -> set[str]:
    """Every module a file of ``package`` imports, relative imports resolved (``from ..variants import
    x`` in kmtlib.reference is kmtlib.variants and kmtlib.variants.x)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


def _is_circuit(module: str) -> bool:
    return any(module == c or module.startswith(c + ".") for c in CIRCUIT_MODULES)


def test_the_reference_algorithms_import_no_circuit():
    """kmtlib.reference holds independent checks of the circuits: none of its modules imports a circuit
    module (kmtlib.variants, kmtlib.constructions, the learned layer, the transformer), not even for an
    option check (those shared checks live in kmtlib._checks)."""
    offenders = []
    for path in sorted((ROOT / "kmtlib" / "reference").rglob("*.py")):
        package = ".".join(path.relative_to(ROOT).parts[:-1])
        for module in sorted(_absolute_imports(path.read_text(encoding="utf-8"), package)):
            if _is_circuit(module):
                offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not offenders, offenders


def test_the_circuit_import_check_sees_relative_and_absolute_imports():
    """The check above would have caught the option checks the references once imported."""
    for source in (
        "def f():\n    from ..variants.robust import check_robust_options\n",
        "from .. import constructions\n",
        "import kmtlib.variants.kmedoids\n",
        "from kmtlib.transformer import KMeansTransformer\n",
        "from ..layer import KMeansLayer\n",
        "from ..kernels.limit_model import forward\n",
        "from kmtlib import kernels\n",
    ):
        assert any(_is_circuit(m) for m in _absolute_imports(source, "kmtlib.reference")), source
    assert not any(_is_circuit(m) for m in _absolute_imports("from .._checks import check_tau\n", "kmtlib.reference"))
