"""The reading path of one forward pass: which files and lines of ``kmtlib`` run.

Traces every ``kmtlib`` function entered while a model computes two steps, ``model(X, C0, 2)``,
and counts the files and the lines of code of those functions (blank lines, comments and
docstrings not counted; a function nested in another counted once). Run from the repository root::

    python scripts/reading_path.py

It prints one line per model and path: the fixed-weight model of Theorem 2.1
(``from_theorem(8, 4)``) and the trained layer shipped in ``kmtlib/pretrained/``, each on the
formula path (``model.fast = False``: every block by its formula) and on the default path
(``model.fast``, the default: the blocks' kernels where they apply). ``--files`` lists the files
with their lines.
"""

from __future__ import annotations

import argparse
import ast
import io
import itertools
import sys
import tokenize
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import kmtlib  # noqa: E402

PACKAGE = Path(kmtlib.__file__).resolve().parent


def code_lines(path: Path) -> set[int]:
    """The lines of ``path`` that hold code: not blank, not only a comment, not in a docstring."""
    source = path.read_text()
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            continue
        if tok.type == tokenize.ENDMARKER:
            continue
        lines.update(range(tok.start[0], tok.end[0] + 1))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            if docstring and isinstance(first.value.value, str):
                lines -= set(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def function_spans(path: Path) -> dict[int, tuple[int, int]]:
    """First line of each function's code object -> (first line with decorators, last line)."""
    spans = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            spans[node.lineno] = (first, node.end_lineno)
            spans.setdefault(first, (first, node.end_lineno))
    return spans


def trace(run: Callable[[], object]) -> dict[Path, set[int]]:
    """Run ``run()`` and return, per kmtlib file, the code lines of the functions it entered."""
    entered: set[tuple[str, int]] = set()

    def profiler(frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(str(PACKAGE)):
                entered.add((code.co_filename, code.co_firstlineno))

    sys.setprofile(profiler)
    try:
        run()
    finally:
        sys.setprofile(None)
    per_file: dict[Path, set[int]] = {}
    for filename, first in entered:
        path = Path(filename)
        span = function_spans(path).get(first)
        if span is None:  # module or class body: not a function a reader follows
            continue
        per_file.setdefault(path, set()).update(range(span[0], span[1] + 1))
    return {path: lines & code_lines(path) for path, lines in per_file.items()}


def inputs(d: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(2, 32, d, generator=generator)
    return X, X[:, :k].clone()


def theorem_model():
    return kmtlib.KMeansTransformer.from_theorem(8, 4), 8, 4


def trained_layer():
    path = PACKAGE / "pretrained" / "any_k_broad.pt"
    model = kmtlib.load_model(path)
    return model, model.d, 5


MODELS = {"theorem 2.1, from_theorem(8, 4)": theorem_model, "trained layer (kmtlib/pretrained)": trained_layer}


PATHS = {"formula path": False, "default path": True}
"""The two paths a forward pass may take: ``model.fast`` False (the formula) or True (the default)."""


def measure(build, fast: bool = False) -> dict[Path, set[int]]:
    model, d, k = build()
    model.fast = fast
    model.eval()
    X, C0 = inputs(d, k)
    with torch.no_grad():
        model(X, C0, 2)  # warm up: first-call imports and registries are not the reading path
        return trace(lambda: model(X, C0, 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", action="store_true", help="list each file and its lines of code")
    args = parser.parse_args()
    for (name, build), (path, fast) in itertools.product(MODELS.items(), PATHS.items()):
        per_file = measure(build, fast)
        total = sum(len(lines) for lines in per_file.values())
        print(f"{name}, {path}: {len(per_file)} files, {total} lines of code")
        if args.files:
            for path, lines in sorted(per_file.items(), key=lambda item: -len(item[1])):
                print(f"    {len(lines):4d}  {path.relative_to(PACKAGE.parent)}")


if __name__ == "__main__":
    main()
