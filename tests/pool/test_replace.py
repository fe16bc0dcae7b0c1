"""`Pool(replace_failed=True)`: a node lost for good is destroyed and a fresh one launched for its index.

Local pools (a worker killed with SIGKILL) and `sky.Simulated` at 100 nodes (a simulation, named as one:
`die_at` kills a node's in-process worker) drive the real pool actor, node actors and event log. The
SSH cases (a stopped sshd, a vanished host, spare hosts) are in test_ssh_replace.py.
"""

from __future__ import annotations

import json
import os
import signal

import anyio
import pytest

import skyhive as sky
from skyhive.cli import main
from skyhive.runtime.events import timeline
from skyhive.runtime.events.log import EventLog, pool_log_path, read_log
from skyhive.runtime.events.types import NodeReplaced, NodeStateChanged
from tests.infra.sshd import process_alive

pytestmark = pytest.mark.anyio


def where() -> tuple[int, int, int]:
    info = sky.instance_info()
    return info.node, info.rank, os.getpid()


def head_port() -> int:
    return sky.instance_info().head_port


def node_events(rt, node: int) -> list[tuple[str, str]]:
    """The lifecycle of `node` as recorded: ("state", name) and ("replaced", old provider id)."""
    out = []
    for ev in rt.log.recent:
        if isinstance(ev, NodeStateChanged) and ev.node == node:
            out.append(("state", ev.state))
        elif isinstance(ev, NodeReplaced) and ev.node == node:
            out.append(("replaced", ev.old_provider_id))
    return out


async def wait_replaced(rt, node: int, times: int = 1) -> None:
    with anyio.fail_after(60):
        while not (rt.log.state.nodes[node].replacements >= times and rt.log.state.nodes[node].state == "ready"):
            await anyio.sleep(0.05)


# ---- Local: a worker killed with SIGKILL ----------------------------------------------------------------


async def test_local_killed_worker_is_replaced_and_a_broadcast_reaches_every_node(capsys):
    async with sky.Pool(provider=sky.Local(), nodes=3, replace_failed=True, output=None, name="repl-local") as pool:
        rt = pool._runtime
        before = await pool.broadcast(where)
        assert [b[:2] for b in before] == [(0, 0), (1, 1), (2, 2)]
        old_pid = before[1][2]
        old_id = rt.log.state.nodes[1].provider_id
        os.kill(old_pid, signal.SIGKILL)
        await wait_replaced(rt, 1)
        after = await pool.broadcast(where)
        assert [a[:2] for a in after] == [(0, 0), (1, 1), (2, 2)]  # same ranks, node 1 included
        assert set(await pool.broadcast(head_port)) == {rt.infos[(0, 0)].head_port}  # one port, as before
        assert after[1][2] != old_pid and after[0][2] == before[0][2] and after[2][2] == before[2][2]
        assert not process_alive(old_pid)
        record = rt.log.state.nodes[1]
        assert record.replacements == 1 and record.replaced_ids == (old_id,)
        assert record.provider_id != old_id  # a node of its own, not the old one restarted
        assert node_events(rt, 1)[-9:] == [
            ("state", "failed"), ("state", "terminating"), ("state", "terminated"), ("replaced", old_id),
            ("state", "provisioning"), ("state", "running"), ("state", "connecting"), ("state", "bootstrapping"),
            ("state", "ready"),
        ]
        live = rt.log.state
    # replaying the log gives the state the pool had, and the closing that followed
    replayed = EventLog.replay(pool_log_path("repl-local"))
    assert replayed.nodes[1].replacements == 1 and replayed.nodes[1].replaced_ids == (old_id,)
    assert replayed.nodes[1].provider_id == live.nodes[1].provider_id
    assert [n.state for n in replayed.nodes] == ["terminated"] * 3 and replayed.status == "stopped"
    assert not process_alive(after[1][2])  # nothing left
    # `skyhive timeline` marks the replacement on node 1's lane; `skyhive ls` counts it
    lane = next(la for la in timeline.build(read_log(pool_log_path("repl-local"))).lanes
                if la.node == 1 and not la.tasks)
    assert any(text.startswith(f"replaced ({old_id}: worker 0: the worker process was killed by SIGKILL")
               for _, text in lane.marks), lane.marks
    assert [s.kind for s in lane.spans].count("ready") == 2
    capsys.readouterr()
    assert main(["ls", "-a", "--json"]) == 0
    row = next(r for r in map(json.loads, capsys.readouterr().out.splitlines()) if r["pool"] == "repl-local")
    assert row["replaced"] == {"1": [old_id]} and row["nodes"] == ["terminated"] * 3
    assert main(["ls", "-a"]) == 0
    assert "3: 3 terminated (1 replaced)" in capsys.readouterr().out


