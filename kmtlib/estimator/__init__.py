"""The k-means transformer as a scikit-learn estimator, :class:`TransformerKMeans`: read it to
cluster your own data with the paper's construction or the shipped trained layer, through
``KMeans``' interface (``fit``, ``predict``, ``transform``, ``score``).

Two kinds of model run the clustering, chosen by ``model``:

* ``"theorem"``: the fixed-weight limit construction of Theorem 2.1 (``gamma -> inf``, float64),
  built for the data's own dimension d and the requested k: Lloyd's algorithm as a transformer,
  on the user's data as given (no map, any d; divided by an exact power of two, so any scale).
* ``"learned"`` (default): the single trained layer that reads any number of clusters (random
  cluster codes, :class:`~kmtlib.embedding.CodeEmbedding`), shipped with the package. It was
  trained on synthetic tasks of width D = 32 (the broad family of
  :func:`kmtlib.domain.broad_tasks.sample_broad_tasks`, each task shifted and scaled as here), so the
  data are first mapped into that domain by :class:`DomainMap` (centred, turned to their principal
  axes with a sign fixed by the data, one isotropic scale, zero padding for d < D, the top D axes
  for d > D), and the centres mapped back; it runs on a sample of at most ``sample_size`` points,
  and its clustering is read out over all points as the means of its clusters (``readout``).

Whatever the model, every reported number is in the user's own space: ``cluster_centers_``,
``labels_`` (the nearest of those centres), ``inertia_`` (the sum of squared distances to them),
``transform`` and ``score``, the same quantities as :class:`sklearn.cluster.KMeans`. The user's
data are checked once, where they come in (``fit``, ``predict``, ``transform``, ``score``), and
nothing below checks them again.

The modules, in the order a fit uses them: :mod:`.params` (the parameters and their checks),
:mod:`.model` (the model to run and the memory of its attention), :mod:`.domain` (the data's
unit, the frame and the map into the model's domain), :mod:`.fit` (the seedings, the layer's
passes, the read-out, the polish and the choice of the run), :mod:`.reported` (labels, inertia
and distances as ``KMeans`` defines them) and :mod:`.transformer_kmeans` (the estimator itself).
"""

from __future__ import annotations

from ..domain.domain_map import DomainMap
from .fit import POLISH_MAX_ITER, TIE_TOLERANCE, lloyd_to_fixed_point, means_readout, model_or_seeding
from .model import ATTENTION_BATCH_BYTES, PRETRAINED_ANY_K, pretrained_model
from .params import INITS, LEARNED_K_RANGE, MAX_FRAMES, READOUTS, SAMPLE_SIZE
from .reported import labels_inertia
from .transformer_kmeans import TransformerKMeans

__all__ = [
    "ATTENTION_BATCH_BYTES",
    "INITS",
    "LEARNED_K_RANGE",
    "MAX_FRAMES",
    "POLISH_MAX_ITER",
    "PRETRAINED_ANY_K",
    "READOUTS",
    "SAMPLE_SIZE",
    "TIE_TOLERANCE",
    "DomainMap",
    "TransformerKMeans",
    "labels_inertia",
    "lloyd_to_fixed_point",
    "means_readout",
    "model_or_seeding",
    "pretrained_model",
]
