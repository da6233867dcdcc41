"""The sweep: the mechanism (kmtlib.training.sweep: groups, jobs, serial and submitit executors,
--plan's estimate) on the book's plan of the paper's whole set (kmtbook.paper_sweep), run into the
layout the chapters read."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kmtlib
from kmtbook.paper_sweep import PAPER_SEEDS, paper_plan
from kmtlib.training import train
from kmtlib.training.sweep import check_plan, describe, execute, finished, groups, select, steps_done

ROOT = Path(__file__).resolve().parent.parent
TINY = dict(n=32, batch=4, val_batches=1, eval_every=1)


def test_the_paper_plan_and_its_layout():
    plan = paper_plan()
    main = [r for r in plan if r.part == "main"]
    dynamics = [r for r in plan if r.part == "dynamics"]
    # ten seeds, both widths: the main configuration, and the 12 sweep configurations of chapter 08
    assert len(main) == 2 * 10 and len(dynamics) == 12 * 2 * 10 and {r.config.seed for r in plan} == set(PAPER_SEEDS)
    assert all(r.config.steps == 10_000 and r.config.n == 512 for r in plan)
    assert {r.name for r in main} == {f"{e}_seed{s}" for e in ("onehot", "none") for s in PAPER_SEEDS}
    # the folder names and configurations of scripts/train_dynamics.sh (what chapter 08 reads)
    script = (ROOT / "scripts" / "train_dynamics.sh").read_text()
    configs = set(re.findall(r'"(\d+) (\d+) (\d+)"', script.split("CONFIGS=(", 1)[1].split(")", 1)[0]))
    assert {(str(r.config.d), str(r.config.k), f"{r.config.loss_inv_temp:g}") for r in dynamics} == configs
    for r in dynamics:
        c = r.config
        assert r.name == f"d{c.d}_k{c.k}_li{c.loss_inv_temp:g}_{c.embedding}_seed{c.seed}"
    # groups share a shape; every run is in one
    grouped = groups(plan)
    assert sum(len(g) for g in grouped) == len(plan)
    assert all(len({r.shape for r in g}) == 1 for g in grouped) and len({g[0].shape for g in grouped}) == len(grouped)


def test_only_selects_parts_and_patterns():
    plan = paper_plan(seeds=[1, 2])
    assert {r.part for r in select(plan, ["main"])} == {"main"}
    picked = select(plan, ["*_li1_*"])
    assert picked and all("_li1_" in r.name for r in picked)
    assert select(plan, ["onehot_seed2"])[0].name == "onehot_seed2"
    with pytest.raises(ValueError, match="--only nope"):
        select(plan, ["nope"])


def test_serial_sweep_trains_skips_and_resumes(tmp_path, capsys):
    plan = select(paper_plan(seeds=[5], steps=2, **TINY), ["main"])
    execute(plan, tmp_path, "serial", threads=1)
    for run in plan:
        assert finished(run, tmp_path) and (run.folder(tmp_path) / "model.pt").is_file()
    # the chapters' loaders read the layout (weights_dir = OUT/main)
    from kmtbook.shipped import require_runs

    assert [r.seed for r in require_runs("onehot", tmp_path / "main", d=32, k=10)] == [5]
    assert "2 finished" in describe(plan, tmp_path)
    # a longer plan resumes every run; its result is the run trained in one go
    longer = select(paper_plan(seeds=[5], steps=4, **TINY), ["onehot_seed5"])
    assert steps_done(longer[0], tmp_path) == 2 and not finished(longer[0], tmp_path)
    execute(longer, tmp_path, "serial", threads=1, program="python -m kmtbook.paper_sweep")
    manifest = json.loads((longer[0].folder(tmp_path) / "manifest.json").read_text())
    assert manifest["command"] == "python -m kmtbook.paper_sweep (group (32, 10, 32, 'onehot'): main/onehot_seed5)"
    train(longer[0].config, tmp_path / "alone", quiet=True, threads=1)
    a = kmtlib.load_model(longer[0].folder(tmp_path) / "model.pt").state_dict()
    b = kmtlib.load_model(tmp_path / "alone" / "model.pt").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_local_executor_runs_the_groups_as_subprocesses(tmp_path):
    """submitit's local executor (subprocesses, as a Slurm array would run the jobs) gives the
    same runs in the same layout as the serial sweep."""
    pytest.importorskip("submitit")
    plan = select(paper_plan(seeds=[7, 8], steps=2, **TINY), ["d4_k6_li10_*"])
    assert len(groups(plan)) == 2 and [len(g) for g in groups(plan, runs_per_group=1)] == [1] * 4
    execute(plan, tmp_path / "local", "local", threads=1, poll_s=0.5)
    execute(plan, tmp_path / "serial", "serial", threads=1)
    for run in plan:
        a = kmtlib.load_model(run.folder(tmp_path / "local") / "model.pt").state_dict()
        b = kmtlib.load_model(run.folder(tmp_path / "serial") / "model.pt").state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a), run.name
        # the two seeds of a shape trained together, as one job
        manifest = json.loads((run.folder(tmp_path / "local") / "manifest.json").read_text())
        assert manifest["group"]["runs"] == 2
    assert (tmp_path / "local" / "_submitit").is_dir()
    # one run per job: the same runs again (each run is the run trained alone)
    execute(plan, tmp_path / "alone", "serial", threads=1, runs_per_group=1)
    for run in plan:
        a = kmtlib.load_model(run.folder(tmp_path / "alone") / "model.pt").state_dict()
        b = kmtlib.load_model(run.folder(tmp_path / "serial") / "model.pt").state_dict()
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)


def test_command_line_plan(tmp_path, capsys):
    from kmtbook.paper_sweep import main

    timings = str(ROOT / "data" / "weights")
    main(["--plan", "--out", str(tmp_path), "--only", "main", "--seeds", "1,2", "--timings", timings])
    err = capsys.readouterr().err
    assert "4 run(s) in 2 group(s)" in err and "about" in err
    with pytest.raises(SystemExit, match="--seeds must list integers"):
        main(["--plan", "--seeds", "a,b"])


@pytest.mark.parametrize(
    "args, said",
    [
        (["--seeds", "1,1", "--plan"], "--seeds repeats 1"),
        (["--seeds", "1,2,1", "--steps", "1"], "--seeds repeats 1"),
        (["--seeds", "1", "--steps", "1", "--threads", "0"], "--threads must be >= 1, got 0"),
        (["--seeds", "1", "--executor", "slurm", "--slurm", "{partition: gpu}", "--plan"], "--slurm is not JSON"),
        (["--seeds", "1", "--executor", "slurm", "--slurm", "[1]", "--plan"], "--slurm must be a JSON object"),
        (["--seeds", "1", "--slurm", '{"slurm_partition": "gpu"}', "--plan"], "--slurm applies to --executor slurm"),
    ],
    ids=["repeated-seed-plan", "repeated-seed", "threads-0", "slurm-not-json", "slurm-not-object", "slurm-unused"],
)
def test_command_line_refuses_bad_options_in_one_line_naming_them(args, said, tmp_path):
    """Each bad option of ``python -m kmtbook.paper_sweep`` ends in one ``error:`` line naming it,
    before the plan is printed or any folder made (not a plan of duplicate runs, not a traceback
    from deep inside a job)."""
    from kmtbook.paper_sweep import main

    with pytest.raises(SystemExit, match=said) as refused:
        main([*args, "--only", "onehot_seed1", "--out", str(tmp_path / "sweep")])
    assert str(refused.value).startswith("error: ") and "\n" not in str(refused.value)
    assert not (tmp_path / "sweep").exists()


def test_a_plan_of_two_runs_in_one_folder_is_refused(tmp_path):
    """The mechanism refuses a plan that puts two runs into one folder (whoever planned it), before
    anything is written."""
    plan = select(paper_plan(seeds=[3, 3], steps=1, **TINY), ["main"])
    with pytest.raises(ValueError, match=r"two runs of the plan in main/onehot_seed3"):
        check_plan(plan)
    with pytest.raises(ValueError, match=r"two runs of the plan in main/onehot_seed3"):
        execute(plan, tmp_path / "sweep", "serial", threads=1)
    assert not (tmp_path / "sweep").exists()
    check_plan(select(paper_plan(seeds=[3, 4], steps=1, **TINY), ["main"]))


def test_two_sweeps_on_one_folder_end_in_one_line(tmp_path):
    """A sweep into a folder another process trains in: one ``error:`` line naming the folder in
    use, no traceback."""
    from kmtlib.training.run_folder import run_lock

    out = tmp_path / "sweep"
    (out / "main" / "onehot_seed1").mkdir(parents=True)
    args = ["--seeds", "1", "--only", "onehot_seed1", "--steps", "1", "--threads", "1", "--out", str(out)]
    with run_lock(out / "main" / "onehot_seed1"):
        proc = subprocess.run([sys.executable, "-m", "kmtbook.paper_sweep", *args], capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "onehot_seed1 is in use by another training process" in last, proc.stderr


def test_plan_time_left_counts_a_grouped_run_per_run_step(tmp_path):
    """A run trained in a group of S records its group's seconds per step: the time a run-step
    takes is that over S, and --plan's hours are the steps left at that rate."""
    from kmtlib.training.sweep import seconds_per_step

    timings = tmp_path / "timings"
    config = {"d": 32, "k": 10, "n": 512, "embedding": "onehot"}
    for name, per_step, group in (("a", 7.2, {"group": {"runs": 4}}), ("b", 1.8, {})):
        (timings / name).mkdir(parents=True)
        record = {"config": config, "wall_s_per_step": per_step, **group}
        (timings / name / "manifest.json").write_text(json.dumps(record))
    assert seconds_per_step([timings]) == {(32, 10, 512, "onehot"): 1.8}
    # two onehot runs of 10 000 steps at 1.8 s per run-step: 10.0 h; the "none" group is unmeasured
    plan = select(paper_plan(seeds=[1, 2]), ["main"])
    text = describe(plan, tmp_path / "out", [timings])
    assert "group d=32 k=10 n=512 onehot: 2 run(s), 20000 step(s) left, about 10.0 h left" in text
    assert text.endswith("about 10.0 h plus 1 group(s) with no finished run to measure")
