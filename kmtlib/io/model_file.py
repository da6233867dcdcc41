"""Reading model files and training checkpoints with errors that say which file is wrong and how.

``torch.load`` reports a damaged file in terms of its own internals (``OSError: [Errno 22]``,
``EOFError``, ``KeyError: 101``, a miniz error, a page about ``weights_only``), and a torch file
of something else fails later still, with ``KeyError: 'config'`` or a shape mismatch deep in
``load_state_dict``. Everything here raises :class:`ModelFileError` (a ``ValueError``) whose
message starts with the file's path and says what is wrong with it, in the reader's words:
empty, truncated, not a torch file, a pickle that a weights-only load refuses, a torch file of
something else, weights that do not fit the configuration saved beside them. A missing file is a
``FileNotFoundError`` that names the file.

Files are always read with ``weights_only=True``: a model file is data, and loading it must not
run code that a stranger put in it.
"""

from __future__ import annotations

import math
import os
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

from ..domain.trained import TrainingDomain
from ..embedding import embedding_name
from ..layer import LayerConfig
from ..transformer import MODEL_FORMAT, KMeansTransformer
from ..variants import import_all

# The format history. Format 4, :data:`kmtlib.transformer.MODEL_FORMAT` (what
# :meth:`KMeansTransformer.save` writes), saves the :class:`~kmtlib.layer.LayerConfig` (as a dict)
# with the weights and a trained layer's training domain. A new format number makes an older kmtlib
# refuse a file by its format, not by a field.
OLD_MODEL_FORMATS = ("kmtlib.KMeansTransformer/1", "kmtlib.KMeansTransformer/2", "kmtlib.KMeansTransformer/3")
"""The formats before :data:`~kmtlib.transformer.MODEL_FORMAT`, all still read. Format 1 (before
version 0.2) saved ``{"builder": name, "kwargs": {...}}`` and the weights under the old layer
classes' names (:func:`_old_state_keys`). Format 3 is format 4 without the configuration's
``construction`` (read from its ``origin``) and without a trained layer's domain (the documented
range stands in); format 2 is format 3 with the field ``embedding`` named ``tokens`` and the
width-d embedding ``"none"`` (read through :func:`_current_names`)."""
CHECKPOINT_FORMAT = "kmtlib.train-checkpoint/1"

# The builders a format-1 configuration may name (a file must not make us call any other method).
BUILDERS = ("from_theorem", "trainable", "from_variant")
# Builder options that say where and how to make the weights, never what model it is: a file that
# carries them is not one that :meth:`KMeansTransformer.save` wrote.
_PLACEMENT_OPTIONS = ("generator", "dtype", "device")

_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's default format is a zip archive
_PICKLE_MAGIC = b"\x80"  # the legacy format (and plain pickles) start with a protocol opcode


class ModelFileError(ValueError):
    """A model file or training checkpoint is damaged, truncated or holds something else.

    The message starts with the file's path and says what is wrong with it.
    """


def _short(exc: BaseException | str, limit: int = 160) -> str:
    """The first line of an exception's message (or of a text), shortened (torch's messages run to pages)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = text.split(" This is an internal miniz error", 1)[0]  # (then advice to file a bug)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _weights_only_reason(exc: BaseException) -> str:
    # torch puts the actual reason ("Unsupported global: GLOBAL __main__.Foo", "Unsupported
    # operand 149") after "WeightsUnpickler error:" inside a long explanation (on the same line
    # or the next; after it, advice on allow-listing classes, cut off here).
    lines = str(exc).splitlines()
    for i, line in enumerate(lines):
        if "WeightsUnpickler error:" in line:
            rest = [line.split("WeightsUnpickler error:", 1)[1].strip()] + [x.strip() for x in lines[i + 1 :]]
            reason = next((x for x in rest if x), "")
            return _short(reason.split(". Please use", 1)[0]) if reason else "objects other than tensors"
    return _short(exc)


def read_torch_file(path: str | os.PathLike, what: str = "kmtlib model file") -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU, with the failure named by category.

    Raises ``FileNotFoundError`` for a missing file and :class:`ModelFileError`
    (``"<path>: not a <what> (<problem>)"``) for anything that is not a readable torch file.
    """
    path = Path(path)
    if _file_kind(path, what) == "zip":
        _check_archive(path, what, path.stat().st_size)
    try:
        with warnings.catch_warnings():
            # (torch warns about the pickle protocol of a foreign pickle before refusing it)
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "weights only" in str(exc).lower() or "weightsunpickler" in str(exc).lower():
            raise ModelFileError(
                f"{path}: not a {what} (it holds Python objects that a "
                f"weights-only load refuses: {_weights_only_reason(exc)})"
            ) from exc
        raise ModelFileError(f"{path}: not a {what} (damaged torch file: {_short(exc)})") from exc
    except (EOFError, OSError) as exc:
        raise ModelFileError(f"{path}: not a {what} (truncated or damaged torch file: {_short(exc)})") from exc
    except MemoryError as exc:
        raise ModelFileError(
            f"{path}: not a {what} (damaged torch file: it asks for more memory than there is)"
        ) from exc
    except Exception as exc:  # miniz errors (RuntimeError), KeyError from a garbage opcode, ...
        raise ModelFileError(f"{path}: not a {what} (truncated or damaged torch file: {_short(exc)})") from exc


