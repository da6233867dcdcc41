"""Model files: format 2 (the LayerConfig beside the weights) round-trips bitwise, and format 1
(``{"builder", "kwargs"}`` and the old layer classes' weight names, before version 0.2) is still
read, to the same numbers: the first three shipped seeds of data/weights and hand-written files of every
builder."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import kmtlib
from kmtbook.paper_sweep import PAPER_SEEDS
from kmtlib import KMeansTransformer, load_model
from kmtlib.io.model_file import MODEL_FORMAT, OLD_MODEL_FORMATS
from kmtlib.layer import BLOCK_NAMES, LayerConfig
from kmtlib.theorems import theorem_weights

F64 = torch.float64
ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "data" / "weights").glob("*/model.pt"))
OLD_FORMAT = OLD_MODEL_FORMATS[0]
FIRST_SEEDS = PAPER_SEEDS[:3]  # shipped before kmtlib 0.2, in format 1; later seeds are in today's format
SHIPPED_FORMAT_1 = [p for p in SHIPPED if int(p.parent.name.split("_seed")[1]) in FIRST_SEEDS]
SHIPPED_LATER = [p for p in SHIPPED if p not in SHIPPED_FORMAT_1]


def _tasks(d: int, k: int, dtype=F64, B: int = 3, n: int = 30, seed: int = 0):
    X = kmtlib.sample_tasks(B, n, d, k, generator=seed, dtype=dtype)
    return X, kmtlib.init_centers(X, k, generator=seed + 1)


def _assert_same_model(a: KMeansTransformer, b: KMeansTransformer, steps: int = 3) -> None:
    """The same configuration, bitwise the same weights (names, dtypes, values) and outputs."""
    assert a.config == b.config
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for name in sa:
        assert sa[name].dtype == sb[name].dtype and torch.equal(sa[name], sb[name]), name
    dtype = next(iter(sa.values())).dtype
    X, C0 = _tasks(a.d, a.k, dtype=dtype)
    a.eval(), b.eval()
    with torch.no_grad():
        ra, rb = a(X, C0, steps=steps), b(X, C0, steps=steps)
    assert torch.equal(ra.centers, rb.centers) and torch.equal(ra.objective, rb.objective)
    assert torch.equal(ra.labels, rb.labels)


# ------------------------------------------------------------------------------------ shipped (format 1)
def test_the_shipped_weights_are_the_papers_seeds_at_both_widths():
    """Both widths for the same seeds, every one of the paper's, the first three among them."""
    runs = {(p.parent.name.split("_seed")[0], int(p.parent.name.split("_seed")[1])) for p in SHIPPED}
    seeds = {seed for _, seed in runs}
    assert runs == {(width, seed) for width in ("onehot", "none") for seed in seeds}, runs
    assert set(FIRST_SEEDS) <= seeds <= set(PAPER_SEEDS), seeds
    assert len(SHIPPED_FORMAT_1) == 6


@pytest.mark.parametrize("path", SHIPPED_FORMAT_1, ids=[p.parent.name for p in SHIPPED_FORMAT_1])
def test_each_shipped_model_file_of_format_1_loads(path, tmp_path):
    payload = torch.load(path, weights_only=True)
    assert payload["format"] == OLD_FORMAT and payload["config"]["builder"] == "trainable"
    kwargs = payload["config"]["kwargs"]
    model = load_model(path)
    embedding = path.parent.name.split("_seed")[0]
    assert kwargs["embedding"] == embedding
    assert model.config == kmtlib.learned.trainable_config(
        kwargs["d"], kwargs["k"], kwargs["embedding"], kwargs["gamma"], kwargs["dropout"]
    )
    assert model.config.embedding == ("data" if embedding == "none" else "onehot")
    # the weights under their new names: layer.cax.query.weight is layer.CAX.query.weight
    state = model.state_dict()
    assert len(state) == len(payload["state_dict"])
    for old_name, value in payload["state_dict"].items():
        layer, block, *rest = old_name.split(".")
        assert block in ("cax", "sax", "cac", "sac")
        new = state[".".join([layer, block.upper(), *rest])]
        assert new.dtype == value.dtype == torch.float32 and torch.equal(new, value), old_name
    # it runs as the chapters run it, and saved again (format 2) it reads back bitwise
    manifest = json.loads((path.parent / "manifest.json").read_text())
    assert manifest["config"]["d"] == model.d and manifest["config"]["k"] == model.k
    X, C0 = _tasks(model.d, model.k, dtype=torch.float32, B=2, n=40)
    with torch.no_grad():
        out = model.eval()(X, C0, steps=2)
    assert torch.isfinite(out.centers).all()
    again = load_model(model.save(tmp_path / "model.pt"))
    assert torch.load(tmp_path / "model.pt", weights_only=True)["format"] == MODEL_FORMAT
    _assert_same_model(model, again)


