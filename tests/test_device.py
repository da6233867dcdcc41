"""kmtlib.resolve_device and kmtlib.make_generator: the chapters' device and seed plumbing."""

from __future__ import annotations

import pytest
import torch
from _helpers import requires_cuda

from kmtlib import make_generator, resolve_device
from kmtlib.device import DEVICE_ENV

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    return monkeypatch


def test_env_variable_name():
    assert DEVICE_ENV == "KMT_DEVICE"


@pytest.mark.parametrize("request_", ["cpu", "CPU", " cpu ", torch.device("cpu")])
def test_cpu(clean_env, request_):
    assert resolve_device(request_) == torch.device("cpu")


def test_cpu_ignores_the_environment(clean_env):
    clean_env.setenv(DEVICE_ENV, "cuda")
    assert resolve_device("cpu") == torch.device("cpu")


def test_auto_without_env_picks_what_is_there(clean_env):
    expected = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    assert resolve_device("auto") == expected
    assert resolve_device() == expected


@pytest.mark.parametrize("value", ["cpu", "CPU", " cpu"])
def test_auto_honours_env(clean_env, value):
    clean_env.setenv(DEVICE_ENV, value)
    assert resolve_device("auto") == torch.device("cpu")


@pytest.mark.parametrize("value", ["", "auto", "  "])
def test_auto_env_empty_or_auto_falls_back(clean_env, value):
    clean_env.setenv(DEVICE_ENV, value)
    expected = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    assert resolve_device("auto") == expected


def test_auto_env_with_unknown_device_is_an_error(clean_env):
    clean_env.setenv(DEVICE_ENV, "tpu")
    with pytest.raises(ValueError, match=r"unknown device 'tpu'"):
        resolve_device("auto")


@no_cuda
@pytest.mark.parametrize("request_", ["cuda", "cuda:0", "CUDA"])
def test_explicit_cuda_without_cuda_is_an_error(clean_env, request_):
    with pytest.raises(RuntimeError, match=r"CUDA is not available"):
        resolve_device(request_)


@no_cuda
def test_auto_with_env_cuda_without_cuda_is_an_error(clean_env):
    # "auto" with KMT_DEVICE=cuda is an explicit CUDA request: no silent CPU fallback.
    clean_env.setenv(DEVICE_ENV, "cuda")
    with pytest.raises(RuntimeError, match=r"CUDA is not available"):
        resolve_device("auto")


@requires_cuda
@pytest.mark.cuda
def test_cuda_when_available(clean_env):
    assert resolve_device("cuda").type == "cuda"
    assert resolve_device("cuda:0") == torch.device("cuda:0")
    clean_env.setenv(DEVICE_ENV, "cuda")
    assert resolve_device("auto").type == "cuda"
    with pytest.raises(RuntimeError, match=r"CUDA device\(s\) present"):
        resolve_device(f"cuda:{torch.cuda.device_count()}")


@pytest.mark.parametrize("request_", ["gpu", "mps0", "cuda0", ""])
def test_unknown_string(clean_env, request_):
    with pytest.raises(ValueError, match=r"unknown device"):
        resolve_device(request_)


@pytest.mark.parametrize("request_", [0, None, 1.5])
def test_not_a_string(clean_env, request_):
    with pytest.raises(TypeError, match=r"device must be a string"):
        resolve_device(request_)


def test_make_generator():
    g = make_generator(3)
    assert isinstance(g, torch.Generator) and g.device == torch.device("cpu")
    a = torch.rand(5, generator=g)
    assert torch.equal(a, torch.rand(5, generator=make_generator(3, "cpu")))
    assert not torch.equal(a, torch.rand(5, generator=make_generator(4)))
