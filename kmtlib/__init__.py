"""kmtlib: the k-means transformer of Clarkson et al. (arXiv 2506.19125) as a small PyTorch library.

Reading order. The top level of the package is the paper; read it beside the paper, in this order:

1. ``tasks.py``: the clustering tasks of the paper's experiments (Gaussian mixtures in [0, 1]^d).
2. ``init.py``, ``lloyd.py``, ``objective.py``: initial centres, Lloyd's algorithm (the algorithm
   the circuit realises, with its empty-cluster rule) and the k-means objective.
3. ``attention.py``: the attention scores (Euclidean, dot product) and maps (soft-max, its limit
   the averaging hard attention, the normalised linear attention) of Section 2.
4. ``layer.py``: one layer (Section 2): the four blocks CAX, SAX, CAC, SAC, each
   ``map_gamma(score(Q z, K z')) V z'``, the residual update, Theorem 2.2's feed-forward block.
5. ``embedding.py``: points and centres as tokens ``[x_i; y_i]``, ``[c_j; e_j]`` and back.
6. ``theorems.py``, ``constructions.py``: the weight matrices of Theorems 2.1 and 2.2 and the
   fixed-weight models they make.
7. ``learned.py``, ``losses.py``, ``equivariant.py``: the trainable layer of the learning
   experiments, its training loss, and the maps of a layer for any number of clusters.
8. ``transformer.py``: the model, ``KMeansTransformer``: embed, apply the layer T times, read the
   centres, each step :meth:`KMeansLayer.forward` (``model.fast``: each block's attention by a
   kernel where one applies, the same numbers); its result measures the labels and the objective
   when they are read, and a trained layer warns on data outside the tasks it was trained on.
   ``whole_pass(model)`` asks by name for a fixed-weight model's whole pass by one kernel.

Helpers of the maths: ``_checks.py`` (input checks), ``_numerics.py`` (exact distances and ties),
``chunks.py``, ``results.py``, ``device.py``; ``_atomic_save.py`` (a file written whole or not at
all). Skip the subpackages unless you need them (each ``__init__`` says when): ``fast/`` and
``kernels/`` (speed), ``estimator/`` (the scikit-learn estimator), ``domain/`` (a trained layer's
domain: the broad tasks, the map of a user's data into it), ``analysis/`` (evaluation, layer
inspection), ``io/`` (model files of every format), ``training/``, ``variants/`` and
``reference/`` (the circuit variants and their reference algorithms).

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
from .constructions import load_theorem_weights, theorem_config
from .theorems import theorem_weights
from .embedding import DataEmbedding, NormAugmentedEmbedding, OneHotEmbedding
from .io.model_file import ModelFileError, load_model
from .transformer import KMeansTransformer, whole_pass
from .domain.trained import OutsideTrainingDomainWarning

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
    "OutsideTrainingDomainWarning",
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
    "whole_pass",
]
