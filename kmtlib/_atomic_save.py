"""Writing a file so that a crash leaves the old contents or the new, never a partial file (model
files, checkpoints)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def atomic_torch_save(obj: Any, path: Path, keep_previous: Path | None = None) -> None:
    """``torch.save`` to a temporary file in the same folder, then rename over ``path``.

    The temporary file (``.<name>.<random>.tmp``) is flushed to disk before the rename, so that
    after a crash ``path`` holds either the old or the new contents, never a zero-length file (a
    rename can reach the disk before the data it names). With ``keep_previous``, the file that
    ``path`` held is first renamed to ``keep_previous`` (a damaged newest checkpoint can then
    be recovered from the one before it); between the two renames only ``keep_previous`` exists.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        # mkstemp creates the file private (0600); give it the usual permissions of a new file.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        if keep_previous is not None and path.exists():
            os.replace(path, keep_previous)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (the renames into it) to disk where the OS allows it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # (not possible on Windows; nothing to do there)
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