async def test_local_the_task_on_the_lost_node_fails_clearly_or_is_retried():
    def pid_then_sleep(seconds: float) -> int:
        import time

        time.sleep(seconds)
        return os.getpid()

    async with sky.Pool(provider=sky.Local(), nodes=2, replace_failed=True, output=None) as pool:
        rt = pool._runtime
        pids = [p for _, _, p in await pool.broadcast(where)]
        # a broadcast in flight when a rank is lost fails at once, saying the node is being replaced
        async with anyio.create_task_group() as tg:
            tg.start_soon(_kill_soon, pids[1])
            with anyio.fail_after(60), pytest.raises(sky.WorkerLost, match=r"node 1.*being replaced \(replace_failed=True\)"):
                await pool.broadcast(pid_then_sleep, 30)
        await wait_replaced(rt, 1)
        # retries=1: the attempt that lost its worker is run again, on the replacement
        pids = [p for _, _, p in await pool.broadcast(where)]
        async with anyio.create_task_group() as tg:
            tg.start_soon(_kill_soon, pids[0])
            with anyio.fail_after(90):
                again = await pool.broadcast(pid_then_sleep, 1.5, retries=1)
        assert again[0] not in (pids[0],) and again[1] == pids[1]
        assert rt.log.state.nodes[0].replacements == 1 and pool.statistics()["retries"] == 1


async def _kill_soon(pid: int) -> None:
    await anyio.sleep(0.5)
    os.kill(pid, signal.SIGKILL)


async def test_default_restarts_the_worker_in_place_and_replaces_nothing():
    async with sky.Pool(provider=sky.Local(), nodes=2, output=None) as pool:
        rt = pool._runtime
        pids = [p for _, _, p in await pool.broadcast(where)]
        old_id = rt.log.state.nodes[1].provider_id
        os.kill(pids[1], signal.SIGKILL)
        with anyio.fail_after(60):
            while rt.log.state.nodes[1].workers[0].restarts < 1 or rt.log.state.nodes[1].workers[0].state != "ready":
                await anyio.sleep(0.05)
        after = await pool.broadcast(where)
        assert after[1][2] != pids[1]
        record = rt.log.state.nodes[1]
        assert record.provider_id == old_id and record.replacements == 0 and record.state == "ready"
        assert record.workers[0].restarts == 1
        assert not any(isinstance(e, NodeReplaced) for e in rt.log.recent)


def test_replace_failed_must_be_a_bool():
    with pytest.raises(TypeError, match=r"replace_failed='yes'"):
        sky.Pool(replace_failed="yes")


# ---- Simulated: the policy at 100 nodes --------------------------------------------------------------


def _node() -> int:
    return sky.instance_info().node


async def test_simulated_100_nodes_lost_nodes_are_replaced_and_the_pool_goes_on():
    provider = sky.Simulated(die_at={3: 1, 50: 1, 99: 1})
    async with sky.Pool(provider=provider, nodes=100, replace_failed=True, output=None, name="repl-sim") as pool:
        rt = pool._runtime
        with pytest.raises(sky.WorkerLost, match=r"node (3|50|99).*being replaced"):
            await pool.broadcast(_node)
        assert await pool.broadcast(_node) == list(range(100))  # waited for the three replacements
        nodes = rt.log.state.nodes
        assert [i for i, n in enumerate(nodes) if n.replacements] == [3, 50, 99]
        assert pool.statistics()["replacements"] == 3 and pool.statistics()["replacing"] == []
        assert all(n.replaced_ids == (f"sim-repl-sim-{n.node}",) and n.provider_id == f"sim-repl-sim-{n.node}.1"
                   for n in (nodes[3], nodes[50], nodes[99]))
        assert len(provider.live["repl-sim"]) == 100
        assert sorted(await pool.map(lambda x: x * 2, range(1000))) == [x * 2 for x in range(1000)]
        live = rt.log.state
    assert not provider.live["repl-sim"]  # nothing left, replacements included
    replayed = EventLog.replay(pool_log_path("repl-sim"))
    assert [n.replacements for n in replayed.nodes] == [n.replacements for n in live.nodes]
    assert [n.provider_id for n in replayed.nodes] == [n.provider_id for n in live.nodes]


