"""One layer of the k-means transformer (the paper's Section 2), readable beside its equations.

Rows are tokens. A layer holds four attention blocks, in the paper's order ``mu = 1..4``,

* ``CAX``: cross-attention of the points over the centres (writes the new assignment),
* ``SAX``: self-attention of the points (erases the old assignment: a residual reset),
* ``CAC``: cross-attention of the centres over the *updated* points (adds the cluster means),
* ``SAC``: self-attention of the centres (erases the old centres: a residual reset),

each ``A(Z, Z') = map_gamma(score(Z W_Q^T, Z' W_K^T)) Z' W_V^T`` with affine query, key and value
maps, and the residual update of Theorem 2.1 (plus the feed-forward block of Theorem 2.2 and the
data normalisation of the spherical variant where the configuration asks for them)::

    X(t+1) = X(t) + A_SAX(X(t), X(t)) + A_CAX(X(t), C(t))
    C(t+1) = C(t) + A_SAC(C(t), C(t)) + A_CAC(C(t), X(t+1))      [+ FFN(C(t+1))]

The paper writes the two terms of each update in the other order; in exact arithmetic the sum
is the same. Here the reset is added first because in floating point ``(h - h) + out`` is ``out``
exactly, where ``(h + out) - h`` rounds (a centre halfway between two points would no longer be
exactly equidistant from them, and a k-medoids centre no longer exactly a data point). The blocks
are called in the paper's order (CAX, SAX, CAC, SAC), the order in which they draw their dropout
masks.

Everything a layer is -- its blocks' scores, maps, temperatures, the token layout, whether its
weights learn -- is one :class:`LayerConfig`, saved with the weights. The theorems
(:mod:`kmtlib.constructions`), the trainable layer (:mod:`kmtlib.learned`) and the circuit
variants (:mod:`kmtlib.variants`) are each a configuration and an initialiser of the weights.

Speed: ``layer.fast`` (default True) lets a block use the kernels of :mod:`kmtlib.kernels` where
one exists for it (Euclidean soft-max with a hand-written backward pass, hard self-attention in
closed form); ``fast = False`` evaluates the formula below as written. Both give the same
numbers up to rounding, which the tests check.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from ._checks import check_choice, check_int, check_positive_float
from ._numerics import tie_equal_keys
from .attention import (  # noqa: F401 (SCORES, register_score, ScoreFunction: the scores registry, read here)
    MAX_SCORE_ELEMENTS,
    SCORES,
    ScoreFunction,
    by_query_chunks,
    get_attention_map,
    register_score,
)
from .embedding import EMBEDDINGS
from .equivariant import BROADCASTS, EquivariantMap
from .kernels import Kernel
from .kernels.euclidean_softmax import euclidean_attention, sample_dropped
from .kernels.limit_model import LimitBlock
from .kernels.point_attention import point_self_attention
from .theorems import coordinate_selector, theorem_weights

BLOCK_NAMES: tuple[str, ...] = ("CAX", "SAX", "CAC", "SAC")
"""The four blocks in the paper's order mu = 1, 2, 3, 4."""

SELF_ATTENTION_BLOCKS: tuple[str, ...] = ("SAX", "SAC")
"""The blocks whose keys are their own queries' sequence."""

RANDOM_MAPS: tuple[str, ...] = ("gumbel",)
"""Attention maps that draw random numbers: the block passes them its ``generator``."""


