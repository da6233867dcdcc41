"""Which of a sweep's submitted jobs are gone: ended on the scheduler without a result.

A job handed to Slurm can end without running its function to the end: cancelled (``scancel``),
preempted, killed with its node, out of time or memory. submitit learns a job's state from
``sacct``, which answers only where the cluster keeps an accounting database; without one, every
state stays ``UNKNOWN`` and a driver waiting for ``done()`` waits forever. :class:`JobWatch` asks
the controller itself, with ``squeue`` (:func:`queue_states`: it lists a job while it is pending or
running, and for a while after it ended with its final state), and otherwise takes the state that
submitit knows (sacct's, or a local subprocess's). A job that has written no result and is seen
ended on two checks in a row (listed with a final state, or no longer listed at all) is **gone**;
the two checks leave a result written at the very end the time to appear on a shared file system.
A job is therefore called gone at most about two check intervals after it ended, and only from an
answer read in full: output of squeue that is not its ``<job id>|<state>`` lines, or not UTF-8, is
an error (:class:`QueueAnswerError`), never an empty queue.
"""

from __future__ import annotations

import math
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

ENDED_STATES: frozenset[str] = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
    "REVOKED", "TIMEOUT",
    "FINISHED", "INTERRUPTED",  # (submitit's states of a local subprocess that ended)
})  # fmt: skip
"""Job states after which a job runs no more (Slurm's, as squeue and sacct print them, and
submitit's for local jobs). Every other state (PENDING, RUNNING, COMPLETING, REQUEUED, SUSPENDED,
UNKNOWN, ...) counts as a job that may still run."""

QueueQuery = Callable[[Sequence[str]], "dict[str, str] | None"]


class QueueAnswerError(ValueError):
    """squeue answered (exit status 0) with output that is not its ``<job id>|<state>`` lines, or
    not UTF-8 text: the message names the command and shows the line that cannot be read. The
    watch never reads such an answer as an empty queue, which would call every job gone."""


QUEUE_LINE = re.compile(r"(?P<job>\d+(?:_\d+|_\[[^\]]*\]|\+\d+)?)\|(?P<state>[A-Za-z_]+)")
"""One line of ``squeue --format=%i|%T``: a job id (``123``, an array task ``123_4``, pending tasks
``123_[5-9]``, a heterogeneous job's part ``123+0``), a bar and its state (``RUNNING``)."""


def queue_states(job_ids: Sequence[str]) -> dict[str, str] | None:
    """The state squeue gives each job it lists among ``job_ids`` (array tasks as ``"123_4"``), ended
    jobs included while the controller remembers them; ``{}`` when it knows none of them; None when
    squeue cannot answer (not installed, controller unreachable), which says nothing about the jobs.
    An answer that cannot be read raises :class:`QueueAnswerError`."""
    arrays = sorted({str(j).split("_", 1)[0] for j in job_ids})
    if not arrays:
        return {}
    command = ["squeue", "--noheader", "--array", "--states=all", "--format=%i|%T", f"--jobs={','.join(arrays)}"]
    try:
        proc = subprocess.run(command, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        # (every id purged from the controller's memory: the jobs ended long ago)
        return {} if b"Invalid job id" in proc.stderr else None
    return parse_queue(proc.stdout, " ".join(command))


def parse_queue(output: bytes, command: str = "squeue") -> dict[str, str]:
    """``{job id: state}`` from squeue's ``<job id>|<state>`` lines (blank lines skipped);
    :class:`QueueAnswerError` naming ``command`` for bytes that are not UTF-8 or a line that is
    not such a pair."""
    try:
        text = output.decode("utf-8")
    except UnicodeDecodeError:
        first = next((line for line in output.splitlines() if line.strip()), output)
        raise QueueAnswerError(f"`{command}` printed bytes that are not UTF-8 text; its first line: "
                               f"{_shown(first)}") from None
    states = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = QUEUE_LINE.fullmatch(line.strip())
        if match is None:
            raise QueueAnswerError(f"`{command}` printed what is not <job id>|<state>; its line {number}: "
                                   f"{_shown(line)}")
        states[match["job"]] = match["state"].upper()
    return states


def _shown(line: str | bytes, most: int = 120) -> str:
    shown = repr(line)
    return shown if len(shown) <= most else shown[: most - 3] + "..."


def _has_result(job: Any) -> bool:
    return bool(job.paths.result_pickle.exists())


def _submitit_state(job: Any) -> str:
    """The job's state as submitit knows it (``CANCELLED by 0`` -> ``CANCELLED``)."""
    try:
        state = str(job.state)
    except Exception:  # (submitit's state can fail in many ways; not knowing is the answer)
        return "UNKNOWN"
    return (state.split() or ["UNKNOWN"])[0].upper()


class JobWatch:
    """Tells which of ``jobs`` (submitit jobs, or anything with ``job_id``, ``state`` and
    ``paths.result_pickle``) are gone, checking at most every ``check_s`` seconds.

    ``query``: how to ask the scheduler for the jobs' states (:func:`queue_states` for Slurm; None
    for jobs that have no queue, such as local subprocesses, whose submitit state is exact).
    """

    def __init__(
        self, jobs: Iterable[Any], query: QueueQuery | None = None, check_s: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.jobs = list(jobs)
        self.query = query
        self.check_s = float(check_s)
        self.clock = clock
        self.ended_checks: dict[str, int] = {}
        self.states: dict[str, str] = {}
        self.last_check = -math.inf

    def ended(self, job: Any, queued: dict[str, str] | None) -> bool:
        """Whether ``job`` runs no more, by the queue when it answered, else by submitit's state."""
        job_id = str(job.job_id)
        if queued is not None:
            state = queued.get(job_id, "NOT IN THE QUEUE")
            self.states[job_id] = state
            return state == "NOT IN THE QUEUE" or state.split()[0] in ENDED_STATES
        state = _submitit_state(job)
        self.states[job_id] = state
        return state in ENDED_STATES

    def check(self) -> list[Any]:
        """The jobs gone so far (no result, seen ended on two checks in a row); asks the scheduler
        when ``check_s`` has passed since the last time, else answers from the last check."""
        now = self.clock()
        if now - self.last_check >= self.check_s:
            self.last_check = now
            waiting = [job for job in self.jobs if not _has_result(job)]
            queued = self.query([str(job.job_id) for job in waiting]) if self.query and waiting else None
            for job in waiting:
                job_id = str(job.job_id)
                self.ended_checks[job_id] = self.ended_checks.get(job_id, 0) + 1 if self.ended(job, queued) else 0
        return [job for job in self.jobs if self.ended_checks.get(str(job.job_id), 0) >= 2 and not _has_result(job)]

    def describe(self, jobs: Iterable[Any]) -> str:
        """``"123_0 (CANCELLED), 123_1 (NOT IN THE QUEUE)"``: the jobs with the state last seen."""
        return ", ".join(f"{job.job_id} ({self.states.get(str(job.job_id), 'UNKNOWN')})" for job in jobs)
