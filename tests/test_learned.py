"""The trainable layer (kmtlib.learned), the smoothed loss (kmtlib.losses) and the multi-step
evaluation (kmtlib.analysis.evaluate).

* the fast Euclidean-attention kernel against the straightforward cdist + soft-max form, values
  and gradients in float64 to 1e-10, with and without a dropout mask;
* the sparse dropout sampler against the Bernoulli law it claims;
* the model: structure, deterministic initialisation, eval-mode determinism, re-embedding,
  save/load round trip, argument errors;
* the loss: an upper bound that tends to the objective as the inverse temperature grows.
"""

from __future__ import annotations

import math

import pytest
import torch

from kmtlib import init_centers, kmeans_objective, lloyd, sample_tasks
from kmtlib.analysis.evaluate import evaluate_multistep, evaluate_seeds
from kmtlib.io.model_file import load_model
from kmtlib.kernels.euclidean_softmax import euclidean_attention, explicit_euclidean_attention, sample_dropped
from kmtlib.layer import BLOCK_NAMES, KMeansLayer
from kmtlib.learned import trainable_config
from kmtlib.losses import smoothed_objective
from kmtlib.transformer import KMeansTransformer

F64 = torch.float64


def _tasks(B=4, n=24, d=3, k=4, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    X = sample_tasks(B, n, d, k, generator=g, dtype=dtype)
    return X, init_centers(X, k, generator=g)


def _model(d=3, k=4, embedding="onehot", seed=0, **kw):
    return KMeansTransformer.trainable(d, k, embedding=embedding, generator=seed, dtype=F64, **kw)


# ------------------------------------------------------------------------------------ the loss
def test_smoothed_objective_is_an_upper_bound_and_tends_to_the_objective():
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        B, n, d, k = 3, int(torch.randint(1, 40, (1,), generator=g)), 4, 5
        X = torch.randn(B, n, d, generator=g, dtype=F64)
        C = torch.randn(B, k, d, generator=g, dtype=F64)
        obj = kmeans_objective(X, C)
        previous = None
        for t in (0.01, 1.0, 10.0, 100.0, 1e4):
            s = smoothed_objective(X, C, inv_temperature=t)
            assert s.shape == (B,)
            assert bool((s >= obj - 1e-12 * (1 + obj)).all())
            if previous is not None:  # d/dt E_softmax[D] = -Var <= 0
                assert bool((s <= previous + 1e-12 * (1 + previous)).all())
            previous = s
        torch.testing.assert_close(smoothed_objective(X, C, inv_temperature=1e7), obj, rtol=1e-9, atol=1e-9)


def test_smoothed_objective_default_temperature_and_gradient():
    X, C = _tasks()
    C = C.clone().requires_grad_(True)
    s = smoothed_objective(X, C)  # inverse temperature 10
    D = ((X.unsqueeze(2) - C.unsqueeze(1)) ** 2).sum(-1)
    torch.testing.assert_close(s, (torch.softmax(-10.0 * D, -1) * D).sum((1, 2)), rtol=1e-12, atol=1e-12)
    s.sum().backward()
    assert C.grad is not None and bool(torch.isfinite(C.grad).all())


def test_smoothed_objective_bad_inputs():
    X, C = _tasks()
    with pytest.raises(ValueError, match="inv_temperature"):
        smoothed_objective(X, C, inv_temperature=0.0)
    with pytest.raises(ValueError, match=r"\(B, n, d\)"):
        smoothed_objective(X[0], C)
    with pytest.raises(ValueError, match="dimension"):
        smoothed_objective(X, C[..., :2])
    with pytest.raises(TypeError, match="dtype"):
        smoothed_objective(X, C.float())


# -------------------------------------------------------------------------------- the kernel
@pytest.mark.parametrize("shape", [(3, 7, 5, 4), (2, 16, 16, 6), (2, 5, 9, 3), (1, 1, 1, 2)])
@pytest.mark.parametrize("p", [0.0, 0.2])
def test_fast_attention_equals_explicit_form(shape, p):
    B, nq, nk, D = shape
    g = torch.Generator().manual_seed(sum(shape))
    q = (3 * torch.randn(B, nq, D, generator=g, dtype=F64)).requires_grad_(True)
    k = (3 * torch.randn(B, nk, D, generator=g, dtype=F64) + 5).requires_grad_(True)
    v = torch.randn(B, nk, D + 1, generator=g, dtype=F64).requires_grad_(True)
    scale = 0.37
    dropped = sample_dropped(B * nq * nk, p, torch.Generator().manual_seed(7))
    keep = torch.ones(B * nq * nk, dtype=F64)
    keep[dropped] = 0.0
    keep = keep.view(B, nq, nk)
    fast = euclidean_attention(q, k, v, scale, p, dropped=dropped)
    slow = explicit_euclidean_attention(q, k, v, scale, keep if p > 0 else None, p)
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-10)
    grad = torch.randn(fast.shape, generator=g, dtype=F64)
    g_fast = torch.autograd.grad(fast, (q, k, v), grad)
    g_slow = torch.autograd.grad(slow, (q, k, v), grad)
    for a, b in zip(g_fast, g_slow):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_fast_attention_gradcheck():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, 3, generator=g, dtype=F64, requires_grad=True) for _ in range(3))
    dropped = torch.tensor([1, 6, 17, 30])
    assert torch.autograd.gradcheck(lambda q, k, v: euclidean_attention(q, k, v, 0.8, 0.1, dropped=dropped), (q, k, v))


