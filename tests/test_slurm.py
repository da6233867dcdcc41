"""The paper's sweep on a running Slurm, as a cluster user meets it: ``python -m kmtbook.paper_sweep
--executor slurm`` submits a job array, the array is cancelled mid-run as a preemption would
cancel it, the driver notices and ends in one ``error:`` line that names the jobs and the command
that resumes them, that command resumes every run, and the models equal those of the serial
sweep bit for bit.

It needs a Slurm that answers with a partition ``debug``: ``.ci/start_slurm.sh`` starts a
single-node one from the system's packages (Debian: ``apt-get install slurm-wlm munge``; it runs as
root; ``.ci/run`` installs and starts it). Without one the test skips, except under CI (``CI``
set), where it fails: CI must run the sweep on a real scheduler. The cluster it starts keeps no
accounting database, so the driver has to tell a cancelled job from the controller alone.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import kmtlib

# one job array at a time on the single node: a second test's jobs would queue behind the first's
pytestmark = pytest.mark.xdist_group("slurm")

ROOT = Path(__file__).resolve().parent.parent
START = ROOT / ".ci" / "start_slurm.sh"
RUNS = ("onehot_seed11", "onehot_seed12")
STEPS = 2000  # long enough (about a minute a run on one quiet core) that the cancel lands mid-run
SWEEP = [
    "--seeds", "11,12", "--steps", str(STEPS), "--only", "onehot*", "--threads", "1", "--runs-per-group", "1",
    "--set", "n=32", "--set", "batch=4", "--set", "val_batches=1", "--set", "eval_every=10",
]  # fmt: skip
"""Two runs of the main configuration, one job each, small enough for CI's two cores (a few
seconds of training each), long enough to be cancelled between two checkpoints."""
NOTICE_S = 90
"""The driver must end within this many seconds of the cancellation (it checks every 15 s and
calls a job gone when it is seen ended twice)."""


def _slurm_missing_reason() -> str | None:
    if shutil.which("sbatch") is None or shutil.which("squeue") is None:
        return "no Slurm here (Debian: apt-get install slurm-wlm munge; then .ci/start_slurm.sh as root)"
    if subprocess.run([str(START), "--check"], capture_output=True).returncode == 0:
        return None
    if os.geteuid() != 0:
        return "Slurm is installed but not running, and .ci/start_slurm.sh needs root"
    started = subprocess.run([str(START)], capture_output=True, text=True, timeout=180)
    if started.returncode != 0:
        return f"Slurm could not be started: {(started.stderr or started.stdout).strip()}"
    return None


@pytest.fixture(scope="module")
def slurm() -> None:
    reason = _slurm_missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"the Slurm test must run in CI: {reason}")
        pytest.skip(reason)


def _environment() -> dict[str, str]:
    """The test's environment for the commands (and, through sbatch, for their jobs): this
    Python, this checkout first on the path, one torch thread."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _sweep(out: Path, executor: str) -> list[str]:
    command = [sys.executable, "-m", "kmtbook.paper_sweep", *SWEEP, "--out", str(out), "--executor", executor]
    if executor == "slurm":
        command += ["--slurm", json.dumps({"slurm_partition": "debug"})]
    return command


def _rows(run: Path) -> list[list[str]]:
    try:
        with open(run / "log.csv", newline="") as f:
            return list(csv.reader(f))[1:]
    except OSError:
        return []


def _wait_for_checkpoints(out: Path, driver: subprocess.Popen, limit_s: float = 300) -> None:
    """Until every run has a checkpoint (at least one evaluation after step 0), none finished."""
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        runs = [out / "main" / name for name in RUNS]
        if all((run / "last.pt").is_file() and len(_rows(run)) >= 2 for run in runs):
            return
        if driver.poll() is not None:
            pytest.fail(f"the sweep ended before it was cancelled:\n{driver.communicate()[1]}")
        time.sleep(0.2)
    driver.kill()
    pytest.fail(f"no checkpoint in {limit_s:.0f} s (is the partition taking jobs?)")


@pytest.fixture
def cancel_at_the_end(tmp_path):
    """One test's job arrays on the node at a time (whichever worker runs it), and, whatever happens in the
    test, no job of its sweeps stays on the cluster."""
    from _book_site import exclusive

    with exclusive("slurm"):
        yield
        arrays = {p.name.split("_", 1)[0] for p in tmp_path.glob("*/_submitit/*_submitted.pkl")}
        if arrays:
            subprocess.run(["scancel", *sorted(arrays)], capture_output=True)


def test_a_cancelled_job_array_is_noticed_and_resumed_bit_for_bit(slurm, cancel_at_the_end, tmp_path, capsys):
    out, env = tmp_path / "slurm", _environment()
    driver = subprocess.Popen(_sweep(out, "slurm"), env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    _wait_for_checkpoints(out, driver)
    arrays = sorted({p.name.split("_", 1)[0] for p in (out / "_submitit").glob("*_submitted.pkl")})
    tasks = sorted(p.name.rsplit("_", 1)[0] for p in (out / "_submitit").glob("*_submitted.pkl"))
    before = {name: _rows(out / "main" / name) for name in RUNS}
    subprocess.run(["scancel", *arrays], check=True)
    cancelled = time.monotonic()
    try:
        _, err = driver.communicate(timeout=NOTICE_S)
    except subprocess.TimeoutExpired:
        driver.kill()
        pytest.fail(f"the driver still waited {NOTICE_S} s after its jobs were cancelled")
    noticed_s = time.monotonic() - cancelled
    at_cancel = {name: int(rows[-1][0]) for name, rows in before.items()}
    assert all(0 < step < STEPS for step in at_cancel.values()), at_cancel  # (cancelled mid-run)

    # one error line naming every job and the command that resumes; submitit's warnings kept out
    assert driver.returncode != 0 and "Traceback" not in err and "Bypassing" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and all(task in last for task in tasks), last
    assert "python -m kmtbook.paper_sweep --seeds 11,12" in last and "resumes them" in last, last

    # the same command again resumes every run to the end; nothing logged before the cancel is lost
    again = subprocess.run(_sweep(out, "slurm"), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    for name, rows in before.items():
        after = _rows(out / "main" / name)
        assert after[: len(rows)] == rows, name
        assert [int(r[0]) for r in after] == list(range(0, STEPS + 1, 10)), name

    # bit for bit the serial sweep's models
    serial = subprocess.run(_sweep(tmp_path / "serial", "serial"), env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=600)  # fmt: skip
    assert serial.returncode == 0, serial.stderr
    for name in RUNS:
        a = kmtlib.load_model(out / "main" / name / "model.pt").state_dict()
        b = kmtlib.load_model(tmp_path / "serial" / "main" / name / "model.pt").state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    with capsys.disabled():
        print(f"\nslurm sweep: jobs {', '.join(tasks)} submitted; cancelled at steps "
              f"{', '.join(f'{n} {s}' for n, s in at_cancel.items())} of {STEPS}; the driver ended "
              f"{noticed_s:.1f} s after the cancellation; resumed to step {STEPS}; "
              f"{len(RUNS)} models equal the serial sweep's bit for bit")  # fmt: skip


def test_a_partition_slurm_refuses_ends_in_one_line(slurm, cancel_at_the_end, tmp_path):
    command = _sweep(tmp_path / "sweep", "slurm")
    command[-1] = json.dumps({"slurm_partition": "no_such_partition"})
    proc = subprocess.run(command, env=_environment(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the scheduler refused the jobs (see --slurm)") and "partition" in last, last
