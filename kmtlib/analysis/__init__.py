"""Analysis: looking at a model from outside, not part of its forward pass. Read it when you
want to measure or inspect a model, as the book's chapters do; skip it to learn how the circuit
works.

* :mod:`.evaluate`: the multi-step evaluation of a learned layer over seeds and tasks (chapters 5
  to 8);
* :mod:`.inspect_layer`: one layer's attention maps, token updates and their agreement with a
  Lloyd step (chapter 9);
* :mod:`.broad_tasks`: the broad synthetic task family (unequal cluster sizes and spreads) that the
  shipped layer for any k was trained on and that the estimator's domain is matched to (chapter 13);
* :mod:`.frame` and :mod:`.domain_map`: the data's own frame and the map from a user's space into a
  trained layer's domain and back, which the estimator uses and training uses to present its
  tasks as the estimator presents data (chapter 13).

This package imports none of its modules: import the one you need.
"""
