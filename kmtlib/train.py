"""``python -m kmtlib.train``: the training command (:mod:`kmtlib.training.cli`).

The training code lives in the package :mod:`kmtlib.training`; this module is the command's name
(``python -m kmtlib.train --help``) and keeps the package's public names importable from their
old home (``from kmtlib.train import TrainConfig, train``). Run as ``python -m``, the command is
the package's own ``main``: every class it raises and catches (``RunInUseError``, ...) is the
package's, never a copy made by running this file as ``__main__``.
"""

from __future__ import annotations

from .training import *  # noqa: F403 (the package's public names, from their old home)
from .training import __all__ as _names
from .training.cli import main

__all__ = [*_names, "main"]

if __name__ == "__main__":
    main()
