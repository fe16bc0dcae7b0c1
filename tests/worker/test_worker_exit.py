"""How the worker daemon ends when its input is garbage: it kills only a process group it leads,
and says it failed with its exit status."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

LIMIT = 60

SCRIPT = textwrap.dedent("""\
    #!/bin/sh
    # the worker runs in this script's process group, which it does not lead
    printf 'this is not a skyhive frame, just garbage on stdin\\n' | "$PYTHON" -m skyhive.runtime.worker
    echo "worker exit status $?"
    echo "the script survived"
    """)


def test_garbage_on_stdin_exits_non_zero_and_spares_the_callers_process_group(tmp_path):
    script = tmp_path / "start-worker.sh"
    script.write_text(SCRIPT)
    # the script leads a group of its own (never pytest's): the worker joins it without leading it
    done = subprocess.run(["/bin/sh", str(script)], env={**os.environ, "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=LIMIT, start_new_session=True)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)  # not killed by SIGTERM
    assert "the script survived" in done.stdout, done.stdout
    status = int(done.stdout.split("worker exit status ")[1].split()[0])
    assert status != 0, done.stdout
    assert "protocol error from the client" in done.stderr and "exceeds" in done.stderr, done.stderr


def test_a_worker_leading_its_own_group_still_takes_its_task_children_with_it(tmp_path):
    """The Local transport starts each worker as a group leader: abandoning still ends the group."""
    marker = tmp_path / "child.pid"
    code = textwrap.dedent(f"""\
        import os, subprocess, sys
        child = subprocess.Popen(["sleep", "300"])  # a process a task would have started
        open({str(marker)!r}, "w").write(str(child.pid))
        from skyhive.runtime.worker.daemon import WorkerDaemon
        w = WorkerDaemon(0, 1)
        w.failure = "protocol error from the client: test"
        w.abandon()
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=LIMIT,
                          start_new_session=True)
    assert proc.returncode == 1, proc.stderr
    pid = int(marker.read_text())
    deadline = time.monotonic() + LIMIT
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), f"the task's child {pid} outlived its worker"


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for the machine's init to reap it counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
