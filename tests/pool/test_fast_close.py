"""The close of a pool ends its workers and returns at once, and loses nothing it used to flush (issue 41).

Each test runs the user's script in a fresh process (the blocking `with sky.Pool(...)`, as a script
writes it) and looks at what is left afterwards: the worker processes, the pool's event log, the lines
printed. How long the close takes is measured in bench/ (`bench/script_life.py`), not here.
"""

from __future__ import annotations

import json
import subprocess
import sys

from skyhive.runtime.events.log import pool_log_path, read_log
from skyhive.runtime.events.types import OutputChunk, PoolStopped, WorkerStateChanged

from tests.procs import wait_gone

SCRIPT = r"""
import json, os, subprocess, sys
import skyhive as sky

def talk(tag):
    print(f"whole line {tag}", flush=False)        # Python output, in the task's stream buffer
    os.write(1, f"fd line {tag}\n".encode())        # native output: through the worker's fd-1 pump
    sys.stdout.write(f"partial line {tag}")        # no newline: the printer shows it at the end
    return os.getpid()

def grandchild():
    return subprocess.Popen(["sleep", "600"]).pid   # left running by the task: the close ends it

def state(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None

with sky.Pool(provider=sky.Local(), nodes=2) as pool:
    workers = [w.pid for node in pool.state.nodes for w in node.workers]
    seen = [state(pid) for pid in workers]
    pids = pool.broadcast(talk, "x")
    child = pool.run(grandchild)
    pool_id = pool.id
left = {pid: state(pid) for pid in workers if state(pid) is not None}
sys.stderr.write("RESULT " + json.dumps({"pool": pool_id, "workers": workers, "seen": seen, "pids": pids,
                                         "left": left, "child": child}) + "\n")
"""


ASYNC_SCRIPT = r"""
import asyncio, json, sys
import skyhive as sky

def nop():
    return 1

async def main():
    async with sky.Pool(provider=sky.Local(), nodes=2, output=None) as pool:
        workers = [w.pid for node in pool.state.nodes for w in node.workers]
        await pool.run(nop)
    return pool.id, workers

pool_id, workers = asyncio.run(main())
sys.stderr.write("RESULT " + json.dumps({"pool": pool_id, "workers": workers}) + "\n")
"""


def run_script(script: str = SCRIPT) -> tuple[dict, str, str]:
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    line = next(x for x in reversed(done.stderr.splitlines()) if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), done.stdout, done.stderr


def test_the_workers_are_gone_when_with_returns():
    found, _, _ = run_script()
    assert len(found["workers"]) == 2 and all(s not in (None, "Z") for s in found["seen"])
    assert sorted(found["pids"]) == sorted(found["workers"])  # the tasks ran in those processes
    # not a zombie either: each worker was waited for before `with` returned
    assert found["left"] == {}, f"worker processes left when `with` returned: {found['left']}"
    # what a task left running dies with its worker's process group (the machine's init reaps it)
    assert wait_gone({found["child"]}, timeout=30) == set()


def test_the_close_loses_no_output_line_and_no_last_event():
    found, stdout, _ = run_script()
    for text in ("whole line x", "fd line x", "partial line x"):  # printed here, once per node
        assert sum(text in line for line in stdout.splitlines()) == 2, (text, stdout)
    events = list(read_log(pool_log_path(found["pool"])))
    assert isinstance(events[-1], PoolStopped) and events[-1].error == "" and events[-1].leaked == ()
    stopped = {(e.node, e.pid) for e in events if isinstance(e, WorkerStateChanged) and e.state == "stopped"}
    assert {pid for _, pid in stopped} == set(found["workers"]), stopped
    for node in (0, 1):  # the event log has every piece of each node's output
        text = "".join(e.text for e in events if isinstance(e, OutputChunk) and e.node == node)
        for piece in ("whole line x\n", "fd line x\n", "partial line x"):
            assert piece in text, (node, text)


def test_under_asyncio_run_the_close_records_each_workers_stop_and_prints_no_error():
    """`async with` under plain `asyncio.run` (no anyio.run): a worker's pipe closing is handled in a
    protocol callback outside any task, where anyio could not tell the event loop — each worker's
    `stopped` was lost and a `NoEventLoopError` traceback printed per worker."""
    found, _, stderr = run_script(ASYNC_SCRIPT)
    assert "Traceback" not in stderr and "NoEventLoopError" not in stderr, stderr
    events = list(read_log(pool_log_path(found["pool"])))
    stopped = {e.pid for e in events if isinstance(e, WorkerStateChanged) and e.state == "stopped"}
    assert stopped == set(found["workers"]), [e for e in events if isinstance(e, WorkerStateChanged)]
    assert isinstance(events[-1], PoolStopped) and events[-1].error == ""


RESTART_SCRIPT = r"""
import asyncio, json, os, signal, sys, time
import skyhive as sky

def pid():
    return os.getpid()

async def main():
    async with sky.Pool(provider=sky.Local(), nodes=1, output=None) as pool:
        first = await pool.run(pid)
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while True:  # until the node shows a ready worker with another pid (the restart), or the deadline
            workers = pool.state.nodes[0].workers
            if any(w.state == "ready" and w.pid not in (0, first) for w in workers) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        second = await pool.run(pid)
    return first, second

first, second = asyncio.run(main())
sys.stderr.write("RESULT " + json.dumps({"first": first, "second": second}) + "\n")
"""


def test_under_asyncio_run_a_lost_worker_is_restarted():
    """The same callback starts the restart of a worker lost while the pool runs: under plain
    `asyncio.run` it failed (`NoEventLoopError`), the worker was never restarted and the next call
    failed with `WorkerLost`."""
    found, _, stderr = run_script(RESTART_SCRIPT)
    assert found["second"] != found["first"], found
    assert "NoEventLoopError" not in stderr, stderr

