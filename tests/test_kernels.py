"""The speed kernels of kmtlib.kernels, each pinned to the plain formula it replaces.

* :func:`kmtlib._numerics.lowest_true_` against :func:`~kmtlib._numerics.lowest_true_plain`;
* the whole pass asked for by name (``kmtlib.whole_pass(model)``, :mod:`kmtlib.kernels.limit_model`)
  against the model's own loop, ``model(X, C0)``, which runs :meth:`kmtlib.layer.KMeansLayer.forward`
  with the blocks' kernels (and with ``model.fast = False`` the formula), for every option set of
  ``from_theorem`` and the soft variant, and its hard-assignment pass against the blocks it replaces;
* the Euclidean soft-max kernel against its explicit form through the layer's blocks (values
  and gradients; the kernel alone is tested in test_learned.py);
* the points' self-attention in the data's coordinates against the attention of the projected
  tokens (values and gradients, with dropout), and where the block takes it;
* hard self-attention in closed form against the dense n x n attention, block by block.

Float64 throughout; where an exact (bitwise) equality is claimed it rests on operations that do
not round (selections, multiplications by +-1 and exact averages of equal values), never on a
BLAS kernel's order of summation.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import kmtlib
from kmtlib import KMeansTransformer
from kmtlib._numerics import lowest_true_, lowest_true_plain
from kmtlib.fast import whole_pass as whole_pass_module
from kmtlib.fast.choice import attend, attention_kernel, closed_form_self_attention, writes_hard_assignment
from kmtlib.kernels import limit_model
from kmtlib.kernels.euclidean_softmax import euclidean_attention, explicit_euclidean_attention, sample_dropped
from kmtlib.kernels.point_attention import point_self_attention
from kmtlib.objective import squared_distances
from kmtlib.reference.soft import soft_kmeans

F64 = torch.float64
MARGIN = 1e-8


def _margin(X: torch.Tensor, centers: torch.Tensor) -> torch.Tensor:
    """Smallest assignment margin per task over the steps of a trajectory (B, T+1, k, d)."""
    B, T1, k, d = centers.shape
    if k == 1:
        return torch.full((B,), math.inf, dtype=X.dtype)
    D = squared_distances(X.repeat_interleave(T1, 0), centers.reshape(B * T1, k, d))
    two = D.topk(2, dim=-1, largest=False).values
    return (two[..., 1] - two[..., 0]).view(B, -1).amin(dim=1)


def _tie_free_tasks(B: int, n: int, d: int, k: int, steps: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    X = kmtlib.sample_tasks(B, n, d, k, generator=seed, dtype=F64)
    C0 = kmtlib.init_centers(X, k, generator=seed + 1)
    keep = _margin(X, kmtlib.lloyd(X, C0, steps, empty="mean").centers) >= MARGIN
    assert int(keep.sum()) >= B // 2
    return X[keep], C0[keep]


# ------------------------------------------------------------------------------------ labels
@pytest.mark.parametrize("r", [1, 2, 7, 255, 256, 300, 1000])
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_lowest_true_is_its_plain_formula(r, dim):
    g = torch.Generator().manual_seed(r)
    shape = [3, 5, 4]
    shape[dim] = r
    for density in (0.0, 1.0 / r, 3.0 / r, 0.5, 1.0):
        mask = torch.rand(shape, generator=g) < density
        plain = lowest_true_plain(mask, dim)
        fast = lowest_true_(mask.clone(), dim)
        assert fast.dtype == torch.int64 and fast.shape == plain.shape
        assert torch.equal(fast, plain), (r, dim, density)
        assert bool((plain <= r).all())
    # the planted rows: nowhere (r), only the last index (r - 1), only the first (0)
    mask = torch.zeros(shape, dtype=torch.bool)
    moved = mask.movedim(dim, -1)
    moved[0, 1, -1] = True
    moved[1, 2, 0] = True
    expected = torch.full(moved.shape[:-1], r, dtype=torch.long)
    expected[0, 1], expected[1, 2] = r - 1, 0
    assert torch.equal(lowest_true_plain(mask, dim), expected)
    assert torch.equal(lowest_true_(mask.clone(), dim), expected)


def test_lowest_true_on_strided_masks_and_of_the_limit_labels():
    # a transposed (non-contiguous) mask, as the limit model's coordinate-major assignments give
    g = torch.Generator().manual_seed(0)
    w = torch.rand(2, 7, 300, generator=g, dtype=F64).transpose(1, 2)  # (2, 300, 7), memory (2, 7, 300)
    w = torch.where(w > 0.7, w, torch.zeros_like(w))
    mask = w > 0
    assert torch.equal(lowest_true_(mask.clone(), 2), lowest_true_plain(mask, 2))
    assert torch.equal(lowest_true_(mask.transpose(1, 2).clone(), 1), lowest_true_plain(mask, 2))
    # _lowest_positive: the first positive entry; k - 1 where there is none
    plain = lowest_true_plain(mask, 2).clamp_max(6)
    assert torch.equal(limit_model.lowest_positive(w), plain)


# ------------------------------------------------------------------------------------ the limit model
THEOREM_OPTIONS = [
    dict(attention=attention, center_update=update, self_attention=reset, gamma=gamma)
    for attention, update, reset, gamma in itertools.product(
        ("euclidean", "dot"), ("linear", "attention"), ("attention", "identity"), (math.inf, 30.0)
    )
] + [
    dict(gamma=30.0, reset_gamma=1e6, center_update="attention"),
    dict(gamma=30.0, reset_gamma=1e6, attention="dot", center_update="attention"),
    dict(gamma=math.inf, reset_gamma=1e12),
]
THEOREM_IDS = ["-".join(f"{v}" for v in o.values()) for o in THEOREM_OPTIONS]


def uses_limit_kernel(model: KMeansTransformer, X: torch.Tensor, C0: torch.Tensor) -> bool:
    return kmtlib.whole_pass(model).applies(X, C0)


def _fast_and_plain(model: KMeansTransformer, X: torch.Tensor, C0: torch.Tensor, steps: int, monkeypatch):
    """``model(X, C0, steps)`` by the whole-pass kernel (which must be the one that runs, and only
    when asked for by name) and by the model's loop: the layer step, with the blocks' kernels and
    with the formula (those two the same numbers)."""
    calls = []
    kernel = whole_pass_module.WholePass.run

    def counted(*args, **kwargs):
        calls.append(1)
        return kernel(*args, **kwargs)

    monkeypatch.setattr(whole_pass_module.WholePass, "run", counted)
    with torch.no_grad():
        assert model.fast and uses_limit_kernel(model, X, C0)
        fast = kmtlib.whole_pass(model)(X, C0, steps=steps)
        assert calls == [1], "the whole pass did not run the limit-model kernel"
        plain = model(X, C0, steps=steps)
        assert calls == [1], "model(X, C0) ran the whole-pass kernel"
        model.fast = False
        formula = model(X, C0, steps=steps)
        model.fast = True
    assert type(fast) is type(plain)  # (one result type, whichever pass)
    torch.testing.assert_close(plain.centers, formula.centers, rtol=1e-12, atol=1e-12)
    assert torch.equal(plain.labels, formula.labels)
    return fast, plain


@pytest.mark.parametrize("options", THEOREM_OPTIONS, ids=THEOREM_IDS)
def test_limit_model_kernel_is_the_plain_loop_for_every_theorem_option(options, monkeypatch):
    hard = options["gamma"] == math.inf
    X, C0 = _tie_free_tasks(12, 45, 3, 4, 6, seed=40)
    # an empty cluster (a far centre) and n = k among the tasks
    C0[0, -1] += 7.0
    model = KMeansTransformer.from_theorem(3, 4, **options).to(F64)
    fast, plain = _fast_and_plain(model, X, C0, 6, monkeypatch)
    torch.testing.assert_close(fast.centers, plain.centers, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fast.objective, plain.objective, rtol=1e-12, atol=1e-12)
    assert torch.equal(fast.labels, plain.labels)
    if hard:  # (the hard assignments of tie-free tasks are exact: one-hot, or 1/k of an empty model)
        assert torch.equal(fast.assignments, plain.assignments)
        torch.testing.assert_close(fast.centers, kmtlib.lloyd(X, C0, 6, empty="mean").centers, rtol=0, atol=1e-12)
    else:
        torch.testing.assert_close(fast.assignments, plain.assignments, rtol=1e-12, atol=1e-12)
    # zero steps and n = k
    Xn = X[:, :4].clone()
    fast0, plain0 = _fast_and_plain(model, Xn, Xn[:, [2, 0, 3, 1]], 0, monkeypatch)
    assert torch.equal(fast0.centers, plain0.centers) and fast0.assignments is None and plain0.assignments is None
    assert torch.equal(fast0.objective, plain0.objective)


@pytest.mark.parametrize("gamma", [0.5, 5.0, 1e3, math.inf])
def test_limit_model_kernel_is_the_plain_loop_for_the_soft_variant(gamma, monkeypatch):
    X, C0 = _tie_free_tasks(10, 50, 2, 5, 5, seed=50)
    model = KMeansTransformer.from_variant("soft", 2, 5, gamma=gamma).to(F64)
    fast, plain = _fast_and_plain(model, X, C0, 5, monkeypatch)
    torch.testing.assert_close(fast.centers, plain.centers, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fast.objective, plain.objective, rtol=1e-12, atol=1e-12)
    # (the soft-max multiplies the scores' rounding, about 1e-16 of them, by gamma)
    tol = 1e-12 * max(1.0, gamma if gamma != math.inf else 1.0)
    torch.testing.assert_close(fast.assignments, plain.assignments, rtol=tol, atol=tol)
    assert torch.equal(fast.labels, plain.labels)
    # and both are soft k-means (the variant's reference)
    torch.testing.assert_close(fast.centers, soft_kmeans(X, C0, 5, gamma).centers, rtol=1e-9, atol=1e-9)


def _hard_assignment_tasks() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Tasks for the hard-assignment pass: plain ones, an empty cluster, exact ties on integer
    grids (several winners), equal centres, float32, and shapes whose points or centres the
    blocks take in chunks (k n above the score cap)."""
    g = torch.Generator().manual_seed(7)
    X = torch.randn(3, 400, 3, generator=g, dtype=F64)
    empty = X[:, :5].clone()
    empty[0, -1] += 50.0
    grid = torch.randint(0, 5, (2, 300, 2), generator=g).to(F64)
    equal = X[:1, [0, 0, 3, 9]].clone()
    X32 = torch.randn(2, 500, 4, generator=g)
    big = torch.randn(2, 40_000, 3, generator=g, dtype=F64)  # (2 x 40 000 x 64 scores: chunked)
    return [
        ("plain", X, X[:, :6].clone()),
        ("empty cluster", X[:, :, :3], empty),
        ("ties", grid, grid[:, :6].clone()),
        ("equal centres", X[:1], equal),
        ("float32", X32, X32[:, :5].clone()),
        ("chunked", big, big[:, :64].clone()),
    ]


