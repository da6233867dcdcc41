"""The k-means transformer: one module type for the fixed-weight constructions, the trainable
layer and the circuit variants.

A model is an :class:`~kmtlib.embedding.Embedding` (points and centres to tokens and back) and a
layer (tokens to tokens). Calling it on ``(X, C0, steps=T)`` applies the layer T times and
returns the same kind of :class:`~kmtlib.results.ClusteringResult` as :func:`kmtlib.lloyd`.

* Weight-shared multi-layer models (the theorems) carry the tokens from layer to layer.
* Models with ``reembed=True`` (the trained single layer) rebuild the tokens from the current
  centres before every step, so the one learned layer acts as a map C(t) -> C(t+1).
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ._checks import check_centers, check_int, check_points, check_square_range
from ._numerics import lowest_true_
from ._scratch import Scratch, same_storage
from .embedding import Embedding
from .model_file import MODEL_FORMAT, ModelFileError, load_model_file  # noqa: F401 (ModelFileError: re-exported)
from .objective import _kmeans_objective, _nearest_center, assignment_cost, assignment_cost_rows, center_rows
from .results import ClusteringResult


class KMeansTransformer(nn.Module):
    """A k-means transformer over ``d``-dimensional points with ``k`` centres.

    Build one with :meth:`from_theorem`, :meth:`trainable` or :meth:`from_variant`; the plain
    constructor is for library code that supplies its own embedding and layer.

    Args:
        embedding: turns (X, C) into point and centre tokens and reads centres back.
        layer: an ``nn.Module`` mapping (point tokens, centre tokens) to updated tokens.
        reembed: rebuild the tokens from the current centres before every step.
        config: how the model was built (``{"builder": name, "kwargs": {...}}``); saved with the
            weights so :func:`load_model` can rebuild it.
    """

    def __init__(self, embedding: Embedding, layer: nn.Module, *, reembed: bool, config: dict[str, Any]):
        super().__init__()
        self.embedding = embedding
        self.layer = layer
        self.reembed = bool(reembed)
        self.config = dict(config)

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_theorem(cls, d: int, k: int, gamma: float = math.inf, attention: str = "euclidean", **options: Any):
        """The fixed-weight construction of Theorem 2.1 (``attention="euclidean"``) or 2.2 (``"dot"``)."""
        from .constructions import build_theorem_model

        return build_theorem_model(cls, d=d, k=k, gamma=gamma, attention=attention, **options)

    @classmethod
    def trainable(cls, d: int, k: int, embedding: str = "onehot", gamma: float = 1.0, **options: Any):
        """The learnable single layer of the paper's learning experiments."""
        from .learned import build_trainable_model

        return build_trainable_model(cls, d=d, k=k, embedding=embedding, gamma=gamma, **options)

    @classmethod
    def from_variant(cls, name: str, d: int, k: int, **options: Any):
        """A circuit variant: ``"soft"``, ``"spherical"``, ``"trimmed"``, ``"robust"`` or ``"kmedoids"``."""
        from .variants import build_variant_model

        return build_variant_model(cls, name=name, d=d, k=k, **options)

    # ------------------------------------------------------------------ properties
    @property
    def d(self) -> int:
        return self.embedding.d

    @property
    def k(self) -> int:
        return self.embedding.k

    @property
    def width(self) -> int:
        """Token width D."""
        return self.embedding.width

    def extra_repr(self) -> str:
        return (
            f"d={self.d}, k={self.k}, width={self.width}, reembed={self.reembed}, builder={self.config.get('builder')}"
        )

    # ------------------------------------------------------------------ running
    def _check_inputs(self, X: torch.Tensor, C0: torch.Tensor) -> None:
        check_points(X)
        check_centers(C0, X)
        if X.shape[-1] != self.d:
            raise ValueError(f"the model is built for d={self.d} but X has d={X.shape[-1]}")
        if C0.shape[1] != self.k:
            raise ValueError(f"the model is built for k={self.k} centres but C0 has {C0.shape[1]}")
        # the tokens hold the data in its own scale: their squares must stay in the dtype's range
        check_square_range(X, C0, self.width, "the k-means transformer")
        for p in self.parameters():
            if p.dtype != X.dtype:
                raise TypeError(f"the model's weights are {p.dtype} but X is {X.dtype}; call model.to({X.dtype})")
            if p.device != X.device:
                raise ValueError(
                    f"the model's weights are on {p.device} but X is on {X.device}; call model.to(X.device)"
                )
            break

    def step(self, X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
        """One step from fresh tokens: the centres (B, k, d) after one layer (the training hot path;
        no input checks)."""
        point_tokens, centre_tokens = self.embedding.embed(X, C)
        _, centre_tokens = self.layer(point_tokens, centre_tokens)
        return self.embedding.centers(centre_tokens)

    def forward(self, X: torch.Tensor, C0: torch.Tensor, steps: int = 1) -> ClusteringResult:
        """Apply the layer ``steps`` times from the initial centres ``C0``.

        Returns a :class:`ClusteringResult`: the centre trajectory (B, T+1, k, d), the nearest-centre
        labels under the final centres (B, n), the objective per step (B, T+1, computed without
        gradient), and the assignment weights the point tokens hold after the last layer.
        """
        self._check_inputs(X, C0)
        steps = check_int("steps", steps, minimum=0)
        columns = bool(getattr(self.layer, "column_tokens", False))
        point_tokens, centre_tokens = self.embedding.embed(X, C0, columns=columns)
        trajectory = [C0]
        objectives: list[torch.Tensor] = []
        # A limit construction has already found the nearest centre of every point for the centres
        # it read: the objective of those centres needs no second distance computation.
        hard = self._hard_assignment()
        # Without autograd a layer that can update the point tokens in place may do so: they were
        # made here by the embedding and nobody else holds them (saves a copy of all n tokens).
        advance = getattr(self.layer, "advance_", None)
        if (
            advance is None
            or (torch.is_grad_enabled() and (X.requires_grad or C0.requires_grad))
            or any(p.requires_grad for p in self.parameters())
        ):
            advance = self.layer
        scratch = Scratch()
        for t in range(steps):
            if self.reembed and t > 0:
                point_tokens, centre_tokens = self.embedding.embed(X, trajectory[-1], columns=columns)
            if advance is not self.layer and same_storage(point_tokens, X):
                point_tokens = point_tokens.clone()  # (an embedding that hands out X itself)
            point_tokens, centre_tokens = advance(point_tokens, centre_tokens)
            with torch.no_grad():
                C = trajectory[-1].detach()
                if hard:
                    assignments = self.embedding.assignments(point_tokens)
                    assert assignments is not None  # (a hard model's tokens hold the assignment)
                    labels = _lowest_positive(assignments)
                    objectives.append(assignment_cost_rows(X, C, center_rows(labels, self.k), scratch))
                else:
                    objectives.append(_kmeans_objective(X, C))
            trajectory.append(self.embedding.centers(centre_tokens))
        centers = torch.stack(trajectory, dim=1)
        with torch.no_grad():
            labels = _nearest_center(X, trajectory[-1].detach())
            objectives.append(assignment_cost(X, trajectory[-1].detach(), labels))
            objective = torch.stack(objectives, dim=1)
        return ClusteringResult(
            centers=centers,
            labels=labels,
            objective=objective,
            assignments=self.embedding.assignments(point_tokens) if steps > 0 else None,
        )

    def _hard_assignment(self) -> bool:
        """Whether the point tokens after a layer hold the hard nearest-centre assignment of the
        centres the layer read: Theorem 2.1's limit model (``from_theorem(d, k)``, any centre
        update and reset option), whose CAX block is hard Euclidean attention.

        There, CAX puts its weight on exactly the centres of maximal score ``2 x.c - ||c||^2`` (the
        negated scores of :func:`~kmtlib.objective.nearest_center`, so the same ties), and the
        residual update ``y + CAX - y`` keeps the positive entries where CAX put them (its
        weights are at least 1/k, the old ones are cancelled); the lowest index with a positive
        entry is then the nearest-centre label, lowest index on exact ties.
        """
        kwargs = self.config.get("kwargs", {})
        if self.config.get("builder") != "from_theorem" or kwargs.get("attention") != "euclidean":
            return False
        # (a soft reset block at finite reset_gamma would not cancel the old assignment exactly)
        if kwargs.get("gamma") != math.inf or kwargs.get("reset_gamma") not in (None, math.inf):
            return False
        if kwargs.get("self_attention") != "identity" and getattr(self.layer, "limit_self_attention", None) != "copies":
            return False  # (the dense verification mode averages copies: not guaranteed exact)
        blocks = getattr(self.layer, "blocks", None)
        if blocks is None or "CAX" not in blocks:
            return False
        cax = blocks["CAX"]
        return bool(getattr(cax, "is_hard", False)) and getattr(cax, "score", None) == "euclidean"

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> Path:
        """Save weights and configuration to ``path`` atomically (a killed save leaves no partial file)."""
        from . import __version__

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "format": MODEL_FORMAT,
            "config": self.config,
            "state_dict": {k: v.detach().cpu() for k, v in self.state_dict().items()},
            "dtype": str(next(iter(self.state_dict().values())).dtype) if self.state_dict() else None,
            "kmtlib_version": __version__,
        }
        atomic_torch_save(payload, path)
        return path