def _file_kind(path: Path, what: str) -> str:
    """``"zip"`` or ``"pickle"``, the two kinds of torch file, read from the first bytes; a missing,
    empty or foreign file raises, naming ``path``."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (expected a {what})")
    if path.is_dir():
        raise ModelFileError(f"{path}: not a {what} (it is a directory)")
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot be read ({_short(exc)})") from exc
    if size == 0:
        raise ModelFileError(f"{path}: not a {what} (the file is empty: 0 bytes)")
    if head.startswith(_ZIP_MAGIC):
        return "zip"
    if head.startswith(_PICKLE_MAGIC):
        return "pickle"
    raise ModelFileError(f"{path}: not a {what} (not a torch file: it starts with the bytes {head!r})")


def _check_archive(path: Path, what: str, size: int) -> None:
    """Check a torch zip archive: complete, and every member matching its CRC-32 checksum.

    torch.load checks neither: a cut archive fails with ``OSError: [Errno 22]`` and a flipped
    byte inside a tensor loads as a silently different weight. Python's zipfile does both checks
    (one more read of a file that is small next to the memory it will take).
    """
    if not zipfile.is_zipfile(path):
        # A zip archive ends with its directory: without it the file was cut short.
        raise ModelFileError(
            f"{path}: not a {what} (truncated or damaged torch archive: "
            f"the archive's end record is missing, {size} bytes)"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except Exception as exc:  # (BadZipFile, zlib errors, a member cut short: EOFError)
        raise ModelFileError(f"{path}: not a {what} (truncated or damaged torch archive: {_short(exc)})") from exc
    if bad is not None:
        raise ModelFileError(f"{path}: damaged {what} (the archive member {bad!r} does not match its CRC-32 checksum)")


def describe_contents(obj: Any) -> str:
    """What a loaded torch file holds, in a few words ("a tensor of shape (3,)", "a dict with keys ...")."""
    if isinstance(obj, torch.Tensor):
        return f"a tensor of shape {tuple(obj.shape)}"
    if isinstance(obj, dict):
        keys = ", ".join(repr(k) for k in list(obj)[:6])
        return f"a dict with keys {keys}{', ...' if len(obj) > 6 else ''}" if obj else "an empty dict"
    return f"a {type(obj).__name__}"


def check_state_dict(state: Any, path: Path, what: str, entry: str) -> dict[str, torch.Tensor]:
    """``state`` as a dict of finite floating-point tensors of one dtype, else ModelFileError."""
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ModelFileError(
            f"{path}: not a {what} (its {entry!r} entry is {describe_contents(state)}, not a dict of named tensors)"
        )
    dtypes = {v.dtype for v in state.values()}
    if any(not dt.is_floating_point for dt in dtypes) or len(dtypes) > 1:
        names = ", ".join(sorted(str(dt) for dt in dtypes))
        raise ModelFileError(f"{path}: not a {what} (its weights must be floating point of one dtype, found {names})")
    for name, value in state.items():
        if not bool(torch.isfinite(value).all()):
            raise ModelFileError(f"{path}: damaged {what} (the weights {name!r} hold NaN or infinite values)")
    return state


def build_model(
    config: Any,
    state: Any,
    path: Path,
    what: str = "kmtlib model file",
    config_entry: str = "config",
    state_entry: str = "state_dict",
):
    """Rebuild a :class:`~kmtlib.KMeansTransformer` from a saved configuration and state dict (on
    the CPU, in the saved dtype), checking both; ModelFileError names ``path`` on any mismatch."""
    import_all()  # (a configuration may name a score or map that a variant registers)
    if not isinstance(config, dict):
        raise ModelFileError(
            f"{path}: not a {what} (its {config_entry!r} entry is "
            f"{describe_contents(config)}, not a model configuration)"
        )
    state = check_state_dict(state, path, what, state_entry)
    if "builder" in config or "kwargs" in config:
        model = _build_format_1(config, path, what)
        state = _old_state_keys(state, model)
    else:
        try:
            layer_config = LayerConfig.from_dict(_current_names(config))
        except (TypeError, ValueError) as exc:
            raise ModelFileError(
                f"{path}: not a {what} (its configuration does not describe a layer: {_short(exc)})"
            ) from exc
        model = KMeansTransformer(layer_config)
    if state:
        model = model.to(next(iter(state.values())).dtype)
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise ModelFileError(
            f"{path}: not a {what} (its weights do not fit the model its "
            f"configuration describes: {_state_mismatch(model, state)})"
        ) from exc
    return model


def _current_names(config: dict[str, Any]) -> dict[str, Any]:
    """A format-2, 3 or 4 layer configuration under today's names: the field ``tokens`` (its name before)
    is ``embedding``, an embedding's old name (``"none"``, ``"normaugmented"``) its current one
    (:data:`kmtlib.embedding.OLD_EMBEDDING_NAMES`), and a theorem's ``construction``, which formats
    before 4 did not save, read from its ``origin`` (``from_theorem(..., attention='dot')``: 2.2)."""
    config = dict(config)
    origin = config.get("origin")
    if "construction" not in config and isinstance(origin, str) and origin.startswith("from_theorem("):
        config["construction"] = "theorem 2.2" if "attention='dot'" in origin else "theorem 2.1"
    if "tokens" in config and "embedding" not in config:
        config["embedding"] = config.pop("tokens")
    if "embedding" in config:
        config["embedding"] = embedding_name(config["embedding"])
    return config


def _build_format_1(config: dict[str, Any], path: Path, what: str):
    """A model from a format-1 configuration ``{"builder": name, "kwargs": {...}}``."""
    unknown = sorted(set(map(str, config)) - {"builder", "kwargs"})
    if unknown or "builder" not in config or "kwargs" not in config:
        raise ModelFileError(
            f"{path}: not a {what} (its configuration must have the keys "
            f"'builder' and 'kwargs', found {sorted(map(str, config))})"
        )
    builder, kwargs = config["builder"], config["kwargs"]
    if builder not in BUILDERS:
        raise ModelFileError(
            f"{path}: not a {what} (unknown builder {builder!r}; expected one of {', '.join(BUILDERS)})"
        )
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise ModelFileError(
            f"{path}: not a {what} (the builder options are {describe_contents(kwargs)}, not a dict of named options)"
        )
    placement = sorted(set(kwargs) & set(_PLACEMENT_OPTIONS))
    if placement:
        raise ModelFileError(
            f"{path}: not a {what} (its configuration carries the option(s) "
            f"{', '.join(placement)}, which a saved model never has)"
        )
    options = dict(kwargs)
    if builder == "trainable":
        options.pop("impl", None)  # (the kernel choice is model.fast now, not part of the model)
    if builder == "from_theorem" and "centre_update" in options:
        options["center_update"] = options.pop("centre_update")  # (its spelling before version 0.2)
    try:
        return getattr(KMeansTransformer, builder)(**options)
    except (TypeError, ValueError, RuntimeError, MemoryError) as exc:
        raise ModelFileError(
            f"{path}: not a {what} (its configuration "
            f"{builder}({_kwargs_text(kwargs)}) does not build a model: {_short(exc)})"
        ) from exc


_OLD_ROLES = {"Q": "query.weight", "K": "key.weight", "V": "value.weight"}


def _old_state_keys(state: dict[str, torch.Tensor], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights of a format-1 file under today's names: the trainable layer's ``layer.cax.query.weight``
    is ``layer.CAX.query.weight``; the theorem layer's buffers ``layer.blocks.CAX.Q`` are
    ``layer.CAX.query.weight`` and ``layer.ffn.W1``/``W2`` are ``layer.ffn.up.weight``/``down.weight``.
    A variant's layer had no weights (its circuit was written in code): it takes the ones its
    configuration builds. Keys of no known old form are kept, so a mismatch is still reported."""
    if not state:
        return dict(model.state_dict())
    renamed: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        parts = key.split(".")
        if len(parts) == 4 and parts[0] == "layer" and parts[1] in ("cax", "sax", "cac", "sac"):
            key = ".".join(["layer", parts[1].upper(), *parts[2:]])
        elif len(parts) == 4 and parts[:2] == ["layer", "blocks"] and parts[3] in _OLD_ROLES:
            key = f"layer.{parts[2]}.{_OLD_ROLES[parts[3]]}"
        elif key in ("layer.ffn.W1", "layer.ffn.W2"):
            key = "layer.ffn.up.weight" if key.endswith("W1") else "layer.ffn.down.weight"
        renamed[key] = value
    return renamed


