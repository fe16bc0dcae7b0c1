"""Ctrl-C in a script that holds a pool (issue 26 point 2): the remote call is cancelled on the node
(its worker gone, not printing on for seconds), and the script prints one short line, not chained
tracebacks — from a plain script (`with sky.Pool`) and from `anyio.run` alike. A real subprocess gets a
real SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import anyio
import pytest

import skyhive as sky
from tests.procs import Lines, wait_gone

WORK = textwrap.dedent("""\
    import os, time
    import anyio
    import skyhive as sky

    def work():
        print("worker-pid", os.getpid(), flush=True)
        for i in range(600):
            print("tick", i, flush=True)
            time.sleep(0.1)
        print("FINISHED", flush=True)
    """)
PLAIN = WORK + textwrap.dedent("""\
    with sky.Pool(provider=sky.Local(), nodes=1) as pool:
        pool.run(work)
    """)
SUBMITTED = WORK + textwrap.dedent("""\
    with sky.Pool(provider=sky.Local(), nodes=1) as pool:
        pool.submit(work).result()  # Ctrl-C lands in concurrent.futures, not in skyhive
    """)
ASYNC = WORK + textwrap.dedent("""\
    async def main():
        async with sky.Pool(provider=sky.Local(), nodes=1) as pool:
            await pool.run(work)

    anyio.run(main)
    """)


def interrupt(tmp_path, script: str, **env: str) -> tuple[subprocess.CompletedProcess[str], int]:
    path = tmp_path / "script.py"
    path.write_text(script)
    proc = subprocess.Popen([sys.executable, str(path)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **env})
    out, err = Lines(proc.stdout), Lines(proc.stderr)  # (read with a deadline: a stuck child fails, never hangs)
    try:
        out.wait_for("tick 2", 120, "the function running on the node")
        worker = int(next(line for line in out.seen if "worker-pid" in line).split()[-1])
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.rest(), err.rest()), worker


@pytest.mark.parametrize("script", [PLAIN, SUBMITTED, ASYNC], ids=["with-pool", "submitted", "anyio-run"])
def test_ctrl_c_cancels_the_remote_call_and_says_one_line(tmp_path, script):
    done, worker = interrupt(tmp_path, script)
    assert wait_gone({worker}, timeout=30) == set()  # the node's worker process is gone, nothing left running
    assert done.returncode == -signal.SIGINT  # Python's own status for Ctrl-C (130 in a shell)
    assert "FINISHED" not in done.stdout
    ticks = [line for line in done.stdout.splitlines() if "tick" in line]
    assert len(ticks) < 300, "the function ran on long after Ctrl-C"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("skyhive: interrupted (Ctrl-C): pool pool-") and "cancelled on the nodes" in lines[0]
    assert "Traceback" not in done.stderr


def test_ctrl_c_with_skyhive_traceback_full_shows_the_traceback(tmp_path):
    done, worker = interrupt(tmp_path, PLAIN, SKYHIVE_TRACEBACK="full")
    assert wait_gone({worker}, timeout=30) == set()
    assert "Traceback (most recent call last)" in done.stderr and "KeyboardInterrupt" in done.stderr


def test_a_script_that_catches_ctrl_c_itself_gets_no_message(tmp_path):
    caught = PLAIN.replace("with sky.Pool", "try:\n  with sky.Pool").replace("    pool.run(work)",
                                                                            "      pool.run(work)")
    caught += "except KeyboardInterrupt:\n    print('CAUGHT', flush=True)\n"
    done, worker = interrupt(tmp_path, caught)
    assert wait_gone({worker}, timeout=30) == set()
    assert done.returncode == 0 and "CAUGHT" in done.stdout and done.stderr == ""


def _started_then_sleeps(marker: str) -> None:
    import pathlib
    import time

    pathlib.Path(marker).write_text("started")
    time.sleep(600)


def test_a_submitted_future_of_a_pool_left_by_ctrl_c_ends_cancelled_at_once(tmp_path):
    """The race behind "Task was destroyed but it is pending!" at a Ctrl-C'd script's exit (issue 42):
    a pool left by Ctrl-C cancels its calls in flight (`cancel_in_flight`), and a `pool.submit` future's
    task — no caller of its own to cancel it — must end then, cancelled. It used to be left waiting on
    a reply future the channel had dropped: pending on nothing, referenced only from a garbage cycle,
    so whichever came first, the garbage collector (destroying it pending) or the event loop's close,
    ended it. Here the loop runs on after the pool closed, so a task left pending never ends."""
    marker = tmp_path / "started"

    async def main():
        fut = None
        try:
            async with sky.Pool(provider=sky.Local(), nodes=1, output=None) as pool:
                fut = pool.submit(_started_then_sleeps, str(marker))
                with anyio.fail_after(120):
                    while not marker.exists():  # the call runs on the node
                        await anyio.sleep(0.05)
                raise KeyboardInterrupt  # (what Ctrl-C raises in a script: the pool is left by it)
        except KeyboardInterrupt:
            pass
        assert fut is not None
        with anyio.move_on_after(60):  # a bound, not a margin: it ends at once (or never, before the fix)
            while not fut.done():
                await anyio.sleep(0.05)
        # (checked here, on the running loop: its close would cancel a task left pending)
        assert fut.done(), "the submitted call's task was left pending after its pool closed"
        assert fut.cancelled()

    anyio.run(main)
