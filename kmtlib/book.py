"""Helpers every book chapter uses: profiles, parameter checks, output folder, figures, metrics.

A chapter's parameters cell holds plain literals (so papermill can override them); its first code
cell after that builds a :class:`Chapter`, which checks the common parameters, resolves the device
and fills the size parameters left at ``None`` from the chosen profile.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import platform
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from . import __version__
from .device import resolve_device

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


class Chapter:
    """The run context of one chapter.

    Args:
        stem: the chapter's file stem, e.g. ``"01_kmeans_and_lloyd"`` (names the default output folder).
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (see :func:`kmtlib.resolve_device`).
        seed: the chapter's master seed (>= 0).
        profile: one of :data:`PROFILES`.
        output_dir: where figures and ``metrics.json`` go; empty = ``results/<stem>/`` at the repo root.
        sizes: the size parameters as set in the parameters cell; ``0`` (or ``None``) means "take the
            profile's value" (papermill's type parser knows no ``int | None``, so chapters use 0).
        profiles: for every profile, the default of every size parameter.
    """

    def __init__(self, stem: str, *, device: str, seed: int, profile: str, output_dir: str,
                 sizes: Mapping[str, Any], profiles: Mapping[str, Mapping[str, Any]]) -> None:
        self.started = time.perf_counter()
        self.stem = stem
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
        root = find_repo_root()
        self.output_dir = Path(output_dir) if output_dir else root / "results" / stem
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.metrics: dict[str, Any] = {}
        self.figures: list[str] = []
        # Names this run: printed by describe() into the executed notebook and stored in metrics.json,
        # so the book build can tell whether the files in output_dir belong to the page it renders.
        self.run_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}-{time.perf_counter_ns() % 10**6:06d}"

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
        return (f"profile={self.profile}, device={self.device}, seed={self.seed}; {sizes}{extra}; "
                f"output_dir={self.output_dir}; run={self.run_id}")

    def save_figure(self, fig, label: str) -> None:
        """Write ``<label>.png`` and ``<label>.pdf`` into the output folder."""
        if not label.startswith("fig-"):
            raise ValueError(f"figure labels start with 'fig-', got {label!r}")
        fig.savefig(self.output_dir / f"{label}.png", dpi=150, bbox_inches="tight")
        fig.savefig(self.output_dir / f"{label}.pdf", bbox_inches="tight")
        self.figures.append(label)

    def record(self, **values: Any) -> None:
        """Add key numbers to ``metrics.json`` (plain numbers, strings, lists of numbers)."""
        for name, value in values.items():
            if isinstance(value, Mapping):
                # metrics.json is flat (DESIGN.md): readers and tests look numbers up by one name
                raise TypeError(f"metric {name!r} is a mapping; record one flat name per number or list")
            self.metrics[name] = _plain(value)

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
        path = self.output_dir / "metrics.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True))
        os.replace(tmp, path)
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
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
