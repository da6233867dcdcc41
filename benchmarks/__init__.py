"""kmt-book benchmarks: ``python -m benchmarks`` (or ``nox -s bench``).

Each benchmark is a module with a ``run(quick=..., threads=..., repeats=...)`` function that
returns a JSON-able dict and a ``report(result)`` function that formats it as text. The entry point
pins the thread counts, runs the selected benchmarks, prints the tables and writes
``<out>/<name>.json``.

* ``lloyd``: :mod:`benchmarks.lloyd_bench`, kmtlib's batched Lloyd and the limit transformer
  against scikit-learn and faiss-cpu on many small tasks and on one large task.
* ``training``: :mod:`benchmarks.training_bench`, one training step of the learned layer at the
  paper configuration, kmtlib against the straightforward :mod:`benchmarks.reference_model`
  (same process, same inputs and weights, losses compared).
* ``memory``: :mod:`benchmarks.memory_bench`, a short training run at the paper configuration in
  a child process: peak memory, time per 50-step window with evaluation, and the extrapolated
  time of a full 10 000-step run.
* ``group``: :mod:`benchmarks.group_bench`, S training runs of one shape as one stacked pass
  (:mod:`kmtlib.training.group`) against the same runs one after another, at d = 32 and d = 4:
  runs x steps per second.
* ``estimator``: :mod:`benchmarks.estimator_bench`, the theorem model (its forward alone, and the
  whole ``TransformerKMeans(model="theorem")`` fit) against ``KMeans`` from the same start for
  the same number of steps, at n = 200 000 on one thread: the ratios (issue 26's target: 3).
"""

from __future__ import annotations

from . import estimator_bench, group_bench, lloyd_bench, memory_bench, training_bench

BENCHMARKS = {
    "lloyd": lloyd_bench,
    "training": training_bench,
    "memory": memory_bench,
    "group": group_bench,
    "estimator": estimator_bench,
}

__all__ = ["BENCHMARKS"]
