"""`Pool(replace_failed=True)` over SSH, with real sshd in network-namespace hosts: a node whose host stops
answering (its sshd stopped, or the host vanished) is replaced by the spare host listed beyond `nodes`;
with no spare left the node fails with an error naming it and saying so."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import anyio
import pytest

import skyhive as sky
from skyhive.runtime.events.log import EventLog, pool_log_path
from tests.clusters.test_ssh_down import pool_files, pool_processes, still_running
from tests.kinds.ssh.test_ssh_pool import ssh_for

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

IDLE = 3.0  # a detached worker whose client is gone exits after this


def where() -> tuple[str, int, int, list[str]]:
    info = sky.instance_info()
    return socket.gethostname(), info.node, os.getpid(), [p.addr for p in info.peers]


def provider(hosts) -> sky.SSH:
    return ssh_for(hosts, connect_timeout=3, reconnect_timeout=4, idle_timeout=IDLE)


def vanish(host) -> None:
    """Everything in the host's namespace killed and the namespace deleted: a machine gone."""
    pids = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True).stdout.split()
    for pid in pids:
        os.kill(int(pid), signal.SIGKILL)
    subprocess.run(["ip", "netns", "del", host.netns], check=True)


async def wait_replaced(rt, node: int) -> None:
    with anyio.fail_after(120):
        while not (rt.log.state.nodes[node].replacements and rt.log.state.nodes[node].state == "ready"):
            await anyio.sleep(0.1)


def ssh_id(host) -> str:
    return f"ssh:{host.user}@{host.host}" + (f":{host.port}" if host.port != 22 else "")


@pytest.mark.parametrize("fault", ["sshd stopped", "host vanished"])
async def test_a_lost_host_is_replaced_by_the_spare(make_netns_hosts, fault):
    hosts = make_netns_hosts(3)
    a, b, c = hosts
    name = f"repl-ssh-{fault.split()[1]}"
    async with sky.Pool(provider=provider(hosts), nodes=2, replace_failed=True, output=None, name=name) as pool:
        rt = pool._runtime
        before = await pool.broadcast(where)
        assert [(h, n) for h, n, _, _ in before] == [(a.hostname, 0), (b.hostname, 1)]
        if fault == "sshd stopped":
            b.sshd.stop()  # the detached worker on b lives on, but no client can reach it any more
        else:
            vanish(b)
        await wait_replaced(rt, 1)
        after = await pool.broadcast(where)
        assert [(h, n) for h, n, _, _ in after] == [(a.hostname, 0), (c.hostname, 1)]  # c took rank 1
        assert after[0][2] == before[0][2]  # node 0 untouched
        assert after[1][3] == [a.address, c.address]  # the replacement knows its peers as they are now
        record = rt.log.state.nodes[1]
        assert (record.provider_id, record.replaced_ids, record.addr) == (ssh_id(c), (ssh_id(b),), c.address)
    replayed = EventLog.replay(pool_log_path(name))
    assert replayed.nodes[1].replaced_ids == (ssh_id(b),) and replayed.nodes[1].provider_id == ssh_id(c)
    assert [n.state for n in replayed.nodes] == ["terminated", "terminated"]
    # nothing of the pool left anywhere: a and c stopped by the pool, b's orphaned worker (sshd stopped)
    # exits by its idle timeout; the vanished host has nothing left at all
    assert not still_running(pool_processes(name), timeout=IDLE + 20)
    for host in (a, c) if fault == "host vanished" else (a, b, c):  # no socket left (the worker's
        assert not [p for p in pool_files(host, name) if p.name.endswith(".sock")]  # .log/.exit stay, as always


async def test_no_spare_left_fails_the_node_naming_it(make_netns_hosts):
    hosts = make_netns_hosts(2)
    a, b = hosts
    async with sky.Pool(provider=provider(hosts), nodes=2, replace_failed=True, output=None,
                        name="repl-ssh-nospare") as pool:
        rt = pool._runtime
        await pool.broadcast(where)
        vanish(b)
        with anyio.fail_after(120):
            while rt.log.state.nodes[1].state != "failed" or rt.loss_policy.replacing():
                await anyio.sleep(0.1)
        pattern = (rf"node 1 \({ssh_id(b)}\) was lost: .*{b.host}.*could not be replaced: node 1: "
                   r"no spare host left to replace it: SSH\(hosts=...\) lists 2 hosts for 2 nodes")
        with anyio.fail_after(60), pytest.raises(sky.WorkerLost, match=pattern):
            await pool.broadcast(where)
        host, node, _, _ = await pool.run(where)  # the pool goes on with the node it has
        assert (host, node) == (a.hostname, 0)
    assert not still_running(pool_processes("repl-ssh-nospare"), timeout=IDLE + 20)


