"""kmtlib: the k-means transformer of Clarkson et al. (arXiv 2506.19125) as a small PyTorch library.

Tensors are batched with rows as tokens: points ``X`` are (B, n, d), centres ``C`` are (B, k, d).
"""

from __future__ import annotations

from .device import make_generator, resolve_device
from .init import INIT_METHODS, init_centers
from .lloyd import EMPTY_RULES, lloyd
from .objective import kmeans_objective, nearest_center, squared_distances
from .results import ClusteringResult
from .tasks import FAMILIES, Mixture, sample_tasks

__version__ = "0.1.0"

__all__ = [
    "EMPTY_RULES",
    "FAMILIES",
    "INIT_METHODS",
    "ClusteringResult",
    "Mixture",
    "__version__",
    "init_centers",
    "kmeans_objective",
    "lloyd",
    "make_generator",
    "nearest_center",
    "resolve_device",
    "sample_tasks",
    "squared_distances",
]

# The k-means transformer (fixed-weight constructions, trainable layer, variants) and its files.
from .transformer import KMeansTransformer, load_model  # noqa: E402

# The learned layer's training loss and multi-step evaluation. (kmtlib.train, the training
# command, is deliberately not imported here, so that `python -m kmtlib.train` runs cleanly.)
from .evaluate import evaluate_multistep, evaluate_seeds  # noqa: E402
from .losses import smoothed_objective  # noqa: E402

__all__ += ["KMeansTransformer", "evaluate_multistep", "evaluate_seeds", "load_model", "smoothed_objective"]