def test_sample_dropped_is_bernoulli():
    numel, p = 200_000, 0.01
    idx = sample_dropped(numel, p, torch.Generator().manual_seed(0))
    assert idx.dtype == torch.long and bool((idx[1:] > idx[:-1]).all())
    assert int(idx.min()) >= 0 and int(idx.max()) < numel
    sd = math.sqrt(numel * p * (1 - p))
    assert abs(idx.numel() - numel * p) < 5 * sd
    # uniform over positions: counts in 10 equal bins
    counts = torch.bincount(idx * 10 // numel, minlength=10).double()
    chi2 = float(((counts - counts.mean()) ** 2 / counts.mean()).sum())
    assert chi2 < 40  # chi-square with 9 degrees of freedom, p ~ 1e-5
    again = sample_dropped(numel, p, torch.Generator().manual_seed(0))
    assert torch.equal(idx, again)
    assert sample_dropped(10, 0.0).numel() == 0
    assert torch.equal(sample_dropped(5, 1.0), torch.arange(5))
    # tiny matrices: the loop that draws more gaps must also terminate correctly
    assert sample_dropped(3, 0.5, torch.Generator().manual_seed(1)).numel() <= 3


# -------------------------------------------------------------------------------- the model
@pytest.mark.parametrize("embedding,width", [("onehot", 42), ("none", 32), ("data", 32)])
def test_model_structure_and_parameter_count(embedding, width):
    m = KMeansTransformer.trainable(32, 10, embedding=embedding)
    assert isinstance(m.layer, KMeansLayer) and m.reembed and m.width == width and m.fast
    assert sum(p.numel() for p in m.parameters()) == 12 * (width * width + width)
    assert all(p.requires_grad for p in m.parameters())
    assert list(m.layer.blocks) == list(BLOCK_NAMES) == ["CAX", "SAX", "CAC", "SAC"]
    assert m.config == trainable_config(32, 10, embedding, 1.0, 0.01)
    assert m.config.embedding == ("data" if embedding == "none" else embedding)
    assert m.config.trainable and m.config.reembed and m.config.bias
    for block in m.layer.blocks.values():
        assert (block.config.score, block.config.map, block.config.gamma, block.config.dropout) == (
            "euclidean",
            "softmax",
            1.0,
            0.01,
        )
        assert all(linear.bias is not None for linear in (block.query, block.key, block.value))
    assert m.layer.SAX.config.scale == pytest.approx(1.0 / math.sqrt(width))
    assert m.layer.SAX.config.inverse_temperature == pytest.approx(1.0 / math.sqrt(width))


def test_deterministic_initialisation():
    torch.manual_seed(5)
    a = KMeansTransformer.trainable(3, 4)
    torch.manual_seed(5)
    b = KMeansTransformer.trainable(3, 4)
    c = KMeansTransformer.trainable(3, 4, generator=5)
    d = KMeansTransformer.trainable(3, 4, generator=torch.Generator().manual_seed(5))
    for (name, pa), pb, pc, pd in zip(a.named_parameters(), b.parameters(), c.parameters(), d.parameters()):
        assert torch.equal(pa, pb), name
        assert torch.equal(pc, pd), name
        bound = 1 / math.sqrt(a.width)
        assert float(pc.detach().abs().max()) <= bound  # PyTorch's default nn.Linear range


def test_fast_model_equals_explicit_model_in_eval_mode():
    X, C0 = _tasks(B=3, n=30, d=3, k=4)
    fast = _model(seed=2).eval()
    slow = _model(seed=2, fast=False).eval()
    assert fast.fast and not slow.fast
    with torch.no_grad():  # make the weights large, as training does, to stress the expansion
        for p in fast.parameters():
            p.mul_(4)
    slow.load_state_dict(fast.state_dict())
    a, b = fast(X, C0, steps=3), slow(X, C0, steps=3)
    torch.testing.assert_close(a.centers, b.centers, rtol=0, atol=1e-10)
    # gradients in train mode, without dropout (the two draw their masks differently)
    state = fast.state_dict()
    fast, slow = _model(seed=2, dropout=0.0).train(), _model(seed=2, dropout=0.0, fast=False).train()
    fast.load_state_dict(state)
    slow.load_state_dict(state)
    la = smoothed_objective(X, fast.step(X, C0)).sum()
    lb = smoothed_objective(X, slow.step(X, C0)).sum()
    ga = torch.autograd.grad(la, list(fast.parameters()))
    gb = torch.autograd.grad(lb, list(slow.parameters()))
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-9)