def test_down_after_a_killed_client_also_sweeps_the_spare_a_replacement_used(make_netns_hosts):
    """`skyhive down` visits the hosts the pool used: the first `nodes`, plus one spare per replacement
    recorded in its log."""
    import asyncio
    import json
    import secrets
    import time

    from skyhive.runtime.events.state import fold
    from skyhive.runtime.events.log import read_log
    from skyhive.runtime.events.types import NodeReplaced, to_json
    from tests.clusters.test_ssh_down import fake_log, kill_pool_processes, run_on, skyhive

    first, spare = make_netns_hosts(2)  # each host its own login account: a sweep sees only its own
    pool_id = f"lost-repl-{secrets.token_hex(3)}"
    info = json.dumps({"pool_id": pool_id, "node": 0}, separators=(",", ":"))
    # what the killed client's replacement left on the spare: a worker-like process of the pool
    start = (f"{{ env COMPUTE_POOL='{info}' setsid sh -c 'exec sleep 600'; }} </dev/null >/dev/null 2>&1 & echo $!")
    assert asyncio.run(run_on(spare, start)).exit_status == 0
    try:
        deadline = time.monotonic() + 10
        while not (left := pool_processes(pool_id)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left
        config = {"provider": "ssh", "hosts": [f"{s.user}@{s.host}:{s.port}" for s in (first, spare)],
                  "key": str(first.client_key), "known_hosts": str(ssh_for([first, spare]).known_hosts),
                  "python": None, "connect_timeout": 5}
        path = fake_log(pool_id, config, nodes=1)
        state = fold(read_log(path))
        with open(path, "a") as fh:
            fh.write(to_json(NodeReplaced(pool_id=pool_id, seq=state.last_seq + 1, ts=time.time(), node=0,
                                          replacement=1, old_provider_id=f"ssh:{config['hosts'][0]}")) + "\n")
        cleaned = skyhive("down", pool_id)
        assert cleaned.returncode == 0, cleaned.stderr
        assert still_running(left) == set()
        assert fold(read_log(path)).status == "stopped"
    finally:
        kill_pool_processes(pool_id)


async def test_a_dropped_connection_that_resumes_replaces_nothing(make_netns_hosts):
    """Only a loss the link could not resume counts: sessions cut mid-task, sshd still up, the task goes on."""
    import time as _time

    def slow(n: int) -> int:
        _time.sleep(1.5)
        return n

    hosts = make_netns_hosts(3)
    async with sky.Pool(provider=provider(hosts), nodes=2, replace_failed=True, output=None) as pool:
        rt = pool._runtime
        pids = [p for _, _, p, _ in await pool.broadcast(where)]
        async with anyio.create_task_group() as tg:
            async def cut() -> None:
                await anyio.sleep(0.5)
                assert await anyio.to_thread.run_sync(hosts[1].kill_sessions)
            tg.start_soon(cut)
            assert await pool.broadcast(slow, 7, timeout=60) == [7, 7]
        assert [p for _, _, p, _ in await pool.broadcast(where)] == pids  # the same workers
        assert [n.replacements for n in rt.log.state.nodes] == [0, 0] and not rt.loss_policy.replacing()


async def test_a_spare_that_cannot_be_reached_is_passed_over_for_the_next(make_netns_hosts):
    """The first spare refuses connections: that replacement fails and is itself replaced by the next
    spare, all recorded (two NodeReplaced for node 1)."""
    from skyhive.runtime.events.types import NodeReplaced
    from tests.infra.sshd import find_free_port

    hosts = make_netns_hosts(3)
    a, b, c = hosts
    dead = f"{a.user}@127.0.0.1:{find_free_port()}"  # nothing listens there
    base = provider(hosts)
    spec = [f"{h.user}@{h.host}:{h.port}" for h in (a, b)] + [dead, f"{c.user}@{c.host}:{c.port}"]
    ssh = sky.SSH(hosts=spec, key=base.key, known_hosts=base.known_hosts, connect_timeout=3,
                  reconnect_timeout=4, idle_timeout=IDLE)
    async with sky.Pool(provider=ssh, nodes=2, replace_failed=True, output=None) as pool:
        rt = pool._runtime
        await pool.broadcast(where)
        vanish(b)
        with anyio.fail_after(120):
            while not (rt.log.state.nodes[1].replacements == 2 and rt.log.state.nodes[1].state == "ready"):
                await anyio.sleep(0.1)
        assert [(h, n) for h, n, _, _ in await pool.broadcast(where)] == [(a.hostname, 0), (c.hostname, 1)]
        replaced = [e for e in rt.log.recent if isinstance(e, NodeReplaced)]
        assert [e.old_provider_id for e in replaced] == [ssh_id(b), f"ssh:{dead}"]
        assert "its replacement failed" in replaced[1].reason and "127.0.0.1" in replaced[1].reason
