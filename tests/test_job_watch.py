"""The sweep's driver never waits forever for jobs that are gone (kmtlib.training.job_watch and
the submitit path of kmtlib.training.sweep.execute), without a scheduler: fake jobs with a state
and a result file, a fake queue and a fake clock. tests/test_slurm.py does the same on a real
Slurm."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from kmtbook.paper_sweep import paper_plan
from kmtlib.training import job_watch, sweep
from kmtlib.training.job_watch import JobWatch, queue_states
from kmtlib.training.sweep import JobsEndedError, execute, select

TINY = dict(n=32, batch=4, val_batches=1, eval_every=1)


class FakeJob:
    """What the watch and the driver read of a submitit job: its id, its state (as sacct or a
    local subprocess gives it), its result file and its result."""

    def __init__(self, folder: Path, job_id: str, state: str = "UNKNOWN", error: str | None = None) -> None:
        self.job_id, self.state, self.error = job_id, state, error
        self.paths = SimpleNamespace(result_pickle=folder / f"{job_id}_result.pkl", stderr=folder / f"{job_id}.err")

    def finish(self) -> None:
        self.paths.result_pickle.write_text("done")

    def result(self) -> list[str]:
        if self.error:
            raise RuntimeError(f"Job failed during processing with trace:\n----\nTraceback ...\n{self.error}\n----")
        return []


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_job_ended_on_two_checks_without_a_result_is_gone(tmp_path):
    jobs = [FakeJob(tmp_path, "7_0"), FakeJob(tmp_path, "7_1"), FakeJob(tmp_path, "7_2")]
    queue = {"7_0": "RUNNING", "7_1": "RUNNING", "7_2": "PENDING"}
    asked = []
    clock = Clock()
    watch = JobWatch(jobs, lambda ids: asked.append(list(ids)) or dict(queue), check_s=15, clock=clock)
    assert watch.check() == [] and len(asked) == 1
    # 7_0 cancelled, 7_1 dropped from the queue (the controller forgot it), 7_2 finished with its result
    queue = {"7_0": "CANCELLED", "7_2": "COMPLETED"}
    jobs[2].finish()
    clock.now = 5.0
    assert watch.check() == [] and len(asked) == 1  # (within check_s: the last answer stands)
    clock.now = 15.0
    assert watch.check() == [] and len(asked) == 2  # seen ended once: a result may still be on its way
    assert asked[-1] == ["7_0", "7_1"]  # (a job with a result is not asked about)
    clock.now = 30.0
    assert watch.check() == jobs[:2]
    assert watch.describe(jobs[:2]) == "7_0 (CANCELLED), 7_1 (NOT IN THE QUEUE)"


def test_a_job_seen_alive_again_is_not_gone(tmp_path):
    """Preempted and requeued: sacct may say PREEMPTED while the queue lists it pending again; the
    queue decides, and the count of ended checks starts again."""
    job = FakeJob(tmp_path, "8_0", state="PREEMPTED")
    answers = iter([{}, {"8_0": "PENDING"}, {}, {"8_0": "RUNNING"}])
    clock = Clock()
    watch = JobWatch([job], lambda ids: next(answers), check_s=1, clock=clock)
    for t in range(4):
        clock.now = float(t)
        assert watch.check() == []


def test_without_a_queue_the_submitit_state_decides(tmp_path):
    """No squeue (a local job, or a cluster where squeue cannot answer): a final state from sacct
    (``CANCELLED by 0``) or from a local subprocess (``INTERRUPTED``) ends a job; UNKNOWN does not."""
    jobs = [FakeJob(tmp_path, "9_0", "CANCELLED by 0"), FakeJob(tmp_path, "9_1", "UNKNOWN"),
            FakeJob(tmp_path, "123", "INTERRUPTED")]  # fmt: skip
    clock = Clock()
    for query in (None, lambda ids: None):
        watch = JobWatch(jobs, query, check_s=1, clock=clock)
        clock.now += 1
        watch.check()
        clock.now += 1
        assert watch.check() == [jobs[0], jobs[2]]


def test_queue_states_reads_squeue(monkeypatch):
    calls = []

    def fake_run(command, **kwargs):
        calls.append(command)
        if "--jobs=404" in command:
            return subprocess.CompletedProcess(command, 1, b"", b"slurm_load_jobs error: Invalid job id specified\n")
        if "--jobs=500" in command:
            unreachable = b"slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"
            return subprocess.CompletedProcess(command, 1, b"", unreachable)
        return subprocess.CompletedProcess(command, 0, b"12_0|RUNNING\n12_1|CANCELLED\n13|COMPLETING\n", b"")

    monkeypatch.setattr(job_watch.subprocess, "run", fake_run)
    assert queue_states(["12_0", "12_1", "13"]) == {"12_0": "RUNNING", "12_1": "CANCELLED", "13": "COMPLETING"}
    assert calls[-1][-1] == "--jobs=12,13" and "--states=all" in calls[-1] and "--array" in calls[-1]
    assert queue_states(["404_0"]) == {}  # every id forgotten: the jobs ended long ago
    assert queue_states(["500_0"]) is None  # no answer says nothing

    def no_squeue(command, **kwargs):
        raise FileNotFoundError("squeue")

    monkeypatch.setattr(job_watch.subprocess, "run", no_squeue)
    assert queue_states(["1_0"]) is None


def fake_slurm_commands(monkeypatch, folder: Path, squeue_output: bytes = b"") -> None:
    """Put Slurm's commands on ``PATH``: ``sbatch`` and ``srun`` that are never meant to run, and an
    ``squeue`` that prints ``squeue_output`` and exits with status 0."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "squeue_output").write_bytes(squeue_output)
    scripts = {"sbatch": "echo sbatch is not to be called >&2; exit 1", "srun": "exit 1",
               "squeue": f"cat '{folder / 'squeue_output'}'"}  # fmt: skip
    for name, body in scripts.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")


