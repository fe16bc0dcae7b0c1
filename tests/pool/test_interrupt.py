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

import pytest

from tests.procs import wait_gone

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
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # the function runs on the node
        lines.append(line)
        if "tick 2" in line:
            break
    worker = int(next(line for line in lines if "worker-pid" in line).split()[-1])
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines) + out, err), worker


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
