"""Floating-point care: the label search and its ties in both of its branches (k <= 255 and
k > 255), equal keys scored equally whatever the matrix product did, and data whose squares leave
the dtype's range.

Ties are planted on a dyadic grid (coordinates in multiples of 1/4, a few bits each): every
coordinate, product and sum of the distance computations is exact there, in float32 and in any
summation order, so a tie is a tie bitwise in every code and on every CPU.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import kmtlib
from kmtlib._numerics import first_equal_key, tie_equal_keys, times_power_of_two
from kmtlib.attention import softmax_attention
from kmtlib.kernels.limit_model import lowest_positive as _lowest_positive

F32, F64 = torch.float32, torch.float64
DTYPES = pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
# both branches of the label search: weights in uint8 up to k = 255, in int64 above
KS = pytest.mark.parametrize("k", [3, 200, 255, 256, 300, 1000])


def _grid(B: int, m: int, d: int, cells: int, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """(B, m, d) points of the grid {0, 1/4, ..., (cells - 1)/4}^d."""
    return torch.randint(0, cells, (B, m, d), generator=g).to(dtype) / 4


def _grid_task(k: int, dtype: torch.dtype, seed: int, n: int = 1024, d: int = 3):
    """Points and centres on a small grid (8^3 cells): with up to 1000 centres, many centres
    coincide and many points are equidistant from several centres."""
    g = torch.Generator().manual_seed(seed)
    return _grid(2, n, d, 8, dtype, g), _grid(2, k, d, 8, dtype, g)


def _brute_force(X: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(labels, squared distances): argmin over explicit differences, lowest index on ties
    (NumPy's argmin returns the first minimum)."""
    D = ((X.unsqueeze(2) - C.unsqueeze(1)) ** 2).sum(-1)
    return torch.from_numpy(D.numpy().argmin(-1)), D


def _tied_points(D: torch.Tensor) -> int:
    """How many points have their minimum distance at two or more centres."""
    return int(((D.amin(-1, keepdim=True) == D).sum(-1) > 1).sum())


# ----------------------------------------------------------------------------- label search
@DTYPES
@KS
def test_nearest_center_is_the_brute_force_argmin_with_planted_ties(dtype, k):
    X, C = _grid_task(k, dtype, seed=k)
    labels, D = _brute_force(X, C)
    assert _tied_points(D) >= D.shape[0] * D.shape[1] // 100  # the ties the test is about (1 % of the points or more)
    assert torch.equal(kmtlib.nearest_center(X, C), labels)
    # Lloyd's own assignment (points laid out once, scratch memory): the same labels
    assert torch.equal(kmtlib.lloyd(X, C, 0).labels, labels)
    # the objective: the minimum distances, exact on the grid
    assert torch.equal(kmtlib.kmeans_objective(X, C), D.amin(-1).sum(-1))
    assert torch.equal(kmtlib.lloyd(X, C, 0).objective[:, 0], D.amin(-1).sum(-1))


@DTYPES
@pytest.mark.parametrize("k", [3, 255, 256, 300])
def test_limit_transformer_labels_are_the_brute_force_argmin_with_planted_ties(dtype, k):
    # The limit model's CAX averages over tied centres; the label reduction (_lowest_positive)
    # takes the lowest of them, Lloyd's rule, and the objective of C0 is computed from it.
    X, C0 = _grid_task(k, dtype, seed=k + 1, n=600, d=2)
    labels, D = _brute_force(X, C0)
    assert _tied_points(D) >= D.shape[0] * D.shape[1] // 100
    model = kmtlib.KMeansTransformer.from_theorem(2, k).to(dtype)
    with torch.no_grad():
        out = model(X, C0, steps=1)
    assert torch.equal(_lowest_positive(out.assignments), labels)
    # tied centres share the point: positive weight on every one of them, 1 / (number tied)
    tied = D.amin(-1, keepdim=True) == D
    assert torch.equal(out.assignments > 0, tied)
    assert torch.equal(out.objective[:, 0], D.amin(-1).sum(-1))


@pytest.mark.parametrize("k", [2, 255, 256, 300, 1000])
@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_lowest_positive_is_the_first_positive_entry(k, layout):
    g = torch.Generator().manual_seed(k)
    B, n = 2, 300
    w = torch.rand(B, n, k, generator=g, dtype=F64)
    # mostly zeros, a few positive entries per row at random places, some rows with one only
    w = torch.where(torch.rand(B, n, k, generator=g) < 3.0 / k, w, torch.zeros_like(w))
    w[:, :5] = 0.0
    w[:, :5, k - 1] = 1.0  # positive only at the last index
    w[:, 5:10] = 0.0
    w[:, 5:10, 0] = 0.5  # positive only at the first
    w[0, 10] = math.nan  # no positive entry: k - 1 (in range)
    positive = (w > 0).numpy()
    expected = np.where(positive.any(-1), positive.argmax(-1), k - 1)  # argmax: the first True
    if layout == "columns":
        w = w.transpose(1, 2).contiguous().transpose(1, 2)  # memory (B, k, n), as the model's tokens
    assert torch.equal(_lowest_positive(w), torch.from_numpy(expected))


