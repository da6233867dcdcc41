"""The version of kmtlib (a leaf, so that a module that records it imports no package)."""

__version__ = "0.1.0"
