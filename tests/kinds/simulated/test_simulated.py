"""`sky.Simulated` at scale: 1,000 in-process nodes through the real pool, node actors and worker core."""

from __future__ import annotations

import asyncio

import anyio
import pytest

import skyhive as sky
from skyhive.errors import ProvisionError


def _where() -> tuple[int, int]:
    info = sky.instance_info()
    return info.node, info.total_nodes


def test_thousand_nodes_up_broadcast_map_teardown() -> None:
    provider = sky.Simulated()

    async def main() -> None:
        async with sky.Pool(provider=provider, nodes=1000) as pool:
            results = await pool.broadcast(_where)
            assert results == [(i, 1000) for i in range(1000)]  # node order, each its own instance_info
            doubled = await pool.map(lambda x: 2 * x, range(100_000))
            assert doubled == [2 * x for x in range(100_000)]
            assert len(provider.live[next(iter(provider.live))]) == 1000
        assert all(not nodes for nodes in provider.live.values())  # nothing left

    anyio.run(main)


def test_bad_fault_stage_names_the_node_and_the_stages() -> None:
    with pytest.raises(ValueError, match=r"fail=\{3: 'boot'\}.*launch, wait_running, connecting, bootstrapping"):
        sky.Simulated(fail={3: "boot"})


@pytest.mark.parametrize("stage", ["wait_running", "connecting", "bootstrapping"])
def test_node_failing_at_a_stage_fails_the_pool_naming_it(stage: str) -> None:
    provider = sky.Simulated(fail={7: stage})

    async def main() -> None:
        with pytest.raises(ProvisionError, match="node 7"):
            async with sky.Pool(provider=provider, nodes=20):
                pass
        assert all(not nodes for nodes in provider.live.values())

    anyio.run(main)


def test_seeded_delays_repeat() -> None:
    a = sky.Simulated(nodes_latency=(0.0, 0.01), seed=4).delays(50)
    assert a == sky.Simulated(nodes_latency=(0.0, 0.01), seed=4).delays(50)
    assert a != sky.Simulated(nodes_latency=(0.0, 0.01), seed=5).delays(50)
    assert all(0.0 <= d <= 0.01 for d in a)


def _one() -> int:
    return 1


def test_workers_dying_mid_broadcast_raise_one_worker_lost_naming_all_of_them() -> None:
    dead = {n: 1 for n in range(5, 1000, 100)}  # 1% of 1,000 nodes die at their first task

    async def main() -> None:
        async with sky.Pool(provider=sky.Simulated(die_at=dead), nodes=1000) as pool:
            with pytest.raises(sky.WorkerLost) as caught:
                await pool.broadcast(_one)
            lost = caught.value
            assert lost.nodes == tuple(sorted(dead))
            assert lost.node == min(dead)
            message = str(lost)
            assert f"{len(dead)} workers of pool {pool.id}" in message
            assert f"nodes {', '.join(map(str, sorted(dead)))}: the worker process was killed by SIGKILL" in message

    anyio.run(main)


def test_workers_dying_mid_broadcast_with_retries_give_the_results() -> None:
    dead = {n: 1 for n in range(5, 1000, 100)}

    async def main() -> None:
        async with sky.Pool(provider=sky.Simulated(die_at=dead), nodes=1000) as pool:
            assert await pool.broadcast(_where, retries=1) == [(i, 1000) for i in range(1000)]

    anyio.run(main)


def _boom_on_7() -> int:
    if sky.instance_info().node == 7:
        raise KeyError("seven")
    return 1


def test_a_task_error_in_a_broadcast_is_raised_as_it_is() -> None:
    async def main() -> None:
        async with sky.Pool(provider=sky.Simulated(), nodes=100) as pool:
            with pytest.raises(KeyError, match="seven"):
                await pool.broadcast(_boom_on_7)

    anyio.run(main)


def test_hung_worker_is_caught_by_heartbeats() -> None:
    async def main() -> None:
        async with sky.Pool(provider=sky.Simulated(hang_at={3: 1}), nodes=10,
                            heartbeat_interval=0.1, heartbeat_timeout=0.5) as pool:
            with pytest.raises(sky.WorkerLost, match="node 3.*no heartbeat") as caught:
                await pool.broadcast(_one)
            assert caught.value.node == 3

    anyio.run(main)


def test_hung_worker_is_killed_restarted_and_a_retry_gets_its_result() -> None:
    async def main() -> None:
        async with sky.Pool(provider=sky.Simulated(hang_at={3: 1, 8: 1}), nodes=10,
                            heartbeat_interval=0.1, heartbeat_timeout=0.5) as pool:
            assert await pool.broadcast(_where, retries=1) == [(i, 10) for i in range(10)]
            restarted = [n.node for n in pool.state.nodes if n.workers[0].restarts]
            assert restarted == [3, 8]  # killed as silent, started again (a fresh worker answers)
            assert all(n.state == "ready" for n in pool.state.nodes)

    anyio.run(main)


def test_a_ready_pool_runs_no_task_per_node() -> None:
    """Workers are watched by callbacks and one pool-wide heartbeat ticker, not a parked task (with a
    timer) per node: the tasks of a ready pool do not grow with its nodes."""

    async def tasks_with(nodes: int) -> int:
        async with sky.Pool(provider=sky.Simulated(), nodes=nodes, heartbeat_interval=0.05,
                            heartbeat_timeout=5) as pool:
            await pool.broadcast(_one)
            await anyio.sleep(0.2)  # a few heartbeat ticks: every worker pinged, none lost
            assert await pool.broadcast(_one) == [1] * nodes
            return len(asyncio.all_tasks())

    async def main() -> None:
        assert await tasks_with(300) == await tasks_with(3)

    anyio.run(main)


def test_event_log_of_thousand_nodes_replays_to_the_live_state(tmp_path, monkeypatch) -> None:
    from skyhive.runtime.events.log import EventLog

    monkeypatch.setenv("SKYHIVE_HOME", str(tmp_path))

    async def main() -> None:
        async with sky.Pool(provider=sky.Simulated(), nodes=1000) as pool:
            await pool.broadcast(_one)
            path = pool.log_path
        assert path is not None
        live = pool.state
        replayed = EventLog.replay(path)
        assert len(replayed.nodes) == 1000
        assert replayed == live

    anyio.run(main)


def test_no_worker_left_at_scale_is_summarised_not_listed_node_by_node() -> None:
    async def main() -> None:
        dead = {n: 1 for n in range(200)}
        async with sky.Pool(provider=sky.Simulated(die_at=dead), nodes=200, max_restarts=0,
                            wait_for_worker=0.5) as pool:
            with pytest.raises(sky.WorkerLost):
                await pool.broadcast(_one)
            with pytest.raises(sky.WorkerLost, match=r"no worker of pool .* is available \(200 failed; node 0: failed") as caught:
                await pool.run(_one)
            message = str(caught.value)
            assert "and 180 more failed" in message and len(message) < 5000

    anyio.run(main)
