"""Rewrite the absolute paths of the training machine in the shipped manifests as paths relative
to the repository root, and say so in each manifest (its ``paths`` field).

The runs of ``data/weights_any_k*/`` were trained into ``/<somewhere>/runs/<group>/<run>``: their
``command`` recorded that folder as typed. Rewritten, ``--out runs/<group>/<run>`` reruns from the
repository root on any machine (``runs/`` is git-ignored). A path below the repository becomes
relative to it; one outside it keeps its part from the last ``runs/`` folder on; any other
absolute path stops the script (nothing is made up). Run from anywhere:
``python scripts/relative_paths.py`` (idempotent).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATHS_NOTE = "paths in command relative to the repository root (the training machine's absolute paths rewritten)"
PATH_OPTIONS = ("--out", "--init-from")


def relative(path: str, root: Path = ROOT) -> str:
    if not path.startswith("/"):
        return path
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        pass
    m = re.search(r"(?:^|/)(runs/.+)$", path)
    if m is None:
        raise ValueError(f"{path}: neither below the repository nor in a runs/ folder")
    return m.group(1)


def relative_command(command: str, root: Path = ROOT) -> str:
    words = shlex.split(command)
    for i in range(1, len(words)):
        if words[i - 1] in PATH_OPTIONS:
            words[i] = relative(words[i], root)
    return shlex.join(words)


def rewrite(entry: dict, root: Path = ROOT) -> bool:
    """Rewrite ``entry["command"]`` in place; True when it changed."""
    if "command" not in entry:
        return False
    new = relative_command(entry["command"], root)
    changed = new != entry["command"] or entry.get("paths") != PATHS_NOTE
    entry["command"], entry["paths"] = new, PATHS_NOTE
    return changed


def main() -> None:
    for path in sorted(ROOT.glob("data/weights_any_k*/**/*.json")):
        data = json.loads(path.read_text())
        entries = [data] if path.name == "manifest.json" else list(data.values())
        if any([rewrite(e) for e in entries if isinstance(e, dict)]):
            sort = path.name == "index.json"
            path.write_text(json.dumps(data, indent=2, sort_keys=sort) + "\n")
            print(f"rewrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