@pytest.mark.parametrize("options", [{}, {"self_attention": "identity"}, {"center_update": "attention"}])
def test_hard_assignment_pass_is_the_blocks_bitwise(options, monkeypatch):
    """CAX and SAX as one pass (and CAC's means read from it) give the numbers of the blocks run
    one by one, bit for bit: the same products on the same operands, then exact operations."""
    ran = []
    write = limit_model._HardAssignment.write_

    def counted(self, X, C):
        out = write(self, X, C)
        ran.append(out is not None)
        return out

    for name, X, C0 in _hard_assignment_tasks():
        if name == "chunked" and options.get("center_update") == "attention":
            continue  # (its CAC compares the n points' keys pairwise: n^2 memory)
        model = KMeansTransformer.from_theorem(X.shape[-1], C0.shape[1], **options).to(X.dtype)
        with torch.no_grad(), monkeypatch.context() as patch:
            patch.setattr(limit_model._HardAssignment, "write_", counted)
            fast = kmtlib.whole_pass(model)(X, C0, steps=4)
            patch.setattr(limit_model._HardAssignment, "of", classmethod(lambda cls, blocks, scratch: None))
            blocks = kmtlib.whole_pass(model)(X, C0, steps=4)
        for field in ("centers", "labels", "objective", "assignments"):
            assert torch.equal(getattr(fast, field), getattr(blocks, field)), (name, field)
    assert any(ran) and not all(ran)  # (the pass ran, and gave the ties back to the blocks)


