"""kmtlib.chunks: work on slices of a batch, joined, is the work on the whole batch."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from kmtlib.chunks import chunk_size, in_chunks


def test_chunk_size_is_at_least_one():
    assert chunk_size(100, 7) == 14
    assert chunk_size(100, 1000) == 1
    assert chunk_size(100, 0) == 100


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100])
def test_in_chunks_joins_tensors_and_tuples_bitwise(size):
    g = torch.Generator().manual_seed(0)
    X, C = torch.randn(7, 5, 3, generator=g), torch.randn(7, 4, 3, generator=g)

    def fn(x, c):
        return torch.bmm(x, c.transpose(1, 2)), x.sum(1)

    whole = fn(X, C)
    got = in_chunks(fn, X, C, size=size)
    assert all(torch.equal(a, b) for a, b in zip(got, whole, strict=True))
    assert torch.equal(in_chunks(lambda x, c: fn(x, c)[0], X, C, size=size, copy=True), whole[0])
    rows = in_chunks(lambda q: q.exp(), X, size=size, dim=1)  # (along the points)
    assert torch.equal(rows, X.exp())


def test_in_chunks_joins_objects_with_cat_in_order():
    @dataclass
    class Part:
        t: torch.Tensor

        def cat(self, other):
            return Part(torch.cat([self.t, other.t]))

    X = torch.arange(10.0).view(10, 1)
    assert torch.equal(in_chunks(Part, X, size=3).t, X)


def test_one_chunk_returns_the_result_itself():
    X = torch.ones(3, 2)
    out = torch.zeros(1)
    assert in_chunks(lambda x: out, X, size=3) is out
