"""The book's published numbers held against a reference build, so that none of them moves unnoticed.

Every number the index states from the build and every number of a chapter's opening box (the
``{metric}`` references of ``book/index.md`` and of each chapter's "In this chapter" box; see
:func:`guarded_keys`) has an entry in ``data/book_build/reference_metrics.json`` (the book profile)
or ``reference_metrics_quick.json`` (the quick profile of the tests): the value the reference
build recorded, how far a later build may move it (with the reason) and the commit of the
reference. A build whose ``metrics.json`` moves a number beyond its tolerance fails, naming the
chapter, the metric, both values and the tolerance (:func:`check_build`).

The tolerances (:func:`tolerance_for`), by what a number is:

* ``exact``: fixed by the build's settings or read from shipped files (sizes, seed counts, the
  shipped training logs, quoted constants): any change is a change of result (tolerance 0; a
  float may move by 1e-9 relative, the rounding of another CPU's kernels);
* ``rounding``: an exactness claim whose value is the rounding error itself (largest centre
  difference of Theorem 2.1, ...): it may move within rounding, never beyond (an absolute bound);
* ``sampled``: computed from random draws of the chapter's seed: three standard errors, estimated
  from the spread over seeds the chapter records where it does (seed ranges, the values a mean over
  repeats is taken of), from the sample size
  for a share or count (binomial), and otherwise a stated bound (for an average log-objective
  three times the 0.01 nats by which two samples of 320 tasks differ, scaled to the chapter's
  task count; 5 % of the value for anything else; the reason says it is a bound);
* a point of a grid (Chapter 3's gamma thresholds): tolerance 0, as a move changes the statement;
* ``not guarded``: timings and what depends on them; listed, never compared.

A build's value must be of its reference's type (a flag is not a number: ``True == 1`` does not
pass), and an entry without a valid tolerance is an error naming it, never a number left
unguarded. Every command ends a damaged or missing reference file or ``metrics.json`` with one
``error:`` line naming it.

Updating a reference is deliberate (``python -m kmtbook.reference_metrics update``): it rewrites the
named entries from the current build's ``metrics.json`` files and appends the reason to
``data/book_build/README.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .reference_file import (  # noqa: F401  (the file's checks, used here and named by the tests)
    KINDS,
    check_entry,
    check_reference_value,
    check_tolerance,
    parse_key,
    read_references,
    value_type,
    write_references,
)

PROFILES = ("book", "quick")
REFERENCE_FILES = {"book": "data/book_build/reference_metrics.json",
                   "quick": "data/book_build/reference_metrics_quick.json"}  # fmt: skip
"""Where each profile's references live, relative to the repository root."""
README = "data/book_build/README.md"
UPDATE_LOG_HEADING = "## Changes to the reference numbers"

_ROLE = re.compile(r"\{metric\}`([^`]*)`")
_REFERENCE = re.compile(r"^(?:(?P<chapter>\d[\w-]*):)?(?P<name>[A-Za-z_]\w*)(?:\[(?P<index>-?\d+)\])?(?::[^:]*)?$")
BOX_START = ":::{admonition} In this chapter"


# --- which numbers are guarded ---------------------------------------------------------------------------


def chapter_stems(root: Path) -> list[str]:
    """The chapters of the book: ``book/NN_slug.md`` stems, in order."""
    return sorted(p.stem for p in (Path(root) / "book").glob("[0-9]*.md"))


def _keys_in(text: str, own_chapter: str | None) -> list[str]:
    keys = []
    for reference in _ROLE.findall(text):
        match = _REFERENCE.match(reference.strip())
        if match is None:
            continue  # (the build reports a malformed reference itself)
        chapter = match["chapter"] or own_chapter
        if chapter is None:
            continue
        keys.append(f"{chapter}:{match['name']}" + (f"[{match['index']}]" if match["index"] else ""))
    return keys


def opening_box(text: str) -> str:
    """The "In this chapter" box of a chapter's source (empty when it has none)."""
    start = text.find(BOX_START)
    if start < 0:
        return ""
    end = text.find("\n:::\n", start)
    return text[start:] if end < 0 else text[start:end]


