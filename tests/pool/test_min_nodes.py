"""`Pool(min_nodes=M)`: the pool starts with the nodes that could be provisioned when at least M
could — the others recorded and destroyed — and fails naming every failed node otherwise."""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
import pytest

import skyhive as sky
from skyhive.runtime.events.log import EventLog, read_log
from skyhive.runtime.events.timeline import build
from tests.procs import worker_pids
from tests.providers.staged import Staged

STAGES = ("launch", "wait_running", "connecting", "bootstrapping")


def _where() -> tuple[int, int, int]:
    info = sky.instance_info()
    return info.node, info.total_nodes, len(info.peers)


def test_thousand_nodes_one_percent_failing_start_with_the_rest_and_say_so() -> None:
    failing = {n: STAGES[k % 4] for k, n in enumerate(range(7, 1000, 100))}  # 1%, at every stage
    provider = sky.Simulated(fail=failing)

    async def main() -> None:
        async with sky.Pool(provider=provider, nodes=1000, min_nodes=950) as pool:
            kept = 1000 - len(failing)
            # the workers see the members, numbered 0..kept-1: ranks stay contiguous
            assert await pool.broadcast(_where) == [(i, kept, kept) for i in range(kept)]
            assert sorted(pool.dropped) == sorted(failing)
            for node, stage in failing.items():
                record = pool.state.nodes[node]
                assert record.state == "terminated" and record.dropped  # given back at once
                expected = {"launch": "launch refused", "wait_running": "failed while provisioning",
                            "connecting": "failed while connecting", "bootstrapping": "failed while bootstrapping"}
                assert expected[stage] in record.dropped
            assert len(provider.live[pool.id]) == kept  # the failed ones were terminated
            path = pool.log_path
        assert all(not nodes for nodes in provider.live.values())  # nothing left
        events = list(read_log(path))
        dropped = [e for e in events if e.kind == "node_dropped"]
        assert sorted(e.node for e in dropped) == sorted(failing) and {e.min_nodes for e in dropped} == {950}
        assert EventLog.replay(path) == pool.state
        lanes = {lane.node: lane for lane in build(events).lanes if not lane.tasks}
        assert any("left out at start" in what for _, what in lanes[7].marks)

    anyio.run(main)


def test_more_failures_than_min_nodes_allows_fail_naming_every_failed_node() -> None:
    failing = {3: "wait_running", 5: "connecting", 8: "bootstrapping"}
    provider = sky.Simulated(fail=failing)

    async def main() -> None:
        with pytest.raises(sky.ProvisionError) as caught:
            async with sky.Pool(provider=provider, nodes=10, min_nodes=8):
                pass
        message = str(caught.value)
        assert "3 of 10 nodes failed to start (nodes 3, 5, 8); min_nodes=8 allows 2" in message
        for node in failing:
            assert f"node {node}: " in message
        assert all(not nodes for nodes in provider.live.values())

    anyio.run(main)


def test_launch_refusing_nodes_is_asked_again_without_them() -> None:
    provider = sky.Simulated(fail={2: "launch", 6: "launch"})

    async def main() -> None:
        async with sky.Pool(provider=provider, nodes=8, min_nodes=6) as pool:
            assert [r[0] for r in await pool.broadcast(_where)] == list(range(6))
            assert sorted(pool.dropped) == [2, 6] and "launch refused" in pool.dropped[2]
        with pytest.raises(sky.ProvisionError, match=r"nodes 2, 6\); min_nodes=7 allows 1"):
            async with sky.Pool(provider=provider, nodes=8, min_nodes=7):
                pass
        assert all(not nodes for nodes in provider.live.values())

    anyio.run(main)


def test_without_min_nodes_one_failure_still_fails_the_pool() -> None:
    async def main() -> None:
        with pytest.raises(sky.ProvisionError, match="node 4"):
            async with sky.Pool(provider=sky.Simulated(fail={4: "bootstrapping"}), nodes=6):
                pass

    anyio.run(main)


@pytest.mark.parametrize("bad", [0, 11, 2.5, True, "3"])
def test_bad_min_nodes_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(ValueError, match=rf"Pool\(min_nodes={bad!r}\): need a whole number from 1 to nodes=10"):
        sky.Pool(provider=sky.Simulated(), nodes=10, min_nodes=bad)  # type: ignore[arg-type]


def test_local_workers_start_without_the_node_that_failed_and_skyhive_ls_says_so() -> None:
    """Real local worker processes (`Staged` hands out Local nodes); its node 1 reports the cloud
    state "error" and never runs."""
    provider = Staged(final_state={1: "error"})

    async def main() -> tuple[str, set[int]]:
        async with sky.Pool(provider=provider, nodes=3, min_nodes=2, name="partial-local") as pool:
            results = await pool.broadcast(_where)
            assert results == [(0, 2, 2), (1, 2, 2)]
            pids = worker_pids(pool.id)
            assert len(pids) == 2
            assert ("terminate", 1) in provider.calls and provider.live == {0, 2}
            listed = subprocess.run([sys.executable, "-m", "skyhive", "ls", "--json"], capture_output=True,
                                    text=True, timeout=60, check=True).stdout
        return listed, pids

    listed, pids = anyio.run(main)
    entry = next(json.loads(line) for line in listed.splitlines() if json.loads(line)["pool"] == "partial-local")
    assert entry["nodes"] == ["ready", "terminated", "ready"]
    assert "'error'" in entry["dropped"]["1"]
    assert provider.live == set()
    assert not (worker_pids("partial-local") & pids)  # nothing left running