def test_limit_model_supports_only_fixed_weight_token_passing_models():
    X = kmtlib.sample_tasks(2, 20, 2, 3, generator=1, dtype=F64)
    C0 = kmtlib.init_centers(X, 3, generator=2)
    assert uses_limit_kernel(KMeansTransformer.from_theorem(2, 3).to(F64), X, C0)
    assert not uses_limit_kernel(KMeansTransformer.trainable(2, 3, dtype=F64), X, C0)  # re-embeds, learns
    for name in ("spherical", "trimmed", "robust", "kmedoids"):
        assert not uses_limit_kernel(KMeansTransformer.from_variant(name, 2, 3).to(F64), X, C0), name
    model = KMeansTransformer.from_theorem(2, 3).to(F64)
    Xg = X.clone().requires_grad_(True)
    assert not uses_limit_kernel(model, Xg, C0)  # autograd: the plain loop
    with torch.no_grad():
        assert uses_limit_kernel(model, Xg, C0)


def test_writes_hard_assignment_only_where_the_tokens_hold_lloyds_labels():
    """Read from the configuration (which construction, which blocks), never from rebuilt weights."""
    assert writes_hard_assignment(kmtlib.theorem_config(2, 3))
    assert writes_hard_assignment(kmtlib.theorem_config(2, 3, self_attention="identity"))
    assert writes_hard_assignment(kmtlib.theorem_config(2, 3, center_update="attention"))
    assert not writes_hard_assignment(kmtlib.theorem_config(2, 3, gamma=10.0))
    assert not writes_hard_assignment(kmtlib.theorem_config(2, 3, attention="dot"))
    assert not writes_hard_assignment(KMeansTransformer.from_variant("soft", 2, 3).config)
    # a layer of the theorem's blocks whose configuration names no construction: weights of its own
    assert not writes_hard_assignment(kmtlib.theorem_config(2, 3).replace(construction=""))


