"""A small chapter for the tests of the book's tooling: the MyST front matter of the book's chapters, a
``parameters`` cell with the four parameters every chapter has (and any others), and code cells."""

from __future__ import annotations

FRONT_MATTER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""


def demo_chapter(title: str, *cells: str, seed: int = 0, parameters: str = "") -> str:
    """The chapter's MyST text: ``# title``, the parameters cell (``seed`` its default seed, ``parameters`` more
    lines of it), then one code cell per item of ``cells``."""
    cell = (f'device: str = "auto"  # where to run\nseed: int = {seed}  # the seed\n'
            'profile: str = "book"  # quick, book or paper\noutput_dir: str = ""  # empty: results/<chapter>/\n'
            + parameters)
    code = "".join(f"\n```{{code-cell}} python\n{source.strip()}\n```\n" for source in cells)
    return f"{FRONT_MATTER}\n# {title}\n\n```{{code-cell}} python\n:tags: [parameters]\n{cell}```\n{code}"