# ------------------------------------------------------------------------------------ config
@dataclass(frozen=True)
class BlockConfig:
    """What one attention block computes (its weights are in the module, not here).

    Attributes:
        score: a name of :data:`kmtlib.attention.SCORES` (``"euclidean"``: ``-||q - k||^2``; ``"dot"``: ``q.k``).
        map: a name of :data:`kmtlib.attention.ATTENTION_MAPS` (``"softmax"``, ``"linear"``, ...).
        gamma: inverse temperature; ``math.inf`` with ``"softmax"`` is the limit, computed as
            averaging hard attention.
        scale: multiplies ``gamma`` inside the map (``1/sqrt(D)`` in the trainable layer; 2 in
            the dot-product blocks of Theorem 2.2).
        options: the map's own options (``tau`` of norm-max, ``fraction`` of top-k, ...).
        identity: the identity attention matrix instead of the map (the authors' shortcut for the
            self-attention blocks): each token gets its own value.
        dropout: dropout rate on the attention matrix (active in ``train()`` mode only).
    """

    score: str = "euclidean"
    map: str = "softmax"
    gamma: float = math.inf
    scale: float = 1.0
    options: Mapping[str, Any] = field(default_factory=dict)
    identity: bool = False
    dropout: float = 0.0

    @property
    def inverse_temperature(self) -> float:
        """``scale * gamma``: what multiplies the scores inside the map."""
        return self.scale * self.gamma

    @property
    def is_hard(self) -> bool:
        """The block uses the limit: averaging hard attention, decided by exact comparison."""
        return self.map == "hardmax" or (self.map == "softmax" and self.gamma == math.inf)

    def validated(self, name: str) -> BlockConfig:
        if self.score not in SCORES:  # (a variant registers its score when imported: the model imports them)
            raise ValueError(
                f"block {name}: unknown attention score {self.score!r}; expected one of {', '.join(SCORES)}"
            )
        get_attention_map(self.map)
        check_positive_float(f"block {name}: gamma", self.gamma, allow_inf=True)
        check_positive_float(f"block {name}: scale", self.scale)
        if not 0.0 <= float(self.dropout) < 1.0:
            raise ValueError(f"block {name}: dropout must be in [0, 1), got {self.dropout!r}")
        if self.identity and name not in SELF_ATTENTION_BLOCKS:
            raise ValueError(f"block {name}: the identity shortcut needs a self-attention block")
        return self