def test_reembedding_forward_equals_repeated_steps():
    X, C0 = _tasks()
    for embedding in ("onehot", "data"):
        m = _model(embedding=embedding).eval()
        with torch.no_grad():
            res = m(X, C0, steps=3)
            C = C0
            for t in range(3):
                C = m.step(X, C)
                torch.testing.assert_close(res.centers[:, t + 1], C, rtol=0, atol=0)
        assert res.centers.shape == (4, 4, 4, 3) and res.objective.shape == (4, 4)
        torch.testing.assert_close(res.objective[:, -1], kmeans_objective(X, C))


def test_dropout_only_in_train_mode_and_seeded():
    X, C0 = _tasks(n=40)
    m = _model()
    m.eval()
    with torch.no_grad():
        e1, e2 = m.step(X, C0), m.step(X, C0)
    assert torch.equal(e1, e2)
    m.train()
    m.layer.generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        t1 = m.step(X, C0)
    m.layer.generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        t2 = m.step(X, C0)
        t3 = m.step(X, C0)
    assert torch.equal(t1, t2)
    assert not torch.equal(t1, t3) and not torch.equal(t1, e1)
    assert float((t1 - e1).abs().median()) < 0.05  # p = 0.01 moves most outputs a little
    with pytest.raises(TypeError, match=r"generator must be a torch\.Generator"):
        m.layer.generator = 3


