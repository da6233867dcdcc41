"""The test command runs the tests on every core (pytest-xdist, ``--dist loadgroup``, noxfile.py): the tests
of one ``xdist_group`` must run on one worker. tests/conftest.py sends the tests of the built book there as
one group (its worker builds the book once and reads it); a pytest and pytest-xdist that stop grouping
(pytest 9.2 with pytest-xdist 3.8 did, silently) would make every worker build and read the book."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

GROUPED = '''
import os
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    print("worker", os.environ["PYTEST_XDIST_WORKER"])
'''


def test_the_tests_of_one_group_run_on_one_worker(tmp_path):
    pytest.importorskip("xdist")
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v",
         "test_grouped.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = re.findall(r"\[(gw\d+)\] \[ *\d+%\] PASSED", proc.stdout)
    assert len(workers) == 6, proc.stdout
    assert len(set(workers)) == 1, f"the six tests of one xdist_group ran on {sorted(set(workers))}:\n{proc.stdout}"