def test_an_answer_of_squeue_that_cannot_be_read_is_an_error_naming_it(monkeypatch, tmp_path):
    """rc 0 with garbage, or with bytes that are not UTF-8: an error naming the command and showing
    the line, never an empty queue (which would call every job gone)."""
    answers = {b"<html>502 Bad Gateway</html>\n": r"`squeue --noheader .*--jobs=12`.* line 1: '<html>502 Bad Gateway",
               b"12_0|RUNNING\nslurm_load_jobs error: Socket timed out\n": r"`squeue .*` .*line 2: 'slurm_load_jobs",
               b"12_0|RUNN\xffING\n": r"`squeue .*` printed bytes that are not UTF-8.*b'12_0\|RUNN\\xffING'"}
    for number, (output, message) in enumerate(answers.items()):
        fake_slurm_commands(monkeypatch, tmp_path / str(number), output)
        with pytest.raises(ValueError, match=message) as raised:
            queue_states(["12_0", "12_1"])
        assert "\n" not in str(raised.value)
    # what squeue prints for array tasks, pending ranges and heterogeneous jobs, with a blank line
    fake_slurm_commands(monkeypatch, tmp_path / "good", b"12_0|RUNNING\n12_[2-5]|PENDING\n\n13+0|COMPLETING\n")
    assert queue_states(["12_0", "13"]) == {"12_0": "RUNNING", "12_[2-5]": "PENDING", "13+0": "COMPLETING"}
    fake_slurm_commands(monkeypatch, tmp_path / "empty", b"")
    assert queue_states(["12_0"]) == {}  # (a parsed answer: squeue knows none of them)