def test_save_load_round_trip(tmp_path):
    X, C0 = _tasks()
    m = _model(embedding="data", seed=4, gamma=2.5, dropout=0.05).eval()
    path = m.save(tmp_path / "m.pt")
    m2 = load_model(path).eval()
    assert m2.config == m.config and m2.layer.SAX.config.gamma == 2.5 and m2.layer.SAX.config.dropout == 0.05
    with torch.no_grad():
        a, b = m(X, C0, steps=4), m2(X, C0, steps=4)
    assert torch.equal(a.centers, b.centers)
    for (n1, p1), (n2, p2) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown embedding 'binary'"):
        KMeansTransformer.trainable(3, 4, embedding="binary")
    with pytest.raises(ValueError, match="gamma must be a positive"):
        KMeansTransformer.trainable(3, 4, gamma=0.0)
    with pytest.raises(ValueError, match="gamma must be a positive"):
        KMeansTransformer.trainable(3, 4, gamma=-1.0)
    with pytest.raises(ValueError, match="dropout"):
        KMeansTransformer.trainable(3, 4, dropout=1.0)
    with pytest.raises(ValueError, match="d must be >= 1"):
        KMeansTransformer.trainable(0, 4)
    with pytest.raises(TypeError, match="k must be an integer"):
        KMeansTransformer.trainable(3, 4.0)
    with pytest.raises(TypeError, match="fast must be True or False"):
        KMeansTransformer.trainable(3, 4, fast="flash")
    with pytest.raises(TypeError, match="impl"):  # (the old kernel option: now model.fast)
        KMeansTransformer.trainable(3, 4, impl="explicit")
    m = _model(d=3, k=4)
    X, C0 = _tasks(d=5, k=4)
    with pytest.raises(ValueError, match="built for d=3"):
        m(X, C0)
    X, C0 = _tasks(d=3, k=2)
    with pytest.raises(ValueError, match="built for k=4"):
        m(X, C0)


# ---------------------------------------------------------------------------- evaluation
def test_evaluate_multistep_and_seeds():
    X, C0 = _tasks(B=5, n=30, d=3, k=4, dtype=torch.float32)
    models = [KMeansTransformer.trainable(3, 4, generator=s) for s in range(3)]
    for m in models:
        m.train()
    ev = evaluate_multistep(models[0], X, C0, steps=5, generator=0, batch_size=2)
    assert models[0].training  # mode restored
    assert ev.model_objective.shape == (5, 6) and ev.steps == 5
    ref = lloyd(X, C0, 5, empty="random", generator=0)
    torch.testing.assert_close(ev.lloyd_objective, ref.objective)
    torch.testing.assert_close(ev.lloyd_log_objective, ref.objective.log().mean(0))
    with torch.no_grad():
        direct = models[0].eval()(X, C0, steps=5).objective
    torch.testing.assert_close(ev.model_objective, direct)
    torch.testing.assert_close(ev.model_log_objective[0], ev.lloyd_log_objective[0])  # same C0

    summary = evaluate_seeds(models, X, C0, steps=5, lloyd_empty="mean")
    curves = summary.model_curves
    assert curves.shape == (3, 6)
    torch.testing.assert_close(summary.model_median, curves.sort(0).values[1])
    torch.testing.assert_close(summary.model_min, curves.min(0).values)
    torch.testing.assert_close(summary.model_max, curves.max(0).values)
    torch.testing.assert_close(summary.lloyd_min, summary.lloyd_max)  # same tasks, deterministic rule
    per_model = evaluate_seeds(models[:2], [X, X[:3]], [C0, C0[:3]], steps=2)
    assert per_model.model_curves.shape == (2, 3)
    assert set(summary.as_dict()) >= {"model_median", "lloyd_median", "model_curves"}
    # the authors' protocol: attention dropout left on at evaluation, its draws seeded
    models[0].train()
    on = evaluate_multistep(models[0], X, C0, steps=5, generator=0, dropout_seed=3)
    again = evaluate_multistep(models[0], X, C0, steps=5, generator=0, dropout_seed=3)
    torch.testing.assert_close(on.model_objective, again.model_objective, rtol=0, atol=0)
    assert not torch.equal(on.model_objective, ev.model_objective) and models[0].layer.generator is None
    assert not torch.equal(evaluate_multistep(models[0], X, C0, steps=5, dropout_seed=4).model_objective,
                           on.model_objective)  # fmt: skip
    assert models[0].training and models[0].layer.training  # the modes are restored
    torch.testing.assert_close(on.model_objective[:, 0], ev.model_objective[:, 0])  # the start is the same
    seeded = evaluate_seeds(models[:2], X, C0, steps=5, dropout_seed=3)
    torch.testing.assert_close(seeded.model_curves[0], on.model_log_objective, rtol=0, atol=0)
    with pytest.raises(ValueError, match="models"):
        evaluate_seeds(models, [X], [C0])
    with pytest.raises(ValueError, match="steps must be >= 0"):
        evaluate_multistep(models[0], X, C0, steps=-1)