# ----------------------------------------------------------------------------- equal keys
def test_tie_equal_keys_copies_the_first_copy_wherever_the_keys_are():
    g = torch.Generator().manual_seed(3)
    keys = torch.rand(2, 9, 4, generator=g, dtype=F64)
    keys[0, 7] = keys[0, 2]
    keys[0, 8] = keys[0, 2]
    keys[1, 4] = keys[1, 1]
    keys[1, 5, 0] = -0.0
    keys[1, 6] = keys[1, 5]
    keys[1, 6, 0] = 0.0  # equal to key 5 (-0.0 == 0.0)
    assert first_equal_key(keys).tolist() == [[0, 1, 2, 3, 4, 5, 6, 2, 2], [0, 1, 2, 3, 1, 5, 5, 7, 8]]
    # scores (B, m, r) whose copies differ in the last bit, as a BLAS kernel may make them
    scores = torch.rand(2, 5, 9, generator=g, dtype=F64)
    scores[0, :, 7] = scores[0, :, 2].nextafter(torch.tensor(2.0, dtype=F64))
    tied = tie_equal_keys(scores, keys, dim=2)
    assert torch.equal(tied[0, :, 7], tied[0, :, 2]) and torch.equal(tied[0, :, 8], tied[0, :, 2])
    assert torch.equal(tied[1, :, 4], scores[1, :, 1]) and torch.equal(tied[1, :, 6], scores[1, :, 5])
    assert torch.equal(tied[:, :, :2], scores[:, :, :2])
    # keys along dim 1 (B, r, m), as nearest_center lays out its scores
    assert torch.equal(tie_equal_keys(scores.transpose(1, 2), keys, dim=1), tied.transpose(1, 2))
    # distinct keys: the scores themselves, untouched
    distinct = torch.rand(2, 9, 4, generator=g, dtype=F64)
    assert tie_equal_keys(scores, distinct, dim=2) is scores


def test_first_equal_key_for_many_keys_uses_exact_comparison():
    # above the pairwise limit the bit sums only pre-select; permuted coordinates have equal bit
    # sums but are different keys
    g = torch.Generator().manual_seed(4)
    keys = torch.rand(1, 400, 3, generator=g, dtype=F32)
    assert first_equal_key(keys) is None
    keys[0, 10] = keys[0, 3].flip(0)
    assert first_equal_key(keys) is None
    keys[0, 399] = keys[0, 3]
    first = first_equal_key(keys)
    assert first[0, 399] == 3 and int((first != torch.arange(400)).sum()) == 1