def guarded_keys(root: Path) -> list[str]:
    """Every number the index states from the build and every number of each chapter's opening box,
    as keys ``<chapter>:<metric>`` or ``<chapter>:<metric>[<index>]``, sorted, each once."""
    root = Path(root)
    keys = set(_keys_in((root / "book" / "index.md").read_text(encoding="utf-8"), None))
    for stem in chapter_stems(root):
        keys.update(_keys_in(opening_box((root / "book" / f"{stem}.md").read_text(encoding="utf-8")), stem))
    return sorted(keys)




def metric_value(metrics: Mapping[str, Any], name: str, index: int | None) -> Any:
    """The number ``metrics[name]`` (or its element ``index``); ``KeyError`` naming what is missing."""
    if name not in metrics:
        raise KeyError(f"no metric {name!r}")
    value = metrics[name]
    if index is None:
        return value
    try:
        return value[index]
    except (TypeError, IndexError):
        raise KeyError(f"metric {name!r} has no element [{index}]") from None


# --- tolerances ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tolerance:
    kind: str  # "exact", "rounding", "sampled" or "not guarded"
    amount: float | None  # the largest allowed |build - reference|; None: not compared
    reason: str


NOT_GUARDED = re.compile(
    r"^11_performance:(step_speedup\w*|run_peak_rss_mb|sweep_plan_cpu_hours|targets_\w+)$"
    r"|^12_any_k:k_restarts_below_layer$"  # (the restarts R are matched to the layer's measured time)
    r"|^13_your_data:(defaults_time_ratio|equal_compute_gmean_ratio)$"  # (KMeans' n_init matched to a measured time)
)
"""Timings, and what is decided by a timing (targets met on this machine): not guarded."""

ROUNDING = {
    r"^0[24]_\w+:exact_max_\w+$": (1e-12, "float64 rounding of a computation the theorem makes exact"),
    r"^10_variants:(soft|spherical|trimmed_topk|trimmed_normmax|robust)_max_diff$":
        (1e-12, "float64 rounding: the circuit equals its reference algorithm"),
    r"^10_variants:spherical_faiss_max_diff$": (1e-5, "float32 rounding: faiss computes in float32"),
    r"^11_performance:step_loss_rel_diff$": (1e-5, "float32 rounding: the same loss from two implementations"),
}
"""Exactness claims whose value is the rounding error itself: (absolute bound, reason)."""

EXACT = re.compile(
    r":param_\w+$|:(main_)?n_seeds$|_n_seeds$|:main_onehot_seeds$|:n_settings$|:n_layers$|:train_steps$"
    r"|:k_tested$|:bar_sets_tested$|:fig3_n$|:authors_s_per_step$|:measured_full_run_min$"
    r"|^07_generalization:\w+_tasks$|^08_training_dynamics:|^10_variants:kmedoids_tie_free_tasks$"
    r"|^10_variants:kmedoids_bitwise_tasks$"
)
"""Numbers fixed by the build's settings, read from shipped files (Chapter 8 reads only the shipped
training logs; Chapter 11's full runs are shipped records) or quoted, and the count of an exactness
claim (k-medoids: every tie-free run bitwise equal to its reference): tolerance 0."""

GRID = re.compile(r"^03_temperature:curve_gamma_\w+$")
"""Points of a chapter's grid (Chapter 3's gamma at which a curve first comes within a threshold of
Lloyd's): a move to the next grid point changes the published statement, so tolerance 0."""

SEED_RANGES = {  # (min, max, count): the chapter records the spread over seeds of its median
    "05_training:main_model_t20": ("main_model_t20_min", "main_model_t20_max", "main_n_seeds"),
    "05_training:main_lloyd_t20": ("main_lloyd_t20_min", "main_lloyd_t20_max", "main_n_seeds"),
    "06_ablation_d_only:onehot_t20": ("onehot_model_min[-1]", "onehot_model_max[-1]", "onehot_n_seeds"),
    "06_ablation_d_only:none_t20": ("none_model_min[-1]", "none_model_max[-1]", "none_n_seeds"),
    "06_ablation_d_only:lloyd_t20": ("onehot_lloyd_min[-1]", "onehot_lloyd_max[-1]", "onehot_n_seeds"),
}

SEED_MEANS = {  # a mean over repeats whose values the chapter records (the metric named): the dropout effect
    "05_training:dropout_on_minus_off_t20": "dropout_on_minus_off_t20_per_seed",
    "06_ablation_d_only:onehot_t20_dropout_on_minus_off": "onehot_t20_dropout_on_minus_off_per_seed",
    "06_ablation_d_only:none_t20_dropout_on_minus_off": "none_t20_dropout_on_minus_off_per_seed",
}

