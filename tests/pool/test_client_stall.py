"""A client whose event loop is blocked (a synchronous call in the user's async code, a long pickle, a
debugger stop) loses no worker: silence is counted only over the time the client was listening.

Real Local pools with `replace_failed=True`; the client's loop is blocked by `time.sleep` on it for
twice the heartbeat timeout. What each test waits for is an event (heartbeat ticks of the pool's clock,
a replacement), never a fixed time.
"""

from __future__ import annotations

import os
import signal
import time

import anyio
import pytest

import skyhive as sky
from skyhive.runtime.events.types import NodeReplaced, WorkerStateChanged

pytestmark = pytest.mark.anyio

BEATS = {"heartbeat_interval": 0.2, "heartbeat_timeout": 2.0}
STALL = 2 * BEATS["heartbeat_timeout"]


def where() -> tuple[int, int]:
    return sky.instance_info().node, os.getpid()


async def ticks_after(rt, count: int) -> None:
    """Wait until the pool's heartbeat clock has ticked `count` more times (each tick judges every worker)."""
    target = rt.heartbeat_ticks + count
    with anyio.fail_after(60):
        while rt.heartbeat_ticks < target:
            await anyio.sleep(0.02)


def losses(rt) -> list[WorkerStateChanged | NodeReplaced]:
    return [ev for ev in rt.log.recent
            if (isinstance(ev, WorkerStateChanged) and ev.state == "lost") or isinstance(ev, NodeReplaced)]


async def test_a_client_blocked_past_the_heartbeat_timeout_loses_no_worker():
    async with sky.Pool(provider=sky.Local(), nodes=2, replace_failed=True, output=None, **BEATS) as pool:
        rt = pool._runtime
        before = sorted(await pool.broadcast(where))
        await ticks_after(rt, 2)  # the clock is running: every worker pinged and answering
        time.sleep(STALL)  # the client's loop is blocked: nothing is read, no ping is sent
        await ticks_after(rt, 3)  # the clock's first ticks after the stall judged every worker
        assert losses(rt) == []
        assert sorted(await pool.broadcast(where)) == before  # the same worker processes
        await ticks_after(rt, 2)
        assert losses(rt) == []
        assert [n.replacements for n in pool.state.nodes] == [0, 0]


async def test_a_worker_that_really_stopped_during_the_stall_is_still_caught():
    async with sky.Pool(provider=sky.Local(), nodes=2, replace_failed=True, output=None, **BEATS) as pool:
        rt = pool._runtime
        before = dict(await pool.broadcast(where))
        os.kill(before[1], signal.SIGSTOP)  # node 1's worker stops answering for good
        try:
            time.sleep(STALL)
            with anyio.fail_after(60):  # judged over the time we listened: lost, killed, node replaced
                while not (pool.state.nodes[1].replacements == 1 and pool.state.nodes[1].state == "ready"):
                    await anyio.sleep(0.05)
        finally:
            try:
                os.kill(before[1], signal.SIGKILL)
            except ProcessLookupError:
                pass
        lost = [ev for ev in losses(rt) if isinstance(ev, WorkerStateChanged)]
        assert [ev.node for ev in lost] == [1]
        assert "no heartbeat" in lost[0].detail
        after = dict(await pool.broadcast(where))
        assert after[0] == before[0]  # the healthy worker stayed
        assert after[1] != before[1]