def test_the_sweep_stops_on_an_unreadable_queue_instead_of_calling_its_jobs_gone(monkeypatch, tmp_path):
    from kmtbook.paper_sweep import main

    fake_slurm_commands(monkeypatch, tmp_path / "bin", b"Welcome to the cluster! Maintenance on Monday.\n")
    monkeypatch.setattr(sweep, "_submit", lambda todo, out, *rest: [FakeJob(out, f"31_{i}") for i in range(len(todo))])
    polls = {"n": 0}

    def sleep(seconds):
        polls["n"] += 1
        if polls["n"] > 200:
            raise AssertionError("the driver is still waiting")

    monkeypatch.setattr(sweep, "time", SimpleNamespace(sleep=sleep))  # (the driver's pauses only, not squeue's)
    plan = select(paper_plan(seeds=[1], steps=2, **TINY), ["main"])
    with pytest.raises(ValueError, match=r"`squeue .*Maintenance on Monday"):  # (not JobsEndedError: "gone")
        execute(plan, tmp_path / "library", "slurm", poll_s=0.001, check_s=0.001)
    polls["n"] = 0
    argv = ["--seeds", "1,2", "--steps", "2", "--only", "main", "--set", "n=32", "--set", "batch=4",
            "--set", "val_batches=1", "--out", str(tmp_path / "sweep"), "--executor", "slurm"]  # fmt: skip
    with pytest.raises(SystemExit) as ended:
        main(argv)
    message = str(ended.value)
    assert message.startswith("error: `squeue --noheader") and "\n" not in message, message
    assert "'Welcome to the cluster! Maintenance on Monday.'" in message and "gone" not in message
    assert message.endswith("; job(s) 31_0, 31_1 were left unwatched and may still run")


def test_slurm_without_slurm_commands_ends_in_one_line_before_submitit_is_asked(monkeypatch, tmp_path):
    from kmtbook.paper_sweep import main

    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # (no sbatch, srun or squeue there)

    def submit(*args):
        raise AssertionError("submitit was asked")

    monkeypatch.setattr(sweep, "_submit", submit)
    out = tmp_path / "sweep"
    with pytest.raises(SystemExit) as ended:
        main(["--seeds", "1", "--only", "onehot_seed1", "--out", str(out), "--executor", "slurm"])
    message = str(ended.value)
    assert message == ("error: --executor slurm: no Slurm commands found (sbatch, srun not on PATH); "
                       "to run on this machine instead, use --executor local (or --executor serial)")
    assert not out.exists()
    with pytest.raises(ValueError, match="no Slurm commands found"):
        execute(select(paper_plan(seeds=[1], steps=2, **TINY), ["main"]), out, "slurm")
    assert not out.exists()
    main(["--seeds", "1", "--out", str(out), "--executor", "slurm", "--plan"])  # (a plan needs no Slurm)


def _fake_submission(monkeypatch, make_jobs, queue=None, at_poll=None, bin_folder=None):
    """``execute``'s submitit path with jobs from ``make_jobs(folder, groups)`` and a queue that
    lists only the jobs in ``queue`` (a scancel'ed job drops out of it on a cluster without
    accounting, and sacct says nothing); ``at_poll(i)`` runs at the driver's i-th pause, and a
    driver still waiting after 2000 pauses fails the test instead of hanging it. Slurm's commands
    are faked in ``bin_folder``."""
    if bin_folder is not None:
        fake_slurm_commands(monkeypatch, bin_folder)
    monkeypatch.setattr(sweep, "_submit", lambda todo, out, *rest: make_jobs(out / "_submitit", todo))
    monkeypatch.setattr(job_watch, "queue_states", lambda ids: {i: s for i, s in (queue or {}).items() if i in ids})
    polls = {"n": 0}
    real_sleep = time.sleep

    def sleep(seconds):
        polls["n"] += 1
        if polls["n"] > 2000:
            raise AssertionError("the driver is still waiting for jobs that are gone")
        if at_poll:
            at_poll(polls["n"])
        real_sleep(seconds)

    monkeypatch.setattr(sweep.time, "sleep", sleep)
    return polls


def test_the_driver_ends_when_its_jobs_are_gone(monkeypatch, tmp_path, capfd):
    """Every job cancelled without a result, and submitit's warnings on the way: the driver ends
    within a bounded time with one error naming every job; the warnings are in the sweep's
    folder, not on the terminal."""
    pytest.importorskip("submitit")  # (its logger gets its handlers to the terminal on import)
    plan = select(paper_plan(seeds=[1, 2], steps=2, **TINY), ["main"])
    logger = logging.getLogger("submitit")
    before, seen = list(logger.handlers), []

    def make_jobs(folder, todo):
        folder.mkdir(parents=True, exist_ok=True)
        seen.extend(logger.handlers)
        logger.warning("Call #1 - Bypassing sacct error, status may be inaccurate.")
        return [FakeJob(folder, f"31_{i}") for i in range(len(todo))]

    _fake_submission(monkeypatch, make_jobs, bin_folder=tmp_path / "bin")
    start = time.monotonic()
    with pytest.raises(JobsEndedError) as ended:
        execute(plan, tmp_path / "sweep", "slurm", poll_s=0.01, check_s=0.05)
    assert time.monotonic() - start < 10
    message = str(ended.value)
    assert "\n" not in message and message.startswith("2 of 2 job(s) ended without finishing their runs")
    assert "31_0 (NOT IN THE QUEUE) is gone" in message and "31_1 (NOT IN THE QUEUE) is gone" in message
    err = capfd.readouterr().err
    assert "Bypassing" not in err and "sweep: job 31_0 (NOT IN THE QUEUE) is gone from the scheduler" in err
    assert "Bypassing sacct error" in (tmp_path / "sweep" / "_submitit" / "submitit.log").read_text()
    # while the sweep runs, the file is where submitit's messages go, and only there; then as before
    assert [type(h) for h in seen] == [logging.FileHandler] and not any(h in seen for h in before)
    assert logger.handlers == before