COUNTS = {  # a count of ... out of the metric named: a binomial count
    "02_kmeans_transformer:exact_tasks": "param_n_tasks",
    "04_dot_product_ffn:exact_tasks": "param_n_tasks",
    "02_kmeans_transformer:exact_tasks_with_empty": "exact_tasks",
    "02_kmeans_transformer:fig3_float32_exact": "fig3_n",
    "02_kmeans_transformer:fig3_float64_exact": "fig3_n",
    "02_kmeans_transformer:fig3_float32_int_cast": "fig3_n",
    "02_kmeans_transformer:fig3_float64_int_cast": "fig3_n",
    "02_kmeans_transformer:fig3_draws_float32_int_cast_median": "fig3_n",
    "02_kmeans_transformer:fig3_draws_float64_int_cast_median": "fig3_n",
    "07_generalization:wins": "n_settings",
    "12_any_k:k_below_lloyd": "k_tested",
    "12_any_k:k_kmeanspp_below_layer": "k_tested",
    "12_any_k:k_restarts_below_layer": "k_tested",
    "12_any_k:k_wins_under_half": "k_tested",
    "13_your_data:bar_sets_met": "bar_sets_tested",
    "13_your_data:bar_sets_met_layer": "bar_sets_tested",
    "13_your_data:bar_sets_met_nopolish": "bar_sets_tested",
    "13_your_data:bar_sets_met_paper_layer": "bar_sets_tested",
}

SHARES = {  # a share of ... out of the metric named (its sample size)
    "02_kmeans_transformer:fig3_draws_float64_exact_median_share": "fig3_n",
    "02_kmeans_transformer:fig3_draws_float32_exact_median_share": "fig3_n",
    "02_kmeans_transformer:fig3_draws_float64_int_cast_median_share": "fig3_n",
    "02_kmeans_transformer:fig3_draws_float32_int_cast_median_share": "fig3_n",
}

LOG_OBJECTIVE = re.compile(r":\w*(t20|_gap|log_objective|_median|reference_gap|cost_mean_change)"
                           r"|^12_any_k:perm_(as_trained|lloyd|renumbered|symmetrised)$")
"""Averages of log k-means objectives over tasks (and their differences), in nats."""

LOG_OBJECTIVE_SPREAD_320 = 0.01
"""Two independent samples of the paper's 320 tasks give average log-objectives about 0.01 nats
apart (Chapter 1's Lloyd baselines against the authors' generator). For an average log-objective
whose spread the chapter does not record, the bound is three times that, scaled to the chapter's
tasks (``param_n_tasks``) as a standard error is, by sqrt(320 / tasks): an estimate from that one
observation, not from the number's own spread."""

RELATIVE_BOUND = 0.05
"""For any other sampled number whose spread the chapter does not record: 5 % of its value, a bound
rather than an estimate of the standard error, as the reason says."""

D2 = {2: 1.128, 3: 1.693, 4: 2.059, 5: 2.326, 6: 2.534, 7: 2.704, 8: 2.847, 9: 2.970, 10: 3.078}
"""The expected range of ``n`` standard normal draws (Tippett's d2): a range over ``n`` seeds divided
by ``D2[n]`` estimates their standard deviation."""


def _element(metrics: Mapping[str, Any], reference: str) -> Any:
    """``metrics["name"]`` or, for ``"name[i]"``, its element ``i``."""
    name, _, index = reference.partition("[")
    return metrics[name] if not index else metrics[name][int(index.rstrip("]"))]


def _seed_range_tolerance(key: str, value: Any, metrics: Mapping[str, Any], low: str, high: str,
                          count: str) -> Tolerance:  # fmt: skip
    n = int(metrics[count])
    spread = float(_element(metrics, high)) - float(_element(metrics, low))
    if n < 2 or spread <= 0:
        return _bound(key, value, metrics, f"one seed only ({count} = {n}): no spread over seeds to estimate from")
    sd = spread / D2.get(n, math.sqrt(n) * 1.0)
    se = 1.2533 * sd / math.sqrt(n)  # the standard error of a median is about 1.25 times that of a mean
    return Tolerance("sampled", round(3 * se, 4),
                     f"3 standard errors of a median over {n} seeds, the seeds' spread estimated from their "
                     f"range ({low} to {high}: {spread:.3f}) / d2({n})")


