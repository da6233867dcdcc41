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

These classes hold the formula and nothing else. :func:`update` is the layer's one update on every
per-step path: :meth:`KMeansLayer.forward` runs it, and so do the stacked runs of training
(:class:`kmtlib.fast.run_stack.RunStack`). It computes each block's attention by the function it
is given, the block's own formula by default; with ``model.fast`` the model gives it
:func:`kmtlib.fast.attend`, which computes the same numbers by a kernel where one applies (as
nanoGPT's ``if self.flash:`` beside the manual attention).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import torch
from torch import Tensor, nn

from ._checks import check_choice, check_int, check_positive_float
from ._numerics import MAX_SCORE_ELEMENTS, tie_equal_keys
from .attention import ATTENTION_MAPS, SCORES, get_attention_map
from .embedding import EMBEDDINGS
from .equivariant import BROADCASTS, EquivariantMap

BLOCK_NAMES: tuple[str, ...] = ("CAX", "SAX", "CAC", "SAC")
"""The four blocks in the paper's order mu = 1, 2, 3, 4."""

SELF_ATTENTION_BLOCKS: tuple[str, ...] = ("SAX", "SAC")
"""The blocks whose keys are their own queries' sequence."""

CONSTRUCTIONS: tuple[str, ...] = ("", "theorem 2.1", "theorem 2.2")
"""What ``LayerConfig.construction`` may say: no construction, or the theorem whose weights the layer holds."""

RANDOM_MAPS: tuple[str, ...] = ("gumbel",)
"""Attention maps that draw random numbers: the block passes them its ``generator``."""

BlockAttention = Callable[["AttentionBlock", torch.Tensor, torch.Tensor], torch.Tensor]
"""``attend(block, queries, keys)``: a block's attention on these tokens, ``block(queries, keys)``
(the formula) or the same numbers by a kernel (:func:`kmtlib.fast.attend`)."""

Block = TypeVar("Block")
"""What :func:`update` reads a block as: an :class:`AttentionBlock`, or the stacked runs' blocks."""


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
        embedding: how points and centres become tokens, a key of :data:`kmtlib.embedding.EMBEDDINGS`.
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
        construction: ``"theorem 2.1"`` or ``"theorem 2.2"`` where the layer holds that theorem's
            fixed weights (:func:`kmtlib.constructions.theorem_config`), else ``""``; the fast
            path reads it (:mod:`kmtlib.fast.choice`: hard self-attention in closed form, the
            assignment the tokens hold).
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
    construction: str = ""

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
        check_choice("construction", self.construction, CONSTRUCTIONS)
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
        (A model file's older names are mapped by :mod:`kmtlib.io.model_file`.)"""
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
        self.d, self.clusters, self.construction = layer.d, layer.k, layer.construction
        self.query, self.key, self.value = token_map(layer), token_map(layer), token_map(layer)
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

    def _weights(self, Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
        """``map_gamma(score(Q, K))`` of the projected queries Q (B, m, D) and keys K (B, r, D)."""
        c = self.config
        exact = self.self_attention and c.is_hard and c.score == "euclidean"
        scores = SCORES[c.score](Q, K, d=self.d, clusters=self.clusters, exact=exact, gamma=c.gamma)
        if c.is_hard:
            # hard attention decides by exact comparison: equal keys get bitwise equal scores,
            # whatever the matrix product rounded (it may round one dot product differently at
            # another position of its tile)
            scores = tie_equal_keys(scores, K, dim=2)
        # (the score and the map by name from their registries: the names were checked when the
        # block was built, in BlockConfig.validated)
        if c.map in RANDOM_MAPS:
            return ATTENTION_MAPS[c.map](scores, c.inverse_temperature, generator=self.generator, **c.options)
        return ATTENTION_MAPS[c.map](scores, c.inverse_temperature, **c.options)

    # ------------------------------------------------------------------ the formula
    def forward(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """``A(Z, Z') = map_gamma(score(Q Z, K Z')) V Z'`` for query tokens Z and key tokens Z'."""
        c = self.config
        Q, K, V = self.query(queries), self.key(keys), self.value(keys)
        if c.identity:
            return V  # (the identity attention matrix: every token its own value)
        p = c.dropout if self.training else 0.0
        # (the queries a slice at a time, so that the score matrix stays within MAX_SCORE_ELEMENTS)
        per_query = Q.shape[0] * K.shape[1] * (K.shape[-1] if self.self_attention and c.is_hard else 1)
        rows = max(1, MAX_SCORE_ELEMENTS // per_query)
        slices = [Q[:, start : start + rows] for start in range(0, Q.shape[1], rows)]
        return torch.cat([_dropout(self._weights(Q_slice, K), p) @ V for Q_slice in slices], dim=1)


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


def update(
    blocks: Mapping[str, Block], X: Tensor, C: Tensor, attend: Callable[[Block, Tensor, Tensor], Tensor]
) -> tuple[Tensor, Tensor]:
    """The residual update of Theorem 2.1 (module documentation) on point tokens X (..., n, D) and
    centre tokens C (..., k, D), each block's attention by ``attend(blocks[name], queries, keys)``,
    in the paper's order (CAX, SAX, CAC, SAC: the order of the dropout masks). The one update of
    every per-step path: :meth:`KMeansLayer.forward` calls it with the layer's blocks, and the
    stacked runs of training (:meth:`kmtlib.fast.run_stack.RunStack.step`) with the runs' blocks
    and a leading run axis."""
    assign, reset = attend(blocks["CAX"], X, C), attend(blocks["SAX"], X, X)
    X = X + reset + assign
    means, reset = attend(blocks["CAC"], C, X), attend(blocks["SAC"], C, C)
    return X, C + reset + means


class KMeansLayer(nn.Module):
    """One k-means transformer layer: the blocks ``CAX``, ``SAX``, ``CAC``, ``SAC`` (attributes of
    those names), the optional ``ffn`` and the data normalisation, as ``config`` says.

    ``forward(X, C)`` takes point tokens (B, n, D) and centre tokens (B, k, D) and returns the
    updated pair (module documentation); ``forward(X, C, attend)`` computes each block's attention
    by ``attend(block, queries, keys)`` (:data:`BlockAttention`), by default the block's formula."""

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

    def forward(self, X: torch.Tensor, C: torch.Tensor, attend: BlockAttention | None = None) -> tuple[Tensor, Tensor]:
        if self.config.normalise_data:
            X, C = normalise_data(X, self.config.d), normalise_data(C, self.config.d)
        # (by default each block's attention by its formula, the block's own forward)
        X, C = update(self.blocks, X, C, attend or AttentionBlock.__call__)
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

    def attention_maps(
        self, X: torch.Tensor, C: torch.Tensor, step: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
    ) -> dict[str, torch.Tensor]:
        """The four attention matrices of one layer on these tokens (full matrices: keep n small):
        CAX (B, n, k), SAX (B, n, n), CAC (B, k, n, over the updated points), SAC (B, k, k).
        ``step`` applies the layer for the updated points (default: :meth:`forward`, the formula;
        ``model.apply_layer`` runs the kernels where ``model.fast``)."""
        if self.config.normalise_data:
            X, C = normalise_data(X, self.config.d), normalise_data(C, self.config.d)
        X1, _ = (step or self.forward)(X, C)
        return {
            "CAX": self.CAX.weights(X, C),
            "SAX": self.SAX.weights(X, X),
            "CAC": self.CAC.weights(C, X1),
            "SAC": self.SAC.weights(C, C),
        }
