"""Bad input stops every public entry point with an error that names the problem."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _helpers import requires_cuda

import kmtlib
from kmtlib import init_centers, kmeans_objective, lloyd, sample_tasks

F64 = torch.float64


def _X(B=2, n=6, d=2, dtype=F64):
    return torch.rand(B, n, d, generator=torch.Generator().manual_seed(0), dtype=dtype)


def _C(B=2, k=3, d=2, dtype=F64):
    return torch.rand(B, k, d, generator=torch.Generator().manual_seed(1), dtype=dtype)


# Entry points taking (X, C) the same way: the checks must be the same for all of them.
WITH_CENTERS = {
    "lloyd": lambda X, C: lloyd(X, C, 2),
    "kmeans_objective": kmeans_objective,
}
centers_api = pytest.mark.parametrize("call", list(WITH_CENTERS.values()), ids=list(WITH_CENTERS))


# ---------------------------------------------------------------------------- number of clusters


def test_init_k_larger_than_n():
    with pytest.raises(ValueError, match=r"k=7 clusters exceed the n=6 points"):
        init_centers(_X(), 7)


@pytest.mark.parametrize("k", [0, -1])
def test_init_k_below_one(k):
    with pytest.raises(ValueError, match=r"k must be >= 1"):
        init_centers(_X(), k)


@pytest.mark.parametrize("k", [2.0, True, "3"])
def test_init_k_not_an_integer(k):
    with pytest.raises(TypeError, match=r"k must be an integer"):
        init_centers(_X(), k)


@centers_api
def test_more_centers_than_points(call):
    with pytest.raises(ValueError, match=r"number of centres in .*=7 clusters exceed the n=6 points"):
        call(_X(), _C(k=7))


@centers_api
def test_zero_centers(call):
    with pytest.raises(ValueError, match=r"number of centres in .* must be >= 1"):
        call(_X(), _C(k=0))


def test_sample_k_below_one():
    with pytest.raises(ValueError, match=r"k must be >= 1"):
        sample_tasks(2, 5, 2, 0)


# ---------------------------------------------------------------------------- shapes


@centers_api
def test_mismatched_dimension(call):
    with pytest.raises(ValueError, match=r"dimension d=3 but X has d=2"):
        call(_X(d=2), _C(d=3))


@centers_api
def test_mismatched_batch(call):
    with pytest.raises(ValueError, match=r"has 3 tasks but X has 2"):
        call(_X(B=2), _C(B=3))


@pytest.mark.parametrize(
    "call",
    [lambda X: lloyd(X, _C()[0], 1), lambda X: kmeans_objective(X, _C()[0]), lambda X: init_centers(X, 2)],
    ids=["lloyd", "kmeans_objective", "init_centers"],
)
def test_2d_points_suggest_unsqueeze(call):
    with pytest.raises(ValueError, match=r"shape \(B, n, d\).*unsqueeze\(0\)"):
        call(_X()[0])


def test_2d_centers():
    with pytest.raises(ValueError, match=r"C0 must have shape \(B, k, d\)"):
        lloyd(_X(), _C()[0], 1)


def test_empty_batch_of_points():
    with pytest.raises(ValueError, match=r"B >= 1 tasks"):
        init_centers(torch.zeros(0, 5, 2, dtype=F64), 2)


def test_not_a_tensor():
    with pytest.raises(TypeError, match=r"X must be a torch.Tensor"):
        lloyd(np.zeros((1, 4, 2)), _C(B=1), 1)
    with pytest.raises(TypeError, match=r"C0 must be a torch.Tensor"):
        lloyd(_X(), np.zeros((2, 3, 2)), 1)


# ---------------------------------------------------------------------------- values and dtypes


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(
    "call",
    [lambda X: lloyd(X, _C(), 1), lambda X: kmeans_objective(X, _C()), lambda X: init_centers(X, 2)],
    ids=["lloyd", "kmeans_objective", "init_centers"],
)
def test_nonfinite_points(call, bad):
    X = _X()
    X[1, 3, 0] = bad
    with pytest.raises(ValueError, match=r"X contains NaN or inf"):
        call(X)


def test_finite_points_whose_sum_overflows_are_accepted():
    # the finiteness check sums first; an overflowing sum of finite values must not be mistaken
    # for a non-finite value, and a non-finite value among huge ones must still be found
    from kmtlib._checks import all_finite, check_points

    X = torch.full((2, 50, 3), 3.0e38, dtype=torch.float32)
    assert not torch.isfinite(X.sum()) and all_finite(X)
    check_points(X)
    for bad in (math.nan, math.inf, -math.inf):
        Y = X.clone()
        Y[1, 7, 2] = bad
        assert not all_finite(Y)
        with pytest.raises(ValueError, match=r"X contains NaN or inf"):
            check_points(Y)
    Z = torch.tensor([[[1.0, -math.inf], [math.inf, 2.0]]])  # inf - inf: the sum is NaN
    assert not all_finite(Z)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nonfinite_centers(bad):
    C = _C()
    C[0, 2, 1] = bad
    with pytest.raises(ValueError, match=r"C0 contains NaN or inf"):
        lloyd(_X(), C, 1)
    with pytest.raises(ValueError, match=r"C contains NaN or inf"):
        kmeans_objective(_X(), C)


@centers_api
def test_mixed_dtypes(call):
    with pytest.raises(TypeError, match=r"dtype torch.float64 but X has torch.float32"):
        call(_X(dtype=torch.float32), _C(dtype=F64))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float16, torch.bool])
def test_non_float_points(dtype):
    X = torch.ones(2, 6, 2, dtype=dtype)
    with pytest.raises(TypeError, match=r"X must be float32 or float64"):
        init_centers(X, 2)
    with pytest.raises(TypeError, match=r"X must be float32 or float64"):
        lloyd(X, _C(), 1)


def test_integer_centers():
    with pytest.raises(TypeError, match=r"dtype torch.int64 but X has torch.float64"):
        lloyd(_X(), torch.zeros(2, 3, 2, dtype=torch.int64), 1)


def test_sample_dtype():
    with pytest.raises(TypeError, match=r"dtype must be torch.float32 or torch.float64"):
        sample_tasks(2, 5, 2, 2, dtype=torch.float16)


# ---------------------------------------------------------------------------- steps


@pytest.mark.parametrize("steps", [-1, -10])
def test_negative_steps(steps):
    with pytest.raises(ValueError, match=r"steps must be >= 0"):
        lloyd(_X(), _C(), steps)


@pytest.mark.parametrize("steps", [2.5, 2.0, True, "3", None])
def test_non_integer_steps(steps):
    with pytest.raises(TypeError, match=r"steps must be an integer"):
        lloyd(_X(), _C(), steps)


def test_numpy_integer_steps_accepted():
    assert lloyd(_X(), _C(), np.int64(3)).steps == 3


# ---------------------------------------------------------------------------- choices


def test_unknown_family():
    with pytest.raises(ValueError, match=r"unknown family 'uniform'; expected one of 'normal'"):
        sample_tasks(2, 5, 2, 2, family="uniform")


def test_unknown_init_method():
    with pytest.raises(ValueError, match=r"unknown init method 'kmeans\+\+\+'.*'random', 'kmeans\+\+'"):
        init_centers(_X(), 2, method="kmeans+++")


@pytest.mark.parametrize("rule", ["drop", "", None])
def test_unknown_empty_rule(rule):
    with pytest.raises(ValueError, match=r"unknown empty-cluster rule .*'mean', 'keep', 'random'"):
        lloyd(_X(), _C(), 1, empty=rule)


# ---------------------------------------------------------------------------- sample_tasks sizes


@pytest.mark.parametrize("scale", [-0.1, 0.0, math.nan, math.inf])
def test_bad_scale(scale):
    with pytest.raises(ValueError, match=r"scale must be a positive finite number"):
        sample_tasks(2, 5, 2, 2, scale=scale)


def test_scale_not_a_number():
    with pytest.raises(TypeError, match=r"scale must be a real number"):
        sample_tasks(2, 5, 2, 2, scale="0.1")


@pytest.mark.parametrize("name, args", [("batch", (0, 5, 2, 2)), ("n", (2, 0, 2, 2)), ("d", (2, 5, 0, 2))])
def test_zero_sizes(name, args):
    with pytest.raises(ValueError, match=rf"{name} must be >= 1, got 0"):
        sample_tasks(*args)


def test_non_integer_batch():
    with pytest.raises(TypeError, match=r"batch must be an integer"):
        sample_tasks(2.0, 5, 2, 2)


# ---------------------------------------------------------------------------- generators


def test_negative_seed():
    with pytest.raises(ValueError, match=r"generator \(seed\) must be >= 0"):
        sample_tasks(2, 5, 2, 2, generator=-1)


@pytest.mark.parametrize("seed", [2**64, 2**70])
def test_seed_beyond_64_bits_names_generator_and_range(seed):
    with pytest.raises(ValueError, match=r"generator \(seed\) must be <= 18446744073709551615"):
        sample_tasks(2, 5, 2, 2, generator=seed)
    with pytest.raises(ValueError, match=r"generator \(seed\) must be <= 18446744073709551615"):
        init_centers(_X(), 2, generator=seed)
    with pytest.raises(ValueError, match=r"seed \(seed\) must be <= 18446744073709551615"):
        kmtlib.make_generator(seed)


def test_largest_seed_is_accepted():
    assert sample_tasks(1, 5, 2, 2, generator=2**64 - 1).shape == (1, 5, 2)
    assert isinstance(kmtlib.make_generator(2**64 - 1), torch.Generator)


def test_generator_of_wrong_type():
    with pytest.raises(TypeError, match=r"generator \(seed\) must be an integer"):
        init_centers(_X(), 2, generator=1.5)


@requires_cuda
@pytest.mark.cuda
def test_tensors_on_different_devices():
    with pytest.raises(ValueError, match=r"C0 is on cuda.* but X is on cpu; move both to one device"):
        lloyd(_X(), _C().cuda(), 1)
    with pytest.raises(ValueError, match=r"C is on cpu but X is on cuda.*move both to one device"):
        kmeans_objective(_X().cuda(), _C())


@requires_cuda
@pytest.mark.cuda
def test_generator_on_wrong_device():
    g_cpu = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match=r"generator lives on cpu but the tensors are on cuda"):
        init_centers(_X().cuda(), 2, generator=g_cpu)
    with pytest.raises(ValueError, match=r"generator lives on cpu but the tensors are on cuda"):
        sample_tasks(2, 5, 2, 2, generator=g_cpu, device="cuda")
    g_cuda = torch.Generator(device="cuda").manual_seed(0)
    with pytest.raises(ValueError, match=r"generator lives on cuda.* but the tensors are on cpu"):
        lloyd(_X(), _C(), 1, empty="random", generator=g_cuda)


# ---------------------------------------------------------------------------- distance helpers
# nearest_center and squared_distances check (X, C) like the rest of the API; more centres than
# points is a valid question for them.
PAIR_HELPERS = {"nearest_center": kmtlib.nearest_center, "squared_distances": kmtlib.squared_distances}
pair_helpers = pytest.mark.parametrize("call", list(PAIR_HELPERS.values()), ids=list(PAIR_HELPERS))


@pair_helpers
def test_helpers_name_a_missing_batch_dimension(call):
    message = r"X must have shape \(B, n, d\), got shape \(6, 2\) \(for one task use X.unsqueeze\(0\)\)"
    with pytest.raises(ValueError, match=message):
        call(_X()[0], _C())
    with pytest.raises(ValueError, match=r"C must have shape \(B, k, d\), got shape \(3, 2\)"):
        call(_X(), _C()[0])


@pair_helpers
@pytest.mark.parametrize("where", ["X", "C"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_helpers_refuse_non_finite_values(call, where, bad):
    X, C = _X(), _C()
    (X if where == "X" else C)[1, 2 if where == "X" else 0, 1] = bad
    with pytest.raises(ValueError, match=rf"^{where} contains NaN or inf values"):
        call(X, C)


@pair_helpers
def test_helpers_check_shapes_dtypes_and_types(call):
    with pytest.raises(ValueError, match=r"C has dimension d=3 but X has d=2"):
        call(_X(), _C(d=3))
    with pytest.raises(ValueError, match=r"C has 3 tasks but X has 2"):
        call(_X(), _C(B=3))
    with pytest.raises(ValueError, match=r"number of centres in C must be >= 1"):
        call(_X(), _C(k=0))
    with pytest.raises(TypeError, match=r"C has dtype torch.float32 but X has torch.float64"):
        call(_X(), _C(dtype=torch.float32))
    with pytest.raises(TypeError, match=r"X must be float32 or float64, got torch.int64"):
        call(_X().long(), _C())
    with pytest.raises(TypeError, match=r"C must be a torch.Tensor of shape \(B, k, d\), got list"):
        call(_X(), [[0.0, 0.0]])
    with pytest.raises(TypeError, match=r"X must be a torch.Tensor of shape \(B, n, d\), got ndarray"):
        call(np.zeros((2, 6, 2)), _C())


def test_helpers_allow_more_centers_than_points():
    X, C = _X(n=2), _C(k=5)
    assert kmtlib.nearest_center(X, C).shape == (2, 2)
    assert kmtlib.squared_distances(X, C).shape == (2, 2, 5)