def _seed_mean_tolerance(key: str, value: Any, metrics: Mapping[str, Any], values_name: str) -> Tolerance:
    values = [float(v) for v in metrics[values_name]]
    if len(values) < 2:
        return _bound(key, value, metrics, f"one repeat only ({values_name}): no spread to estimate from")
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return Tolerance("sampled", round(3 * sd / math.sqrt(len(values)), 4),
                     f"3 standard errors of a mean over {len(values)} repeats, from their spread ({values_name})")


def _count_tolerance(value: float, total: float, what: str) -> Tolerance:
    p = (value + 0.5) / (total + 1)  # (kept off 0 and 1, where a binomial spread would vanish)
    se = math.sqrt(total * p * (1 - p))
    return Tolerance("sampled", max(1.0, math.floor(3 * se)),
                     f"3 binomial standard errors of a count out of {what} = {total:g} (at least 1)")


def _share_tolerance(value: float, total: float, what: str) -> Tolerance:
    p = min(max(value, 0.5 / total), 1 - 0.5 / total)
    return Tolerance("sampled", round(3 * math.sqrt(p * (1 - p) / total), 6),
                     f"3 binomial standard errors of a share of {what} = {total:g}")


def _bound(key: str, value: Any, metrics: Mapping[str, Any],
           why: str = "the chapter records no spread") -> Tolerance:  # fmt: skip
    if LOG_OBJECTIVE.search(key.split("[")[0]):
        # (a live run's numbers are measured on its own tasks: param_live_tasks where the chapter has it)
        live = key.split(":", 1)[-1].startswith("live_") and "param_live_tasks" in metrics
        tasks = int(metrics.get("param_live_tasks" if live else "param_n_tasks") or 320)
        amount = round(3 * LOG_OBJECTIVE_SPREAD_320 * math.sqrt(320 / tasks), 4)
        return Tolerance("sampled", amount,
                         f"sampled; {why}: an average log-objective; two independent samples of 320 tasks agree to "
                         f"about {LOG_OBJECTIVE_SPREAD_320} nats (Chapter 1), so 3 x {LOG_OBJECTIVE_SPREAD_320} x "
                         f"sqrt(320 / {tasks} tasks), a bound from that observation")  # fmt: skip
    amount = RELATIVE_BOUND * abs(float(value)) if isinstance(value, (int, float)) else 0.0
    return Tolerance("sampled", float(f"{amount:.3g}"),
                     f"sampled; {why}: a bound of {RELATIVE_BOUND:.0%} of the value, not an estimate of its "
                     "standard error")


def _fixed_tolerance(plain: str, value: Any) -> Tolerance | None:
    """The tolerance of a number that is not sampled (``plain``: ``<chapter>:<metric>``), or None."""
    if NOT_GUARDED.search(plain):
        return Tolerance("not guarded", None, "a timing, or decided by timings: it moves with the machine and its load")
    for pattern, (amount, reason) in ROUNDING.items():
        if re.search(pattern, plain):
            return Tolerance("rounding", amount, reason)
    if isinstance(value, (str, bool)):
        return Tolerance("exact", 0.0, "a statement or flag the chapter computes: any change is a change of result")
    if EXACT.search(plain):
        return Tolerance("exact", 0.0, "fixed by the build's settings, read from shipped files, or quoted")
    if GRID.search(plain):
        return Tolerance("exact", 0.0, "a point of the chapter's grid: a move to the next point changes the statement")
    return None


def tolerance_for(key: str, value: Any, chapter_metrics: Mapping[str, Any]) -> Tolerance:
    """How far the number ``key`` (value ``value`` in the reference build, whose chapter recorded
    ``chapter_metrics``) may move, and why (see the module's documentation)."""
    chapter, name, _ = parse_key(key)
    fixed = _fixed_tolerance(f"{chapter}:{name}", value)
    if fixed is not None:
        return fixed
    if key in SEED_RANGES:
        try:
            return _seed_range_tolerance(key, value, chapter_metrics, *SEED_RANGES[key])
        except (KeyError, IndexError, TypeError):  # the chapter did not record the range this time
            pass
    if key in SEED_MEANS and SEED_MEANS[key] in chapter_metrics:
        return _seed_mean_tolerance(key, value, chapter_metrics, SEED_MEANS[key])
    if key in COUNTS and COUNTS[key] in chapter_metrics:
        total_name = COUNTS[key]
        return _count_tolerance(float(value), float(chapter_metrics[total_name]), total_name)
    if key in SHARES and SHARES[key] in chapter_metrics:
        total_name = SHARES[key]
        return _share_tolerance(float(value), float(chapter_metrics[total_name]), total_name)
    return _bound(key, value, chapter_metrics)