def _kwargs_text(kwargs: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    return text if len(text) <= 120 else text[:117] + "..."


def _state_mismatch(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> str:
    """A one-line account of how a state dict differs from a model's (load_state_dict's own
    message lists every key on many lines)."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [
        f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    parts = []
    for label, items in (("missing", missing), ("unexpected", unexpected), ("wrong shape (file vs model)", shapes)):
        if items:
            parts.append(f"{label}: {', '.join(items[:2])}{', ...' if len(items) > 2 else ''} ({len(items)})")
    return "; ".join(parts) or "load_state_dict refused it"


def load_model_file(path: str | os.PathLike, map_location: str | torch.device = "cpu"):
    """What :func:`kmtlib.load_model` does: read, check and rebuild a saved model."""
    path = Path(path)
    what = "kmtlib model file"
    payload = read_torch_file(path, what)
    if not isinstance(payload, dict):
        raise ModelFileError(
            f"{path}: not a {what} (it holds {describe_contents(payload)}; "
            "expected a model saved with KMeansTransformer.save)"
        )
    fmt = payload.get("format")
    if fmt == CHECKPOINT_FORMAT:
        raise ModelFileError(
            f"{path}: not a {what} (it is a training checkpoint: read it with kmtlib.training.load_checkpoint_model)"
        )
    if fmt != MODEL_FORMAT and fmt not in OLD_MODEL_FORMATS:
        found = "no 'format' entry" if fmt is None else f"format {fmt!r}"
        raise ModelFileError(
            f"{path}: not a {what} ({found}; expected format {MODEL_FORMAT!r}; it holds {describe_contents(payload)})"
        )
    for key in ("config", "state_dict"):
        if key not in payload:
            raise ModelFileError(f"{path}: damaged {what} (the {key!r} entry is missing)")
    model = build_model(payload["config"], payload["state_dict"], path, what)
    if "training_domain" in payload:  # (format 4; an older file keeps the documented range)
        model.training_domain = read_training_domain(payload["training_domain"], path, what)
    return model.to(map_location)


def read_training_domain(entry: Any, path: Path, what: str) -> TrainingDomain:
    """The ``training_domain`` entry of a model file, checked: finite spreads ``0 < low <= high``, a
    finite offset >= 0 and a text source; ModelFileError names ``path`` otherwise."""
    fields = ("spread_low", "spread_high", "offset", "source")
    if not isinstance(entry, dict) or set(entry) != set(fields):
        raise ModelFileError(f"{path}: damaged {what} (its 'training_domain' is {describe_contents(entry)})")
    low, high, offset = (entry[name] for name in fields[:3])
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in entry.values()
                  if not isinstance(v, str))  # fmt: skip
    if not (numbers and 0 < low <= high and offset >= 0 and isinstance(entry["source"], str)):
        raise ModelFileError(f"{path}: damaged {what} (its 'training_domain' is not a range: {entry!r})")
    return TrainingDomain(float(low), float(high), float(offset), entry["source"])


def load_model(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> KMeansTransformer:
    """Rebuild a :class:`~kmtlib.KMeansTransformer` saved with :meth:`~kmtlib.KMeansTransformer.save`.

    Raises ``FileNotFoundError`` for a missing file and :class:`~kmtlib.ModelFileError` (a
    ``ValueError``; the message starts with the path and says what is wrong) for a file that is
    empty, truncated, damaged, not a torch file, a pickle of other objects, or a torch file of
    something else (a tensor, another model's weights, a configuration that does not fit them).
    """
    return load_model_file(path, map_location)