def test_the_driver_waits_for_the_other_jobs_then_names_the_gone_and_the_failed(monkeypatch, tmp_path, capfd):
    plan = select(paper_plan(seeds=[1, 2, 3], steps=2, **TINY), ["main"])
    state = {}

    def make_jobs(folder, todo):
        folder.mkdir(parents=True, exist_ok=True)
        jobs = [FakeJob(folder, "40_0"), FakeJob(folder, "40_1", error="FloatingPointError: diverged"),
                FakeJob(folder, "40_2")]  # fmt: skip
        jobs[1].finish()
        state["jobs"] = jobs
        return jobs

    def at_poll(i):  # 40_2 finishes well after 40_0 is gone
        if i == 200:
            state["jobs"][2].finish()

    polls = _fake_submission(monkeypatch, make_jobs, queue={"40_2": "RUNNING"}, at_poll=at_poll,
                             bin_folder=tmp_path / "bin")
    with pytest.raises(JobsEndedError) as ended:
        execute(plan, tmp_path / "sweep", "slurm", runs_per_group=1, poll_s=0.001, check_s=0.01)
    assert polls["n"] >= 200  # (it waited for 40_2)
    message = str(ended.value)
    assert message.startswith("2 of 3 job(s)") and "job 40_0 (NOT IN THE QUEUE) is gone" in message
    assert "job 40_1 failed: FloatingPointError: diverged (log: " in message and "40_2" not in message
    assert "waiting for the 1 other job(s)" in capfd.readouterr().err


def test_the_command_names_the_jobs_and_the_command_that_resumes(monkeypatch, tmp_path):
    from kmtbook.paper_sweep import main

    def fail(*args, **kwargs):
        raise JobsEndedError("1 of 1 job(s) ended without finishing their runs: job 5_0 (CANCELLED) is gone")

    monkeypatch.setattr(sweep, "execute", fail)
    fake_slurm_commands(monkeypatch, tmp_path / "bin")
    argv = ["--seeds", "1", "--only", "onehot_seed1", "--out", str(tmp_path / "my sweep"), "--executor", "slurm"]
    with pytest.raises(SystemExit) as ended:
        main(argv)
    message = str(ended.value)
    assert message.startswith("error: 1 of 1 job(s) ended") and "\n" not in message
    assert f"`python -m kmtbook.paper_sweep --seeds 1 --only onehot_seed1 --out '{tmp_path / 'my sweep'}' " \
           "--executor slurm` resumes them" in message  # fmt: skip


@pytest.mark.parametrize("executor", ["local", "slurm"])
def test_an_executor_without_submitit_ends_in_one_line(monkeypatch, tmp_path, executor):
    from kmtbook.paper_sweep import main

    fake_slurm_commands(monkeypatch, tmp_path / "bin")
    monkeypatch.setitem(sys.modules, "submitit", None)  # (as if not installed: importing it fails)
    out = tmp_path / "sweep"
    with pytest.raises(SystemExit) as ended:
        main(["--seeds", "1", "--only", "onehot_seed1", "--out", str(out), "--executor", executor])
    assert str(ended.value) == (f"error: --executor {executor} needs submitit, which is not installed (pip install "
                                "'kmtlib[sweep]'); or run in this process with --executor serial")
    assert not out.exists()