# --- the reference file ----------------------------------------------------------------------------------


def reference_path(root: Path, profile: str) -> Path:
    if profile not in REFERENCE_FILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    return Path(root) / REFERENCE_FILES[profile]


def make_entry(key: str, metrics_by_chapter: Mapping[str, Mapping[str, Any]], commit: str) -> dict[str, Any]:
    """The reference entry of ``key`` from a build's metrics (``KeyError`` when the build lacks it)."""
    chapter, name, index = parse_key(key)
    if chapter not in metrics_by_chapter:
        raise KeyError(f"the build has no metrics.json of chapter {chapter}")
    metrics = metrics_by_chapter[chapter]
    value = metric_value(metrics, name, index)
    try:
        check_reference_value(value)
    except ValueError as err:
        raise ValueError(f"{key}: {err} (a list: name one element, {key}[i])") from None
    tolerance = tolerance_for(key, value, metrics)
    return {"value": value, "kind": tolerance.kind, "tolerance": tolerance.amount, "reason": tolerance.reason,
            "commit": commit}


# --- the comparison --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    key: str
    reference: Any
    value: Any  # None when the build lacks the number
    tolerance: float | None
    kind: str
    status: str  # "within", "moved", "missing" or "not guarded"

    @property
    def failed(self) -> bool:
        return self.status in ("moved", "missing")


def compare_value(reference: Any, value: Any, tolerance: float | None, kind: str) -> str:
    """``"within"`` or ``"moved"`` for one number (``"not guarded"`` for a number of that kind). A
    value of another type than the reference's has moved (a flag is not a number); a tolerance
    that is not a finite number >= 0 is a ValueError, never a number left unguarded."""
    check_tolerance(tolerance, kind)
    if kind == "not guarded" or tolerance is None:
        return "not guarded"
    if value_type(value) != value_type(reference):
        return "moved"
    if value_type(reference) != "number":
        return "within" if value == reference else "moved"
    if not math.isfinite(value) or not math.isfinite(reference):
        return "moved"
    allowed = tolerance + (1e-9 * abs(reference) if kind == "exact" else 0.0)
    return "within" if abs(value - reference) <= allowed else "moved"


def compare(entries: Mapping[str, Mapping[str, Any]],
            metrics_by_chapter: Mapping[str, Mapping[str, Any]]) -> list[Comparison]:  # fmt: skip
    """Every reference entry against a build's metrics (``{chapter stem: metrics.json}``)."""
    out = []
    for key in sorted(entries):
        entry = entries[key]
        check_entry(key, entry)
        chapter, name, index = parse_key(key)
        try:
            value = metric_value(metrics_by_chapter[chapter], name, index)
        except KeyError:
            out.append(Comparison(key, entry["value"], None, entry["tolerance"], entry["kind"],
                                  "not guarded" if entry["kind"] == "not guarded" else "missing"))
            continue
        status = compare_value(entry["value"], value, entry["tolerance"], entry["kind"])
        out.append(Comparison(key, entry["value"], value, entry["tolerance"], entry["kind"], status))
    return out


def update_command(profile: str, keys: Iterable[str]) -> str:
    keys = list(keys)
    return (f"python -m kmtbook.reference_metrics update --profile {profile} --entries {' '.join(keys)} "
            '--reason "<why the number changed>"')


def drift_report(comparisons: Iterable[Comparison], profile: str) -> str:
    """The failures of a comparison, one line each (chapter, metric, both values, tolerance), and the
    command that updates them once the change is understood; empty when nothing moved."""
    failed = [c for c in comparisons if c.failed]
    if not failed:
        return ""
    lines = [f"{len(failed)} published number(s) of the {profile} profile moved beyond their tolerance "
             f"({REFERENCE_FILES[profile]}):"]
    for c in failed:
        chapter, _, _ = parse_key(c.key)
        metric = c.key.split(":", 1)[1]
        if c.status == "missing":
            lines.append(f"  chapter {chapter}, metric {metric}: reference {c.reference!r}, not in this build")
        else:
            lines.append(f"  chapter {chapter}, metric {metric}: reference {c.reference!r}, this build {c.value!r}, "
                         f"tolerance {c.tolerance!r} ({c.kind})")
    lines.append("If the change is intended, update these references (a missing number's entry is removed) with")
    lines.append("  " + update_command(profile, (c.key for c in failed)))
    return "\n".join(lines)


