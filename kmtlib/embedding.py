"""Token embeddings of the k-means transformer: how points and centres become tokens and back.

Rows are tokens. The paper writes tokens as columns ([x_i; y_i] and [c_j; e_j]); chapter 02 shows
the mapping. Every embedding knows how to read the centres (and, where it has them, the
assignment scratch coordinates) back out of the tokens.
"""

from __future__ import annotations

import torch


class Embedding:
    """Base class: ``embed`` points and centres into tokens; read centres and assignments back."""

    name: str = ""

    def __init__(self, d: int, k: int) -> None:
        self.d, self.k = d, k

    @property
    def width(self) -> int:
        """Token width D."""
        raise NotImplementedError

    def embed(self, X: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Point tokens (B, n, D) and centre tokens (B, k, D)."""
        raise NotImplementedError

    def centers(self, center_tokens: torch.Tensor) -> torch.Tensor:
        """The centres (B, k, d) held in the data coordinates of the centre tokens."""
        return center_tokens[..., : self.d]

    def assignments(self, point_tokens: torch.Tensor) -> torch.Tensor | None:
        """The assignment weights (B, n, k) held by the point tokens, or None."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(d={self.d}, k={self.k}, width={self.width})"


class OneHotEmbedding(Embedding):
    """Width d + k: points [x_i; 0_k] (the k scratch coordinates hold the assignment), centres [c_j; e_j]."""

    name = "onehot"

    @property
    def width(self) -> int:
        return self.d + self.k

    def embed(self, X: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        (B, n, _), k = X.shape, C.shape[1]  # (k of the centres given: a layer of any k reads any)
        ids = torch.eye(k, dtype=C.dtype, device=C.device).expand(B, k, k)
        return torch.cat([X, X.new_zeros(B, n, k)], dim=-1), torch.cat([C, ids], dim=-1)

    def assignments(self, point_tokens: torch.Tensor) -> torch.Tensor:
        return point_tokens[..., self.d :]


class DataEmbedding(Embedding):
    """Width d: the tokens are the points and centres themselves, data coordinates only (the
    paper's d-only ablation; called ``"none"``, no embedding, before version 0.2)."""

    name = "data"

    @property
    def width(self) -> int:
        return self.d

    def embed(self, X: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return X, C


class NormAugmentedEmbedding(Embedding):
    """Width d + k + 2, the tokens of Theorem 2.2 (dot-product attention): points
    [x_i; 0_k; ||x_i||^2; 1] and centres [c_j; e_j; ||c_j||^2; 1].

    The squared norm and the constant 1 let dot-product attention compute Euclidean scores:
    a query [x; -1/2] against a key [c; ||c||^2] gives x.c - ||c||^2 / 2, which is
    -||x - c||^2 / 2 up to a term that is constant over the keys. The k coordinates after the
    data hold the assignment (points) and the cluster id (centres), as in :class:`OneHotEmbedding`.
    """

    name = "norm_augmented"

    @property
    def width(self) -> int:
        return self.d + self.k + 2

    @property
    def norm_index(self) -> int:
        """Index of the squared-norm coordinate."""
        return self.d + self.k

    @property
    def one_index(self) -> int:
        """Index of the constant coordinate 1."""
        return self.d + self.k + 1

    def embed(self, X: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, n, _ = X.shape
        k = C.shape[1]
        points = torch.cat([X, X.new_zeros(B, n, self.k), (X * X).sum(-1, keepdim=True), X.new_ones(B, n, 1)], dim=-1)
        ids = torch.eye(self.k, dtype=C.dtype, device=C.device).expand(B, self.k, self.k)
        centers = torch.cat([C, ids, (C * C).sum(-1, keepdim=True), C.new_ones(B, k, 1)], dim=-1)
        return points, centers

    def assignments(self, point_tokens: torch.Tensor) -> torch.Tensor:
        return point_tokens[..., self.d : self.d + self.k]


class CodeEmbedding(Embedding):
    """Width d + m whatever k: points [x_i; 0_m], centres [c_j; r_j] with a random code r_j per
    centre and task, entries N(0, 1/m) (nearly orthogonal unit vectors for large m, as the one-hot
    ids are exactly). Renumbering the centres then changes nothing a layer can learn to rely on.

    In training mode the codes are drawn from :attr:`generator` when one is set (the trainer sets
    its data stream, so every task of every step sees new codes). Otherwise, and always in
    ``model.eval()``, every task gets the same k codes, drawn from a generator seeded with ``seed``
    at every call: the same task gives the same numbers every time, whatever else is in its batch.
    """

    name = "codes"

    def __init__(self, d: int, k: int, code_width: int, seed: int = 0) -> None:
        super().__init__(d, k)
        self.code_width, self.seed = code_width, seed
        self.generator: torch.Generator | None = None
        self.training = True  # (the model's mode: KMeansTransformer.train sets it)

    @property
    def width(self) -> int:
        return self.d + self.code_width

    def codes(self, B: int, k: int, like: torch.Tensor) -> torch.Tensor:
        """Codes (B, k, m) for ``B`` tasks of ``k`` centres, in ``like``'s dtype and device."""
        scale = self.code_width**-0.5
        if self.training and self.generator is not None:
            return torch.randn((B, k, self.code_width), generator=self.generator, dtype=like.dtype,
                               device=like.device) * scale  # fmt: skip
        g = torch.Generator(device=like.device)
        g.manual_seed(self.seed)
        fixed = torch.randn((k, self.code_width), generator=g, dtype=like.dtype, device=like.device) * scale
        return fixed.expand(B, k, self.code_width)

    def embed(self, X: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        (B, n, _), k = X.shape, C.shape[1]
        points = torch.cat([X, X.new_zeros(B, n, self.code_width)], dim=-1)
        return points, torch.cat([C, self.codes(B, k, C)], dim=-1)


EMBEDDINGS: dict[str, type[Embedding]] = {
    "onehot": OneHotEmbedding,
    "data": DataEmbedding,
    "norm_augmented": NormAugmentedEmbedding,
    "codes": CodeEmbedding,
}
"""The token embeddings by name, the one list of them: ``LayerConfig.embedding`` and
``KMeansTransformer.trainable(d, k, embedding=...)`` take these names."""

OLD_EMBEDDING_NAMES: dict[str, str] = {"none": "data", "normaugmented": "norm_augmented"}
"""Names of embeddings before version 0.2, still read (in model files, training configurations
and ``embedding=`` arguments): ``"none"`` (no embedding) is the width-d ``"data"`` embedding."""


def embedding_name(name: str) -> str:
    """The current name of the embedding ``name`` (an old name of :data:`OLD_EMBEDDING_NAMES`
    becomes its current one; any other value is returned as given, for the caller to check)."""
    return OLD_EMBEDDING_NAMES.get(name, name) if isinstance(name, str) else name


def make_embedding(name: str, d: int, k: int, code_width: int = 0, seed: int = 0) -> Embedding:
    """The embedding ``name`` (a key of :data:`EMBEDDINGS`; ``code_width`` and ``seed`` are those
    of ``"codes"``)."""
    if name not in EMBEDDINGS:
        raise ValueError(f"unknown embedding {name!r}; expected one of {', '.join(EMBEDDINGS)}")
    if name == "codes":
        return CodeEmbedding(d, k, code_width, seed)
    return EMBEDDINGS[name](d, k)
