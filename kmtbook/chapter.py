"""Helpers every book chapter uses: profiles, parameter checks, output folder, figures, metrics.

A chapter's parameters cell holds plain literals (so papermill can override them); its first code
cell after that builds a :class:`Chapter`, which checks the common parameters, resolves the device
and fills the size parameters left at ``None`` from the chosen profile.
"""

from __future__ import annotations

import ast
import difflib
import json
import math
import numbers
import os
import platform
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from kmtlib import __version__
from kmtlib.device import resolve_device

PROFILES: tuple[str, ...] = ("quick", "book", "paper")
"""``quick``: a smoke run for the tests (under a minute on 2 CPU cores); ``book``: the default build
on a 2-core CPU (a chapter within 10 minutes); ``paper``: the paper's own scale (a GPU helps)."""

REPO_ROOT = Path(__file__).resolve().parent.parent


def find_repo_root(start: Path | None = None) -> Path:
    """The folder holding ``_config.yml`` (the book root), searched upwards from ``start`` or the cwd;
    falls back to the folder above the installed package."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_config.yml").is_file() and (folder / "kmtlib").is_dir():
            return folder
    return REPO_ROOT


class ParameterError(ValueError):
    """A chapter parameter has a bad value; the message names the parameter."""


def check_parameter(name: str, value: Any, kind: type, *, minimum: float | None = None,
                    maximum: float | None = None, choices: tuple | None = None) -> Any:
    """Check one chapter parameter and return it; raise :class:`ParameterError` naming it otherwise."""
    if kind is int:
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if ok and math.isnan(float(value)):
            raise ParameterError(f"parameter {name} must be a number, got NaN")
    elif kind is bool:
        ok = isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise ParameterError(f"parameter {name} must be of type {kind.__name__}, got {type(value).__name__} {value!r}")
    if choices is not None and value not in choices:
        raise ParameterError(f"parameter {name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    if minimum is not None and value < minimum:
        raise ParameterError(f"parameter {name} must be >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ParameterError(f"parameter {name} must be <= {maximum}, got {value!r}")
    return value


PAPERMILL_HEADER = "# Parameters"
"""The first line of the cell papermill injects after the ``parameters`` cell (its Python translator
writes ``# Parameters`` and then one assignment per parameter given with ``-p``)."""


def _assigned_names(source: str) -> list[str]:
    """The names a cell assigns at top level (``x = 1``, ``x: int = 1``), in order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def passed_parameters(history: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """``(declared, passed)`` read from a kernel's input history (IPython's ``In``), or ``None``
    when no parameters were injected (the book build, an interactive session).

    Papermill runs the ``parameters`` cell, then the cell it injected with the values given on its
    command line (first line ``# Parameters``), then the rest. ``declared`` are the names assigned
    before the injected cell (the chapter's parameters), ``passed`` the names the injected cell
    assigns."""
    for i in range(len(history) - 1, -1, -1):
        source = history[i] or ""
        if source.lstrip().startswith(PAPERMILL_HEADER):
            declared = [name for cell in history[:i] for name in _assigned_names(cell or "")]
            return declared, _assigned_names(source)
    return None


def check_passed_parameters(declared: Sequence[str], passed: Sequence[str]) -> None:
    """Raise :class:`ParameterError` naming the first passed parameter the chapter does not declare
    (a misspelling such as ``-p n_taks 10`` would otherwise run silently with the profile's value)
    and the closest declared name."""
    known = list(dict.fromkeys(declared))
    unknown = [name for name in dict.fromkeys(passed) if name not in known]
    if not unknown:
        return
    name = unknown[0]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    more = f" (nor are {', '.join(unknown[1:])})" if len(unknown) > 1 else ""
    hint = f" Did you mean {close[0]}?" if close else ""
    raise ParameterError(
        f"parameter {name} is not a parameter of this chapter{more}.{hint} Its parameters are {', '.join(known)}."
    )


def _kernel_history() -> list[str] | None:
    """The raw input history of the IPython kernel running this code, or ``None`` outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with the kernel
        return None
    shell = get_ipython()
    if shell is None:
        return None
    return list(shell.history_manager.input_hist_raw)


class Chapter:
    """The run context of one chapter.

    Args:
        stem: the chapter's file stem, e.g. ``"01_kmeans_and_lloyd"`` (names the default output folder).
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (see :func:`kmtlib.resolve_device`).
        seed: the chapter's master seed (>= 0).
        profile: one of :data:`PROFILES`.
        output_dir: where figures and ``metrics.json`` go; empty = ``results/<stem>/``; a relative path
            is taken from the repository root.
        sizes: the size parameters as set in the parameters cell; ``0`` (or ``None``) means "take the
            profile's value" (papermill's type parser knows no ``int | None``, so chapters use 0).
        profiles: for every profile, the default of every size parameter.
    """

    def __init__(
        self,
        stem: str,
        *,
        device: str,
        seed: int,
        profile: str,
        output_dir: str,
        sizes: Mapping[str, Any],
        profiles: Mapping[str, Mapping[str, Any]],
    ) -> None:
        self.started = time.perf_counter()
        self.stem = stem
        history = _kernel_history()
        found = passed_parameters(history) if history is not None else None
        if found is not None:
            check_passed_parameters(*found)
        check_parameter("profile", profile, str, choices=PROFILES)
        check_parameter("seed", seed, int, minimum=0)
        check_parameter("output_dir", output_dir, str)
        check_parameter("device", device, str)
        try:
            self.device = resolve_device(device)
        except (ValueError, RuntimeError, TypeError) as err:
            raise ParameterError(f"parameter device: {err}") from err
        self.seed = int(seed)
        self.profile = profile
        defaults = profiles[profile]
        unknown = set(sizes) - set(defaults)
        if unknown:
            raise ParameterError(f"no profile default for parameter(s) {sorted(unknown)}")
        unset = {name for name, value in sizes.items() if value is None or (_is_number(value) and value == 0)}
        self.sizes = {name: (defaults[name] if name in unset else value) for name, value in sizes.items()}
        self.overridden = sorted(set(sizes) - unset)
        self.root = find_repo_root()
        # A relative folder is taken from the repository root, where the printed commands are run
        # (chapters themselves run with cwd book/).
        self.output_dir = self.root / (output_dir or Path("results") / stem)
        try:
            self.output_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ParameterError(f"parameter output_dir: cannot create the folder {self.output_dir}: "
                                 f"{err.strerror or err}") from err
        if not os.access(self.output_dir, os.W_OK):
            raise ParameterError(f"parameter output_dir: the folder {self.output_dir} is not writable")
        self.metrics: dict[str, Any] = {}
        self.figures: list[str] = []
        # Names this run: printed by describe() into the executed notebook and stored in metrics.json,
        # so the book build can tell whether the files in output_dir belong to the page it renders.
        self.run_id = (
            f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}-{time.perf_counter_ns() % 10**6:06d}"
        )

    def __getitem__(self, name: str) -> Any:
        return self.sizes[name]

    def generator(self, offset: int = 0, device: torch.device | str | None = None) -> torch.Generator:
        """A fresh generator seeded with ``seed + offset`` on the chapter's device (or ``device``)."""
        g = torch.Generator(device=torch.device(device) if device is not None else self.device)
        g.manual_seed(self.seed + offset)
        return g

    def describe(self) -> str:
        """One line naming the profile, device, seed and sizes (printed at the top of every chapter)."""
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        extra = f" (overridden: {', '.join(self.overridden)})" if self.overridden else ""
        return (
            f"profile={self.profile}, device={self.device}, seed={self.seed}; {sizes}{extra}; "
            f"output_dir={self.shown_output_dir}; run={self.run_id}"
        )

    @property
    def shown_output_dir(self) -> str:
        """The output folder as the page prints it: relative to the repository root when it lies
        inside it (``results/<stem>``), so that a page names no folder of the machine that built it."""
        folder = self.output_dir.resolve()
        try:
            return folder.relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return str(self.output_dir)

    def save_figure(self, fig, label: str) -> None:
        """Write ``<label>.png`` and ``<label>.pdf`` into the output folder."""
        if not label.startswith("fig-"):
            raise ValueError(f"figure labels start with 'fig-', got {label!r}")
        fig.savefig(self.output_dir / f"{label}.png", dpi=150, bbox_inches="tight")
        fig.savefig(self.output_dir / f"{label}.pdf", bbox_inches="tight")
        self.figures.append(label)

    def record(self, **values: Any) -> None:
        """Add key numbers to ``metrics.json`` (plain numbers, strings, lists of numbers).

        A NaN or infinite number is refused with the metric's name: JSON has no such numbers, and a
        missing value is recorded as ``None`` (``null``), which says so."""
        for name, value in values.items():
            if isinstance(value, Mapping):
                # metrics.json is flat (the chapter contract): readers and tests look numbers up by one name
                raise TypeError(f"metric {name!r} is a mapping; record one flat name per number or list")
            plain = _plain(value)
            where = _non_finite(plain)
            if where is not None:
                raise ValueError(
                    f"metric {name!r} is not a finite number{where}: {plain!r:.200}; "
                    "record None for a value that does not exist"
                )
            self.metrics[name] = plain

    def write_metrics(self) -> Path:
        """Write ``metrics.json`` with the recorded numbers and the run's settings."""
        payload = {
            **self.metrics,
            "chapter": self.stem,
            "profile": self.profile,
            "device": str(self.device),
            "seed": self.seed,
            **{f"param_{k}": _plain(v) for k, v in self.sizes.items()},
            "figures": list(self.figures),
            "kmtlib_version": __version__,
            "torch_version": torch.__version__,
            "python_version": platform.python_version(),
            "wall_seconds": round(time.perf_counter() - self.started, 3),
            "run_id": self.run_id,
        }
        for name, value in payload.items():
            where = _non_finite(value)
            if where is not None:
                raise ValueError(f"metric {name!r} is not a finite number{where}")
        text = json.dumps(payload, indent=2, sort_keys=True, allow_nan=False) + "\n"
        path = self.output_dir / "metrics.json"
        # Written next to the target and renamed over it: a reader sees the old file or the new one,
        # never a part of one, whatever stops the chapter.
        fd, tmp = tempfile.mkstemp(prefix=".metrics-", suffix=".json.tmp", dir=self.output_dir)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path


_DESCRIBE = re.compile(
    r"profile=(?P<profile>\w+), device=(?P<device>[^,]+), seed=(?P<seed>\d+); (?P<sizes>.*?); "
    r"output_dir=(?P<output_dir>.*?)(?:; run=(?P<run>\S+))?$"
)


def parse_describe(text: str) -> dict[str, str] | None:
    """Read back the line :meth:`Chapter.describe` printed (the first one in ``text`` that matches).

    The book build uses it to tell which profile, device, seed and sizes produced a page and where
    that run wrote its figures; ``None`` when ``text`` holds no such line.
    """
    for line in text.splitlines():
        match = _DESCRIBE.search(line.strip())
        if match:
            found = {k: (v or "") for k, v in match.groupdict().items()}
            found["sizes"] = found["sizes"].split(" (overridden:")[0]
            return found
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _plain(value: Any) -> Any:
    """Turn tensors, numpy values and nested containers into JSON-friendly Python values."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return value.item() if value.ndim == 0 else value.tolist()
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _non_finite(value: Any, path: str = "") -> str | None:
    """Where in ``value`` (a plain value) a NaN or infinity sits: ``""`` for the value itself,
    ``" at [3]"`` for an element of a list; ``None`` when every number is finite."""
    if isinstance(value, float) and not math.isfinite(value):
        return f" at {path}" if path else ""
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _non_finite(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None