@dataclass(frozen=True)
class LayerConfig:
    r"""A k-means transformer layer and how the model applies it; saved with the weights.

    Attributes:
        d, k: data dimension and number of centres.
        embedding: how points and centres become tokens, a key of :data:`kmtlib.embedding.EMBEDDINGS`
            (``tokens``, its name before, is a read-only property).
        CAX, SAX, CAC, SAC: the four blocks.
        ffn: Theorem 2.2's feed-forward block on the centres, ``h -> W2 max(W1 h, 0)^2``.
        normalise_data: scale the data coordinates of every token to unit norm at the layer's
            input and the centres' again at its output (the spherical variant).
        bias: the query, key and value maps are affine (with bias), as in the trainable layer.
        trainable: the weights are parameters that learn (else fixed).
        reembed: the model rebuilds the tokens from the current centres before every step, so
            that one layer acts as a map C(t) -> C(t+1) (the trained layer); otherwise the
            tokens go from layer to layer (the weight-shared theorem models).
        seed: seed of the layer's random numbers (random maps such as Gumbel attention).
        origin: how the configuration was made, e.g. ``"from_theorem(d=2, k=5)"`` (for display).
        any_k: the query, key and value maps are :class:`~kmtlib.equivariant.EquivariantMap`\ s,
            which commute with every renumbering of the clusters and read tokens of any number of
            clusters: the model then runs on centres of any k (``k`` is the number it was built
            around, which sets the token width of its temperature ``1/sqrt(D)``); ``embedding``
            must be ``"onehot"``.
        code_width: the width m of the random cluster codes of ``embedding="codes"`` (0 otherwise):
            tokens of width d + m whatever k, so the layer runs on centres of any k.
        cluster_broadcast: how those maps spread one number over the k cluster coordinates
            (:data:`~kmtlib.equivariant.BROADCASTS`: ``"ones"``, ``"mean"``, ``"unit"``); only
            for ``any_k``.
    """

    d: int
    k: int
    embedding: str
    CAX: BlockConfig
    SAX: BlockConfig
    CAC: BlockConfig
    SAC: BlockConfig
    ffn: bool = False
    normalise_data: bool = False
    bias: bool = False
    trainable: bool = False
    reembed: bool = False
    seed: int = 0
    origin: str = ""
    any_k: bool = False
    cluster_broadcast: str = "ones"
    code_width: int = 0

    @property
    def width(self) -> int:
        """Token width D."""
        widths = {"onehot": self.d + self.k, "data": self.d, "norm_augmented": self.d + self.k + 2}
        return self.d + self.code_width if self.embedding == "codes" else widths[self.embedding]

    @property
    def reads_any_k(self) -> bool:
        """Whether the layer runs on centres of any k (equivariant maps, or cluster codes of a fixed width)."""
        return self.any_k or self.embedding == "codes"

    @property
    def blocks(self) -> dict[str, BlockConfig]:
        return {name: getattr(self, name) for name in BLOCK_NAMES}

    def validated(self) -> LayerConfig:
        check_int("d", self.d, minimum=1)
        check_int("k", self.k, minimum=1)
        check_choice("embedding", self.embedding, tuple(EMBEDDINGS))
        check_int("seed", self.seed, minimum=0)
        if self.any_k and self.embedding != "onehot":
            raise ValueError(f"a layer for any number of clusters reads one-hot tokens, not {self.embedding!r}")
        check_choice("cluster_broadcast", self.cluster_broadcast, BROADCASTS)
        check_int("code_width", self.code_width, minimum=0)
        if (self.embedding == "codes") != (self.code_width > 0):
            raise ValueError(f"embedding={self.embedding!r} with code_width={self.code_width}: codes need a width "
                             ">= 1, other embeddings none")  # fmt: skip
        if self.cluster_broadcast != "ones" and not self.any_k:
            raise ValueError("cluster_broadcast applies to a layer for any number of clusters (any_k=True) only")
        for name, block in self.blocks.items():
            if not isinstance(block, BlockConfig):
                raise TypeError(f"block {name} must be a BlockConfig, got {type(block).__name__}")
            block.validated(name)
        return self

    def replace(self, **changes: Any) -> LayerConfig:
        """A copy with some fields changed (``dataclasses.replace``), validated."""
        return dataclasses.replace(self, **changes).validated()

    def to_dict(self) -> dict[str, Any]:
        """Plain values only (what a model file stores)."""
        out = dataclasses.asdict(self)
        for name in BLOCK_NAMES:
            out[name]["options"] = dict(out[name]["options"])
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LayerConfig:
        """The inverse of :meth:`to_dict`; unknown or missing fields raise ``ValueError`` naming them.
        (A model file's older names are mapped by :mod:`kmtlib.model_file`.)"""
        fields = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        unknown, missing = sorted(set(data) - fields), sorted(required - set(data))
        if unknown or missing:
            raise ValueError(f"not a layer configuration (unknown fields {unknown}, missing fields {missing})")
        values = dict(data)
        for name in BLOCK_NAMES:
            block = values[name]
            if not isinstance(block, Mapping):
                raise ValueError(f"not a layer configuration (block {name} is not a mapping)")
            block_fields = {f.name for f in dataclasses.fields(BlockConfig)}
            if set(block) - block_fields:
                raise ValueError(
                    f"not a layer configuration (block {name} has unknown fields {sorted(set(block) - block_fields)})"
                )
            values[name] = BlockConfig(**block)
        return cls(**values).validated()


# ------------------------------------------------------------------------------------ modules
def affine_map(width: int, bias: bool, trainable: bool) -> nn.Linear:
    """A ``width -> width`` affine map, uninitialised (an initialiser fills it)."""
    linear = nn.utils.skip_init(nn.Linear, width, width, bias=bias)
    linear.requires_grad_(trainable)
    return linear


def token_map(config: LayerConfig) -> nn.Module:
    """A query, key or value map of the layer: ``nn.Linear`` over tokens of width D, or for a layer
    of any k the :class:`~kmtlib.equivariant.EquivariantMap` (uninitialised)."""
    if config.any_k:
        return EquivariantMap(config.d, trainable=config.trainable, broadcast=config.cluster_broadcast)
    return affine_map(config.width, config.bias, config.trainable)