async def test_simulated_no_spare_left_fails_the_node_naming_it():
    provider = sky.Simulated(die_at={5: 1, 7: 1}, spares=1)
    async with sky.Pool(provider=provider, nodes=100, replace_failed=True, output=None, name="repl-nospare") as pool:
        rt = pool._runtime
        with pytest.raises(sky.WorkerLost):
            await pool.broadcast(_node)
        with anyio.fail_after(60):
            while not any(n.state == "failed" for n in rt.log.state.nodes):
                await anyio.sleep(0.05)
        failed = [n for n in rt.log.state.nodes if n.state == "failed"]
        assert len(failed) == 1 and failed[0].node in (5, 7)
        lost = failed[0].node
        pattern = rf"node {lost} \(sim-repl-nospare-{lost}\) was lost.*could not be replaced.*no spare node left"
        assert __import__("re").search(pattern, failed[0].detail), failed[0].detail
        with pytest.raises(sky.WorkerLost, match=pattern):
            await pool.broadcast(_node)
        # the pool goes on with the nodes it has, as it does today with a failed node
        assert sorted(set(await pool.map(lambda _: _node(), range(500)))) == sorted(set(range(100)) - {lost})
    assert not provider.live["repl-nospare"]


async def test_simulated_a_node_that_keeps_dying_is_not_replaced_forever():
    """The intensity limit: an index replaced `max_restarts` times within `restart_window` stays failed."""

    provider = sky.Simulated(die_at={2: 1})
    async with sky.Pool(provider=provider, nodes=4, replace_failed=True, output=None, max_restarts=0) as pool:
        rt = pool._runtime
        with pytest.raises(sky.WorkerLost):
            await pool.broadcast(_node)
        with anyio.fail_after(30):
            while rt.log.state.nodes[2].state != "failed":
                await anyio.sleep(0.05)
        assert rt.log.state.nodes[2].replacements == 0
        with pytest.raises(sky.WorkerLost, match=r"node 2.*not replaced again.*max_restarts=0"):
            await pool.broadcast(_node)


# ---- rank-dependent jobs: torch DDP ------------------------------------------------------------------


@pytest.mark.slow
async def test_torch_the_broadcast_in_flight_fails_and_the_replacement_is_refused_clearly():
    """The replacement gets the same rank, but the surviving ranks' process group cannot take a new
    member: the torch plugin refuses it (WorkerRestarted), the node stays failed saying so, and no
    further replacement is tried for it."""
    from skyhive.errors import WorkerRestarted
    from tests.plugins.test_plugins_torch import crash_on_rank_1, ranks

    async with sky.Pool(provider=sky.Local(), nodes=2, plugins=[sky.plugins.torch()], replace_failed=True,
                        output=None) as pool:
        rt = pool._runtime
        assert await pool.broadcast(ranks) == [0, 1]
        with pytest.raises(sky.WorkerLost, match=r"node 1.*being replaced"):
            await pool.broadcast(crash_on_rank_1)
        with anyio.fail_after(120):
            while rt.loss_policy.replacing() or rt.log.state.nodes[1].state != "failed":
                await anyio.sleep(0.05)
        with pytest.raises(sky.WorkerLost) as lost:
            await pool.broadcast(ranks)
        record = rt.log.state.nodes[1]
    message = str(lost.value)
    assert "node 1" in message and "its replacement failed" in message, message
    assert "cannot re-join the torch process group" in message, message
    assert isinstance(lost.value.__cause__, WorkerRestarted), repr(lost.value.__cause__)
    assert record.replacements == 1  # one replacement, at the same index (rank 1), refused; not retried


async def test_simulated_a_one_node_pool_retries_the_lost_call_on_the_replacement():
    provider = sky.Simulated(die_at={0: 2})
    async with sky.Pool(provider=provider, nodes=1, replace_failed=True, output=None) as pool:
        assert await pool.run(_node) == 0
        with pytest.raises(sky.WorkerLost, match="node 0.*being replaced"):  # no retries: the error as today
            await pool.run(_node)
        assert await pool.run(_node, retries=1) == 0  # waits for the replacement (no other node)
        assert pool._runtime.log.state.nodes[0].replacements == 1
        # the retried call's first attempt may have met the lost node or the replacement already
        assert pool.statistics()["retries"] <= 1


