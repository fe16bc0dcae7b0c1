"""`sky.dict` & co. on real SSH hosts (network-namespace sshd, tests/infra): the client serves them and
each host reaches them through the pool's own SSH connection (a forwarded Unix socket, private to the
pool's user); a dropped connection is made again and the collections go on, nothing lost or counted
twice; nothing is left on the hosts after the pool. Semantics: docs/collections.md."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import anyio
import pytest

import skyhive as sky
from tests.kinds.ssh.test_ssh_pool import ssh_for

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROUNDS = 50
WAIT = 120.0  # the bound of a blocking wait: only a deadlock reaches it


def count_and_meet() -> dict:
    from skyhive.runtime.collections.store import ENV_VAR

    counter = sky.counter("hits")
    for _ in range(ROUNDS):
        counter.increment()
    sky.queue("done").put(sky.instance_info().node)
    arrival = sky.barrier("first", 2, timeout=WAIT).wait()
    path = os.environ[ENV_VAR]
    info, parent = os.stat(path), os.stat(os.path.dirname(path))
    return {"host": socket.gethostname(), "arrival": arrival, "path": path, "uid": os.getuid(),
            "mode": stat.S_IMODE(info.st_mode), "owner": info.st_uid, "is_socket": stat.S_ISSOCK(info.st_mode),
            "dir_mode": stat.S_IMODE(parent.st_mode), "dir_owner": parent.st_uid}


def across_the_drop() -> tuple[object, int, int]:
    mine = sky.lock(f"held-{sky.instance_info().node}")  # (no `assert` in a task: pytest rewrites them)
    if not mine.acquire(timeout=WAIT):
        raise RuntimeError("no lock")
    sky.counter("waiting").increment()
    item = sky.queue("go").get(timeout=WAIT)  # blocked here while the SSH connection is cut
    if not mine.locked():
        raise RuntimeError("the lock was let go in the drop")
    mine.release()  # still this task's: a lock outlives its holder's connection being made again
    with sky.lock("ckpt"):
        best = sky.dict("best")
        best["n"] = best.get("n", 0) + 1
    return item, sky.counter("hits").increment(), sky.barrier("second", 2, timeout=WAIT).wait()


async def test_collections_on_two_ssh_hosts_survive_a_reconnect_and_leave_nothing(netns_hosts):
    from skyhive.providers.ssh_sweep import collections_prefix

    hosts = list(netns_hosts)[:2]
    provider = ssh_for(hosts)
    async with sky.Pool(provider=provider, nodes=2, output=None) as pool:
        rt = pool._runtime
        first = await pool.broadcast(count_and_meet)
        assert [r["host"] for r in first] == [h.hostname for h in hosts]  # really on both hosts
        assert sorted(r["arrival"] for r in first) == [0, 1]
        assert int(sky.counter("hits")) == 2 * ROUNDS  # no lost update across hosts
        done = sky.queue("done")
        assert sorted([done.get(timeout=0), done.get(timeout=0)]) == [0, 1] and done.empty()
        for r, h in zip(first, hosts):  # the forwarded socket: the pool's user's only, on that host
            assert r["is_socket"] and r["mode"] == 0o600 and r["dir_mode"] == 0o700
            assert r["owner"] == r["dir_owner"] == r["uid"] != 0
            assert r["path"].startswith(f"{h.home}/.skyhive/run/coll-")
        transports = [node.transport for node in rt.nodes]
        connects = [t.connects for t in transports]

        results: list[object] = []

        async def call() -> None:
            results.extend(await pool.broadcast(across_the_drop, timeout=WAIT))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(WAIT):
                while sky.counter("waiting").value < 2:  # both tasks are in the store's hands
                    await anyio.sleep(0.05)
            for h in hosts:  # the connections drop, as on a network failure (as tests/kinds/ssh/test_ssh_resume.py)
                assert await anyio.to_thread.run_sync(h.kill_sessions), "no sshd session to kill"
            go = sky.queue("go")
            go.put("a")
            go.put("b")
        assert all(t.connects > c for t, c in zip(transports, connects)), connects  # both really reconnected
        assert sorted(item for item, _, _ in results) == ["a", "b"]  # each item taken once
        assert sorted(value for _, value, _ in results) == [2 * ROUNDS + 1, 2 * ROUNDS + 2]  # none counted twice
        assert sorted(arrival for _, _, arrival in results) == [0, 1]
        assert sky.dict("best")["n"] == 2
        assert not any(sky.lock(name).locked() for name in ("ckpt", "held-0", "held-1"))
        dirs = [Path(r["path"]).parent for r in first]
        assert all(d.is_dir() for d in dirs)  # the forwarded sockets are there while the pool is
        # named after the pool, so `skyhive down` finds them, but a live forward's is not the sweep's
        assert all(d.name.startswith(collections_prefix(rt.pool_id) + "-") for d in dirs)
        owned = await provider.list_owned(rt.pool_id)
        assert len(owned) == 2 and all(h.extra["pids"] for h in owned)  # the sweep saw the live workers
        assert not {str(d) for d in dirs} & {f for h in owned for f in h.extra["files"]}
    assert [d for d in dirs if d.exists()] == []  # and gone with it


def use_counter() -> str:
    try:
        return str(sky.counter("c").increment())
    except RuntimeError as exc:
        return str(exc)


async def test_a_host_that_refuses_the_forward_runs_tasks_and_says_why_collections_fail(make_sshd):
    server = make_sshd(extra_config=["AllowStreamLocalForwarding local"])  # the workers' sockets only
    async with sky.Pool(provider=ssh_for(server), nodes=1, output=None) as pool:
        assert await pool.run(sum, [1, 2]) == 3  # the pool itself is fine
        said = await pool.run(use_counter)
    assert said.startswith("this node cannot reach the pool's distributed collections: host ")
    assert "sshd refused to forward" in said and "AllowStreamLocalForwarding" in said
    refused = Path(said.split("sshd refused to forward ", 1)[1].split(" ", 1)[0])
    assert refused.name == "s.sock" and not refused.parent.exists()  # its directory removed at once
