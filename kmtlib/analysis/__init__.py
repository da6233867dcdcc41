"""Analysis: looking at a model from outside, not part of its forward pass. Read it when you
want to measure or inspect a model, as the book's chapters do; skip it to learn how the circuit
works.

* :mod:`.evaluate`: the multi-step evaluation of a learned layer over seeds and tasks (chapters 5
  to 8);
* :mod:`.inspect_layer`: one layer's attention maps, token updates and their agreement with a
  Lloyd step (chapter 9).

The broad tasks and the map of a user's data into a trained layer's domain are in
:mod:`kmtlib.domain`.

This package imports none of its modules: import the one you need.
"""
