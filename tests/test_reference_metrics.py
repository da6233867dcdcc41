"""The book's published numbers are held against a reference build (kmtbook.reference_metrics)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from kmtbook import reference_metrics as rm

ROOT = Path(__file__).resolve().parent.parent


def _entries(**numbers):
    return {key: {"value": v, "kind": kind, "tolerance": tol, "reason": "test", "commit": "c0"}
            for key, (v, kind, tol) in numbers.items()}


METRICS = {"05_training": {"main_model_t20": 4.98, "main_n_seeds": 3, "profile": "book"},
           "07_generalization": {"gap_t20": [0.3, 0.2, 0.1], "profile": "book"}}


def test_the_clean_values_pass():
    entries = _entries(**{"05_training:main_model_t20": (4.98, "sampled", 0.03),
                          "05_training:main_n_seeds": (3, "exact", 0.0),
                          "07_generalization:gap_t20[1]": (0.2, "sampled", 0.01)})
    comparisons = rm.compare(entries, METRICS)
    assert [c.status for c in comparisons] == ["within", "within", "within"]
    assert rm.drift_report(comparisons, "book") == ""


def test_a_deliberately_moved_number_fails_naming_chapter_metric_values_tolerance_and_command():
    entries = _entries(**{"05_training:main_model_t20": (4.98, "sampled", 0.03),
                          "07_generalization:gap_t20[1]": (0.2, "sampled", 0.01)})
    moved = json.loads(json.dumps(METRICS))
    moved["07_generalization"]["gap_t20"][1] = 0.2 + 0.0101  # just beyond the tolerance
    moved["05_training"]["main_model_t20"] = 4.98 + 0.0299  # just inside it
    comparisons = rm.compare(entries, moved)
    assert [c.status for c in comparisons] == ["within", "moved"]
    report = rm.drift_report(comparisons, "book")
    assert "chapter 07_generalization, metric gap_t20[1]: reference 0.2, this build 0.2101" in report
    assert "tolerance 0.01 (sampled)" in report and "main_model_t20" not in report.split("\n", 1)[1].split("If")[0]
    assert "python -m kmtbook.reference_metrics update --profile book --entries 07_generalization:gap_t20[1]" in report


def test_exact_numbers_allow_only_rounding_and_strings_must_match():
    assert rm.compare_value(3, 3, 0.0, "exact") == "within"
    assert rm.compare_value(3, 4, 0.0, "exact") == "moved"
    assert rm.compare_value(0.1 + 0.2, 0.3, 0.0, "exact") == "within"  # 1e-9 relative: another CPU's rounding
    assert rm.compare_value(0.3, 0.3 + 1e-6, 0.0, "exact") == "moved"
    assert rm.compare_value("not a test", "not a test", 0.0, "exact") == "within"
    assert rm.compare_value("not a test", "consistent", 0.0, "exact") == "moved"
    assert rm.compare_value(1e-16, 8e-13, 1e-12, "rounding") == "within"
    assert rm.compare_value(1e-16, 2e-12, 1e-12, "rounding") == "moved"
    assert rm.compare_value(5.0, float("nan"), 1.0, "sampled") == "moved"
    assert rm.compare_value(3.4, 9.9, None, "not guarded") == "not guarded"


def test_a_number_the_build_lacks_fails_unless_not_guarded():
    entries = _entries(**{"05_training:gone": (1.0, "sampled", 0.1),
                          "11_performance:step_speedup_1thread": (3.2, "not guarded", None)})
    by_key = {c.key: c for c in rm.compare(entries, METRICS)}
    assert by_key["05_training:gone"].status == "missing" and by_key["05_training:gone"].failed
    assert by_key["11_performance:step_speedup_1thread"].status == "not guarded"
    assert "not in this build" in rm.drift_report(by_key.values(), "book")


def test_tolerances_follow_what_a_number_is():
    ch05 = {"main_model_t20": 4.98, "main_model_t20_min": 4.95, "main_model_t20_max": 5.05, "main_n_seeds": 3}
    t = rm.tolerance_for("05_training:main_model_t20", 4.98, ch05)
    se = 1.2533 * (0.10 / 1.693) / math.sqrt(3)
    assert t.kind == "sampled" and t.amount == pytest.approx(3 * se, abs=1e-4) and "d2(3)" in t.reason
    assert rm.tolerance_for("11_performance:step_speedup_1thread", 3.1, {}).kind == "not guarded"
    # counts and ratios decided by a measured time (restarts or n_init matched to it) move with the load
    for decided_by_time in ("12_any_k:k_restarts_below_layer", "13_your_data:equal_compute_gmean_ratio"):
        assert rm.tolerance_for(decided_by_time, 1.0, {}).kind == "not guarded"
    assert rm.tolerance_for("12_any_k:k_kmeanspp_below_layer", 9, {}).kind != "not guarded"
    assert rm.tolerance_for("02_kmeans_transformer:exact_max_centre_diff", 4e-16, {}).amount == 1e-12
    assert rm.tolerance_for("10_variants:spherical_faiss_max_diff", 3e-7, {}).amount == 1e-5
    assert rm.tolerance_for("05_training:param_n_tasks", 320, {}) == rm.tolerance_for("06_ablation_d_only:none_n_seeds",
                                                                                          3, {})
    assert rm.tolerance_for("08_training_dynamics:width_d_worse", 12, {}).amount == 0.0
    # a count out of 28 values of k at p = 1/2: 3 * sqrt(28 / 4) = 7.9, so 7
    assert rm.tolerance_for("12_any_k:k_below_lloyd", 14, {"k_tested": 28}).amount == 7
    # a count near its end stays at least 1
    assert rm.tolerance_for("07_generalization:wins", 10, {"n_settings": 10}).amount >= 1
    share = rm.tolerance_for("02_kmeans_transformer:fig3_draws_float64_exact_median_share", 0.5, {"fig3_n": 10_000})
    assert share.amount == pytest.approx(3 * 0.005, abs=1e-6)
    bound = rm.tolerance_for("09_inside_the_layer:init_onehot_CAX_effective_centres", 2.0, {})
    assert bound.amount == pytest.approx(0.1) and "not an estimate" in bound.reason
    nats = rm.tolerance_for("07_generalization:gap_t20[3]", 0.2, {})
    assert nats.amount == 0.03 and "0.01 nats" in nats.reason
    assert rm.tolerance_for("07_generalization:gap_t20[3]", 0.2, {"param_n_tasks": 80}).amount == 0.06
    assert rm.tolerance_for("03_temperature:curve_gamma_1e3_full", 1e6, {}).amount == 0.0
    ch06 = {"onehot_model_min": [6.0, 4.9], "onehot_model_max": [6.1, 5.1], "onehot_n_seeds": 3}
    assert rm.tolerance_for("06_ablation_d_only:onehot_t20", 5.0, ch06).amount == pytest.approx(
        3 * 1.2533 * (0.2 / 1.693) / math.sqrt(3), abs=1e-4)
    one_seed = rm.tolerance_for("05_training:main_model_t20", 4.98, {**ch05, "main_n_seeds": 1})
    assert one_seed.amount == 0.03 and "one seed only" in one_seed.reason  # (320 tasks when none is recorded)
    assert rm.tolerance_for("08_training_dynamics:inv_temp1_reading", "not a test", {}).kind == "exact"


def test_every_number_of_the_index_and_the_opening_boxes_is_guarded():
    keys = rm.guarded_keys(ROOT)
    assert "05_training:main_model_t20" in keys and "07_generalization:gap_t20[3]" in keys
    assert "06_ablation_d_only:none_t20" in keys  # a box's own reference, without its chapter's stem
    for profile in rm.PROFILES:
        entries = rm.read_references(rm.reference_path(ROOT, profile))
        missing = sorted(set(keys) - set(entries))
        assert not missing, (f"published numbers without a {profile} reference: {missing}; add them with "
                             + rm.update_command(profile, missing))


def test_the_live_run_and_the_dropout_effect_are_guarded_and_quoted_alike():
    keys = rm.guarded_keys(ROOT)
    for key in ("05_training:live_first_below_one_step", "05_training:live_lloyd_minus_model_t20",
                "05_training:dropout_on_minus_off_t20", "06_ablation_d_only:onehot_t20_dropout_on_minus_off"):
        assert key in keys, key
    for profile in rm.PROFILES:  # chapters 05 and 06 quote one number for one effect
        entries = rm.read_references(rm.reference_path(ROOT, profile))
        ours, theirs = (entries.get(k, {}).get("value") for k in ("05_training:dropout_on_minus_off_t20",
                                                                    "06_ablation_d_only:onehot_t20_dropout_on_minus_off"))
        assert ours is None or theirs is None or ours == theirs, (profile, ours, theirs)


def test_a_live_runs_log_objective_is_bounded_by_its_own_task_count():
    metrics = {"param_n_tasks": 16, "param_live_tasks": 320}
    assert rm.tolerance_for("05_training:live_lloyd_minus_model_t20", 0.18, metrics).amount == 0.03
    assert rm.tolerance_for("05_training:main_model_t20", 5.0, metrics).amount == round(3 * 0.01 * math.sqrt(20), 4)


def test_a_mean_over_repeats_is_guarded_by_the_spread_of_its_repeats():
    ch05 = {"dropout_on_minus_off_t20_per_seed": [0.0, 0.02, 0.04, 0.02]}
    t = rm.tolerance_for("05_training:dropout_on_minus_off_t20", 0.02, ch05)
    sd = math.sqrt((0.02**2 + 0 + 0.02**2 + 0) / 3)
    assert t.kind == "sampled" and t.amount == pytest.approx(3 * sd / 2, abs=1e-4) and "4 repeats" in t.reason


def test_update_rewrites_the_named_entries_and_logs_the_reason(tmp_path):
    root = tmp_path
    (root / "book").mkdir()
    (root / "data" / "book_build").mkdir(parents=True)
    (root / "book" / "index.md").write_text("| a | {metric}`05_training:main_model_t20:.2f` |\n")
    (root / "book" / "05_training.md").write_text(
        ":::{admonition} In this chapter\n{metric}`main_n_seeds` seeds\n:::\n\nlater {metric}`not_guarded`\n")
    (root / rm.README).write_text("# book_build/\n")
    metrics = {"05_training": {"main_model_t20": 4.98, "main_n_seeds": 3, "main_model_t20_min": 4.9,
                               "main_model_t20_max": 5.0}}
    done = rm.update_references(root, "book", ["05_training"], "first references", metrics, commit="abc")
    assert set(done) == {"05_training:main_model_t20", "05_training:main_n_seeds"}
    entries = rm.read_references(rm.reference_path(root, "book"))
    assert entries["05_training:main_n_seeds"] == {"value": 3, "kind": "exact", "tolerance": 0.0, "reason": entries[
        "05_training:main_n_seeds"]["reason"], "commit": "abc"}
    metrics["05_training"]["main_n_seeds"] = 10
    assert rm.compare(entries, metrics)[1].status == "moved"
    done = rm.update_references(root, "book", ["05_training:main_n_seeds"], "ten seeds shipped", metrics, commit="def")
    assert done == {"05_training:main_n_seeds": "3 -> 10"}
    entries = rm.read_references(rm.reference_path(root, "book"))
    assert entries["05_training:main_n_seeds"]["value"] == 10
    assert entries["05_training:main_model_t20"]["commit"] == "abc"
    log = (root / rm.README).read_text()
    assert "first references" in log and "book profile, commit `def`: ten seeds shipped" in log and "3 -> 10" in log
    # a number the build no longer has is removed
    del metrics["05_training"]["main_model_t20"]
    done = rm.update_references(root, "book", ["05_training:main_model_t20"], "metric renamed", metrics, commit="g")
    assert done["05_training:main_model_t20"].startswith("removed")
    with pytest.raises(ValueError, match="reason"):
        rm.update_references(root, "book", ["05_training"], " ", metrics)


def test_a_damaged_reference_file_is_named(tmp_path):
    path = tmp_path / "reference_metrics.json"
    path.write_text('{"entries": {"05_training:x": {"value": 1}}}')
    with pytest.raises(ValueError, match=r"reference_metrics.json is damaged: .*'kind'"):
        rm.read_references(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="is damaged"):
        rm.read_references(path)


def test_the_command_fails_on_a_moved_number_and_passes_on_the_clean_build(tmp_path, capsys):
    root = tmp_path
    shutil.copytree(ROOT / "book", root / "book")
    (root / "data" / "book_build").mkdir(parents=True)
    entries = _entries(**{"05_training:main_model_t20": (4.98, "sampled", 0.03)})
    rm.write_references(rm.reference_path(root, "book"), "book", entries)
    out = root / "results" / "05_training"
    out.mkdir(parents=True)
    (out / "metrics.json").write_text(json.dumps({"profile": "book", "main_model_t20": 4.99}))
    assert rm.main(["check", "--root", str(root)]) == 0
    (out / "metrics.json").write_text(json.dumps({"profile": "book", "main_model_t20": 5.10}))
    assert rm.main(["check", "--root", str(root)]) == 1
    assert "chapter 05_training, metric main_model_t20: reference 4.98, this build 5.1" in capsys.readouterr().err


def test_the_chapter_runner_fails_the_book_build_on_a_moved_number(tmp_path, monkeypatch, capsys):
    from kmtbook import execute_chapters as ec

    root = tmp_path
    shutil.copytree(ROOT / "book", root / "book")
    shutil.copy(ROOT / "_toc.yml", root / "_toc.yml")
    (root / "_config.yml").write_text("execute:\n  timeout: 60\n")
    (root / "data" / "book_build").mkdir(parents=True)
    rm.write_references(rm.reference_path(root, "book"), "book",
                        _entries(**{"05_training:main_model_t20": (4.98, "sampled", 0.03)}))
    out = root / "results" / "05_training"
    out.mkdir(parents=True)
    monkeypatch.setattr(ec, "execute_chapters", lambda *a, **k: [])  # every chapter already in the cache
    (out / "metrics.json").write_text(json.dumps({"profile": "book", "main_model_t20": 4.98}))
    assert ec.main(["--root", str(root), "--cache", str(tmp_path / "cache")]) == 0
    (out / "metrics.json").write_text(json.dumps({"profile": "book", "main_model_t20": 4.90}))
    assert ec.main(["--root", str(root), "--cache", str(tmp_path / "cache")]) == 1
    assert "chapter 05_training, metric main_model_t20: reference 4.98, this build 4.9" in capsys.readouterr().err
    assert ec.main(["--root", str(root), "--cache", str(tmp_path / "cache"), "--no-reference-check"]) == 0


def test_the_update_command_reads_another_checkouts_build(tmp_path, capsys):
    root, build = tmp_path / "repo", tmp_path / "build"
    shutil.copytree(ROOT / "book", root / "book")
    (root / "data" / "book_build").mkdir(parents=True)
    out = build / "results" / "06_ablation_d_only"
    out.mkdir(parents=True)
    metrics = {"profile": "book", "none_t20": 5.3, "lloyd_t20": 5.26, "onehot_t20": 5.0, "none_n_seeds": 3,
               "onehot_n_seeds": 3, "param_n_tasks": 96, "none_t20_dropout_on_minus_off": 0.001,
               "onehot_t20_dropout_on_minus_off": -0.002, "none_model_min": [5.2], "none_model_max": [5.4],
               "onehot_model_min": [4.9], "onehot_model_max": [5.1], "onehot_lloyd_min": [5.25],
               "onehot_lloyd_max": [5.27]}
    (out / "metrics.json").write_text(json.dumps(metrics))
    assert rm.main(["update", "--root", str(root), "--build-root", str(build), "--entries", "06_ablation_d_only",
                    "--reason", "first references", "--commit", "abc"]) == 0
    entries = rm.read_references(rm.reference_path(root, "book"))
    assert entries["06_ablation_d_only:lloyd_t20"]["value"] == 5.26
    assert entries["06_ablation_d_only:none_t20"]["kind"] == "sampled"
    assert all(e["commit"] == "abc" for e in entries.values())
    assert "06_ablation_d_only:none_t20: added" in capsys.readouterr().out


def test_a_chapter_run_of_another_profile_in_the_results_is_named(tmp_path, monkeypatch, capsys):
    from kmtbook import execute_chapters as ec

    shutil.copytree(ROOT / "book", tmp_path / "book")
    shutil.copy(ROOT / "_toc.yml", tmp_path / "_toc.yml")
    (tmp_path / "_config.yml").write_text("execute:\n  timeout: 60\n")
    (tmp_path / "data" / "book_build").mkdir(parents=True)
    rm.write_references(rm.reference_path(tmp_path, "book"), "book",
                        _entries(**{"05_training:main_model_t20": (4.98, "sampled", 0.03)}))
    out = tmp_path / "results" / "05_training"
    out.mkdir(parents=True)
    (out / "metrics.json").write_text(json.dumps({"profile": "quick", "main_model_t20": 4.98}))
    monkeypatch.setattr(ec, "execute_chapters", lambda *a, **k: [])
    assert ec.main(["--root", str(tmp_path), "--cache", str(tmp_path / "cache")]) == 1
    assert "written by a run of profile 'quick', not 'book'" in capsys.readouterr().err


def test_a_flag_is_not_a_number_and_types_must_match():
    """A metric that changed from 1 to true (``True == 1`` in Python) has moved, and so has a number
    that became text; a count of 3 recorded as 3.0 has not."""
    assert rm.compare_value(1, True, 0.0, "exact") == "moved"
    assert rm.compare_value(True, 1, 0.0, "exact") == "moved"
    assert rm.compare_value(0, False, 0.5, "sampled") == "moved"
    assert rm.compare_value(4, "4", 0.0, "exact") == "moved"
    assert rm.compare_value(True, True, 0.0, "exact") == "within"
    assert rm.compare_value(3, 3.0, 0.0, "exact") == "within"
    entries = _entries(**{"05_training:main_n_seeds": (1, "exact", 0.0)})
    comparisons = rm.compare(entries, {"05_training": {"main_n_seeds": True}})
    assert [c.status for c in comparisons] == ["moved"]
    assert "reference 1, this build True" in rm.drift_report(comparisons, "book")


@pytest.mark.parametrize("tolerance", [None, -0.1, "0.1", math.nan, math.inf, True], ids=repr)
def test_an_entry_without_a_valid_tolerance_is_an_error_naming_it(tmp_path, tolerance):
    """A damaged entry is never silently unguarded: reading the file, comparing entries and comparing
    one value refuse it, naming the entry."""
    entries = _entries(**{"05_training:main_model_t20": (4.98, "sampled", tolerance)})
    moved = {"05_training": {"main_model_t20": 104.98}}  # (moved by 100)
    path = tmp_path / "reference_metrics.json"
    path.write_text(json.dumps({"entries": entries}))
    with pytest.raises(ValueError, match=r"reference_metrics.json is damaged: entry '05_training:main_model_t20': "
                                         r"tolerance must be a finite number >= 0"):
        rm.read_references(path)
    with pytest.raises(ValueError, match=r"entry '05_training:main_model_t20': tolerance"):
        rm.compare(entries, moved)
    with pytest.raises(ValueError, match="tolerance"):
        rm.compare_value(4.98, 104.98, tolerance, "sampled")
    # a timing is not guarded on purpose: its entry says so by its kind
    timing = _entries(**{"11_performance:step_speedup_1thread": (3.2, "not guarded", None)})
    assert rm.compare(timing, {})[0].status == "not guarded"


def _damage(root: Path, case: str) -> str:
    """Damage a build with reference numbers of chapter 05 in one way; returns the file to be named."""
    references = rm.reference_path(root, "book")
    metrics = root / "results" / "05_training" / "metrics.json"
    if case == "missing reference file":
        references.unlink()
        return str(references)
    if case == "damaged reference file":
        references.write_text('{"entries": {')
        return str(references)
    if case == "entry without tolerance":
        entries = json.loads(references.read_text())
        entries["entries"]["05_training:main_model_t20"]["tolerance"] = None
        references.write_text(json.dumps(entries))
        return "entry '05_training:main_model_t20'"
    if case == "missing metrics.json":
        metrics.unlink()
    elif case == "damaged metrics.json":
        metrics.write_bytes(b'{"profile": "bo\xff')
    elif case == "metrics.json not an object":
        metrics.write_text("[4.98]")
    return str(metrics)


DAMAGES = ["missing reference file", "damaged reference file", "entry without tolerance", "missing metrics.json",
           "damaged metrics.json", "metrics.json not an object"]


DAMAGED_COMMANDS = [(case, command) for case in DAMAGES for command in ("check", "update", "build")
                    if (case, command) != ("missing reference file", "update")]  # fmt: skip


@pytest.mark.parametrize(("case", "command"), DAMAGED_COMMANDS)
def test_every_command_ends_a_damaged_or_missing_file_in_one_error_line(tmp_path, monkeypatch, capsys, case, command):
    """``check``, ``update`` (which writes the first reference file, so a missing one is no error
    there) and the book build's own check."""
    from kmtbook import execute_chapters as ec

    root = tmp_path / "repo"
    shutil.copytree(ROOT / "book", root / "book")
    shutil.copy(ROOT / "_toc.yml", root / "_toc.yml")
    (root / "_config.yml").write_text("execute:\n  timeout: 60\n")
    (root / "data" / "book_build").mkdir(parents=True)
    rm.write_references(rm.reference_path(root, "book"), "book",
                        _entries(**{"05_training:main_model_t20": (4.98, "sampled", 0.03)}))
    (root / "results" / "05_training").mkdir(parents=True)
    (root / "results" / "05_training" / "metrics.json").write_text(json.dumps({"profile": "book", "main_model_t20": 5}))
    named = _damage(root, case)
    before = rm.reference_path(root, "book").read_bytes() if rm.reference_path(root, "book").exists() else None
    monkeypatch.setattr(ec, "execute_chapters", lambda *a, **k: [])  # (every chapter already in the cache)
    argv = {"check": ["check", "--root", str(root)],
            "update": ["update", "--root", str(root), "--entries", "05_training", "--reason", "r", "--commit", "c"]}
    status = ec.main(["--root", str(root), "--cache", str(tmp_path / "c")]) if command == "build" else rm.main(
        argv[command])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert status == 1 and len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], err
    if before is not None:  # (the references stay as they were)
        assert rm.reference_path(root, "book").read_bytes() == before
