"""A trained layer's domain: the tasks it was trained on and the way a user's data is brought
into it. A trained layer is not equivariant to the coordinates or the scale of its input, so the
estimator presents every data set as the broad training tasks were presented, and training
presents its tasks as the estimator presents data. Read it with chapter 13, or when you train a
layer for real data; skip it to learn how the circuit works.

* :mod:`.broad_tasks`: the broad synthetic task family (unequal cluster sizes and spreads) that the
  shipped layer for any k was trained on, and its normalisation (:func:`~.broad_tasks.spread_normalise`);
* :mod:`.frame`: the data's own frame (mean and principal axes, each with a sign fixed by the data);
* :mod:`.domain_map`: the map from a user's space into a trained layer's domain and back
  (:class:`~.domain_map.DomainMap`), which the estimator runs a model through.
* :mod:`.trained`: the range of a trained layer's training tasks (:class:`~.trained.TrainingDomain`,
  recorded in its model file) and the warning a bare trained layer gives on data outside it.

This package imports none of its modules: import the one you need.
"""
