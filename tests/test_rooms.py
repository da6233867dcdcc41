"""The rooms of kmtlib and what each may import (CONTRIBUTING.md, "The rooms"): down only, never
up, and no import cycle anywhere.

Two more rules live in tests/test_environment.py: the references never import a circuit, and
the library never imports kmtbook.

Every module of kmtlib is read with ``ast`` (nothing is imported): every import statement counts,
at the top of the file, inside a function (a lazy import) or under ``if TYPE_CHECKING:``.
Relative imports are resolved; ``from . import x`` where ``x`` is a submodule is an edge to that
submodule; importing ``kmtlib.a.b`` also runs the package ``kmtlib.a`` (an edge to it too). An
import of the package ``kmtlib`` itself from one of its modules is an edge to ``kmtlib``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kmtlib"

ROOMS: dict[str, str] = {
    # the package itself: the public face, may import from every room (no room imports it)
    "kmtlib": "package",
    "kmtlib._version": "maths",
    # maths: tasks, initialisation, Lloyd, the objective, attention maps, the references, helpers
    "kmtlib._checks": "maths",
    "kmtlib._numerics": "maths",
    "kmtlib._atomic_save": "maths",  # (a file written whole or not at all: model files, checkpoints)
    "kmtlib.results": "maths",
    "kmtlib.device": "maths",
    "kmtlib.tasks": "maths",
    # (a trained layer's domain: the broad tasks, the data's own frame and the map into the domain
    # and back; the estimator's, and training's where it presents its tasks as the estimator
    # presents data)
    "kmtlib.domain": "maths",  # (the package imports none of its modules)
    "kmtlib.domain.broad_tasks": "maths",
    "kmtlib.domain.domain_map": "maths",
    "kmtlib.domain.frame": "maths",
    "kmtlib.domain.trained": "maths",
    "kmtlib.init": "maths",
    "kmtlib.lloyd": "maths",
    "kmtlib.objective": "maths",
    "kmtlib.losses": "maths",
    "kmtlib.attention": "maths",
    "kmtlib.reference": "maths",
    "kmtlib.reference._result": "maths",
    "kmtlib.reference.kmedoids": "maths",
    "kmtlib.reference.robust": "maths",
    "kmtlib.reference.soft": "maths",
    "kmtlib.reference.spherical": "maths",
    "kmtlib.reference.trimmed": "maths",
    "kmtlib.theorems": "maths",  # (the theorems' weight matrices: plain tensors)
    "kmtlib.chunks": "maths",  # (work on a batch a slice at a time: imports only torch)
    # kernels: leaves (tensors in, tensors out), beside the formulas they replace
    "kmtlib.kernels": "kernels",
    "kmtlib.kernels.euclidean_softmax": "kernels",
    "kmtlib.kernels.layout": "kernels",
    "kmtlib.kernels.limit_model": "kernels",
    "kmtlib.kernels.point_attention": "kernels",
    "kmtlib.kernels.scratch": "kernels",
    "kmtlib.kernels.weights": "kernels",
    # layer: its configuration, blocks, token embeddings, equivariant maps
    "kmtlib.layer": "layer",
    "kmtlib.embedding": "layer",
    "kmtlib.equivariant": "layer",
    # fast: where a kernel applies, the forward pass with the kernels, the stacked runs of training
    "kmtlib.fast": "fast",
    "kmtlib.fast.choice": "fast",
    "kmtlib.fast.whole_pass": "fast",
    # model: the transformer, the theorem and trainable configurations, the variants, model files
    "kmtlib.transformer": "model",
    "kmtlib.constructions": "model",
    "kmtlib.learned": "model",
    "kmtlib.io": "model",
    "kmtlib.io.model_file": "model",
    "kmtlib.variants": "model",
    "kmtlib.variants.attention_maps": "model",
    "kmtlib.variants.circuit": "model",
    "kmtlib.variants.kmedoids": "model",
    "kmtlib.variants.robust": "model",
    "kmtlib.variants.soft": "model",
    "kmtlib.variants.spherical": "model",
    "kmtlib.variants.trimmed": "model",
    # training: the package kmtlib.training (every module of it, see room_of), the command's name
    # kmtlib.train, and the stack of runs a group trains as one pass
    "kmtlib.train": "training",
    "kmtlib.fast.run_stack": "fast",
    # evaluation and inspection
    "kmtlib.analysis": "evaluation",  # (the package imports none of its modules)
    "kmtlib.analysis.evaluate": "evaluation",
    "kmtlib.analysis.inspect_layer": "evaluation",
    # the scikit-learn estimator: its parameters, the model it runs, the frame and domain map, the
    # fit, the reported quantities, the estimator itself
    "kmtlib.estimator": "estimator",
    "kmtlib.estimator.params": "estimator",
    "kmtlib.estimator.model": "estimator",
    "kmtlib.estimator.domain": "estimator",
    "kmtlib.estimator.fit": "estimator",
    "kmtlib.estimator.reported": "estimator",
    "kmtlib.estimator.transformer_kmeans": "estimator",
}
"""Every module of kmtlib and its room (a new module must be placed here)."""

TRAINING_PACKAGE = "kmtlib.training"
"""Every module of this package is in the training room."""

MAY_IMPORT: dict[str, set[str]] = {
    "maths": {"maths", "kernels"},
    "kernels": {"kernels"},  # and kmtlib._numerics, kmtlib._checks, kmtlib.results: KERNEL_LEAVES
    "layer": {"layer", "maths", "kernels"},
    "fast": {"fast", "layer", "maths", "kernels"},
    "model": {"model", "fast", "layer", "maths", "kernels"},
    "training": {"training", "model", "fast", "layer", "maths", "kernels"},
    "evaluation": {"evaluation", "model", "fast", "layer", "maths", "kernels"},
    "estimator": {"estimator", "model", "fast", "layer", "maths", "kernels"},
    "package": {"package", "maths", "kernels", "layer", "fast", "model", "training", "evaluation", "estimator"},
}
"""Which rooms a room may import (down only; CONTRIBUTING.md)."""

KERNEL_LEAVES = {"kmtlib._numerics", "kmtlib._checks", "kmtlib.results"}
"""The maths modules a kernel may import: plain helpers and data types, themselves leaves."""

def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def kmtlib_modules(package: Path = PACKAGE) -> dict[str, Path]:
    """The modules of ``package`` (kmtlib, or the book's tooling kmtbook) by dotted name."""
    return {module_name(p): p for p in sorted(package.rglob("*.py"))}


def imported_names(node: ast.Import | ast.ImportFrom, package: str, modules: set[str]) -> list[str]:
    """The dotted names one import statement of a module in ``package`` imports: the source and,
    for ``from X import name``, each ``X.name`` that is a module."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = package.split(".")
        base = base[: len(base) - node.level + 1]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    submodules = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in modules]
    if source != package.split(".")[0] or len(submodules) < len(node.names):  # (a name of the package itself)
        return [*submodules, source]
    return submodules


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The modules of its own package (kmtlib or kmtbook) that module ``name`` (file ``path``)
    imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top = name.split(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for target in imported_names(node, package, modules):
            # importing a.b.c runs the packages a.b (but not the package itself, which every import runs,
            # nor the module's own packages, which have run before it)
            parts = target.split(".")
            prefixes = (".".join(parts[:i]) for i in range(2, len(parts) + 1))
            found.update(p for p in prefixes if p in modules and not name.startswith(p + "."))
            if target == top:
                found.add(target)
    found.discard(name)
    return {m for m in found if m == top or m.startswith(top + ".")}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of its own package it imports, for kmtlib or another package (kmtbook)."""
    modules = kmtlib_modules(package)
    return {name: imports_of(name, path, set(modules)) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as a list of nodes (first == last), or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def room_of(module: str) -> str | None:
    if module == TRAINING_PACKAGE or module.startswith(TRAINING_PACKAGE + "."):
        return "training"
    return ROOMS.get(module)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    offenders = []
    for module, targets in sorted(graph.items()):
        room = room_of(module)
        for target in sorted(targets):
            target_room = room_of(target)
            if room == "kernels" and target in KERNEL_LEAVES:
                continue
            if target_room not in MAY_IMPORT.get(room or "", set()):
                offenders.append(f"{module} ({room}) imports {target} ({target_room})")
    return offenders


def is_subfolder(place: str) -> bool:
    """Whether ``place`` (a dotted name) is a subfolder of kmtlib (``kmtlib.io``)."""
    parts = place.split(".")
    return len(parts) == 2 and (PACKAGE / parts[1]).is_dir()


def folder_of(module: str) -> str:
    """The place of a module as a reader sees it: a top-level module is its own place, a module of
    a subfolder (at any depth) is in that subfolder (``kmtlib.io.model_file`` -> ``kmtlib.io``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or is_subfolder(module) else module


def mixed_folders(modules: list[str]) -> list[str]:
    """The subfolders of kmtlib whose modules are not all in one room."""
    rooms: dict[str, set[str]] = {}
    for module in modules:
        if is_subfolder(folder_of(module)):
            rooms.setdefault(folder_of(module), set()).add(str(room_of(module)))
    return [f"{folder}: {sorted(found)}" for folder, found in sorted(rooms.items()) if len(found) > 1]


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` with every module of a subfolder replaced by its folder (edges inside one folder
    dropped)."""
    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = folder_of(module)
        folders.setdefault(source, set()).update(folder_of(t) for t in targets if folder_of(t) != source)
    return folders


# ----------------------------------------------------------------------------------- the tests
def test_every_module_has_a_room():
    """A new module of kmtlib must be placed in a room (ROOMS above, CONTRIBUTING.md)."""
    unplaced = sorted(m for m in kmtlib_modules() if room_of(m) is None)
    assert not unplaced, f"place these modules in ROOMS of tests/test_rooms.py: {unplaced}"
    stale = sorted(set(ROOMS) - set(kmtlib_modules()))
    assert not stale, f"ROOMS names modules that no longer exist: {stale}"


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_import_cycle_in_the_book_tooling():
    """kmtbook, read the same way, has no import cycle either (lazy imports included)."""
    cycle = find_cycle(import_graph(ROOT / "kmtbook"))
    assert cycle is None, "import cycle in kmtbook: " + " -> ".join(cycle or [])


def test_no_module_imports_a_private_name_of_another():
    """A leading underscore is private to its module (CONTRIBUTING.md: a function that skips its
    checks is ``<name>_unchecked``): no module of kmtlib imports another's ``_name``."""
    offenders = []
    for name, path in kmtlib_modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("kmtlib")):
                offenders += [f"{name} imports {a.name} from {node.module}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]  # fmt: skip
    assert not offenders, offenders


def test_rooms_import_down_only():
    """Kernels import no room above them (only each other and KERNEL_LEAVES); the layer never the
    model; maths never the layer or the model; nothing imports training, evaluation or the
    estimator but themselves and the package; no room imports the package ``kmtlib``."""
    offenders = upward_imports(import_graph())
    assert not offenders, "imports that go up:\n" + "\n".join(offenders)


def test_every_folder_is_one_room():
    """A subfolder of kmtlib holds one concern, in one room (``analysis/`` held the maths of a
    trained layer's domain beside the evaluation of a model)."""
    mixed = mixed_folders(sorted(kmtlib_modules()))
    assert not mixed, "folders whose modules are in more than one room (split them):\n" + "\n".join(mixed)


def test_no_folder_level_arrow_up():
    """Read as a reader sees the files (every subfolder one place, every top-level module one),
    the imports still go down only: no folder imports a module that imports that folder (the
    model saved its files by ``io/``, which reads model files and imports the model; the ties of
    ``_numerics`` used a kernel that uses ``_numerics``)."""
    cycle = find_cycle(folder_graph(import_graph()))
    assert cycle is None, "folder-level import cycle (an arrow up): " + " -> ".join(cycle or [])


def test_the_checks_see_what_they_claim(tmp_path):
    """The graph reader sees lazy, TYPE_CHECKING and relative imports and ``from . import x`` of a
    submodule; the search finds a cycle; an upward import is reported."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import kernels\n"
        "if TYPE_CHECKING:\n    from .transformer import KMeansTransformer\n"
        "def f():\n    from .variants import kmedoids\n    import kmtlib\n"
    )
    path = tmp_path / "layer.py"
    path.write_text(source)
    modules = {"kmtlib", "kmtlib.kernels", "kmtlib.transformer", "kmtlib.variants", "kmtlib.variants.kmedoids"}
    found = imports_of("kmtlib.layer", path, modules)
    assert found == modules
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    offenders = upward_imports({"kmtlib.layer": found})
    assert any("kmtlib.transformer (model)" in o for o in offenders)
    assert any("imports kmtlib (package)" in o for o in offenders)
    assert not any("kmtlib.kernels " in o for o in offenders)


def test_the_folder_checks_see_what_they_claim():
    """A folder that imports a module which imports that folder is a folder-level cycle (the
    model saving through ``io/``, which imports the model); a folder of two rooms is mixed."""
    graph = {
        "kmtlib.transformer": {"kmtlib.io.atomic_save", "kmtlib.layer"},
        "kmtlib.io.model_file": {"kmtlib.transformer"},
        "kmtlib.io.atomic_save": set(),
    }
    assert find_cycle(graph) is None
    assert find_cycle(folder_graph(graph)) == ["kmtlib.io", "kmtlib.transformer", "kmtlib.io"]
    assert folder_of("kmtlib.transformer") == "kmtlib.transformer"
    assert folder_of("kmtlib.io") == folder_of("kmtlib.io.model_file") == "kmtlib.io"
    assert mixed_folders(["kmtlib.analysis.evaluate", "kmtlib.domain.frame", "kmtlib.tasks"]) == []
    assert mixed_folders(["kmtlib.io.model_file", "kmtlib.io.evaluate"]) == ["kmtlib.io: ['None', 'model']"]


@pytest.mark.parametrize("room", sorted(MAY_IMPORT))
def test_the_room_rules(room):
    """The never rules of CONTRIBUTING.md, as the table says them."""
    never = {
        "kernels": {"maths", "layer", "fast", "model", "training", "evaluation", "estimator", "package"},
        "layer": {"fast", "model", "training", "evaluation", "estimator", "package"},
        "fast": {"model", "training", "evaluation", "estimator", "package"},
        "maths": {"layer", "fast", "model", "training", "evaluation", "estimator", "package"},
        "model": {"training", "evaluation", "estimator", "package"},
        "training": {"evaluation", "estimator", "package"},
        "evaluation": {"training", "estimator", "package"},
        "estimator": {"training", "evaluation", "package"},
        "package": set(),
    }[room]
    assert not (MAY_IMPORT[room] & never)


def test_one_scores_registry_and_a_variant_score_loads(tmp_path):
    """The layer reads the one scores registry of the maths room (kmtlib.attention.SCORES), which
    the variants register into; a model file whose block names a variant's score loads in a fresh
    interpreter that never imported the variant (the model imports the variants)."""
    import subprocess
    import sys

    import kmtlib.attention
    import kmtlib.layer
    from kmtlib import KMeansTransformer

    assert kmtlib.layer.SCORES is kmtlib.attention.SCORES
    path = KMeansTransformer.from_variant("kmedoids", 2, 3).save(tmp_path / "kmedoids.pt")
    assert "medoid_selection" in kmtlib.attention.SCORES
    code = (
        "import sys, kmtlib\n"
        "assert 'kmtlib.variants.kmedoids' not in sys.modules\n"
        f"model = kmtlib.load_model({str(path)!r})\n"
        "assert model.config.CAC.score == 'medoid_selection'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


MAX_MODULE_LINES = 700
"""A module longer than this holds more than one concern (CONTRIBUTING.md): split it by concern."""


def test_no_module_of_the_library_or_the_book_tooling_is_over_the_limit():
    too_long = {
        str(path.relative_to(ROOT)): lines
        for package in ("kmtlib", "kmtbook")
        for path in sorted((ROOT / package).rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {too_long}"
