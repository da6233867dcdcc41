"""Chapter 12's measurements: one trained layer for any number of clusters, tested the same way as
Lloyd's algorithm and its usual improvements at every k.

* :func:`permutation_test` -- how much a layer trained at one k depends on how the clusters are
  numbered, and what averaging it over all numberings (:func:`kmtlib.equivariant.symmetrised`)
  leaves of it.
* :func:`fair_test` -- for each k, the same tasks and the same initial centres for every method: a
  random k-subset of the points (the layer, Lloyd, best of R Lloyd restarts) and k-means++ seeds
  computed once (k-means++ then Lloyd); per task the log objective after ``steps`` steps and after
  polishing every method's result with Lloyd run to convergence.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

import kmtlib
from kmtlib import KMeansTransformer
from kmtlib.chunks import in_chunks
from kmtlib.equivariant import symmetrised

from .shipped import ShippedRun, require_runs

FORMS: dict[str, dict[str, object]] = {
    "ones (w = 1)": {"embedding": "onehot", "cluster_broadcast": "ones", "loss_temperature_rule": "fixed"},
    "mean (w = 1/k)": {"embedding": "onehot", "cluster_broadcast": "mean", "loss_temperature_rule": "fixed"},
    "unit (w = 1/sqrt k)": {"embedding": "onehot", "cluster_broadcast": "unit", "loss_temperature_rule": "fixed"},
    "ones, loss temperature per k": {
        "embedding": "onehot",
        "cluster_broadcast": "ones",
        "loss_temperature_rule": "log_k",
    },
    "random codes (m = 32)": {"embedding": "codes", "code_width": 32},
}
"""The parametrisations chapter 12 compares, by name: the training options that tell their runs
apart (``scripts/train_any_k.sh`` with ``FORM`` unset, ``mean``, ``unit``, ``logloss``, ``codes``)."""


def form_runs(folder, **config) -> dict[str, ShippedRun]:
    """The first run (in the paper's seed order) of every parametrisation of :data:`FORMS` under
    ``folder`` whose training configuration also has the values ``config``; ``FileNotFoundError``
    naming the folder and the form where one is missing."""
    out = {}
    for form, options in FORMS.items():
        options = dict(options)
        embedding = str(options.pop("embedding"))
        runs = require_runs(embedding, folder, max_runs=1, **options, **config)
        out[form] = runs[0]
    return out


POLISH_STEPS = 100
"""Lloyd steps of the polish at most: enough for every task of the chapter to reach a fixed point
(:func:`fair_test` records how many did not)."""

POLISH_ROUND = 10
"""Lloyd steps between two looks at whether every task of the batch has reached a fixed point."""


def polish(
    X: torch.Tensor, C: torch.Tensor, generator: torch.Generator, max_steps: int = POLISH_STEPS
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lloyd's algorithm from ``C`` (empty cluster: a random point) until every task is at a fixed
    point, at most ``max_steps`` steps: (final objective (B,), whether a task's centres still moved
    in the last step (B,) bool).

    The numbers are those of ``kmtlib.lloyd(X, C, max_steps, empty="random", generator=generator)``:
    the steps run in rounds of :data:`POLISH_ROUND` from the same generator (which draws for every
    cluster at every step, so its stream does not depend on where the rounds end), and the run stops
    after a round whose last step moved no centre and emptied no cluster of any task; such a task
    repeats its centres for the remaining steps."""
    if max_steps < 1:
        raise ValueError(f"the polish needs at least one Lloyd step, got max_steps={max_steps}")
    done = 0
    while True:
        steps = min(POLISH_ROUND, max_steps - done)
        run = kmtlib.lloyd(X, C, steps, empty="random", generator=generator)
        done += steps
        C = run.final_centers
        moved = (run.centers[:, -1] - run.centers[:, -2]).abs().amax(dim=(1, 2)) > 0
        assert run.n_empty is not None  # (Lloyd's algorithm records its empty clusters at every step)
        settled = ~moved & (run.n_empty[:, -1] == 0)
        if done >= max_steps or bool(settled.all()):
            return run.objective[:, -1], moved


def _batched(model: KMeansTransformer, X: torch.Tensor, C0: torch.Tensor, steps: int, batch: int) -> torch.Tensor:
    """Final centres (B, k, d) of the model, ``batch`` tasks at a time (its self-attention is n x n)."""
    with torch.no_grad():
        return in_chunks(lambda Xc, Cc: model(Xc, Cc, steps=steps).final_centers, X, C0, size=batch)


def _log_objective(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    return kmtlib.kmeans_objective(X, C).log()


def renumbered(C0: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``C0`` (B, k, d) with the centres of every task in a random order of their own."""
    B, k, d = C0.shape
    order = torch.stack([torch.randperm(k, generator=generator) for _ in range(B)]).to(C0.device)
    return torch.gather(C0, 1, order.unsqueeze(-1).expand(B, k, d))


def renumbering_change(
    model: KMeansTransformer, X: torch.Tensor, C0: torch.Tensor, steps: int, generator: torch.Generator, batch: int = 32
) -> float:
    """The mean absolute per-task change of the final log objective when the initial centres are
    renumbered (0 for a layer that cannot tell the numbering, up to the order of float sums)."""
    as_given = _log_objective(X, _batched(model, X, C0, steps, batch))
    permuted = _log_objective(X, _batched(model, X, renumbered(C0, generator), steps, batch))
    return float((as_given - permuted).abs().mean())


def permutation_test(
    model: KMeansTransformer, X: torch.Tensor, C0: torch.Tensor, steps: int, generator: torch.Generator, batch: int = 32
) -> dict[str, float]:
    """The model from ``C0`` and from ``C0`` with its centres renumbered (one random permutation per
    task), and the symmetrised model from ``C0``: mean final log objectives and the mean absolute
    per-task change that the renumbering makes."""
    as_given = _log_objective(X, _batched(model, X, C0, steps, batch))
    permuted = _log_objective(X, _batched(model, X, renumbered(C0, generator), steps, batch))
    averaged = _log_objective(X, _batched(symmetrised(model).eval(), X, C0, steps, batch))
    return {
        "as_trained": float(as_given.mean()),
        "renumbered": float(permuted.mean()),
        "mean_abs_change": float((as_given - permuted).abs().mean()),
        "symmetrised": float(averaged.mean()),
    }


@dataclass
class FairTest:
    """Per task and method, the final log objective (``table``: columns k, n, task, method,
    log_objective, polished) and the compute-matched number of Lloyd restarts per k."""

    table: pd.DataFrame
    restarts: dict[int, int]
    not_converged: int

    def by_k(self, column: str = "log_objective") -> pd.DataFrame:
        """Mean over tasks, one row per (k, n), one column per method."""
        return self.table.pivot_table(index=["k", "n"], columns="method", values=column, aggfunc="mean")

    def against(self, method: str, baseline: str = "Lloyd", column: str = "log_objective") -> pd.DataFrame:
        """Per (k, n): the mean per-task difference ``method - baseline`` of the log objective (below
        0: better than the baseline) and the share of tasks where ``method`` is lower (wins)."""
        wide = self.table.pivot_table(index=["k", "n", "task"], columns="method", values=column)
        diff = wide[method] - wide[baseline]
        grouped = diff.groupby(level=["k", "n"])
        return pd.DataFrame({"mean_difference": grouped.mean(), "win_rate": (diff < 0).groupby(level=["k", "n"]).mean(),
                             "sem": grouped.std() / np.sqrt(grouped.count())})  # fmt: skip


def _restarts_matched(layer_seconds: float, lloyd_seconds: float, cap: int) -> int:
    return int(min(cap, max(1, round(layer_seconds / max(lloyd_seconds, 1e-9)))))


def fair_test(
    models: Sequence[KMeansTransformer],
    ks: Sequence[int],
    n_tasks: int,
    ns: Sequence[int] | None = None,
    *,
    d: int = 32,
    steps: int = 20,
    generator_for,
    device: torch.device | str = "cpu",
    max_restarts: int = 32,
    batch: int = 32,
    ns_by_k: dict[int, int] | None = None,
    seeded_models: int | None = None,
) -> FairTest:
    """Every method on the same tasks from the same initial centres, at every ``k`` (and every ``n``
    of ``ns``, default 512; or the ``n`` that ``ns_by_k`` gives each k).

    Methods: each model (named ``layer 1``, ``layer 2``, ... in the order given) and ``Lloyd`` from a
    random k-subset ``C0`` of the points; ``k-means++ then Lloyd`` from k-means++ seeds, and each
    model from the same seeds for the same steps (``k-means++ then layer 1``, ...; the first
    ``seeded_models`` models, all of them when None, none when 0); ``best of R
    Lloyd`` (R random k-subsets, ``C0`` the first, the lowest final objective per task), with R the
    number of Lloyd runs that cost as much time as one run of the first model (measured here on these
    tasks, capped at ``max_restarts``). Empty clusters: Lloyd re-seeds them at a random data
    point (the paper's rule). ``generator_for(k, n, stream)`` gives the generators (a chapter's
    seeded generator), so that every method sees the same draws whatever the list of methods.
    """
    if seeded_models is not None and not 0 <= seeded_models <= len(models):
        raise ValueError(
            f"seeded_models must be between 0 and the number of models ({len(models)}), got {seeded_models}"
        )
    if ns_by_k is not None:
        cases = [(k, ns_by_k[k]) for k in ks]
    else:
        cases = [(k, n) for n in (list(ns) if ns is not None else [512]) for k in ks]
    rows, restarts, not_converged = [], {}, 0
    for k, n in cases:
        g = generator_for(k, n, 0)
        X = kmtlib.sample_tasks(n_tasks, n, d, k, generator=g, device=device)
        assert isinstance(X, torch.Tensor)  # (the points alone, no mixture asked for)
        C0 = kmtlib.init_centers(X, k, "random", generator=g)
        Cpp = kmtlib.init_centers(X, k, "kmeans++", generator=generator_for(k, n, 1))
        finals: dict[str, torch.Tensor] = {}
        t0 = time.perf_counter()
        for i, model in enumerate(models):
            finals[f"layer {i + 1}"] = _batched(model, X, C0, steps, batch)
            if i == 0:
                layer_seconds = time.perf_counter() - t0
        lloyd = kmtlib.lloyd(X, C0, steps, empty="random", generator=generator_for(k, n, 2))
        finals["Lloyd"] = lloyd.final_centers
        t1 = time.perf_counter()
        kmtlib.lloyd(X, C0, steps, empty="random", generator=generator_for(k, n, 2))
        lloyd_seconds = time.perf_counter() - t1
        finals["k-means++ then Lloyd"] = kmtlib.lloyd(X, Cpp, steps, empty="random",
                                                      generator=generator_for(k, n, 3)).final_centers  # fmt: skip
        for i, model in enumerate(models[:seeded_models]):  # from the same k-means++ centres
            finals[f"{SEEDED_LAYER}{i + 1}"] = _batched(model, X, Cpp, steps, batch)
        R = restarts[k] = _restarts_matched(layer_seconds, lloyd_seconds, max_restarts)
        best_C, best_obj = finals["Lloyd"], kmtlib.kmeans_objective(X, finals["Lloyd"])
        g_restart = generator_for(k, n, 4)
        for _ in range(R - 1):
            C_r = kmtlib.lloyd(X, kmtlib.init_centers(X, k, "random", generator=g_restart), steps, empty="random",
                               generator=g_restart).final_centers  # fmt: skip
            obj = kmtlib.kmeans_objective(X, C_r)
            better = obj < best_obj
            best_C = torch.where(better.view(-1, 1, 1), C_r, best_C)
            best_obj = torch.minimum(obj, best_obj)
        finals["best of R Lloyd"] = best_C
        for method, C in finals.items():
            polished_objective, moved = polish(X, C, generator_for(k, n, 5))
            not_converged += int(moved.sum())
            final = _log_objective(X, C).cpu().numpy()
            polished = polished_objective.log().cpu().numpy()
            rows += [
                {"k": k, "n": n, "task": t, "method": method, "log_objective": float(final[t]),
                 "polished": float(polished[t])}
                for t in range(n_tasks)
            ]  # fmt: skip
    return FairTest(pd.DataFrame(rows), restarts, not_converged)


def forms_test(
    models: dict[str, KMeansTransformer],
    ks: Sequence[int],
    n_tasks: int,
    *,
    n: int = 512,
    d: int = 32,
    steps: int = 20,
    generator_for,
    device: torch.device | str = "cpu",
    batch: int = 32,
) -> pd.DataFrame:
    """The parametrisations compared: for each ``k``, each named model and Lloyd from the same
    random k-subset of the same tasks (drawn as :func:`fair_test` draws them, so the tasks are
    those of the main test); per (form, k) the mean per-task difference of the final log
    objective from Lloyd's (below 0: better) and the share of tasks won."""
    rows = []
    for k in ks:
        g = generator_for(k, n, 0)
        X = kmtlib.sample_tasks(n_tasks, n, d, k, generator=g, device=device)
        assert isinstance(X, torch.Tensor)
        C0 = kmtlib.init_centers(X, k, "random", generator=g)
        lloyd = kmtlib.lloyd(X, C0, steps, empty="random", generator=generator_for(k, n, 2))
        reference = _log_objective(X, lloyd.final_centers)
        for form, model in models.items():
            difference = _log_objective(X, _batched(model, X, C0, steps, batch)) - reference
            rows.append({"form": form, "k": k, "minus_lloyd": float(difference.mean()),
                         "win_rate": float((difference < 0).double().mean())})  # fmt: skip
    return pd.DataFrame(rows)


def layer_mean(result: FairTest, column: str = "log_objective") -> pd.Series:
    """The mean over the shipped layers of their per-(k, n) mean log objective."""
    wide = result.by_k(column)
    layers = [c for c in wide.columns if c.startswith("layer ")]
    return wide[layers].mean(axis=1)


def _ks_text(ks: Sequence[int]) -> str:
    return ", ".join(str(k) for k in ks) if ks else "none"


@dataclass(frozen=True)
class Verdict:
    """What :func:`fair_test` says about the layers, k by k (``n`` = the first of the test).

    ``below_lloyd``: the k where the layers' mean log objective is below Lloyd's from the same random
    centres; ``beaten_by``: per baseline (``k-means++ then Lloyd``, ``best of R Lloyd``), the k where
    the baseline's mean is below the layers'; ``win_rate``: per k, the share of tasks on which a
    layer ends below Lloyd (mean over the layers); ``wins_under_half``: the k where that share is
    below one half; ``scaled_below_lloyd``: the same as ``below_lloyd`` for a second test (n growing
    with k), if one was given."""

    ks: tuple[int, ...]
    below_lloyd: tuple[int, ...]
    beaten_by: dict[str, tuple[int, ...]]
    win_rate: dict[int, float]
    wins_under_half: tuple[int, ...]
    large_ks: tuple[int, ...]
    below_kmeanspp_large: tuple[int, ...]
    scaled_below_lloyd: tuple[int, ...] | None = None
    seeded_below_lloyd: tuple[int, ...] | None = None
    """The k where the layers started from the k-means++ seeds end below Lloyd from the same seeds
    after as many steps (None: the test did not run them)."""
    seeded_layers: str = "the layers'"
    """Whose mean ``seeded_below_lloyd`` compares: every layer's, or the first ones' when the test ran
    only those from the k-means++ seeds."""

    def sentences(self) -> list[str]:
        """The verdict in words, every number and every k from the fields above."""
        n = len(self.ks)
        not_below = [k for k in self.ks if k not in self.below_lloyd]
        out = [f"From the same random centres, the layers' mean log objective is below Lloyd's at "
               f"{len(self.below_lloyd)} of {n} values of k" + (f" (not at k = {_ks_text(not_below)})." if not_below
                                                                else " (all of them).")]  # fmt: skip
        for baseline, ks in self.beaten_by.items():
            out.append(f"Against {baseline}, the layers' mean is higher at {len(ks)} of {n} values of k"
                       + (f" (k = {_ks_text(ks)})." if ks else "."))  # fmt: skip
        if self.wins_under_half:
            shares = ", ".join(f"{self.win_rate[k]:.0%} at k = {k}" for k in self.wins_under_half)
            out.append(f"A layer ends below Lloyd on fewer than half of the tasks at k = "
                       f"{_ks_text(self.wins_under_half)} ({shares}).")  # fmt: skip
        else:
            out.append("A layer ends below Lloyd on at least half of the tasks at every k tested.")
        if self.large_ks:
            out.append(
                f"Above k = 16 the layers' mean is below k-means++ then Lloyd at "
                f"{len(self.below_kmeanspp_large)} of {len(self.large_ks)} values of k"
                + (f" (k = {_ks_text(self.below_kmeanspp_large)})." if self.below_kmeanspp_large else ".")
            )
        if self.seeded_below_lloyd is not None:
            not_below = [k for k in self.ks if k not in self.seeded_below_lloyd]
            out.append(f"From the same k-means++ centres and the same number of steps, {self.seeded_layers} mean log "
                       f"objective is below Lloyd's at {len(self.seeded_below_lloyd)} of {n} values of k"
                       + (f" (not at k = {_ks_text(not_below)})." if not_below else " (all of them)."))  # fmt: skip
        if self.scaled_below_lloyd is not None:
            out.append(f"With n growing with k, the layers' mean is below Lloyd's at {len(self.scaled_below_lloyd)} "
                       f"of {n} values of k.")  # fmt: skip
        return out

    def metrics(self) -> dict[str, object]:
        """Flat numbers for ``chapter.record`` (the prose cites them with the ``{metric}`` role)."""
        return {
            "k_tested": len(self.ks),
            "k_below_lloyd": len(self.below_lloyd),
            "k_kmeanspp_below_layer": len(self.beaten_by.get("k-means++ then Lloyd", ())),
            "k_restarts_below_layer": len(self.beaten_by.get("best of R Lloyd", ())),
            "k_wins_under_half": ", ".join(str(k) for k in self.wins_under_half) or "none",
            "k_large_tested": len(self.large_ks),
            "k_large_below_kmeanspp": len(self.below_kmeanspp_large),
            "win_rate": [float(self.win_rate[k]) for k in self.ks],
        } | ({} if self.seeded_below_lloyd is None else {"k_seeded_layer_below_lloyd": len(self.seeded_below_lloyd)})


SEEDED_LAYER = "k-means++ then layer "
"""The prefix of the layers' names in :func:`fair_test` when they start from the k-means++ seeds."""

BASELINES = ("k-means++ then Lloyd", "best of R Lloyd")
"""The stronger baselines the verdict names, as :func:`fair_test` names them."""


def verdict(test: FairTest, scaled: FairTest | None = None, large_above: int = 16) -> Verdict:
    """The chapter's conclusions from :func:`fair_test` results (the first ``n`` of ``test``; for
    ``scaled`` the n of each k): which k the layers win and lose against Lloyd, against the two
    stronger baselines, and where they win fewer than half of the tasks."""
    means = test.by_k().groupby(level="k").first()
    layers = layer_mean(test).groupby(level="k").first()
    ks = tuple(int(k) for k in means.index)
    layer_names = [c for c in means.columns if c.startswith("layer ")]
    seeded_names = [c for c in means.columns if c.startswith(SEEDED_LAYER)]
    rates = pd.concat([test.against(name).groupby(level="k").first().win_rate for name in layer_names], axis=1)
    win_rate = {int(k): float(v) for k, v in rates.mean(axis=1).items()}
    large = tuple(k for k in ks if k > large_above)
    scaled_below = None
    if scaled is not None:
        s_means, s_layers = scaled.by_k().groupby(level="k").first(), layer_mean(scaled).groupby(level="k").first()
        scaled_below = tuple(int(k) for k in s_means.index if s_layers[k] < s_means.loc[k, "Lloyd"])
    return Verdict(
        ks=ks,
        below_lloyd=tuple(k for k in ks if layers[k] < means.loc[k, "Lloyd"]),
        beaten_by={b: tuple(k for k in ks if means.loc[k, b] < layers[k]) for b in BASELINES if b in means.columns},
        win_rate=win_rate,
        wins_under_half=tuple(k for k in ks if win_rate[k] < 0.5),
        large_ks=large,
        below_kmeanspp_large=tuple(k for k in large if layers[k] < means.loc[k, "k-means++ then Lloyd"]),
        scaled_below_lloyd=scaled_below,
        seeded_below_lloyd=tuple(
            k for k in ks if means.loc[k, seeded_names].mean() < means.loc[k, "k-means++ then Lloyd"]
        )
        if seeded_names
        else None,
        seeded_layers=_seeded_layers_text(len(seeded_names), len(layer_names)),
    )


def _seeded_layers_text(seeded: int, layers: int) -> str:
    """Whose mean the verdict's k-means++ sentence gives: all layers, or the first of them."""
    if seeded >= layers:
        return "the layers'"
    return "the first layer's" if seeded == 1 else f"the first {seeded} layers'"


def renumbering_sentence(as_trained: float, renumbered: float, symmetrised: float, lloyd: float) -> str:
    """What the renumbering test of the layers trained at one k says about where their lead over
    Lloyd (mean final log objectives, lower is better) comes from."""
    keeps = renumbered < lloyd
    first = (f"Renumbered, the layers stay below Lloyd ({renumbered:.2f} against {as_trained:.2f} as trained; "
             f"Lloyd {lloyd:.2f})" if keeps else
             f"Renumbered, the layers lose their lead ({renumbered:.2f} against {as_trained:.2f} as trained; "
             f"Lloyd {lloyd:.2f})")  # fmt: skip
    if symmetrised < lloyd:
        return first + f"; averaged over all numberings they stay below it too ({symmetrised:.2f})."
    if not keeps:
        return first + f"; averaged over all numberings they end at {symmetrised:.2f}."
    return first + (
        ": the lead does not rest on one numbering, but on the part of the weights that treats the "
        f"clusters unequally, since averaging over all numberings, which removes that part, takes them "
        f"to {symmetrised:.2f}."
    )


def training_range_note(k_min: int, k_max: int, held_out: Sequence[int]) -> str:
    """``"trained at k = 2..16 except 5, 9, 13"`` (for captions and tables)."""
    held = ", ".join(str(k) for k in held_out)
    return f"trained at k = {k_min}..{k_max}" + (f" except {held}" if held else "")


__all__ = [
    "BASELINES",
    "FORMS",
    "POLISH_ROUND",
    "POLISH_STEPS",
    "FairTest",
    "Verdict",
    "fair_test",
    "form_runs",
    "forms_test",
    "layer_mean",
    "permutation_test",
    "polish",
    "renumbered",
    "renumbering_change",
    "renumbering_sentence",
    "training_range_note",
    "verdict",
]
