"""Attention scores and maps (kmtlib.attention), float64."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from _helpers import identity_block

import kmtlib.layer
from kmtlib.attention import (
    ATTENTION_MAPS,
    dot_scores,
    euclidean_scores,
    get_attention_map,
    hard_attention,
    linear_attention_weights,
    normalized_linear_attention,
    register_attention_map,
    softmax_attention,
)

F64 = torch.float64



def _rand(*shape, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64) * scale


# ----------------------------------------------------------------------------- scores
def test_euclidean_scores_match_differences():
    q, k = _rand(3, 5, 4, seed=1), _rand(3, 7, 4, seed=2)
    direct = -((q.unsqueeze(2) - k.unsqueeze(1)) ** 2).sum(-1)
    torch.testing.assert_close(euclidean_scores(q, k), direct, rtol=0, atol=1e-12)
    torch.testing.assert_close(euclidean_scores(q, k, exact=True), direct, rtol=0, atol=0)
    # without the query norm: shifted by ||q_i||^2 along each row (the maps do not see it)
    shifted = euclidean_scores(q, k, query_norm=False)
    torch.testing.assert_close(shifted - (q * q).sum(-1, keepdim=True), direct, rtol=0, atol=1e-12)
    assert (euclidean_scores(q, q) <= 0).all()
    assert torch.equal(torch.diagonal(euclidean_scores(q, q, exact=True), dim1=1, dim2=2), torch.zeros(3, 5, dtype=F64))


def test_dot_scores():
    q, k = _rand(2, 4, 3, seed=3), _rand(2, 6, 3, seed=4)
    torch.testing.assert_close(dot_scores(q, k), torch.einsum("bmd,brd->bmr", q, k), rtol=0, atol=1e-14)


# ----------------------------------------------------------------------------- soft-max
def test_softmax_matches_reference_and_sums_to_one():
    s = _rand(4, 6, 9, seed=5)
    for gamma in (0.1, 1.0, 7.5):
        w = softmax_attention(s, gamma)
        torch.testing.assert_close(w, torch.softmax(gamma * s, dim=-1), rtol=1e-12, atol=1e-15)
        torch.testing.assert_close(w.sum(-1), torch.ones(4, 6, dtype=F64), rtol=0, atol=1e-14)
    before = s.clone()
    softmax_attention(s, 3.0)
    assert torch.equal(s, before), "the map must not modify its input"


def test_softmax_is_stable_at_huge_gamma_on_large_data():
    # data of scale 1e3: squared distances up to ~1e7, times gamma 1e8 -> 1e15 in the exponent
    q, k = _rand(8, 50, 3, seed=6, scale=1e3), _rand(8, 5, 3, seed=7, scale=1e3)
    s = euclidean_scores(q, k)
    w = softmax_attention(s, 1e8)
    assert torch.isfinite(w).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(8, 50, dtype=F64), rtol=0, atol=1e-12)
    # margins of this random data are far above 1/gamma: soft-max has reached its hard limit
    torch.testing.assert_close(w, hard_attention(s), rtol=0, atol=1e-12)
    # the same through the dropped-query-norm scores the blocks use
    w2 = softmax_attention(euclidean_scores(q, k, query_norm=False), 1e8)
    assert torch.isfinite(w2).all()
    torch.testing.assert_close(w2, hard_attention(s), rtol=0, atol=1e-12)
    # a naive exp(gamma * s) overflows / underflows to NaN here; ours does not
    assert not torch.isfinite(torch.exp(1e8 * -s)).all()


def test_softmax_tends_to_hard_attention():
    s = torch.tensor([[[0.0, -1.0, -0.5, -3.0], [2.0, 2.0, 1.0, -1.0]]], dtype=F64)
    hard = hard_attention(s)
    gaps = [(softmax_attention(s, g) - hard).abs().max().item() for g in (1.0, 10.0, 100.0, 1e4)]
    assert all(a > b for a, b in itertools.pairwise(gaps))
    assert gaps[-1] < 1e-12
    assert torch.equal(softmax_attention(s, math.inf), hard)


@pytest.mark.parametrize("gamma", [0, -1.0, float("nan")])
def test_softmax_rejects_bad_gamma(gamma):
    with pytest.raises(ValueError, match="gamma"):
        softmax_attention(_rand(1, 2, 3), gamma)


def test_softmax_rejects_non_number_gamma():
    with pytest.raises(TypeError, match="gamma"):
        softmax_attention(_rand(1, 2, 3), "10")


# ----------------------------------------------------------------------------- hard
def test_hard_attention_averages_exact_ties():
    s = torch.tensor([[[1.0, 3.0, 3.0, 0.0], [5.0, -1.0, 2.0, 4.0], [-2.0, -2.0, -2.0, -2.0]]], dtype=F64)
    w = hard_attention(s)
    expected = torch.tensor([[[0, 0.5, 0.5, 0], [1, 0, 0, 0], [0.25, 0.25, 0.25, 0.25]]], dtype=F64)
    assert torch.equal(w, expected)
    before = s.clone()
    hard_attention(s)
    assert torch.equal(s, before)


def test_hard_attention_uses_exact_comparison():
    # keys that differ by one rounding unit are not tied: the larger computed score wins (as argmax)
    a = 0.1 + 0.2  # 0.30000000000000004
    s = torch.tensor([[[a, 0.3, 0.0]]], dtype=F64)
    assert torch.equal(hard_attention(s), torch.tensor([[[1.0, 0.0, 0.0]]], dtype=F64))


def test_hard_attention_masked_rows():
    s = torch.tensor([[[-math.inf, -math.inf], [0.0, -math.inf]]], dtype=F64)
    assert torch.equal(hard_attention(s), torch.tensor([[[0.5, 0.5], [1.0, 0.0]]], dtype=F64))


# ----------------------------------------------------------------------------- linear
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_hard_weights_skip_the_normaliser_only_when_every_row_has_one_winner(dtype):
    from kmtlib.kernels.weights import unnormalised_row_weights_

    scores = torch.tensor([[[0.0, 2.0, 1.0], [3.0, -1.0, 0.5], [0.2, 0.1, 0.0]]], dtype=dtype)
    U, Z = unnormalised_row_weights_(scores.clone(), math.inf, hard=True)
    assert Z is None and torch.equal(U, torch.tensor([[[0.0, 1, 0], [1, 0, 0], [1, 0, 0]]], dtype=dtype))
    # a tie (two winners) next to a NaN row (none): the total is still one per row, the counts are not
    tied = torch.tensor([[[1.0, 1.0, 0.0], [math.nan, 0.0, 0.0], [0.0, 5.0, 1.0]]], dtype=dtype)
    U, Z = unnormalised_row_weights_(tied.clone(), math.inf, hard=True)
    assert Z is not None and Z.view(-1).tolist() == [2.0, 0.0, 1.0]
    # the averaged hard attention is the same either way
    w = softmax_attention(tied.nan_to_num(-1e30), math.inf)
    assert torch.equal(w[0, 0], torch.tensor([0.5, 0.5, 0.0], dtype=dtype))


def test_normalized_linear_attention_and_empty_rows():
    q = torch.eye(3, dtype=F64).unsqueeze(0)  # centre ids e_j
    y = torch.tensor([[[1, 0, 0], [1, 0, 0], [0, 1, 0], [1, 0, 0]]], dtype=F64)  # cluster 2 empty
    w = normalized_linear_attention(q, y)
    expected = torch.tensor([[[1 / 3, 1 / 3, 0, 1 / 3], [0, 0, 1, 0], [0.25, 0.25, 0.25, 0.25]]], dtype=F64)
    torch.testing.assert_close(w, expected, rtol=0, atol=1e-15)
    s = dot_scores(q, y)
    torch.testing.assert_close(linear_attention_weights(s), expected, rtol=0, atol=1e-15)
    assert torch.equal(s, dot_scores(q, y)), "the map must not modify its input"


# ----------------------------------------------------------------------------- registry
def test_registry_and_custom_maps():
    assert {"softmax", "hardmax", "linear"} <= set(ATTENTION_MAPS)
    assert get_attention_map("softmax") is softmax_attention
    with pytest.raises(ValueError, match="unknown attention map 'no-such-map'"):
        get_attention_map("no-such-map")
    with pytest.raises(ValueError, match="already registered"):
        register_attention_map("softmax", softmax_attention)
    name = "test-argmax-copy"
    try:
        register_attention_map(name, lambda scores, gamma=None: hard_attention(scores))
        s = _rand(2, 3, 4, seed=8)
        block = identity_block("dot", name, 1.0, 4)
        torch.testing.assert_close(block.weights(s, s), hard_attention(dot_scores(s, s)))
    finally:
        ATTENTION_MAPS.pop(name, None)


@pytest.mark.parametrize("map_name,gamma", [("softmax", 3.0), ("softmax", math.inf), ("linear", 1.0)])
@pytest.mark.parametrize("score", ["euclidean", "dot"])
def test_a_block_chunks_queries_without_changing_the_result(map_name, gamma, score, monkeypatch):
    queries, keys = _rand(2, 37, 3, seed=9), _rand(2, 11, 3, seed=10)
    if map_name == "linear":
        queries, keys = queries.abs(), keys.abs()
    block = identity_block(score, map_name, gamma, 3)
    whole = block(queries, keys)
    monkeypatch.setattr(kmtlib.layer, "MAX_SCORE_ELEMENTS", 2 * 11 * 4)  # chunks of 4 queries
    chunked = block(queries, keys)
    torch.testing.assert_close(chunked, whole, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(whole, torch.bmm(block.weights(queries, keys), keys), rtol=0, atol=1e-13)