# ------------------------------------------------------------------------------------ Euclidean soft-max
@pytest.mark.parametrize("embedding", ["onehot", "data"])
@pytest.mark.parametrize("block", ["CAX", "SAX", "CAC", "SAC"])
def test_trainable_blocks_use_the_euclidean_kernel_and_it_is_the_formula(embedding, block):
    # the block with fast = True runs euclidean_attention, with fast = False the formula
    # (explicit_euclidean_attention is the formula as written): values and gradients agree
    model = KMeansTransformer.trainable(3, 4, embedding=embedding, generator=7, dropout=0.0, dtype=F64)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3)  # large weights, as training makes them, stress the kernel's expansion
    X = kmtlib.sample_tasks(3, 17, 3, 4, generator=8, dtype=F64)
    C = kmtlib.init_centers(X, 4, generator=9)
    P, Ct = model.embedding.embed(X, C)
    queries, keys = {"CAX": (P, Ct), "SAX": (P, P), "CAC": (Ct, P), "SAC": (Ct, Ct)}[block]
    b = model.layer.blocks[block]
    assert attention_kernel(b) is not None
    q, k, v = b.query(queries), b.key(keys), b.value(keys)
    explicit = explicit_euclidean_attention(q, k, v, b.config.inverse_temperature)
    fast = attend(b, queries, keys)
    plain = b(queries, keys)
    torch.testing.assert_close(fast, explicit, rtol=0, atol=1e-10)
    torch.testing.assert_close(plain, explicit, rtol=0, atol=1e-10)
    torch.testing.assert_close(plain, b.weights(queries, keys) @ v, rtol=0, atol=1e-12)
    grad = torch.randn(fast.shape, generator=torch.Generator().manual_seed(10), dtype=F64)
    params = list(b.parameters())
    g_fast = torch.autograd.grad(attend(b, queries, keys), params, grad)
    g_plain = torch.autograd.grad(b(queries, keys), params, grad)
    for x, y in zip(g_fast, g_plain):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("p", [0.05, 0.3])