# --- the build's metrics ---------------------------------------------------------------------------------


def results_folder(root: Path, profile: str) -> Path:
    """Where a build of ``profile`` leaves each chapter's ``metrics.json``: ``results/<stem>/`` (the
    book build) or ``_build/quick/<stem>/results/`` (the quick-profile runs of the tests)."""
    return Path(root) / ("results" if profile == "book" else "_build/quick")


def metrics_path(root: Path, profile: str, stem: str) -> Path:
    folder = results_folder(root, profile) / stem
    return folder / "metrics.json" if profile == "book" else folder / "results" / "metrics.json"


def read_build(root: Path, profile: str, stems: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """The ``metrics.json`` of every chapter (of ``stems``) that a build of ``profile`` left, by stem;
    a chapter whose file is missing is left out, a damaged one raises naming the file, and one of
    another profile (an explicit run in the same folder) raises too."""
    out = {}
    for stem in stems if stems is not None else chapter_stems(root):
        path = metrics_path(root, profile, stem)
        if not path.is_file():
            continue
        try:
            metrics = json.loads(path.read_text(encoding="utf-8"))
        except OSError as err:
            raise OSError(f"{path} cannot be read: {err.strerror or err}") from err
        except ValueError as err:
            raise ValueError(f"{path} is not valid JSON ({err})") from err
        if not isinstance(metrics, dict):
            raise ValueError(f"{path} is not a JSON object of metrics (it holds a {type(metrics).__name__})")
        if metrics.get("profile") != profile:
            raise ValueError(f"{path} was written by a run of profile {metrics.get('profile')!r}, not {profile!r}")
        out[stem] = metrics
    return out


def check_metrics(root: Path, profile: str, metrics_by_chapter: Mapping[str, Mapping[str, Any]],
                  chapters: Iterable[str] | None = None) -> list[Comparison]:  # fmt: skip
    """The comparison of the references of ``chapters`` (all by default) with a build's metrics."""
    entries = read_references(reference_path(root, profile))
    if chapters is not None:
        wanted = set(chapters)
        entries = {k: v for k, v in entries.items() if parse_key(k)[0] in wanted}
    return compare(entries, metrics_by_chapter)


def check_build(root: Path, profile: str = "book") -> tuple[list[Comparison], str]:
    """Compare every reference with the ``metrics.json`` files a build left; returns the comparison
    and the drift report (empty when every guarded number is within its tolerance). A chapter with
    references whose ``metrics.json`` is missing is a ValueError naming the file."""
    build = read_build(root, profile)
    entries = read_references(reference_path(root, profile))
    unbuilt = sorted({parse_key(k)[0] for k in entries} & set(chapter_stems(root)) - set(build))
    if unbuilt:
        raise ValueError(f"no metrics.json of {len(unbuilt)} chapter(s) with reference numbers (run them first): "
                         + _missing_files(root, profile, unbuilt))
    comparisons = check_metrics(root, profile, build)
    return comparisons, drift_report(comparisons, profile)


def _missing_files(root: Path, profile: str, stems: Iterable[str]) -> str:
    return ", ".join(str(metrics_path(root, profile, stem)) for stem in stems)


# --- updating --------------------------------------------------------------------------------------------


def current_commit(root: Path) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip() + ("+uncommitted changes" if dirty else "")


def update_references(root: Path, profile: str, keys: Iterable[str], reason: str,
                      metrics_by_chapter: Mapping[str, Mapping[str, Any]] | None = None,
                      commit: str | None = None, build_root: Path | None = None) -> dict[str, str]:  # fmt: skip
    """Rewrite the entries ``keys`` (a key, or a chapter stem for all of its guarded numbers) from
    the build's metrics (of ``build_root``, default ``root``) and append ``reason`` to
    ``data/book_build/README.md``. A key that the build's ``metrics.json`` lacks, or of a chapter no
    longer in the book, is removed from the references; a chapter of the book whose ``metrics.json``
    the build lacks is a ValueError naming the file (its references stay). Returns what happened to
    each key."""
    root = Path(root)
    build_root = root if build_root is None else Path(build_root)
    if not reason.strip():
        raise ValueError("reason: say why the reference changes (it goes into data/book_build/README.md)")
    path = reference_path(root, profile)
    entries = read_references(path) if path.is_file() else {}
    metrics_by_chapter = read_build(build_root, profile) if metrics_by_chapter is None else metrics_by_chapter
    commit = commit or current_commit(root)
    expanded = _expand(keys, root, entries)
    unbuilt = sorted({parse_key(k)[0] for k in expanded} & set(chapter_stems(root)) - set(metrics_by_chapter))
    if unbuilt:
        raise ValueError(f"no metrics.json of {len(unbuilt)} chapter(s) named, so their references stay (run them "
                         "first): " + _missing_files(build_root, profile, unbuilt))
    done = {}
    for key in expanded:
        try:
            new = make_entry(key, metrics_by_chapter, commit)
        except KeyError as err:
            if key in entries:
                del entries[key]
                done[key] = f"removed ({err.args[0]})"
            else:
                done[key] = f"skipped ({err.args[0]})"
            continue
        old = entries.get(key)
        entries[key] = new
        done[key] = "added" if old is None else f"{old['value']!r} -> {new['value']!r}"
    write_references(path, profile, entries)
    _log_update(root, profile, done, reason, commit)
    return done


def _expand(keys: Iterable[str], root: Path, entries: Mapping[str, Any]) -> list[str]:
    """Keys as given; a chapter stem stands for every guarded number of that chapter and its
    current entries; ``all`` for every guarded number and every current entry."""
    stems = set(chapter_stems(root))
    guarded = guarded_keys(root)
    out: list[str] = []
    for key in keys:
        if key == "all":
            out += guarded + list(entries)
        elif key in stems:
            out += [k for k in [*guarded, *entries] if parse_key(k)[0] == key]
        else:
            parse_key(key)
            out.append(key)
    return list(dict.fromkeys(out))


def _log_update(root: Path, profile: str, done: Mapping[str, str], reason: str, commit: str) -> None:
    readme = root / README
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    if UPDATE_LOG_HEADING not in text:
        text = text.rstrip("\n") + f"\n\n{UPDATE_LOG_HEADING}\n\nEach update of `{REFERENCE_FILES['book']}` or " \
               f"`{REFERENCE_FILES['quick']}` (by the update command of `kmtbook.reference_metrics`), newest last.\n"
    when = time.strftime("%Y-%m-%d", time.gmtime())
    changes = "; ".join(f"`{k}` {v}" for k, v in done.items())
    text = text.rstrip("\n") + f"\n\n- {when}, {profile} profile, commit `{commit}`: {reason.strip()} ({changes})\n"
    readme.write_text(text, encoding="utf-8")


# --- the command -----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kmtbook.reference_metrics",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="compare the last build's metrics.json files with the references")
    update = sub.add_parser("update", help="rewrite reference entries from the last build's metrics.json files")
    for p in (check, update):
        p.add_argument("--root", default=".", help="the repository root")
        p.add_argument("--profile", default="book", choices=PROFILES)
    update.add_argument("--entries", nargs="+", required=True,
                        help="keys <chapter>:<metric>[<index>], chapter stems (all their guarded numbers) or 'all'")
    update.add_argument("--reason", required=True, help="why the numbers changed (goes into data/book_build/README.md)")
    update.add_argument("--build-root", default=None,
                        help="the checkout whose build to read (results/ or _build/quick/), default --root")
    update.add_argument("--commit", default=None, help="the commit the build ran (default: --build-root's HEAD)")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except (OSError, ValueError) as err:  # a damaged or missing reference file or metrics.json
        print(f"error: {err}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    root = Path(args.root)
    if args.command == "check":
        comparisons, report = check_build(root, args.profile)
        guarded = [c for c in comparisons if c.status != "not guarded"]
        print(f"{len(guarded) - sum(c.failed for c in guarded)} of {len(guarded)} guarded numbers within their "
              f"tolerance ({len(comparisons) - len(guarded)} not guarded)")
        if report:
            print(report, file=sys.stderr)
            return 1
        return 0
    build_root = Path(args.build_root) if args.build_root else root
    build = read_build(build_root, args.profile, chapter_stems(root))
    done = update_references(root, args.profile, args.entries, args.reason, build,
                             commit=args.commit or current_commit(build_root), build_root=build_root)
    for key, what in done.items():
        print(f"{key}: {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
