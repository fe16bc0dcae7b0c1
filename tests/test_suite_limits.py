"""No test can hang the run: the suite's own configuration (pyproject's [tool.pytest.ini_options], used here
through `-c`) fails a test that sleeps or waits on a pipe forever within its limit, naming it and showing
where it waited, and the run goes on — serially and in the test processes `dev.py test` uses (xdist). The
hanging tests live in a temporary folder, never in the suite."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

HANGING = '''
import os
import time


def test_sleeps_forever():
    time.sleep(10**6)


def test_reads_a_pipe_whose_writer_lives_on():
    r, w = os.pipe()
    os.read(r, 1)


def test_after_the_hangs():
    assert 1 + 1 == 2
'''


def test_the_suite_configures_a_limit_for_every_test():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert isinstance(options["timeout"], int) and 60 <= options["timeout"] <= 1200
    assert options["timeout_method"] == "signal"  # fails the one test and goes on (thread would end the process)
    lock = (ROOT / "requirements" / "test.lock").read_text()
    assert "\npytest-timeout==" in lock


@pytest.mark.parametrize("parallel", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_hanging_test_fails_within_its_limit_with_its_name_and_the_run_goes_on(tmp_path, parallel):
    (tmp_path / "test_hangs.py").write_text(HANGING)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
         "-p", "no:cacheprovider", "-o", "timeout=3", *parallel, str(tmp_path / "test_hangs.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "2 failed, 1 passed" in out, out
    for name in ("test_sleeps_forever", "test_reads_a_pipe_whose_writer_lives_on"):
        assert re.search(rf"FAILED test_hangs.py::{name} - Failed: Timeo", out), out
    # each failure's traceback ends in the limit's message (the summary repeats it, cut to the terminal's width)
    assert len(re.findall(r"^E\s+Failed: Timeout \(>3\.0s\) from pytest-timeout", out, flags=re.M)) == 2, out
    # where each waited: the line of the test that blocked
    assert "time.sleep(10**6)" in out and "os.read(r, 1)" in out, out
