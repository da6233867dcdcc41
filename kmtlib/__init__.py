"""kmtlib: the k-means transformer of Clarkson et al. (arXiv 2506.19125) as a small PyTorch library.

Tensors are batched with rows as tokens: points ``X`` are (B, n, d), centres ``C`` are (B, k, d).
(``kmtlib.training``, the training package, and its command ``kmtlib.train`` are not imported here
so that ``python -m kmtlib.train`` runs cleanly.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__

# Tasks, initial centres, Lloyd and the objective.
from .device import make_generator, resolve_device
from .init import INIT_METHODS, init_centers
from .lloyd import EMPTY_RULES, lloyd
from .objective import kmeans_objective, nearest_center, squared_distances
from .results import ClusteringResult
from .tasks import FAMILIES, Mixture, sample_tasks

# Attention scores and maps.
from .attention import (
    ATTENTION_MAPS,
    dot_scores,
    euclidean_scores,
    hard_attention,
    normalized_linear_attention,
    register_attention_map,
    softmax_attention,
)

# The k-means transformer: one layer (config, blocks), its constructions, variants, files.
from .layer import AttentionBlock, BlockConfig, KMeansLayer, LayerConfig
from .constructions import load_theorem_weights, theorem_config, theorem_weights
from .embedding import DataEmbedding, NormAugmentedEmbedding, OneHotEmbedding, PlainEmbedding
from .io.model_file import ModelFileError, load_model
from .transformer import KMeansTransformer

# The learned layer's training loss and multi-step evaluation.
from .analysis.evaluate import evaluate_multistep, evaluate_seeds
from .losses import smoothed_objective

# The scikit-learn estimator, imported on first use (scikit-learn and SciPy take a second to import,
# which `import kmtlib` and `python -m kmtlib.train` need not pay).
if TYPE_CHECKING:
    from .estimator import TransformerKMeans


def __getattr__(name: str) -> Any:
    if name == "TransformerKMeans":
        from .estimator import TransformerKMeans

        return TransformerKMeans
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ATTENTION_MAPS",
    "EMPTY_RULES",
    "FAMILIES",
    "INIT_METHODS",
    "AttentionBlock",
    "BlockConfig",
    "ClusteringResult",
    "DataEmbedding",
    "KMeansLayer",
    "KMeansTransformer",
    "LayerConfig",
    "Mixture",
    "ModelFileError",
    "NormAugmentedEmbedding",
    "OneHotEmbedding",
    "PlainEmbedding",
    "TransformerKMeans",
    "__version__",
    "dot_scores",
    "euclidean_scores",
    "evaluate_multistep",
    "evaluate_seeds",
    "hard_attention",
    "init_centers",
    "kmeans_objective",
    "lloyd",
    "load_model",
    "load_theorem_weights",
    "make_generator",
    "nearest_center",
    "normalized_linear_attention",
    "register_attention_map",
    "resolve_device",
    "sample_tasks",
    "smoothed_objective",
    "softmax_attention",
    "squared_distances",
    "theorem_config",
    "theorem_weights",
]
