"""Unnormalised attention weights ``U`` and their normaliser ``Z``: the weights are ``U / Z`` and a
block applies ``(U @ V) / Z`` (plain formula: the normalised weights of the maps of
:mod:`kmtlib.attention`, ``"softmax"``, ``"hardmax"`` and ``"linear"``, times ``V``).

One division per output instead of one per weight (as Lloyd's ``sums / counts``) and one pass
fewer over the (B, m, r) matrix; where every row of hard attention has one winner (the CPU proves
it by two sums) there is nothing to divide. The same operations as the normalised maps of
:mod:`kmtlib.attention` up to that order of the division.
"""

from __future__ import annotations

import torch

from .._numerics import times_gamma


def unnormalised_row_weights_(
    scores: torch.Tensor, gamma: float, *, hard: bool, linear: bool = False, owned: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(U, Z)`` for scores (B, m, r), row by row: with ``hard``, U = 1 on the keys attaining the
    row maximum, 0 elsewhere (exact comparison), Z = their count (None on the CPU when every count
    is 1); with ``linear``, U = the scores, Z = the row sum, a zero row becoming a row of ones with
    Z = r (uniform weights, the empty-cluster rule); else the soft-max at inverse temperature
    ``gamma``, U = exp(gamma (s - max s)), Z = the row sum (>= 1). ``scores`` may be overwritten
    when ``owned`` (a fresh tensor); otherwise (a view of someone's tokens) it is left untouched."""
    if not linear:
        if not owned:
            scores = scores.clone()
        top = scores.amax(dim=-1, keepdim=True)
        if hard:
            scores.eq_(top)  # 1.0 where a key attains the row maximum, else 0.0 (dtype kept)
            if one_winner_per_row(scores, top):
                return scores, None  # every count is 1: nothing to normalise
        else:
            times_gamma(scores.sub_(top), gamma, in_place=True).exp_()
        return scores, row_sums(scores)
    total = row_sums(scores)
    empty = total == 0
    if scores.device.type != "cpu" or bool(empty.any()):  # (no device sync on CUDA)
        scores = scores.masked_fill(empty, 1.0) if not owned else scores.masked_fill_(empty, 1.0)
        total = torch.where(empty, torch.full_like(total, scores.shape[-1]), total)
    return scores, total


def one_winner_per_row(winners: torch.Tensor, top: torch.Tensor) -> bool:
    """Whether every row of the 0/1 matrix ``winners`` (B, m, r) has exactly one 1, proved by two
    sums instead of counting row by row (CPU only: on CUDA the test would wait for the device).

    Only a NaN row maximum ``top`` leaves a row without winner; with none (their sum is not NaN)
    every row has at least one, so a total of m rows means exactly one each. The total of 0/1
    values is exact while it stays below 2^24 (float32) or 2^53 (float64); larger totals are
    counted row by row.
    """
    if winners.device.type != "cpu":
        return False
    rows = winners.numel() // max(winners.shape[-1], 1)
    if rows >= 2.0 / torch.finfo(winners.dtype).eps:  # (2^24 for float32, 2^53 for float64)
        return False
    return not bool(torch.isnan(top.sum())) and float(winners.sum()) == rows


def row_sums(w: torch.Tensor) -> torch.Tensor:
    """``w.sum(-1, keepdim=True)``; along a short contiguous last dimension as a matrix product
    with a vector of ones, which is faster than the reduction there (exact for 0/1 weights)."""
    if w.stride(-1) == 1 and w.shape[-1] <= 64 and w.dim() == 3 and w.shape[1] > 4 * w.shape[-1]:
        return torch.bmm(w, w.new_ones(w.shape[0], w.shape[-1], 1))
    return w.sum(dim=-1, keepdim=True)
