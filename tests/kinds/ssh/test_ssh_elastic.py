"""An elastic pool over `sky.SSH` (issue 40, done-when 2), real sshd in network-namespace hosts: `nodes=(1, 3)`
over 2 hosts starts on the first, takes the spare host while tasks wait, is refused a third node (SSH lists
2 hosts: growth is held, evented, the pool goes on), and gives the spare back once idle; nothing is left."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time

import anyio
import pytest

import skyhive as sky
from skyhive.runtime.events.log import pool_log_path, read_log
from skyhive.runtime.events.types import NodeScaled
from tests.clusters.test_ssh_down import pool_files, pool_processes, still_running
from tests.kinds.ssh.test_ssh_pool import ssh_for

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

IDLE = 3.0  # a detached worker whose client is gone exits after this


def held(i: int, folder: str) -> tuple[int, str]:
    """Say it started, then wait until the test releases it (the hosts share this machine's files)."""
    import pathlib
    import socket
    import time

    path = pathlib.Path(folder)
    (path / f"started-{i}").write_text("")
    while not (path / "release").exists():
        time.sleep(0.02)
    return i, socket.gethostname()


def hostname() -> str:
    return socket.gethostname()


async def until(what: str, condition) -> None:
    with anyio.fail_after(180):  # a loaded machine: generous, waited on a condition
        while not condition():
            await anyio.sleep(0.05)


async def test_an_elastic_ssh_pool_takes_the_spare_host_while_work_waits_and_gives_it_back(make_netns_hosts):
    a, b = hosts = make_netns_hosts(2)
    folder = tempfile.mkdtemp(prefix="skyhive-elastic-")  # the hosts' own login users write here
    os.chmod(folder, 0o777)
    name = "elastic-ssh"
    try:
        provider = ssh_for(hosts, connect_timeout=3, reconnect_timeout=4, idle_timeout=IDLE)
        async with sky.Pool(provider=provider, nodes=(1, 3), autoscale_idle_timeout=1, output=None,
                            name=name) as pool:
            assert await pool.broadcast(hostname) == [a.hostname]
            results: list[tuple[int, str]] = []

            async def one(i: int) -> None:
                results.append(await pool.run(held, i, folder))

            async with anyio.create_task_group() as tg:
                for i in range(3):
                    tg.start_soon(one, i)
                await until("2 tasks running", lambda: len(os.listdir(folder)) == 2)
                await until("growth held", lambda: any(
                    e.change == "held" for e in read_log(pool_log_path(name)) if isinstance(e, NodeScaled)))
                assert pool.current_nodes() == 2 and len(os.listdir(folder)) == 2  # the third waits
                open(os.path.join(folder, "release"), "w").close()
            assert sorted(i for i, _ in results) == [0, 1, 2]
            assert {h for _, h in results} == {a.hostname, b.hostname}  # the spare host took a task
            await until("back to 1 node", lambda: pool.current_nodes() == 1)
            assert await pool.broadcast(hostname) == [a.hostname]
        events = [e for e in read_log(pool_log_path(name)) if isinstance(e, NodeScaled)]
        assert [(e.change, e.node) for e in events] == [("grow", 1), ("grow", 2), ("held", 2), ("shrink", 1)]
        assert "SSH(hosts=...) lists 2" in events[2].reason and "no node is added for" in events[2].reason
        assert events[0].reason.startswith("grow: ") and events[3].reason.startswith("shrink: idle")
        assert not still_running(pool_processes(name), timeout=IDLE + 20)
        for host in (a, b):
            assert not [p for p in pool_files(host, name) if p.name.endswith(".sock")]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_host_given_back_may_be_handed_out_to_the_pool_again():
    """`Provider.released`: an elastic pool shrinking gives its SSH host back; the pool's next growth may
    take it again (without it the host counts as used: a replacement's rule, never the same host)."""
    from skyhive.providers.base import ClusterSpec

    ssh = sky.SSH(hosts=["u@192.0.2.1", "u@192.0.2.2"])  # (launch only names hosts: nothing is reached)
    spec = ClusterSpec(pool_id="p-released", nodes=2)

    async def run() -> None:
        first, second = await ssh.launch(spec, [0, 1])
        with pytest.raises(sky.ProvisionError, match=r"node 1: no spare host left"):
            await ssh.launch(spec, [1])
        ssh.released("p-released", [second])
        (again,) = await ssh.launch(spec, [1])
        assert (again.reach.host, first.reach.host) == ("192.0.2.2", "192.0.2.1")
        ssh.released("other-pool", [first])  # another pool's release changes nothing of this one's
        with pytest.raises(sky.ProvisionError, match=r"node 0: no spare host left"):
            await ssh.launch(spec, [0])

    anyio.run(run)
