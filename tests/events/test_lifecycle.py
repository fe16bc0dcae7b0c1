"""Supervision, cancellation, teardown and the event log, on real worker processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import anyio
import pytest

import skyhive as sky
from skyhive.runtime.events.log import read_log
from skyhive.runtime.events.state import fold
from tests.procs import Lines, alive, state_of, wait_gone, worker_pids

pytestmark = pytest.mark.anyio


def pid_then_sleep(path, seconds):
    Path(path).write_text(str(os.getpid()))
    time.sleep(seconds)
    return "slept"


def tick_forever(path, stubborn=False):
    while True:
        try:
            with open(path, "a") as fh:
                fh.write("x")
            time.sleep(0.02)
        except BaseException:
            if not stubborn:
                raise


async def long_call_collecting(pool, flag, failure):
    """A 60 s call that writes its worker's pid to `flag`; whatever it raises goes to `failure`."""
    try:
        await pool.run(pid_then_sleep, str(flag), 60)
    except BaseException as exc:
        failure.append(exc)


def getpid():
    return os.getpid(), sky.instance_info().node


async def wait_for_file(path: Path, timeout: float = 10.0) -> str:
    with anyio.fail_after(timeout):
        while not path.exists() or not path.read_text():
            await anyio.sleep(0.02)
    return path.read_text()


async def test_killed_worker_fails_the_call_with_worker_lost_and_is_restarted(tmp_path):
    flag = tmp_path / "pid"
    async with sky.Pool(nodes=2) as pool:
        before = dict(await pool.broadcast(getpid))
        failure: list[BaseException] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(long_call_collecting, pool, flag, failure)
            pid = int(await wait_for_file(flag))
            victim_node = next(n for p, n in before.items() if p == pid)
            t0 = time.monotonic()
            os.kill(pid, signal.SIGKILL)
        elapsed = time.monotonic() - t0
        [exc] = failure
        assert isinstance(exc, sky.WorkerLost)
        assert exc.node == victim_node and f"node {victim_node}" in str(exc)
        assert "SIGKILL" in str(exc)
        assert elapsed < 3
        # the supervisor restarted the worker; the pool serves the next calls on every node
        after = dict(await pool.broadcast(getpid))
        assert sorted(after.values()) == [0, 1]
        assert pid not in after
        workers = pool.state.nodes[victim_node].workers
        assert workers[0].restarts == 1 and workers[0].state == "ready"
        assert await pool.run(abs, -3) == 3


@pytest.mark.parametrize("how", ["cancel_scope", "timeout"])
async def test_cancelling_a_call_stops_the_function_on_the_node(tmp_path, how):
    ticks = tmp_path / "ticks"
    async with sky.Pool(nodes=1) as pool:
        pid = (await pool.run(getpid))[0]
        if how == "timeout":
            with pytest.raises(sky.TaskTimeout, match="timeout=0.5"):
                await pool.run(tick_forever, str(ticks), timeout=0.5)
        else:
            with anyio.move_on_after(0.5):
                await pool.run(tick_forever, str(ticks))
        await anyio.sleep(0.3)
        size = ticks.stat().st_size
        assert size > 0
        await anyio.sleep(0.5)
        assert ticks.stat().st_size == size  # it stopped writing
        # same worker process, still usable
        assert await pool.run(getpid) == (pid, 0)
        assert pool.state.tasks_cancelled == 1


async def test_a_function_that_ignores_cancel_gets_its_worker_killed(tmp_path):
    ticks = tmp_path / "ticks"
    async with sky.Pool(nodes=1, cancel_grace=0.5) as pool:
        pid = (await pool.run(getpid))[0]
        with pytest.raises(sky.TaskTimeout):
            await pool.run(tick_forever, str(ticks), True, timeout=0.3)
        await anyio.sleep(1.5)
        size = ticks.stat().st_size
        await anyio.sleep(0.4)
        assert ticks.stat().st_size == size
        assert not alive(pid) or state_of(pid) == "Z"
        new_pid = (await pool.run(getpid))[0]
        assert new_pid != pid


def spawn_sleeper():
    import subprocess

    return subprocess.Popen(["sleep", "60"]).pid


@pytest.mark.parametrize("how", ["normal", "exception", "cancel"])
async def test_no_process_is_left_after_the_pool_exits(how):
    pids: set[int] = set()
    with pytest.raises(Exception) if how == "exception" else _nothing():
        with anyio.move_on_after(1.5) if how == "cancel" else _nothing():
            async with sky.Pool(nodes=2) as pool:
                pids |= {p for p, _ in await pool.broadcast(getpid)}
                pids |= set(await pool.broadcast(spawn_sleeper))  # grandchildren too
                assert all(alive(p) for p in pids)
                if how == "exception":
                    raise RuntimeError("boom")
                if how == "cancel":
                    await anyio.sleep(30)
    assert len(pids) == 4
    assert wait_gone(pids, timeout=3) == set(), {p: state_of(p) for p in pids}
    assert not (worker_pids() & pids)


@pytest.mark.parametrize("after", [0.0, 0.03, 0.08, 0.15])
async def test_cancel_during_start_leaves_nothing(after):
    name = f"cancel-start-{os.getpid()}-{int(after * 1000)}"
    with anyio.move_on_after(after):
        async with sky.Pool(nodes=2, name=name):
            await anyio.sleep(30)
    assert wait_gone(worker_pids(name), timeout=3) == set()
    assert fold(read_log(Path(os.environ["SKYHIVE_HOME"]) / "pools" / f"{name}.jsonl")).status == "stopped"