@pytest.mark.parametrize("path", SHIPPED_LATER, ids=[p.parent.name for p in SHIPPED_LATER])
def test_each_later_shipped_model_file_is_the_trained_configuration_of_its_manifest(path, tmp_path):
    """Seeds shipped after the first three are files of format 3 (today's but for the configuration's
    ``construction`` and the training domain, which format 4 added), of the configuration their
    training manifest names, and read back bitwise when saved again."""
    payload = torch.load(path, weights_only=True)
    assert payload["format"] == "kmtlib.KMeansTransformer/3" and payload["format"] in OLD_MODEL_FORMATS
    model = load_model(path)
    config = json.loads((path.parent / "manifest.json").read_text())["config"]
    assert config["seed"] == int(path.parent.name.split("_seed")[1]) and config["steps"] == 10_000
    assert model.config == kmtlib.learned.trainable_config(
        config["d"], config["k"], config["embedding"], config["gamma"], config["dropout"]
    )
    X, C0 = _tasks(model.d, model.k, dtype=torch.float32, B=2, n=40)
    with torch.no_grad():
        assert torch.isfinite(model.eval()(X, C0, steps=2).centers).all()
    _assert_same_model(model, load_model(model.save(tmp_path / "model.pt")))


# ------------------------------------------------------------------------------------ format 2
MODELS = {
    "theorem 2.1": lambda: KMeansTransformer.from_theorem(3, 4).to(F64),
    "theorem 2.1, finite gamma": lambda: KMeansTransformer.from_theorem(
        3, 4, gamma=30.0, center_update="attention", reset_gamma=1e6
    ).to(F64),
    "theorem 2.1, identity shortcut, float32": lambda: KMeansTransformer.from_theorem(3, 4, self_attention="identity"),
    "theorem 2.2": lambda: KMeansTransformer.from_theorem(3, 4, attention="dot", center_update="attention").to(F64),
    "trainable": lambda: KMeansTransformer.trainable(3, 4, generator=3, dtype=F64),
    "trainable, d-only, float32": lambda: KMeansTransformer.trainable(3, 4, embedding="data", gamma=2.5, dropout=0.05),
    "soft": lambda: KMeansTransformer.from_variant("soft", 3, 4, gamma=4.0).to(F64),
    "spherical": lambda: KMeansTransformer.from_variant("spherical", 3, 4).to(F64),
    "trimmed": lambda: KMeansTransformer.from_variant("trimmed", 3, 4).to(F64),
    "robust": lambda: KMeansTransformer.from_variant("robust", 3, 4).to(F64),
    "kmedoids": lambda: KMeansTransformer.from_variant("kmedoids", 3, 4).to(F64),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_a_model_saved_in_format_2_round_trips_bitwise(name, tmp_path):
    model = MODELS[name]()
    path = model.save(tmp_path / "m.pt")
    payload = torch.load(path, weights_only=True)
    assert payload["format"] == MODEL_FORMAT
    assert payload["config"] == model.config.to_dict() and LayerConfig.from_dict(payload["config"]) == model.config
    assert payload["dtype"] == str(next(iter(model.state_dict().values())).dtype)
    loaded = load_model(path)
    assert loaded.fast  # (the kernel switch is not saved: a loaded model runs the kernels)
    _assert_same_model(model, loaded)
    # saved again, the same file contents (configuration and weights)
    again = torch.load(loaded.save(tmp_path / "again.pt"), weights_only=True)
    assert again["config"] == payload["config"] and again["format"] == payload["format"]
    assert list(again["state_dict"]) == list(payload["state_dict"])
    assert all(torch.equal(again["state_dict"][k], v) for k, v in payload["state_dict"].items())


OLD_EMBEDDING_FILES = {  # the model, and the embedding name its file held before version 0.2
    "theorem 2.1": "onehot",
    "theorem 2.2": "normaugmented",
    "trainable, d-only, float32": "none",
}


@pytest.mark.parametrize("name", list(OLD_EMBEDDING_FILES))
def test_a_format_2_file_of_old_names_loads_to_the_same_numbers(name, tmp_path):
    """A file whose layer configuration has the field ``tokens`` (the name of ``embedding`` before)
    holding an old embedding name ("none": the width-d "data" embedding) loads to the model that
    is saved today: the same configuration, weights and outputs, bitwise."""
    model = MODELS[name]()
    payload = torch.load(model.save(tmp_path / "new.pt"), weights_only=True)
    config = {("tokens" if key == "embedding" else key): value for key, value in payload["config"].items()}
    config["tokens"] = OLD_EMBEDDING_FILES[name]
    torch.save(dict(payload, config=config), tmp_path / "old.pt")
    loaded = load_model(tmp_path / "old.pt")
    assert loaded.config.embedding == model.config.embedding
    _assert_same_model(model, loaded)


def test_the_shipped_layer_for_any_k_is_a_file_of_old_names():
    payload = torch.load(ROOT / "kmtlib" / "pretrained" / "any_k_broad.pt", weights_only=True)
    assert payload["config"]["tokens"] == "codes" and "embedding" not in payload["config"]
    assert load_model(ROOT / "kmtlib" / "pretrained" / "any_k_broad.pt").config.embedding == "codes"


def test_a_model_of_a_layer_config_of_ones_own_round_trips(tmp_path):
    # a LayerConfig that no builder makes (Theorem 2.1's layer with a norm-max assignment and
    # dropout on the centre update) and weights of one's own
    base = kmtlib.constructions.theorem_config(2, 3)
    config = base.replace(
        CAX=base.CAX.__class__(score="euclidean", map="normmax", gamma=1.0, options={"tau": 0.5}),
        seed=7,
        origin="by hand",
    )
    model = KMeansTransformer(config).to(F64)
    kmtlib.constructions.load_theorem_weights(model.layer)
    loaded = load_model(model.save(tmp_path / "m.pt"))
    assert loaded.config.CAX.options == {"tau": 0.5} and loaded.config.seed == 7
    _assert_same_model(model, loaded)


# ------------------------------------------------------------------------------------ format 1, by hand
def _write_format_1(path: Path, builder: str, kwargs: dict, state: dict[str, torch.Tensor]) -> Path:
    dtype = str(next(iter(state.values())).dtype) if state else None
    torch.save({"format": OLD_FORMAT, "config": {"builder": builder, "kwargs": kwargs}, "state_dict": state,
                "dtype": dtype, "kmtlib_version": "0.1.0"}, path)  # fmt: skip
    return path


def _old_names(kwargs: dict) -> dict:
    """The builder options as a format-1 file spells them (``centre_update`` before version 0.2)."""
    return {("centre_update" if key == "center_update" else key): value for key, value in kwargs.items()}


THEOREM_KWARGS = [
    dict(d=3, k=4, gamma=math.inf, attention="euclidean", center_update="linear", self_attention="attention",
         reset_gamma=None),
    dict(d=3, k=4, gamma=1e4, attention="euclidean", center_update="linear", self_attention="identity",
         reset_gamma=None),
    dict(d=3, k=4, gamma=30.0, attention="euclidean", center_update="attention", self_attention="attention",
         reset_gamma=1e6),
    dict(d=2, k=3, gamma=math.inf, attention="dot", center_update="attention", self_attention="attention",
         reset_gamma=None),
]  # fmt: skip


@pytest.mark.parametrize("kwargs", THEOREM_KWARGS, ids=[f"{o['attention']}-{o['gamma']}" for o in THEOREM_KWARGS])
@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_format_1_theorem_files_load_to_the_same_numbers(kwargs, dtype, tmp_path):
    # the old TheoremLayer saved its fixed weights as buffers layer.blocks.CAX.Q and so on, and
    # the feed-forward block of Theorem 2.2 as layer.ffn.W1 and layer.ffn.W2
    W = theorem_weights(kwargs["d"], kwargs["k"], kwargs["attention"], dtype=dtype)
    state = {f"layer.blocks.{name}.{m}": W[name][m] for name in BLOCK_NAMES for m in "QKV"}
    if kwargs["attention"] == "dot":
        state.update({"layer.ffn.W1": W["FFN"]["W1"], "layer.ffn.W2": W["FFN"]["W2"]})
    path = _write_format_1(tmp_path / "old.pt", "from_theorem", _old_names(kwargs), state)
    loaded = load_model(path)
    _assert_same_model(loaded, KMeansTransformer.from_theorem(**kwargs).to(dtype))
    for name in BLOCK_NAMES:
        assert torch.equal(loaded.layer.blocks[name].query.weight, W[name]["Q"])
        assert torch.equal(loaded.layer.blocks[name].value.weight, W[name]["V"])
    if kwargs["attention"] == "dot":
        assert torch.equal(loaded.layer.ffn.up.weight, W["FFN"]["W1"])
        assert torch.equal(loaded.layer.ffn.down.weight, W["FFN"]["W2"])


def test_format_1_theorem_file_with_changed_weights_keeps_them(tmp_path):
    W = theorem_weights(2, 3, "euclidean", dtype=F64)
    state = {f"layer.blocks.{name}.{m}": W[name][m].clone() for name in BLOCK_NAMES for m in "QKV"}
    state["layer.blocks.CAC.V"] *= 0.5  # (what a reader of the old model may have saved)
    kwargs = dict(d=2, k=3, gamma=math.inf, attention="euclidean", center_update="linear", self_attention="attention",
                  reset_gamma=None)  # fmt: skip
    loaded = load_model(_write_format_1(tmp_path / "old.pt", "from_theorem", _old_names(kwargs), state))
    assert torch.equal(loaded.layer.CAC.value.weight, 0.5 * W["CAC"]["V"])
    X, C0 = _tasks(2, 3)
    with torch.no_grad():
        out = loaded(X, C0, steps=1)
    torch.testing.assert_close(out.centers[:, 1], 0.5 * kmtlib.lloyd(X, C0, 1).centers[:, 1], rtol=0, atol=1e-15)


VARIANT_KWARGS = [
    dict(name="soft", d=3, k=4, gamma=4.0),
    dict(name="spherical", d=3, k=4),
    dict(name="trimmed", d=3, k=4),
    dict(name="robust", d=3, k=4),
    dict(name="kmedoids", d=3, k=4),
]


@pytest.mark.parametrize("kwargs", VARIANT_KWARGS, ids=[o["name"] for o in VARIANT_KWARGS])
def test_format_1_variant_files_load_to_the_same_numbers(kwargs, tmp_path):
    # a variant's old layer had no weights (its circuit was written in code): an empty state dict
    loaded = load_model(_write_format_1(tmp_path / "old.pt", "from_variant", kwargs, {}))
    options = {k: v for k, v in kwargs.items() if k not in ("name", "d", "k")}
    _assert_same_model(loaded.to(F64), KMeansTransformer.from_variant(kwargs["name"], 3, 4, **options).to(F64))


@pytest.mark.parametrize("embedding", ["onehot", "none"])
@pytest.mark.parametrize("impl", ["fast", "explicit"])
def test_format_1_trainable_files_load_to_the_same_numbers(embedding, impl, tmp_path):
    model = KMeansTransformer.trainable(3, 4, embedding=embedding, gamma=2.0, dropout=0.02, generator=9, dtype=F64)
    # the old TrainableLayer named its blocks in lower case: layer.cax.query.weight
    state = {}
    for key, value in model.state_dict().items():
        layer, block, *rest = key.split(".")
        state[".".join([layer, block.lower(), *rest])] = value.clone()
    assert "layer.cax.query.weight" in state and "layer.sac.value.bias" in state
    kwargs = dict(d=3, k=4, embedding=embedding, gamma=2.0, dropout=0.02, impl=impl)
    loaded = load_model(_write_format_1(tmp_path / "old.pt", "trainable", kwargs, state))
    assert loaded.fast  # (the old impl option chose a kernel, not a model: model.fast now)
    _assert_same_model(loaded, model)


# ------------------------------------------------------------------------------------ both paths
EVERY_SHIPPED = sorted([*ROOT.glob("data/**/*.pt"), *Path(kmtlib.__file__).parent.glob("pretrained/*.pt")])
"""Every model file the repository ships (data/weights*, kmtlib/pretrained)."""


@pytest.mark.parametrize("path", EVERY_SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_model_gives_the_same_numbers_on_both_paths(path):
    """The layer step, ``model(X, C0)``, and the whole pass asked for by name give bitwise the same
    result of one type (a trained layer has no whole-pass kernel: the call is the model's)."""
    model = load_model(path).eval()
    k = 5 if model.config.reads_any_k else model.k
    X = kmtlib.sample_tasks(2, 40, model.d, k, generator=3).to(next(model.parameters()).dtype)
    C0 = kmtlib.init_centers(X, k, generator=4)
    with torch.no_grad():
        step, whole = model(X, C0, steps=3), kmtlib.whole_pass(model)(X, C0, steps=3)
    assert type(step) is type(whole)
    for field in ("centers", "labels", "objective", "assignments"):
        a, b = getattr(step, field), getattr(whole, field)
        assert (a is None and b is None) or torch.equal(a, b), field
