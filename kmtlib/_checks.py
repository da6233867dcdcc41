"""Input validation shared by every public entry point.

Each check raises with a message that names the argument and what was wrong, so a reader who
passes a bad tensor learns what to fix instead of getting a silent wrong answer.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

import torch

SUPPORTED_DTYPES = (torch.float32, torch.float64)


def check_choice(name: str, value: str, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices``; else raise naming the allowed values."""
    allowed = tuple(choices)
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; expected one of {', '.join(map(repr, allowed))}")
    return value


def check_int(name: str, value: object, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an int; reject bools, floats and values below ``minimum`` or above
    ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


SEED_MAX = 2**64 - 1
"""The largest seed a ``torch.Generator`` takes (its seed is an unsigned 64-bit integer)."""


def check_seed(name: str, value: object) -> int:
    """Return the seed ``value`` as an int in [0, 2^64 - 1], the range ``torch.Generator.manual_seed``
    takes, or raise naming ``name`` and the range."""
    return check_int(f"{name} (seed)", value, minimum=0, maximum=SEED_MAX)


def check_positive_float(name: str, value: object, *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float > 0 (``inf`` only where ``allow_inf``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if value != value or value <= 0 or (value == float("inf") and not allow_inf):
        bound = "a positive number (or math.inf)" if allow_inf else "a positive finite number"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def check_points(X: object, name: str = "X") -> torch.Tensor:
    """Check a batch of point sets: a finite float32/float64 tensor of shape (B, n, d)."""
    if not isinstance(X, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (B, n, d), got {type(X).__name__}")
    if X.ndim != 3:
        hint = f" (for one task use {name}.unsqueeze(0))" if X.ndim == 2 else ""
        raise ValueError(f"{name} must have shape (B, n, d), got shape {tuple(X.shape)}{hint}")
    if X.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} must be float32 or float64, got {X.dtype}")
    B, n, d = X.shape
    if B < 1 or n < 1 or d < 1:
        raise ValueError(
            f"{name} must have B >= 1 tasks, n >= 1 points and d >= 1 dimensions, got shape {tuple(X.shape)}"
        )
    if not all_finite(X):
        raise ValueError(f"{name} contains NaN or inf values")
    return X


def all_finite(t: torch.Tensor) -> bool:
    """Whether every element of ``t`` is finite.

    A finite sum proves it (a NaN or infinite element makes the sum NaN or infinite), at the cost
    of one reduction; only when the sum is not finite (a non-finite element, or finite elements
    whose sum overflows) is every element tested.
    """
    with torch.no_grad():
        if bool(torch.isfinite(t.sum())):
            return True
        return bool(torch.isfinite(t).all())


def check_k(k: object, n: int, name: str = "k") -> int:
    """Check a number of clusters against the number of points ``n``."""
    k = check_int(name, k)
    if k < 1:
        raise ValueError(f"{name} must be >= 1, got {k}")
    if k > n:
        raise ValueError(f"{name}={k} clusters exceed the n={n} points of each task")
    return k


def check_centers(C: object, X: torch.Tensor, name: str = "C0", *, at_most_n: bool = True) -> torch.Tensor:
    """Check centres (B, k, d) against points X (B, n, d): shapes, device, dtype, finiteness, and
    (where ``at_most_n``) no more centres than points."""
    if not isinstance(C, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (B, k, d), got {type(C).__name__}")
    if C.ndim != 3:
        raise ValueError(f"{name} must have shape (B, k, d), got shape {tuple(C.shape)}")
    B, n, d = X.shape
    if C.shape[0] != B:
        raise ValueError(f"{name} has {C.shape[0]} tasks but X has {B}")
    if C.shape[2] != d:
        raise ValueError(f"{name} has dimension d={C.shape[2]} but X has d={d}")
    if at_most_n:
        check_k(C.shape[1], n, name=f"the number of centres in {name}")
    elif C.shape[1] < 1:
        raise ValueError(f"the number of centres in {name} must be >= 1, got shape {tuple(C.shape)}")
    check_same_device_dtype(X=X, **{name: C})
    if not bool(torch.isfinite(C).all()):
        raise ValueError(f"{name} contains NaN or inf values")
    return C


def check_same_device_dtype(**tensors: torch.Tensor) -> None:
    """All named tensors must share one device and one dtype."""
    items = list(tensors.items())
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(f"{name} is on {t.device} but {first_name} is on {first.device}; move both to one device")
        if t.dtype != first.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but {first_name} has {first.dtype}; use one dtype")


def check_generator(generator: object, device: torch.device, name: str = "generator") -> torch.Generator | None:
    """Accept None, a seed (int) or a torch.Generator on ``device``; return a Generator or None."""
    if generator is None:
        return None
    if isinstance(generator, torch.Generator):
        if torch.device(generator.device).type != torch.device(device).type:
            raise ValueError(f"{name} lives on {generator.device} but the tensors are on {device}")
        return generator
    seed = check_seed(name, generator)
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def square_range(dtype: torch.dtype, width: int, terms: int = 1) -> tuple[float, float]:
    """``(low, high)``: the coordinate magnitudes (largest absolute value per task) for which
    squared distances in ``width`` dimensions, summed over up to ``terms`` of them, are computed
    at the dtype's full precision: above ``high`` the expanded square ``||x||^2 - 2 x.c + ||c||^2``
    (at most ``4 width max|.|^2``) overflows; below ``low`` its rounding error
    ``eps max|.|^2`` falls into the subnormal range, where the precision runs out."""
    fi = torch.finfo(dtype)
    return math.sqrt(fi.tiny / fi.eps), math.sqrt(fi.max / (8.0 * width * max(terms, 1)))


def magnitudes(*tensors: torch.Tensor) -> torch.Tensor:
    """The largest absolute coordinate per task (B,) over tensors (B, *, d): the larger of ``|min|``
    and ``|max|``, exactly, in one pass over each tensor (no ``|t|`` copy)."""
    lo_hi = [torch.aminmax(t.detach().reshape(t.shape[0], -1), dim=1) for t in tensors]
    return torch.stack([torch.maximum(lo.abs(), hi.abs()) for lo, hi in lo_hi]).amax(dim=0)


def check_square_range(X: torch.Tensor, C: torch.Tensor, width: int, what: str) -> None:
    """Raise unless the squared distances of points X and centres C in ``width`` coordinates can
    be computed at the dtype's precision, naming the limit (see :func:`square_range`).
    For code that computes in the data's own scale (the transformer's tokens) instead of
    rescaling as :func:`kmtlib.lloyd` does."""
    low, high = square_range(X.dtype, width)
    size = magnitudes(X, C)
    fix = "rescale the data (the clustering does not depend on the scale)"
    if X.dtype == torch.float32:
        fix += " or use float64"
    smallest, largest = (float(v) for v in torch.aminmax(size))
    if low <= smallest and largest <= high:
        return
    if largest > high:
        raise ValueError(
            f"points too large for {what}: |x| up to {largest:.3g} (X and C0), but its {X.dtype} squared "
            f"distances overflow above |x| = {high:.3g}; {fix}"
        )
    tiny = (size > 0) & (size < low)
    if bool(tiny.any()):
        b = int(tiny.nonzero()[0, 0])
        raise ValueError(
            f"points too small for {what}: in task {b} |x| is at most {float(size[b]):.3g} (X and C0), but below "
            f"|x| = {low:.3g} the {X.dtype} squared distances fall into the subnormal range and lose "
            f"precision; {fix}"
        )


# ----------------------------------------------------------------------------------- variant options
# The options of the robust and k-medoids variants, checked here so that the circuits
# (kmtlib.variants) and the reference algorithms that test them (kmtlib.reference) share the checks
# without either importing the other.

SPARSE_MAPS: tuple[str, ...] = ("sparsemax", "entmax15", "entmax")
"""Centre-update maps of the robust variant (names in :data:`kmtlib.attention.ATTENTION_MAPS`):
sparsemax (alpha = 2), entmax-1.5 and alpha-entmax with a chosen ``alpha`` in (1, 2]."""


def authors_inv_temperature(d: int) -> float:
    """The authors' score scale ``0.01 / sqrt(d)`` (their baseline ``rkm_iters``, github.com/rithram/kmeans-trf)."""
    return 0.01 / math.sqrt(check_int("d", d, minimum=1))


def check_robust_options(
    d: int, inv_temperature: float | None, map: str, alpha: float | None
) -> tuple[float, dict[str, float]]:
    """Validate the options of robust k-means (the variant and its reference); return ``beta`` and
    the map's keyword options."""
    check_choice("robust map", map, SPARSE_MAPS)
    beta = (
        authors_inv_temperature(d)
        if inv_temperature is None
        else check_positive_float("inv_temperature", inv_temperature)
    )
    if map != "entmax":
        if alpha is not None:
            raise ValueError(f"alpha is an option of map='entmax' only ({map!r} has a fixed alpha)")
        return beta, {}
    if alpha is None:
        alpha = 1.5
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 1.0 < float(alpha) <= 2.0:
        raise ValueError(
            f"alpha must be a number in (1, 2] (1 would be soft-max, which is never sparse), got {alpha!r}"
        )
    return beta, {"alpha": float(alpha)}


def check_tau(tau: object) -> float:
    """``tau`` must be a finite number >= 0."""
    if isinstance(tau, bool) or not isinstance(tau, numbers.Real):
        raise TypeError(f"tau must be a real number >= 0, got {type(tau).__name__} {tau!r}")
    tau = float(tau)
    if not math.isfinite(tau) or tau < 0:
        raise ValueError(f"tau must be a finite number >= 0 (0 is the deterministic k-medoids step), got {tau}")
    return tau
