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

    def centers(self, centre_tokens: torch.Tensor) -> torch.Tensor:
        """The centres (B, k, d) held in the data coordinates of the centre tokens."""
        return centre_tokens[..., : self.d]

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
        B, n, _ = X.shape
        scratch = X.new_zeros(B, n, self.k)
        ids = torch.eye(self.k, dtype=C.dtype, device=C.device).expand(B, self.k, self.k)
        return torch.cat([X, scratch], dim=-1), torch.cat([C, ids], dim=-1)

    def assignments(self, point_tokens: torch.Tensor) -> torch.Tensor:
        return point_tokens[..., self.d : self.d + self.k]


class PlainEmbedding(Embedding):
    """Width d: the tokens are the points and centres themselves (the paper's d-only ablation)."""

    name = "none"

    @property
    def width(self) -> int:
        return self.d

    def embed(self, X: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return X, C