@DTYPES
@pytest.mark.parametrize("n", [7, 33, 64, 129])
def test_a_duplicated_center_never_takes_a_point_from_its_first_copy(dtype, n):
    # Random (non-dyadic) data: a matrix product may round the two copies' scores differently
    # depending on where they sit in the kernel's tile. The first copy must win everywhere.
    g = torch.Generator().manual_seed(n)
    X = torch.randn(3, n, 5, generator=g, dtype=dtype)
    for k in (2, 5, 17, 40):
        base = torch.randn(3, k, 5, generator=g, dtype=dtype)
        for i, j in [(0, k - 1), (k // 2, k - 1), (0, 1), (max(k - 2, 0), k - 1)]:
            if i >= j:
                continue
            C = base.clone()
            C[:, j] = C[:, i]
            labels = kmtlib.nearest_center(X, C)
            assert not (labels == j).any()
            if k <= n:
                assert not (kmtlib.lloyd(X, C, 0).labels == j).any()


@pytest.mark.parametrize("attention", ["euclidean", "dot"])
@pytest.mark.parametrize("n", [9, 31, 70])
def test_dense_hard_self_attention_splits_exactly_over_copies_at_any_position(attention, n):
    g = torch.Generator().manual_seed(n)
    X = torch.rand(2, n, 3, generator=g, dtype=F64)
    X[:, n - 1] = X[:, 0]  # copies at both ends, in the middle, and three of one point
    X[:, n // 2] = X[:, 1]
    X[:, n // 3] = X[:, 1]
    C0 = X[:, 2:5].clone()
    model = kmtlib.KMeansTransformer.from_theorem(3, 3, attention=attention).to(F64)
    P, _ = model.embedding.embed(X, C0)
    W = model.layer.blocks["SAX"].weights(P, P)
    same = (X.unsqueeze(2) == X.unsqueeze(1)).all(-1).to(F64)
    assert torch.equal(W, same / same.sum(-1, keepdim=True))


# ----------------------------------------------------------------------------- range
# (dtype, power of two): coordinates near 2^e; |x|^2 overflows float32 above about 2^64 and
# float64 above 2^512, and is subnormal below 2^-63 and 2^-511
SCALES = [
    (F32, 40),
    (F32, 60),
    (F32, 64),
    (F32, 70),
    (F32, 100),
    (F32, -70),
    (F32, -110),
    (F64, 531),
    (F64, 1000),
    (F64, -565),
    (F64, -1000),
]
SCALE_IDS = [f"{'f32' if dt == F32 else 'f64'}-2^{e}" for dt, e in SCALES]


def _unit_task(dtype: torch.dtype):
    X = kmtlib.sample_tasks(4, 150, 3, 4, generator=30, dtype=F64).to(dtype)
    X[:, 0, 0] = 0.75  # (the largest coordinate of every task in [0.5, 1): no rescaling at unit scale)
    C0 = kmtlib.init_centers(X, 4, generator=31)
    return X, C0


def _times(t: torch.Tensor, e: int) -> torch.Tensor:
    """t * 2^e with one rounding (two factors, the first exact)."""
    half = e // 2
    return t * 2.0**half * 2.0 ** (e - half)


@pytest.mark.parametrize(("dtype", "e"), SCALES, ids=SCALE_IDS)
def test_lloyd_and_the_helpers_at_any_scale(dtype, e):
    # Scaling by a power of two changes no assignment, no mean and no D^2 draw: at 2^e the results
    # are the unit-scale results times 2^e (2^2e for squares), rounded once; inf only where that
    # value exceeds the dtype's range.
    X, C0 = _unit_task(dtype)
    Xs, Cs = _times(X, e), _times(C0, e)
    assert torch.equal(Xs, times_power_of_two(X, torch.full((4,), e)))  # (the scaled data are exact)
    ref, res = kmtlib.lloyd(X, C0, 6), kmtlib.lloyd(Xs, Cs, 6)
    assert torch.equal(res.labels, ref.labels) and torch.equal(res.n_empty, ref.n_empty)
    assert torch.equal(res.centers, _times(ref.centers, e))
    assert torch.equal(res.objective, _times(ref.objective, 2 * e))
    assert torch.equal(kmtlib.nearest_center(Xs, Cs), kmtlib.nearest_center(X, C0))
    assert torch.equal(kmtlib.kmeans_objective(Xs, Cs), _times(kmtlib.kmeans_objective(X, C0), 2 * e))
    assert torch.equal(kmtlib.squared_distances(Xs, Cs), _times(kmtlib.squared_distances(X, C0), 2 * e))
    for method in kmtlib.INIT_METHODS:
        scaled = kmtlib.init_centers(Xs, 4, method, generator=5)
        assert torch.equal(scaled, _times(kmtlib.init_centers(X, 4, method, generator=5), e))
    assert not torch.isnan(res.objective).any()


def test_a_task_out_of_range_does_not_change_its_neighbours():
    X, C0 = _unit_task(F32)
    Xm, Cm = X.clone(), C0.clone()
    Xm[1], Cm[1] = X[1] * 2.0**70, C0[1] * 2.0**70
    ref, res = kmtlib.lloyd(X, C0, 5), kmtlib.lloyd(Xm, Cm, 5)
    keep = torch.tensor([0, 2, 3])
    assert torch.equal(res.centers[keep], ref.centers[keep]) and torch.equal(res.objective[keep], ref.objective[keep])
    assert torch.equal(res.labels, ref.labels)
    assert torch.equal(res.centers[1], ref.centers[1] * 2.0**70)


@pytest.mark.parametrize("attention", ["euclidean", "dot"])
@pytest.mark.parametrize("gamma", [math.inf, 1e3])
@pytest.mark.parametrize(
    ("dtype", "e", "what"),
    [(F32, 64, "large"), (F32, 70, "large"), (F32, -70, "small"), (F64, 531, "large"), (F64, -565, "small")],
)
def test_transformer_names_the_range_of_its_squares(attention, gamma, dtype, e, what):
    X, C0 = _unit_task(dtype)
    model = kmtlib.KMeansTransformer.from_theorem(3, 4, gamma=gamma, attention=attention).to(dtype)
    limit = r"overflow above \|x\| = [0-9.e+]+" if what == "large" else r"below \|x\| = [0-9.e-]+ .* subnormal"
    with pytest.raises(ValueError, match=rf"points too {what} for the k-means transformer.*{limit}.*rescale the data"):
        model(_times(X, e), _times(C0, e), steps=2)


@pytest.mark.parametrize("attention", ["euclidean", "dot"])
def test_limit_transformer_in_range_is_scale_equivariant(attention):
    # within the range (2^40 in float32 squares to 2^80), every operation of the limit model
    # scales exactly: the results are the unit-scale ones times 2^40
    X, C0 = _unit_task(F32)
    model = kmtlib.KMeansTransformer.from_theorem(3, 4, attention=attention).to(F32)
    ref, res = model(X, C0, steps=4), model(X * 2.0**40, C0 * 2.0**40, steps=4)
    assert torch.equal(res.centers, ref.centers * 2.0**40)
    assert torch.equal(res.labels, ref.labels) and torch.equal(res.assignments, ref.assignments)


@DTYPES
def test_softmax_at_finite_gamma_never_overflows(dtype):
    big = torch.finfo(dtype).max
    g = torch.Generator().manual_seed(6)
    scores = (torch.rand(2, 4, 9, generator=g, dtype=F64) * 2 - 1).to(dtype) * big
    scores[0, 0] = big
    scores[0, 1] = -big
    scores[1, 0, :4] = -math.inf  # masked keys
    for gamma in (1e-30, 1.0, 1e8, 1e300):
        w = softmax_attention(scores, gamma)
        assert torch.isfinite(w).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, dtype=dtype))
        assert (w[1, 0, :4] == 0).all()


@pytest.mark.parametrize("score", ["euclidean", "dot"])
def test_hard_attention_helpers_tie_equal_keys(score):
    from _helpers import identity_block

    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, 13, 4, generator=g, dtype=F64)
    k = torch.randn(2, 21, 4, generator=g, dtype=F64)
    k[:, 3] *= 10  # (the longest key: the best for a query along it, in both scores)
    k[:, 20] = k[:, 3]
    k[:, 11] = k[:, 3]
    q[:, 0] = k[:, 3]
    for map_, gamma in (("hardmax", 1.0), ("softmax", math.inf)):
        block = identity_block(score, map_, gamma, 4)  # (the values are the keys)
        W = block.weights(q, k)
        # every row that picks key 3 picks its copies with it, with equal weight
        assert torch.equal(W[..., 20], W[..., 3]) and torch.equal(W[..., 11], W[..., 3])
        assert (W[:, 0, 3] == 1 / 3).all()
        assert torch.equal(W.sum(-1) > 0, torch.ones(2, 13, dtype=torch.bool))
        torch.testing.assert_close(block(q, k), W @ k, rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    "dtype, scale",
    [
        (torch.float32, 2.0**60),
        (torch.float32, 2.0**70),
        (torch.float64, 1e150),
        (torch.float64, 1e160),
        (torch.float64, 2.0**1000),
    ],
)
def test_smoothed_objective_beyond_the_range_is_a_limit_not_nan(dtype, scale):
    """Squared distances that pass the dtype's range give the smoothed loss as a limit: the same
    value where the sum still fits (an upper bound of the k-means objective), inf where it does not;
    never NaN."""
    X = kmtlib.sample_tasks(3, 40, 3, 4, generator=0, dtype=dtype)
    C = kmtlib.init_centers(X, 4, generator=1)
    loss = kmtlib.smoothed_objective(X * scale, C * scale)
    exact = kmtlib.kmeans_objective(X * scale, C * scale)
    assert not torch.isnan(loss).any()
    assert torch.equal(torch.isinf(loss), torch.isinf(exact))
    fits = torch.isfinite(exact)
    assert (loss[fits] >= exact[fits] * (1 - 1e-6)).all()
    # an inverse temperature whose product with the distances overflows: the hard limit
    hard = kmtlib.smoothed_objective(X * scale, C * scale, inv_temperature=1e30 if dtype == torch.float32 else 1e300)
    torch.testing.assert_close(hard[fits], exact[fits], rtol=1e-5, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("inv_temperature", [1e39, 1e300])
def test_smoothed_objective_beyond_the_dtypes_temperature_is_the_kmeans_objective(dtype, inv_temperature):
    """An inverse temperature above the dtype's largest number (1e39 in float32) is the limit:
    the k-means objective, not 0."""
    X = kmtlib.sample_tasks(3, 50, 2, 3, generator=0, dtype=dtype)
    C = kmtlib.sample_tasks(3, 3, 2, 3, generator=1, dtype=dtype)
    loss = kmtlib.smoothed_objective(X, C, inv_temperature=inv_temperature)
    torch.testing.assert_close(loss, kmtlib.kmeans_objective(X, C))
    assert bool((loss > 0).all())