async def test_simulated_a_silent_worker_is_replaced_after_its_heartbeats_stop():
    provider = sky.Simulated(hang_at={4: 1})
    async with sky.Pool(provider=provider, nodes=8, replace_failed=True, output=None,
                        heartbeat_interval=0.1, heartbeat_timeout=0.5) as pool:
        with anyio.fail_after(60), pytest.raises(sky.WorkerLost, match=r"node 4.*no heartbeat.*being replaced"):
            await pool.broadcast(_node)
        assert await pool.broadcast(_node) == list(range(8))
        assert pool._runtime.log.state.nodes[4].replacements == 1


async def test_simulated_closing_while_a_replacement_starts_leaves_nothing():
    provider = sky.Simulated(die_at={2: 1}, nodes_latency=1.0)
    async with sky.Pool(provider=provider, nodes=4, replace_failed=True, output=None, name="repl-close") as pool:
        rt = pool._runtime
        with pytest.raises(sky.WorkerLost):
            await pool.broadcast(_node)
        with anyio.fail_after(30):
            while rt.log.state.nodes[2].replacements == 0:  # its replacement is waiting to run (1 s)
                await anyio.sleep(0.01)
        assert rt.loss_policy.replacing(2) and pool.statistics()["replacing"] == [2]
    assert not provider.live["repl-close"]
    state = EventLog.replay(pool_log_path("repl-close"))
    assert state.status == "stopped" and [n.state for n in state.nodes] == ["terminated"] * 4
    assert state.nodes[2].replacements == 1


def _rank() -> tuple[int, int]:
    info = sky.instance_info()
    return info.node, info.rank


async def test_simulated_a_node_of_several_processes_is_replaced_whole():
    provider = sky.Simulated(die_at={1: 1})
    async with sky.Pool(provider=provider, nodes=3, processes_per_node=2, replace_failed=True, output=None) as pool:
        with pytest.raises(sky.WorkerLost, match="node 1"):
            await pool.broadcast(_rank)
        assert await pool.broadcast(_rank) == [(n, r) for n in range(3) for r in (2 * n, 2 * n + 1)]
        record = pool._runtime.log.state.nodes[1]
        assert record.replacements == 1 and [w.state for w in record.workers] == ["ready", "ready"]
    assert not any(provider.live.values())


async def test_simulated_calls_wait_for_a_replacement_longer_than_wait_for_worker():
    """A fresh node takes as long as a pool's start: calls wait for it up to `start_timeout`, not only
    `wait_for_worker` (here 0.2 s, while each node takes 1 s to run)."""
    provider = sky.Simulated(die_at={1: 1}, nodes_latency=1.0)
    async with sky.Pool(provider=provider, nodes=2, replace_failed=True, output=None, wait_for_worker=0.2) as pool:
        with pytest.raises(sky.WorkerLost, match="node 1"):
            await pool.broadcast(_node)
        assert await pool.broadcast(_node) == [0, 1]  # waited ~1 s for node 1's replacement


async def test_simulated_with_min_nodes_a_member_is_replaced_and_a_dropped_node_stays_out():
    """`min_nodes` (issue 14) and `replace_failed` together: node 3 never started and was dropped; node 1,
    a member, is lost and replaced — the pool's four members answer again, numbered 0..3."""
    provider = sky.Simulated(fail={3: "connecting"}, die_at={1: 1})
    async with sky.Pool(provider=provider, nodes=5, min_nodes=4, replace_failed=True, output=None) as pool:
        rt = pool._runtime
        with pytest.raises(sky.WorkerLost, match="node 1"):
            await pool.broadcast(_node)
        assert await pool.broadcast(_node) == [0, 1, 2, 3]
        states = rt.log.state.nodes
        assert states[1].replacements == 1 and states[1].state == "ready"
        assert states[3].replacements == 0 and states[3].state != "ready"
    assert not any(provider.live.values())


def test_blocking_face_replaces_too():
    provider = sky.Simulated(die_at={2: 1})
    with sky.Pool(provider=provider, nodes=3, replace_failed=True, output=None) as pool:
        with pytest.raises(sky.WorkerLost, match="node 2.*being replaced"):
            pool.broadcast(_node)
        assert pool.broadcast(_node) == [0, 1, 2]
        assert pool.statistics()["replacements"] == 1
    assert not any(provider.live.values())