async def test_replaying_the_event_log_gives_the_final_state():
    async with sky.Pool(nodes=2, name="replay-me") as pool:
        await pool.broadcast(getpid)
        await pool.map(abs, range(-50, 50))
        with pytest.raises(ZeroDivisionError):
            await pool.run(divmod, 1, 0)
        live_mid = pool.state
        assert fold(read_log(pool.log_path)) .tasks_submitted <= live_mid.tasks_submitted
        path = pool.log_path
    final = pool.state
    replayed = fold(read_log(path))
    assert replayed == final
    assert final.status == "stopped" and final.tasks_failed == 1
    assert [n.state for n in final.nodes] == ["terminated", "terminated"]
    assert final.tasks_ok == final.tasks_submitted - 1
    kinds = [e.kind for e in read_log(path)]
    assert kinds[0] == "pool_started" and kinds[-1] == "pool_stopped"
    states = [e.state for e in read_log(path) if e.kind == "node_state" and e.node == 0]
    assert states == ["requested", "provisioning", "running", "connecting", "bootstrapping", "ready",
                      "draining", "terminating", "terminated"]


async def test_events_iterator_sees_the_lifecycle():
    seen = []
    async with sky.Pool(nodes=1) as pool:
        async def watch():
            async for ev in pool.events(replay=True):
                seen.append(ev.kind)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await pool.run(abs, 1)  # short: submitted -> finished
            await pool.run(time.sleep, 0.2)  # still running at the worker's next tick: started too
            await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
    assert seen[0] == "pool_started"
    assert seen.count("task_submitted") == 2 and seen.count("task_finished") == 2
    assert seen.count("task_started") == 1
    assert seen.index("task_started") > seen.index("task_finished")  # (the second task's)


def divmod(a, b):  # noqa: A001 - a module-level function the worker pickles by value
    return a // b


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


def chatter():
    while True:
        print("x" * 200, flush=True)


async def test_cancelling_a_task_in_the_middle_of_its_output_keeps_the_stream_whole():
    # the cancel signal lands while the worker writes an Output frame: the frame must stay whole
    async with sky.Pool(nodes=1, output=None) as pool:
        pid = (await pool.run(getpid))[0]
        for _ in range(8):
            with pytest.raises(sky.TaskTimeout):
                await pool.run(chatter, timeout=0.15)
        assert await pool.run(getpid) == (pid, 0)  # same worker, no protocol error, no restart
        assert pool.state.nodes[0].workers[0].restarts == 0


HOLDER = """
import os, sys, time, anyio
import skyhive as sky

def long_task():
    time.sleep(120)

async def main():
    async with sky.Pool(nodes=1, name=sys.argv[1]) as pool:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pool.run, long_task)
            await anyio.sleep(0.5)
            print("running", flush=True)
            await anyio.sleep(120)

anyio.run(main)
"""


async def test_a_killed_client_leaves_no_worker_even_mid_task(tmp_path):
    import subprocess
    import sys

    name = f"orphan-{os.getpid()}"
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    proc = subprocess.Popen([sys.executable, str(script), name], stdout=subprocess.PIPE, text=True)
    try:
        Lines(proc.stdout).wait_for(lambda line: line.strip() == "running", 120, "the holder's task running")
        pids = worker_pids(name)
        assert len(pids) == 1
        proc.kill()  # the client dies while its worker runs a 120 s task
        proc.wait()
        assert wait_gone(pids, timeout=5) == set()
    finally:
        proc.kill()


async def test_heartbeats_keep_a_busy_worker_and_catch_a_stopped_one(tmp_path):
    flag = tmp_path / "pid"
    async with sky.Pool(nodes=1, heartbeat_interval=0.2, heartbeat_timeout=1.0) as pool:
        # busy for 3 s (> heartbeat_timeout): the worker still answers pings while the task runs
        assert await pool.run(time.sleep, 3) is None
        assert pool.state.nodes[0].workers[0].restarts == 0
        # stopped (SIGSTOP): it cannot answer; it is declared lost, killed, and replaced
        failure: list[BaseException] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(long_call_collecting, pool, flag, failure)
            pid = int(await wait_for_file(flag))
            os.kill(pid, signal.SIGSTOP)
        [exc] = failure
        assert isinstance(exc, sky.WorkerLost) and "no heartbeat" in str(exc)
        assert wait_gone({pid}, timeout=5) == set()
        new_pid, _ = await pool.run(getpid)
        assert new_pid != pid


def exit_with(code):
    os._exit(code)


async def test_a_node_given_up_says_what_its_last_loss_was():
    async with sky.Pool(nodes=1, output=None, max_restarts=0, restart_backoff=0.05) as pool:
        with pytest.raises(sky.WorkerLost, match="exited with status 7"):
            await pool.run(exit_with, 7)
        with anyio.fail_after(60), pytest.raises(sky.WorkerLost) as lost:
            await pool.run(getpid)
    message = str(lost.value)
    assert "node 0: failed" in message and "the worker process exited with status 7" in message, message
