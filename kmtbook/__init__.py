"""kmtbook: the tooling of the kmt-book companion book, beside the library it is about.

``kmtlib`` is the library (tasks, Lloyd, attention, the k-means transformer, training); it knows
nothing about this book or the repository's folders and never imports ``kmtbook``. This package
holds what only the book needs:

* :mod:`kmtbook.chapter`: :func:`open_chapter` and the run context of a chapter (device, seeded
  generators, the output folder, figures, ``metrics.json``);
* :mod:`kmtbook.parameters` and :mod:`kmtbook.chapter_specs`: what each chapter's parameters may be
  and their values in each profile, checked by :func:`open_chapter`;
* :mod:`kmtbook.shipped` and :mod:`kmtbook.dynamics`: readers of the training runs shipped under
  ``data/``;
* :mod:`kmtbook.paper_sweep`: the paper's whole set of training runs, planned for the chapters that
  read them and run by the library's sweep mechanism (``python -m kmtbook.paper_sweep``);
* :mod:`kmtbook.plotting`: the figure helpers the chapters share; :mod:`kmtbook.figure_metadata` and
  :mod:`kmtbook.figure_data`: what a figure's files say about it (citation, licence, its text
  alternative) and its numbers as CSV (:func:`plotted_data`);
* :mod:`kmtbook.sphinx_ext`: the Sphinx extension of the book (rerun boxes, offline MathJax, the
  figure register, provenance tables, the ``{metric}`` role);
* :mod:`kmtbook.execute_chapters` and :mod:`kmtbook.execution_cache`: how the book build runs the
  chapters and keeps their executions.
"""

from .chapter import Chapter, open_chapter
from .figure_data import plotted_data
from .parameters import PROFILES, ChapterSpec, ParameterError, check_parameter
from .repo_root import find_repo_root

__all__ = ["PROFILES", "Chapter", "ChapterSpec", "ParameterError", "check_parameter", "find_repo_root", "open_chapter",
           "plotted_data"]
