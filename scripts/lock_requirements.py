"""Write the locked environments of the nox sessions: ``requirements/<session>.txt``, every package at one
version with the sha256 of each of its files, for CPU, Linux x86_64 and Python 3.11.

    python scripts/lock_requirements.py            # resolve again and write requirements/*.txt (uv)
    python scripts/lock_requirements.py --check    # exit 1 if pyproject.toml changed since the locks
    python scripts/lock_requirements.py --upgrade-into _build/upgrade/lock
                                                   # a scratch lock: the newest versions the ranges allow

A new resolution keeps the versions of the committed locks wherever pyproject.toml still allows them
(uv prefers the pins of the file it rewrites), so a change of one range moves only what it must.
``--upgrade-into FOLDER`` resolves every package afresh to the newest version its ranges allow and
writes the same files into FOLDER, never into requirements/: ``nox -s upgrade`` installs the book from
that scratch lock and reports what moves (kmtbook/upgrade_report.py).

The locks are made with ``uv pip compile --generate-hashes`` (install uv with ``pip install uv``). torch
stays out of them: the sessions install it first (TORCH_SPEC, default the CPU wheel torch==2.13.0, or a
CUDA build), then the lock with ``pip install --require-hashes -r``, then the project with ``--no-deps``.
The resolution sees torch as the CPU wheel (``torch==2.13.0+cpu``, from ``--find-links``), so the lock holds
torch's own dependencies but no CUDA package. Each lock's header records a digest of pyproject.toml's
dependency tables (tests/test_lock.py fails when they change and the locks do not).

``requirements/launch.txt`` locks the launch button's environment, what Binder installs from
``binder/requirements.txt``: the project's extras named there and every other package it names (jupytext),
resolved within the versions of the other locks, so that ``constraints.txt`` (which binder/requirements.txt
applies with ``-c``) pins every package of that environment, whatever binder/requirements.txt adds. Its
header records a digest of pyproject.toml's dependency tables and of those lines.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCKS = {"book": "book", "tests": "test", "lint": "lint"}
"""requirements/<name>.txt -> the extra of pyproject.toml it locks (the nox session's extra)."""
PYTHON = "3.11"
PLATFORM = "x86_64-manylinux_2_28"
TORCH = "torch==2.13.0+cpu"
DIGEST_LINE = "# pyproject-dependencies-sha256: "
CONSTRAINTS = "constraints.txt"
"""requirements/constraints.txt: every locked version, without hashes, for installers that take the project
editable beside them (environment.yml's pip section, binder/requirements.txt), where pip's hash-checking
mode cannot be used."""
LAUNCH = "launch"
LAUNCH_SOURCE = "binder/requirements.txt"
"""requirements/launch.txt: the lock of what binder/requirements.txt installs (the launch button's environment)."""
_PIN = re.compile(r"(?m)^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def dependency_digest(pyproject: str) -> str:
    """The sha256 of pyproject.toml's dependency tables (requires-python, dependencies, optional-dependencies)."""
    project = tomllib.loads(pyproject)["project"]
    tables = {key: project.get(key) for key in ("requires-python", "dependencies", "optional-dependencies")}
    return hashlib.sha256(json.dumps(tables, sort_keys=True).encode()).hexdigest()


def recorded_digest(lock: Path) -> str | None:
    """The digest a lock file's header records."""
    for line in lock.read_text().splitlines():
        if line.startswith(DIGEST_LINE):
            return line[len(DIGEST_LINE):].strip()
    return None


def launch_inputs(binder: str) -> tuple[list[str], list[str]]:
    """What binder/requirements.txt asks for beside torch (pinned in that file itself): the extras of the project
    it installs (``-e .[nb]``) and its other requirements (``jupytext>=1.16``); options (``-c``, indexes) left out."""
    extras: list[str] = []
    others: list[str] = []
    for raw in binder.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        project = re.fullmatch(r"(?:-e\s+|--editable\s+)?\.(?:\[([^\]]*)\])?", line)
        if project:
            extras += [extra.strip() for extra in (project[1] or "").split(",") if extra.strip()]
        elif not line.startswith("-") and not re.match(r"torch(?![\w.-])", line):
            others.append(line)
    return extras, others


def launch_digest(pyproject: str, binder: str) -> str:
    """The digest requirements/launch.txt records: pyproject.toml's dependency tables and binder's requirements."""
    extras, others = launch_inputs(binder)
    tables = {"pyproject": dependency_digest(pyproject), "extras": extras, "requirements": others}
    return hashlib.sha256(json.dumps(tables, sort_keys=True).encode()).hexdigest()


def pins(lock: Path) -> dict[str, str]:
    """The packages of a lock file and their versions."""
    return {match[1]: match[2] for match in _PIN.finditer(lock.read_text())}


def constraints_text(folder: Path | None = None) -> str:
    """requirements/constraints.txt as the locks make it (those of ``folder``, default requirements/): the
    union of their pins (they agree on each)."""
    folder = ROOT / "requirements" if folder is None else Path(folder)
    union: dict[str, str] = {}
    for name in [*LOCKS, LAUNCH]:
        union.update(pins(folder / f"{name}.txt"))
    lines = [f"{package}=={version}" for package, version in sorted(union.items())]
    names = ",".join([*LOCKS, LAUNCH])
    return ("# requirements/constraints.txt: the versions of requirements/{" + names + "}.txt without "
            "their hashes,\n# for environment.yml and binder/requirements.txt (pip -c). Written by "
            "`python scripts/lock_requirements.py`.\n" + "\n".join(lines) + "\n")


def header(name: str, extra: str, digest: str) -> str:
    return (f"# requirements/{name}.txt: the locked environment of `nox -s {name}` (pyproject.toml's extra "
            f"[{extra}]),\n# for CPU, Linux x86_64, Python {PYTHON}; torch is installed before it (noxfile.py).\n"
            f"# Written by `python scripts/lock_requirements.py` (uv pip compile --generate-hashes); "
            "do not edit by hand.\n"
            f"{DIGEST_LINE}{digest}\n")


def write_lock(name: str, extra: str, find_links: str | None, folder: Path | None = None,
               upgrade: bool = False) -> Path:
    """Resolve the extra and write ``<folder>/<name>.txt`` (default requirements/). Without ``upgrade`` the
    committed lock's versions are kept where the ranges allow them; with it, every package is resolved
    afresh (the newest version the ranges allow)."""
    digest = dependency_digest((ROOT / "pyproject.toml").read_text())
    folder = ROOT / "requirements" if folder is None else Path(folder)
    with tempfile.TemporaryDirectory() as tmp:
        constraint = Path(tmp, "torch.txt")
        constraint.write_text(TORCH + "\n")
        out = Path(tmp, "lock.txt")
        committed = ROOT / "requirements" / f"{name}.txt"
        if not upgrade and committed.is_file():
            out.write_text(committed.read_text())  # uv prefers the versions of the file it rewrites
        command = ["uv", "pip", "compile", "pyproject.toml", "--extra", extra, "--python-version", PYTHON,
                   "--python-platform", PLATFORM, "--generate-hashes", "--no-emit-package", "torch",
                   "--constraint", str(constraint), "--no-header", "--quiet", "--output-file", str(out)]
        if upgrade:
            command.append("--upgrade")
        if find_links:
            command += ["--find-links", find_links]
        subprocess.run(command, cwd=ROOT, check=True)
        lock = folder / f"{name}.txt"
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text(header(name, extra, digest) + out.read_text())
    return lock


def write_launch_lock(find_links: str | None, folder: Path | None = None, upgrade: bool = False) -> Path:
    """Resolve what binder/requirements.txt installs and write ``<folder>/launch.txt``, held to the versions of
    the other locks of ``folder`` (written first): every version it shares with them is theirs."""
    folder = ROOT / "requirements" if folder is None else Path(folder)
    pyproject, binder = (ROOT / "pyproject.toml").read_text(), (ROOT / LAUNCH_SOURCE).read_text()
    extras, others = launch_inputs(binder)
    with tempfile.TemporaryDirectory() as tmp:
        torch, locked, wanted = Path(tmp, "torch.txt"), Path(tmp, "locked.txt"), Path(tmp, "launch.in")
        torch.write_text(TORCH + "\n")
        union: dict[str, str] = {}
        for name in LOCKS:
            union.update(pins(folder / f"{name}.txt"))
        locked.write_text("".join(f"{package}=={version}\n" for package, version in sorted(union.items())))
        wanted.write_text("".join(f"{line}\n" for line in others))
        out = Path(tmp, "lock.txt")
        committed = ROOT / "requirements" / f"{LAUNCH}.txt"
        if not upgrade and committed.is_file():
            out.write_text(committed.read_text())
        command = ["uv", "pip", "compile", "pyproject.toml", str(wanted), *(f"--extra={e}" for e in extras),
                   "--python-version", PYTHON, "--python-platform", PLATFORM, "--generate-hashes",
                   "--no-emit-package", "torch", "--constraint", str(torch), "--constraint", str(locked),
                   "--no-header", "--quiet", "--output-file", str(out)]
        if upgrade:
            command.append("--upgrade")
        if find_links:
            command += ["--find-links", find_links]
        subprocess.run(command, cwd=ROOT, check=True)
        # (the annotations name the files a requirement came from: no temporary path of this machine)
        others_named = "requirements/{" + ",".join(LOCKS) + "}.txt"
        text = out.read_text().replace(str(wanted), LAUNCH_SOURCE).replace(str(locked), others_named)
    lock = folder / f"{LAUNCH}.txt"
    lock.write_text(
        f"# requirements/{LAUNCH}.txt: the locked environment of the launch button (Binder installs {LAUNCH_SOURCE}:\n"
        f"# the project's extras [{','.join(extras)}] and {', '.join(others) or 'nothing else'}), for CPU, Linux "
        f"x86_64, Python {PYTHON};\n# torch is pinned in that file. Its versions are those of the other locks; "
        "constraints.txt carries them to Binder.\n"
        f"# Written by `python scripts/lock_requirements.py` (uv pip compile --generate-hashes); do not edit by hand.\n"
        f"{DIGEST_LINE}{launch_digest(pyproject, binder)}\n" + text)
    return lock


def scratch_folder(path: str) -> Path:
    """The folder of a scratch lock: anything but requirements/ (whose locks only a deliberate update rewrites)."""
    folder = Path(path).resolve()
    if folder == (ROOT / "requirements").resolve():
        raise SystemExit("lock_requirements: --upgrade-into must name a scratch folder, not requirements/ "
                         "(run without it to update the committed locks)")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that the locks follow pyproject.toml")
    parser.add_argument("--find-links", default=os.environ.get("PIP_FIND_LINKS"),
                        help="where the CPU torch wheel lies (default: $PIP_FIND_LINKS)")
    parser.add_argument("--upgrade-into", metavar="FOLDER", default=None,
                        help="resolve the newest versions the ranges allow into FOLDER (a scratch lock: "
                             "requirements/ is not touched)")
    args = parser.parse_args(argv)
    pyproject = (ROOT / "pyproject.toml").read_text()
    digest = dependency_digest(pyproject)
    if args.check:
        stale = [name for name in LOCKS if recorded_digest(ROOT / "requirements" / f"{name}.txt") != digest]
        binder = (ROOT / LAUNCH_SOURCE).read_text()
        if recorded_digest(ROOT / "requirements" / f"{LAUNCH}.txt") != launch_digest(pyproject, binder):
            stale.append(LAUNCH)
        if (ROOT / "requirements" / CONSTRAINTS).read_text() != constraints_text():
            stale.append(CONSTRAINTS.removesuffix(".txt"))
        for name in stale:
            print(f"requirements/{name}.txt does not follow pyproject.toml or {LAUNCH_SOURCE}: run "
                  "python scripts/lock_requirements.py")
        return 1 if stale else 0
    folder = scratch_folder(args.upgrade_into) if args.upgrade_into else ROOT / "requirements"
    for name, extra in LOCKS.items():
        print(write_lock(name, extra, args.find_links, folder, upgrade=args.upgrade_into is not None))
    print(write_launch_lock(args.find_links, folder, upgrade=args.upgrade_into is not None))
    (folder / CONSTRAINTS).write_text(constraints_text(folder))
    print(folder / CONSTRAINTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
