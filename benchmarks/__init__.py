"""kmt-book benchmarks: ``python -m benchmarks`` (or ``nox -s bench``).

Each benchmark is a module with a ``run(quick=..., threads=..., repeats=...)`` function that
returns a JSON-able dict and a ``report(result)`` function that formats it as text. The entry point
pins the thread counts, runs the selected benchmarks, prints the tables and writes
``<out>/<name>.json``.

* ``lloyd``: :mod:`benchmarks.lloyd_bench`, kmtlib's batched Lloyd and the limit transformer
  against scikit-learn and faiss-cpu on many small tasks and on one large task.
"""

from __future__ import annotations

from . import lloyd_bench

BENCHMARKS = {"lloyd": lloyd_bench}

__all__ = ["BENCHMARKS"]