def test_euclidean_kernel_dropout_from_a_generator_is_the_formula_with_that_mask(p):
    g = torch.Generator().manual_seed(11)
    B, nq, nk, D = 2, 9, 13, 4
    q = torch.randn(B, nq, D, generator=g, dtype=F64, requires_grad=True)
    k = torch.randn(B, nk, D, generator=g, dtype=F64, requires_grad=True)
    v = torch.randn(B, nk, 3, generator=g, dtype=F64, requires_grad=True)
    fast = euclidean_attention(q, k, v, 0.6, p, torch.Generator().manual_seed(12))
    dropped = sample_dropped(B * nq * nk, p, torch.Generator().manual_seed(12))
    assert dropped.numel() > 0
    keep = torch.ones(B * nq * nk, dtype=F64)
    keep[dropped] = 0.0
    slow = explicit_euclidean_attention(q, k, v, 0.6, keep.view(B, nq, nk), p)
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-12)
    grad = torch.randn(fast.shape, generator=g, dtype=F64)
    for a, b in zip(torch.autograd.grad(fast, (q, k, v), grad), torch.autograd.grad(slow, (q, k, v), grad)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


# ------------------------------------------------------------------------------------ points' self-attention
@pytest.mark.parametrize("embedding", ["onehot", "codes"])
@pytest.mark.parametrize(("d", "k"), [(1, 2), (3, 4), (8, 5)])
@pytest.mark.parametrize("p", [0.0, 0.2])
def test_point_self_attention_is_the_formula(embedding, d, k, p):
    """SAX on tokens [x; 0] in the data's coordinates (kmtlib.kernels.point_attention) against the
    Euclidean soft-max attention of the projected tokens, with the same dropped entries: values
    and the gradients of every weight."""
    model = KMeansTransformer.trainable(d, k, embedding=embedding, code_width=3 if embedding == "codes" else 0,
                                        generator=5, dtype=F64)  # fmt: skip
    block = model.layer.SAX
    g = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for m in (block.query, block.key, block.value):  # large weights and offsets, as training makes them
            m.weight.mul_(3)
            m.bias.add_(torch.randn(m.bias.shape, generator=g, dtype=F64))
    B, n = 3, 21
    x = torch.randn(B, n, d, generator=g, dtype=F64) + 2.0  # (off the origin: the centring matters)
    Z = torch.cat([x, torch.zeros(B, n, block.query.weight.shape[0] - d, dtype=F64)], dim=-1)
    dropped = sample_dropped(B * n * n, p, torch.Generator().manual_seed(7))
    keep = torch.ones(B * n * n, dtype=F64)
    keep[dropped] = 0.0
    scale = block.config.inverse_temperature
    params = list(block.parameters())
    grad = torch.randn(B, n, Z.shape[-1], generator=g, dtype=F64)
    Q, K, V = block.linear_maps()
    fast = point_self_attention(x, (Q.weight, Q.bias), (K.weight, K.bias), (V.weight, V.bias), scale, dropped, p)
    plain = explicit_euclidean_attention(block.query(Z), block.key(Z), block.value(Z), scale, keep.view(B, n, n), p)
    torch.testing.assert_close(fast, plain, rtol=0, atol=1e-11)
    for a, b in zip(torch.autograd.grad(fast, params, grad), torch.autograd.grad(plain, params, grad)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_the_block_takes_the_point_path_exactly_where_it_applies(monkeypatch):
    import kmtlib.fast.choice

    calls = []
    original = kmtlib.fast.choice.point_self_attention
    monkeypatch.setattr(kmtlib.fast.choice, "point_self_attention", lambda *a: calls.append(1) or original(*a))
    model = KMeansTransformer.trainable(3, 4, generator=1, dtype=F64).eval()  # (no dropout: comparable calls)
    X = kmtlib.sample_tasks(2, 15, 3, 4, generator=2, dtype=F64)
    C = kmtlib.init_centers(X, 4, generator=3)
    P, Ct = model.embedding.embed(X, C)
    sax = model.layer.SAX
    fast = attend(sax, P, P)
    assert len(calls) == 1  # points [x; 0], one tensor for queries and keys
    torch.testing.assert_close(fast, sax(P, P), rtol=0, atol=1e-11)  # the formula, not the kernel
    assert len(calls) == 1
    updated = P + fast  # the assignment coordinates are filled: not [x; 0] any more
    attend(sax, updated, updated)
    attend(sax, P, P.clone())  # two tensors: not a self-attention call the kernel can see as one
    P_grad = P.clone().requires_grad_(True)  # tokens that need a gradient (the kernel gives the points none)
    attend(sax, P_grad, P_grad)
    attend(model.layer.SAC, Ct, Ct)  # centre tokens [c; e]
    data_only = KMeansTransformer.trainable(3, 4, embedding="data", generator=1, dtype=F64)
    attend(data_only.layer.SAX, X, X)  # tokens of width d: nothing to save
    assert len(calls) == 1
    # The model's training step takes it (once per step: SAX on the re-embedded points).
    model.train()
    model.step(X, C).sum().backward()
    assert len(calls) == 2


# ------------------------------------------------------------------------------------ hard self-attention
def _duplicated(B: int, n: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(B, n, d, generator=g, dtype=F64)
    X[:, n - 1] = X[:, 0]  # copies at both ends, in the middle, and three of one point
    X[:, n // 2] = X[:, 1]
    X[:, n // 3] = X[:, 1]
    return X


@pytest.mark.parametrize("attention", ["euclidean", "dot"])
@pytest.mark.parametrize("n", [9, 40, 130])
def test_closed_form_hard_self_attention_is_the_dense_attention(attention, n):
    X = _duplicated(3, n, 2, seed=n)
    C0 = kmtlib.init_centers(X, 3, generator=n + 1)
    model = KMeansTransformer.from_theorem(2, 3, attention=attention).to(F64)
    P, C = model.embedding.embed(X, C0)
    P, C = model.layer(P, C)  # (point tokens that hold an assignment, for a non-trivial value)
    for name, tokens in (("SAX", P), ("SAC", C)):
        block = model.layer.blocks[name]
        # (Theorem 2.2's SAC compares the centres' one-hot ids by dot products: exact small
        # integers, so its k x k formula runs; it must give the same)
        assert closed_form_self_attention(block) == (name == "SAX" or attention == "euclidean"), name
        closed = attend(block, tokens, tokens)
        dense = block(tokens, tokens)
        assert torch.equal(closed, dense), name
        assert torch.equal(closed, block.value(tokens)), name  # each token's own value
    # the dense matrix averages exactly over the copies of each point
    W = model.layer.SAX.weights(P, P)
    same = (X.unsqueeze(2) == X.unsqueeze(1)).all(-1).to(F64)
    assert torch.equal(W, same / same.sum(-1, keepdim=True))


def test_closed_form_only_where_the_maximal_keys_are_the_copies():
    theorem = KMeansTransformer.from_theorem(2, 3)
    assert closed_form_self_attention(theorem.layer.SAX) and closed_form_self_attention(theorem.layer.SAC)
    assert not closed_form_self_attention(theorem.layer.CAX)  # cross-attention
    assert not closed_form_self_attention(KMeansTransformer.from_theorem(2, 3, gamma=5.0).layer.SAX)  # soft
    trainable = KMeansTransformer.trainable(2, 3)
    assert not closed_form_self_attention(trainable.layer.SAX)  # learns: copies need not share a value
    changed = KMeansTransformer.from_theorem(2, 3)
    with torch.no_grad():
        changed.layer.SAX.key.weight.mul_(2.0)  # queries and keys no longer one map
    assert not closed_form_self_attention(changed.layer.SAX)
    dot = KMeansTransformer.from_theorem(2, 3, attention="dot")
    assert closed_form_self_attention(dot.layer.SAX)  # (the configuration says: Theorem 2.2's weights)
    own = KMeansTransformer(dot.config.replace(construction=""))  # the same blocks, weights of its own
    assert not closed_form_self_attention(own.layer.SAX)
    # where no closed form holds, the block runs its formula: dense hard attention
    X = _duplicated(2, 12, 2, seed=3)
    C0 = kmtlib.init_centers(X, 3, generator=4)
    changed = changed.to(F64)
    P, _ = changed.embedding.embed(X, C0)
    out = changed.layer.SAX(P, P)
    torch.testing.assert_close(out, changed.layer.SAX.weights(P, P) @ changed.layer.SAX.value(P), rtol=0, atol=0)


# ------------------------------------------------------------------------------------ CUDA
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("options", [dict(), dict(attention="dot"), dict(gamma=30.0, center_update="attention")])
def test_kernels_on_cuda_are_their_formulas(options):
    X, C0 = _tie_free_tasks(8, 60, 3, 4, 5, seed=60)
    X, C0 = X.cuda(), C0.cuda()
    model = KMeansTransformer.from_theorem(3, 4, **options).to(F64).cuda()
    with torch.no_grad():
        assert uses_limit_kernel(model, X, C0)
        fast = kmtlib.whole_pass(model)(X, C0, steps=5)
        model.fast = False
        plain = model(X, C0, steps=5)
    torch.testing.assert_close(fast.centers, plain.centers, rtol=1e-12, atol=1e-12)
    assert torch.equal(fast.labels, plain.labels)
    trainable = KMeansTransformer.trainable(3, 4, generator=1, dropout=0.0, dtype=F64, device="cuda")
    P, _ = trainable.embedding.embed(X, C0)
    block = trainable.layer.SAX
    fast_out = attend(block, P, P)
    torch.testing.assert_close(fast_out, block(P, P), rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    "build",
    [
        lambda: KMeansTransformer.from_theorem(3, 4).to(torch.float64),
        lambda: KMeansTransformer.from_theorem(3, 4, attention="dot").to(torch.float64),
        lambda: KMeansTransformer.from_theorem(3, 4, center_update="attention", self_attention="identity").to(
            torch.float64
        ),
        lambda: KMeansTransformer.from_theorem(3, 4, gamma=5.0).to(torch.float64),
        lambda: KMeansTransformer.from_variant("soft", 3, 4).to(torch.float64),
        lambda: KMeansTransformer.trainable(3, 4, generator=3).eval(),
    ],
    ids=["theorem", "theorem-dot", "theorem-attention-update", "theorem-soft", "soft", "trainable"],
)
def test_final_centers_are_the_forward_passes_bitwise(build):
    """whole_pass(model).final_centers skips the objective of every step and the final labels,
    nothing else: its centres are those of the whole pass, bitwise (and where the kernel does not
    apply, those of model(X, C0, steps), on the fast path and the formula)."""
    model = build()
    dtype = next(model.parameters()).dtype
    g = torch.Generator().manual_seed(41)
    X = torch.rand(3, 60, 3, generator=g, dtype=dtype)
    C0 = X[:, :4].clone()
    whole = kmtlib.whole_pass(model)
    for fast in (True, False):
        model.fast = fast
        with torch.no_grad():
            assert torch.equal(whole.final_centers(X, C0, 5), whole(X, C0, steps=5).final_centers)
            if not whole.applies(X, C0):
                assert torch.equal(whole.final_centers(X, C0, 5), model(X, C0, steps=5).final_centers)
    model.fast = True
    assert torch.equal(whole.final_centers(X, C0, 0), C0)