def _lowest_positive(weights: torch.Tensor) -> torch.Tensor:
    """Index (B, n) of the first positive entry along the last axis of ``weights`` (B, n, k);
    k - 1 where there is none (a NaN row), as :func:`~kmtlib.objective.nearest_center` keeps
    labels in range.

    The reduction runs over the k entries viewed as (B, k, n), across rows of length n: for the
    model's column-major tokens that view is contiguous and the reduction vectorises over the
    points (as in :func:`~kmtlib.objective.nearest_center_t`)."""
    B, n, k = weights.shape
    if k == 1:
        return torch.zeros(B, n, dtype=torch.long, device=weights.device)
    return lowest_true_(weights.transpose(1, 2) > 0, dim=1).clamp_max_(k - 1)  # (over (B, k, n))


def atomic_torch_save(obj: Any, path: Path, keep_previous: Path | None = None) -> None:
    """``torch.save`` to a temporary file in the same folder, then rename over ``path``.

    The temporary file (``.<name>.<random>.tmp``) is flushed to disk before the rename, so that
    after a crash ``path`` holds either the old or the new contents, never a zero-length file (a
    rename can reach the disk before the data it names). With ``keep_previous``, the file that
    ``path`` held is first renamed to ``keep_previous`` (a damaged newest checkpoint can then
    be recovered from the one before it); between the two renames only ``keep_previous`` exists.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        # mkstemp creates the file private (0600); give it the usual permissions of a new file.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        if keep_previous is not None and path.exists():
            os.replace(path, keep_previous)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (the renames into it) to disk where the OS allows it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # (not possible on Windows; nothing to do there)
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load_model(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> KMeansTransformer:
    """Rebuild a :class:`KMeansTransformer` saved with :meth:`KMeansTransformer.save`.

    Raises ``FileNotFoundError`` for a missing file and :class:`~kmtlib.ModelFileError` (a
    ``ValueError``; the message starts with the path and says what is wrong) for a file that is
    empty, truncated, damaged, not a torch file, a pickle of other objects, or a torch file of
    something else (a tensor, another model's weights, a configuration that does not fit them).
    See :mod:`kmtlib.model_file`.
    """
    return load_model_file(path, map_location)
