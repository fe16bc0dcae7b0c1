"""`Pool.driver()`: the public contract that drives a live pool from outside it (runtime/nodes/driver.py,
runtime/actors/driver.py) — nodes as views, workers and calls on chosen ones, waiting until quiet on the
pool's events (not by polling), replacing a node — on real Local pools."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

import skyhive as sky
from skyhive.errors import PoolClosed
from skyhive.runtime.actors.driver import RuntimeDriver
from skyhive.runtime.events.lifecycle import NodeState
from skyhive.runtime.nodes.driver import NodeView, PoolDriver, WorkerRef

pytestmark = pytest.mark.anyio


def where(tag: str) -> tuple[str, int, int]:
    return tag, sky.instance_info().node, os.getpid()


def wait_for_file(path: str) -> str:
    deadline = time.monotonic() + 120
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.02)
    return "released"


async def test_the_driver_shows_the_nodes_and_calls_chosen_workers():
    async with sky.Pool(provider=sky.Local(), nodes=2, output=None, name="drv-views") as pool:
        driver: PoolDriver = pool.driver()
        assert driver.pool_id == "drv-views" and driver.provider is pool.provider
        views = driver.nodes()
        assert [v.index for v in views] == [0, 1]
        assert all(isinstance(v, NodeView) and v.state is NodeState.READY and v.busy == 0 and not v.replacing
                   and v.handle is not None and v.transport is not None for v in views)
        assert driver.node(1).handle is views[1].handle
        with pytest.raises(IndexError, match="pool drv-views has no node 5 \\(it has 2\\)"):
            driver.node(5)
        workers = await driver.workers()
        assert [(w.node, w.rank) for w in workers] == [(0, 0), (1, 0)]
        tag, node, _ = await driver.call(workers[1], where, ("hi",), name="where")
        assert (tag, node) == ("hi", 1)
        with pytest.raises(ValueError, match="does not come from PoolDriver.workers"):
            await driver.call(WorkerRef(node=0, rank=0), where, ("x",))
        assert not driver.replacing() and not driver.replace(0, "asked by a test")  # replace_failed=False
    with pytest.raises(PoolClosed):  # the pool closed: its driver drives nothing
        await driver.workers()
    with pytest.raises(PoolClosed):  # a pool not entered yet has nothing to drive
        sky.Pool(provider=sky.Local(), nodes=1).driver()


async def test_quiet_waits_for_the_calls_in_flight_on_the_pools_events_not_by_polling(tmp_path, monkeypatch):
    looks = []
    busy = RuntimeDriver._busy
    monkeypatch.setattr(RuntimeDriver, "_busy", lambda self: looks.append(1) or busy(self))
    gate = tmp_path / "release"
    async with sky.Pool(provider=sky.Local(), nodes=2, output=None, heartbeat_interval=0.1, name="drv-quiet") as pool:
        driver = pool.driver()
        assert await driver.quiet(timeout=5)  # nothing runs: quiet at once
        rt = pool._runtime
        async with anyio.create_task_group() as tg:
            result: list[str] = []

            async def blocked() -> None:
                result.append(await driver.call((await driver.workers())[1], wait_for_file, (str(gate),)))

            tg.start_soon(blocked)
            with anyio.fail_after(60):
                while driver.node(1).busy != 1:
                    await anyio.sleep(0.01)
            assert driver.node(0).busy == 0
            assert not await driver.quiet(timeout=0.2)  # the call still runs
            done: list[bool] = []

            async def waiter() -> None:
                done.append(await driver.quiet(timeout=120))

            looks.clear()
            tg.start_soon(waiter)
            ticks = rt.heartbeat_ticks
            with anyio.fail_after(60):  # ten heartbeats (a second at least): a 50 ms poll would look 20 times
                while rt.heartbeat_ticks < ticks + 10:
                    await anyio.sleep(0.05)
            assert not done and len(looks) <= 3, f"quiet looked {len(looks)} times while nothing happened"
            Path(gate).touch()
        assert done == [True] and result == ["released"] and driver.node(1).busy == 0


async def test_a_node_replaced_through_the_driver_comes_back_with_a_new_handle():
    async with sky.Pool(provider=sky.Local(), nodes=2, replace_failed=True, output=None, name="drv-repl") as pool:
        driver = pool.driver()
        old = driver.node(1).handle
        before = await pool.broadcast(where, "a")
        assert driver.replace(1, "asked by a test")
        assert driver.replacing(1) or driver.node(1).handle is not old
        with anyio.fail_after(120):
            workers = await driver.workers()  # waits for the replacement
        assert [(w.node, w.rank) for w in workers] == [(0, 0), (1, 0)]
        assert driver.node(1).state is NodeState.READY
        with anyio.fail_after(60):  # (its replacement task ends just after the node is ready)
            while driver.replacing():
                await anyio.sleep(0.02)
        assert driver.node(1).handle is not old and driver.node(1).handle.provider_id != old.provider_id
        after = await pool.broadcast(where, "b")
        assert after[0][2] == before[0][2] and after[1][2] != before[1][2]  # node 0 kept, node 1 new
        assert not driver.replace(7, "no such node")
