"""The weight matrices of Theorems 2.1 and 2.2: coordinate selectors of the tokens.

Plain tensors, below the layer: :mod:`kmtlib.constructions` loads them into a layer. Nothing
compares a layer's weights with them: where hard self-attention has a closed form is read from the
block's own weights (:func:`kmtlib.fast.choice.closed_form_self_attention`).
"""

from __future__ import annotations

import torch

from ._checks import check_choice, check_int

ATTENTION_KINDS: tuple[str, ...] = ("euclidean", "dot")
"""``"euclidean"``: Theorem 2.1 (Euclidean attention, tokens of width d + k).
``"dot"``: Theorem 2.2 (dot-product attention on norm-augmented tokens of width d + k + 2, plus a
feed-forward block with rectified-quadratic activation on the centres)."""


def coordinate_selector(
    D: int, start: int, stop: int, value: float = 1.0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """The D x D diagonal matrix with ``value`` on coordinates ``start..stop-1`` and 0 elsewhere
    (the paper's ``I^{i:j}_D``, 0-based and half-open here)."""
    W = torch.zeros(D, D, dtype=dtype)
    idx = torch.arange(start, stop)
    W[idx, idx] = value
    return W


def theorem_weights(
    d: int, k: int, attention: str = "euclidean", dtype: torch.dtype = torch.float64
) -> dict[str, dict[str, torch.Tensor]]:
    """The weight matrices of Theorem 2.1 (``attention="euclidean"``) or 2.2 (``"dot"``).

    Returns ``{"CAX": {"Q", "K", "V"}, "SAX": ..., "CAC": ..., "SAC": ...}`` with D x D matrices
    acting on row tokens as ``token @ W.T`` (i.e. ``W @ token`` in the paper's column layout), and
    for ``"dot"`` also ``"FFN": {"W1": (2d, D), "W2": (D, 2d)}``.

    Theorem 2.1 (D = d + k; data coordinates ``:d``, one-hot coordinates ``d:``)::

        CAX: Q = K = I^{:d},  V = +I^{d:}      SAX: Q = K = I^{:d},  V = -I^{d:}
        CAC: Q = K = I^{d:},  V = +I^{:d}      SAC: Q = K = I^{d:},  V = -I^{:d}

    Theorem 2.2 (D = d + k + 2; coordinates ``s = d+k`` hold ||.||^2 and ``o = d+k+1`` the constant
    1): CAX and SAX queries are [x; -1/2] in coordinates (:d, s) (``Q[s, o] = -1/2``), their keys
    [x; ||x||^2] (``K = I^{:d} + e_s e_s^T``), so ``q.k = x.c - ||c||^2/2``; CAC and SAC read the
    one-hot coordinates as in Theorem 2.1; SAC's value also erases the norm coordinate
    (``V = -(I^{:d} + e_s e_s^T)``); the feed-forward block writes ||c||^2 back into ``s``.
    """
    d = check_int("d", d, minimum=1)
    k = check_int("k", k, minimum=1)
    check_choice("attention", attention, ATTENTION_KINDS)
    D = d + k + (2 if attention == "dot" else 0)
    data = coordinate_selector(D, 0, d, dtype=dtype)
    ids = coordinate_selector(D, d, d + k, dtype=dtype)
    if attention == "euclidean":
        return {
            "CAX": {"Q": data, "K": data.clone(), "V": ids.clone()},
            "SAX": {"Q": data.clone(), "K": data.clone(), "V": -ids},
            "CAC": {"Q": ids.clone(), "K": ids.clone(), "V": data.clone()},
            "SAC": {"Q": ids.clone(), "K": ids.clone(), "V": -data},
        }
    s, o = d + k, d + k + 1
    query = data.clone()
    query[s, o] = -0.5
    key = data.clone()
    key[s, s] = 1.0
    erase_center = -key
    W1 = torch.zeros(2 * d, D, dtype=dtype)
    W1[:d, :d] = torch.eye(d, dtype=dtype)
    W1[d:, :d] = -torch.eye(d, dtype=dtype)
    W2 = torch.zeros(D, 2 * d, dtype=dtype)
    W2[s, :] = 1.0
    return {
        "CAX": {"Q": query, "K": key, "V": ids.clone()},
        "SAX": {"Q": query.clone(), "K": key.clone(), "V": -ids},
        "CAC": {"Q": ids.clone(), "K": ids.clone(), "V": data.clone()},
        "SAC": {"Q": ids.clone(), "K": ids.clone(), "V": erase_center},
        "FFN": {"W1": W1, "W2": W2},
    }