def same_map(a: nn.Linear, b: nn.Linear) -> bool:
    """Whether two affine maps are equal (weights and biases)."""
    if not torch.equal(a.weight, b.weight):
        return False
    if a.bias is None or b.bias is None:
        return a.bias is None and b.bias is None
    return torch.equal(a.bias, b.bias)


def normalise_data(tokens: torch.Tensor, d: int) -> torch.Tensor:
    """Tokens with their first ``d`` coordinates scaled to unit Euclidean norm (zero stays zero,
    the rule of faiss' renormalisation); the other coordinates are left alone."""
    data = tokens[..., :d]
    norm = data.norm(dim=-1, keepdim=True)
    scaled = data / torch.where(norm > 0, norm, torch.ones_like(norm))
    return torch.cat([scaled, tokens[..., d:]], dim=-1)


class AttentionBlock(nn.Module):
    """``A(Z, Z') = map_gamma(score(Q(Z), K(Z'))) V(Z')`` with affine maps ``query``, ``key``,
    ``value`` (``nn.Linear``) and the score and map of its :class:`BlockConfig`."""

    def __init__(self, name: str, config: BlockConfig, layer: LayerConfig) -> None:
        super().__init__()
        self.name, self.config = name, config.validated(name)
        self.d, self.clusters = layer.d, layer.k
        self.query, self.key, self.value = token_map(layer), token_map(layer), token_map(layer)
        self.fast = True
        self.generator: torch.Generator | None = None  # dropout and random maps (None: global RNG)

    @property
    def self_attention(self) -> bool:
        return self.name in SELF_ATTENTION_BLOCKS

    def linear_maps(self) -> tuple[nn.Linear, nn.Linear, nn.Linear]:
        """``(query, key, value)`` as the ``nn.Linear`` maps of a layer of one k (their ``.weight``
        are the paper's Q, K, V); a layer of any k has equivariant maps instead (TypeError)."""
        maps = (self.query, self.key, self.value)
        if not all(isinstance(m, nn.Linear) for m in maps):
            raise TypeError(f"block {self.name} of a layer for any k has equivariant maps, not D x D matrices")
        return cast(tuple[nn.Linear, nn.Linear, nn.Linear], maps)

    def extra_repr(self) -> str:
        c = self.config
        if c.identity:
            return f"{self.name}: identity attention"
        temperature = "" if c.map == "linear" else f", gamma={c.gamma}, scale={c.scale:g}"
        return f"{self.name}: {c.score} {c.map}{temperature}" + (f", dropout={c.dropout}" if c.dropout else "")

    def weights(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """The attention matrix (B, m, r) of the block, without dropout (for inspection)."""
        if self.config.identity:
            return _identity_weights(queries, keys, self.name)
        return self._weights(self.query(queries), self.key(keys))

    def _weights(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        c = self.config
        exact = self.self_attention and c.is_hard and c.score == "euclidean"
        scores = SCORES[c.score](q, k, d=self.d, clusters=self.clusters, exact=exact, gamma=c.gamma)
        if c.is_hard:
            # hard attention decides by exact comparison: equal keys get bitwise equal scores,
            # whatever the matrix product rounded (it may round one dot product differently at
            # another position of its tile)
            scores = tie_equal_keys(scores, k, dim=2)
        if c.map in RANDOM_MAPS:
            return get_attention_map(c.map)(scores, c.inverse_temperature, generator=self.generator, **c.options)
        return get_attention_map(c.map)(scores, c.inverse_temperature, **c.options)

    # ------------------------------------------------------------------ which kernel applies
    def closed_form_self_attention(self) -> bool:
        """Whether the block is hard self-attention whose maximal keys are each query's own copies:
        exact Euclidean scores of one map for queries and keys, or Theorem 2.2's dot-product queries
        ``[x; -1/2]`` and keys ``[x; ||x||^2]`` (``q.k = -||x - x'||^2 / 2`` plus a constant per
        query). Fixed weights only: a learning layer's copies need not carry equal values. Then the
        averaging hard attention returns each token's own value (:mod:`kmtlib.kernels`)."""
        c = self.config
        if not (self.self_attention and c.is_hard) or not isinstance(self.query, nn.Linear):
            return False
        if not isinstance(self.key, nn.Linear) or self.query.weight.requires_grad:
            return False
        if c.score == "euclidean":
            return same_map(self.query, self.key)
        if c.score == "dot" and self.query.bias is None and self.key.bias is None:
            D = self.query.weight.shape[0]
            if self.d + self.clusters + 2 != D:
                return False
            weights = theorem_weights(self.d, self.clusters, "dot", dtype=self.query.weight.dtype)["SAX"]
            W = self.query.weight
            return torch.equal(W, weights["Q"].to(W.device)) and torch.equal(self.key.weight, weights["K"].to(W.device))
        return False

    def point_coordinates(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor | None:
        """The non-zero coordinates x (B, n, d) of point tokens ``[x; 0]`` where the block's
        self-attention can run in them (:mod:`kmtlib.kernels.point_attention`), else None: one
        tensor for queries and keys, Euclidean soft-max, affine maps, tokens without gradient that
        are zero past the data coordinates."""
        c = self.config
        if not (self.self_attention and queries is keys) or queries.requires_grad:
            return None
        if c.score != "euclidean" or c.map != "softmax" or c.is_hard or c.options:
            return None
        maps = (self.query, self.key, self.value)
        if not all(isinstance(m, nn.Linear) and m.bias is not None for m in maps):
            return None
        d = self.d
        if queries.shape[-1] <= d or torch.any(queries[..., d:]):
            return None
        return queries[..., :d]

    def attention_kernel(self, q: torch.Tensor, k: torch.Tensor) -> Kernel | None:
        """The kernel for this block and these projected tokens, or None (then the formula runs)."""
        c = self.config
        if self.closed_form_self_attention():
            return lambda q, k, v, p: v  # each token's own value (kmtlib.kernels)
        if c.score == "euclidean" and c.map == "softmax" and not c.is_hard and not c.options:
            return lambda q, k, v, p: euclidean_attention(q, k, v, c.inverse_temperature, p, self.generator)
        return None

    def limit_block(self) -> LimitBlock:
        """The block as :mod:`kmtlib.kernels.limit_model` reads it (the model checks first that
        the kernel applies: :meth:`kmtlib.KMeansTransformer.uses_limit_kernel`)."""
        c = self.config
        return LimitBlock(
            name=self.name,
            weights=tuple(linear.weight for linear in self.linear_maps()),  # type: ignore[arg-type]
            own_values=c.identity or self.closed_form_self_attention(),
            self_attention=self.self_attention,
            euclidean=c.score == "euclidean",
            hard=c.is_hard,
            linear=c.map == "linear",
            inverse_temperature=c.inverse_temperature,
        )

    # ------------------------------------------------------------------ the formula
    def forward(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        c = self.config
        if self.fast and not c.identity:
            points = self.point_coordinates(queries, keys)
            if points is not None:  # (the same numbers from d-wide products: kernels.point_attention)
                p = c.dropout if self.training else 0.0
                B, n, _ = points.shape
                dropped = sample_dropped(B * n * n, p, self.generator, points.device)
                Q, K, V = self.linear_maps()  # (affine maps with bias: point_coordinates checked)
                maps = (Q.weight, Q.bias), (K.weight, K.bias), (V.weight, V.bias)
                return point_self_attention(points, *maps, c.inverse_temperature, dropped, p)
        q, k, v = self.query(queries), self.key(keys), self.value(keys)
        if c.identity:
            return v  # (the identity attention matrix: every token its own value)
        p = c.dropout if self.training else 0.0
        if self.fast:
            kernel = self.attention_kernel(q, k)
            if kernel is not None:
                return kernel(q, k, v, p)
        per_query = q.shape[0] * k.shape[1] * (k.shape[-1] if self.self_attention and c.is_hard else 1)
        return by_query_chunks(
            lambda qc: _dropout(self._weights(qc, k), p) @ v, q, per_query, max_elements=MAX_SCORE_ELEMENTS
        )


def _dropout(weights: torch.Tensor, p: float) -> torch.Tensor:
    return nn.functional.dropout(weights, p, training=True) if p > 0 else weights


def _identity_weights(queries: torch.Tensor, keys: torch.Tensor, name: str) -> torch.Tensor:
    B, m, _ = queries.shape
    if keys.shape[1] != m:
        raise ValueError(f"block {name}: the identity attention needs as many keys as queries")
    return torch.eye(m, dtype=queries.dtype, device=queries.device).expand(B, m, m).clone()


class FeedForward(nn.Module):
    """Theorem 2.2's feed-forward block ``h -> W2 phi(W1 h)``, ``phi(z) = max(z, 0)^2`` (``up`` is
    W1, ``down`` is W2). With W1 reading ``+c`` and ``-c`` and W2 summing into the norm
    coordinate it writes ``||c||^2``, since ``max(z,0)^2 + max(-z,0)^2 = z^2``."""

    def __init__(self, width: int, hidden: int, trainable: bool) -> None:
        super().__init__()
        self.up = nn.utils.skip_init(nn.Linear, width, hidden, bias=False).requires_grad_(trainable)
        self.down = nn.utils.skip_init(nn.Linear, hidden, width, bias=False).requires_grad_(trainable)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(h)).square())


class KMeansLayer(nn.Module):
    """One k-means transformer layer: the blocks ``CAX``, ``SAX``, ``CAC``, ``SAC`` (attributes of
    those names), the optional ``ffn`` and the data normalisation, as ``config`` says.

    ``forward(X, C)`` takes point tokens (B, n, D) and centre tokens (B, k, D) and returns the
    updated pair (module documentation)."""

    CAX: AttentionBlock  # (set in __init__)
    SAX: AttentionBlock
    CAC: AttentionBlock
    SAC: AttentionBlock

    def __init__(self, config: LayerConfig) -> None:
        super().__init__()
        self.config = config.validated()
        c = self.config
        for name, block in c.blocks.items():
            setattr(self, name, AttentionBlock(name, block, c))
        self.ffn = FeedForward(c.width, 2 * c.d, c.trainable) if c.ffn else None
        self.manual_seed(c.seed)

    def forward(self, X: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.config.normalise_data:
            X, C = normalise_data(X, self.config.d), normalise_data(C, self.config.d)
        assign, reset = self.CAX(X, C), self.SAX(X, X)
        X = X + reset + assign
        means, reset = self.CAC(C, X), self.SAC(C, C)
        C = C + reset + means
        if self.ffn is not None:
            C = C + self.ffn(C)
        if self.config.normalise_data:
            C = normalise_data(C, self.config.d)
        return X, C

    # ------------------------------------------------------------------ around the formula
    @property
    def blocks(self) -> dict[str, AttentionBlock]:
        """The four blocks in the paper's order."""
        return {name: getattr(self, name) for name in BLOCK_NAMES}

    def writes_hard_assignment(self) -> bool:
        """Whether the point tokens after the layer hold the hard nearest-centre assignment of the
        centres it read: CAX is hard Euclidean attention of the data coordinates writing into the
        assignment coordinates, and SAX erases the old assignment exactly (Theorem 2.1's limit).

        CAX then puts its weight on exactly the centres of maximal score ``2 x.c - ||c||^2`` (the
        negated scores of :func:`~kmtlib.objective.nearest_center`, so the same ties), and the reset
        leaves the positive entries where CAX put them; the lowest index with a positive entry is
        the nearest-centre label (what the fast forward reads instead of a second distance pass)."""
        c = self.config
        cax, sax = self.CAX, self.SAX
        if c.embedding != "onehot" or not (cax.config.is_hard and cax.config.score == "euclidean"):
            return False
        if c.any_k:
            return False
        (q_a, k_a, v_a), (q_s, k_s, v_s) = cax.linear_maps(), sax.linear_maps()
        exact_reset = sax.config.identity or (
            sax.config.is_hard and sax.config.score == "euclidean" and same_map(q_s, k_s)
        )
        if not exact_reset:
            return False
        D, d, W = c.width, c.d, q_a.weight
        data = coordinate_selector(D, 0, d, dtype=W.dtype).to(W.device)
        ids = coordinate_selector(D, d, D, dtype=W.dtype).to(W.device)
        return (
            torch.equal(q_a.weight, data)
            and torch.equal(k_a.weight, data)
            and torch.equal(v_a.weight, ids)
            and torch.equal(v_s.weight, -ids)
        )

    def limit_blocks(self) -> dict[str, LimitBlock]:
        """The four blocks as :mod:`kmtlib.kernels.limit_model` reads them."""
        return {name: block.limit_block() for name, block in self.blocks.items()}

    @property
    def fast(self) -> bool:
        """Whether the blocks may use the kernels of :mod:`kmtlib.kernels` (module documentation)."""
        return self.CAX.fast

    @fast.setter
    def fast(self, value: bool) -> None:
        for block in self.blocks.values():
            block.fast = bool(value)

    @property
    def generator(self) -> torch.Generator | None:
        """The generator of the layer's random numbers (dropout, random maps)."""
        return self.CAX.generator

    @generator.setter
    def generator(self, generator: torch.Generator | None) -> None:
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        for block in self.blocks.values():
            block.generator = generator

    @property
    def draws_random_numbers(self) -> bool:
        """Whether a block's attention map is random (Gumbel attention)."""
        return any(b.config.map in RANDOM_MAPS for b in self.blocks.values())

    def manual_seed(self, seed: int) -> None:
        """Restart the random maps' numbers from ``seed``: a fresh generator on the data's device
        at the next step (a layer without random maps keeps its dropout ``generator``)."""
        self.seed = check_int("seed", seed, minimum=0)
        if self.draws_random_numbers:
            self.generator = None

    def seed_generator_for(self, device: torch.device) -> None:
        """Before a step (the model calls it): give a layer with random maps a generator seeded
        with :attr:`seed` on ``device`` if it has none; refuse one on another kind of device."""
        if not self.draws_random_numbers:
            return
        g = self.generator
        if g is not None and torch.device(g.device).type != device.type:
            raise ValueError(
                f"the layer's generator lives on {g.device} but the tokens are on {device}; "
                "set model.layer.generator or call model.layer.manual_seed(seed)"
            )
        if g is None:
            g = torch.Generator(device=device)
            g.manual_seed(self.seed)
            self.generator = g

    def extra_repr(self) -> str:
        c = self.config
        extras = [f"embedding={c.embedding}", f"width={c.width}"]
        extras += [name for name in ("ffn", "normalise_data", "bias", "trainable") if getattr(c, name)]
        return ", ".join(extras)

    def attention_maps(self, X: torch.Tensor, C: torch.Tensor) -> dict[str, torch.Tensor]:
        """The four attention matrices of one layer on these tokens (full matrices: keep n small):
        CAX (B, n, k), SAX (B, n, n), CAC (B, k, n, over the updated points), SAC (B, k, k)."""
        if self.config.normalise_data:
            X, C = normalise_data(X, self.config.d), normalise_data(C, self.config.d)
        X1, _ = self.forward(X, C)
        return {
            "CAX": self.CAX.weights(X, C),
            "SAX": self.SAX.weights(X, X),
            "CAC": self.CAC.weights(C, X1),
            "SAC": self.SAC.weights(C, C),
        }
