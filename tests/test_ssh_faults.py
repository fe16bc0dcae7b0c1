"""Issue 9.12 (part; the replacement policy is not built yet): a real sshd restarted on the host in the middle of a pool. The worker daemon runs
detached from sshd's sessions, so the pool reconnects to the restarted sshd and resumes: the running
call completes and later calls reach the same worker process."""

from __future__ import annotations

import anyio
import pytest

import skyhive as sky
from tests.test_ssh_pool import ssh_for
from tests.test_ssh_resume import chatty, quick

pytestmark = pytest.mark.anyio


async def test_sshd_restarted_mid_pool_the_pool_resumes(make_sshd):
    server = make_sshd()
    async with sky.Pool(provider=ssh_for(server), nodes=1, output=None) as pool:
        rt = pool._runtime
        worker_pid = rt.nodes[0].channels[0].pid
        results: dict[str, object] = {}

        async def call() -> None:
            results["a"] = await pool.run(chatty, 100, 0.01, capture=True, timeout=60)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await anyio.sleep(0.3)
            await anyio.to_thread.run_sync(server.stop)  # the daemon and all its sessions go
            await anyio.to_thread.run_sync(server.start)  # same port, same host key
        captured = results["a"]
        assert captured.value == "done after 100 lines"
        assert captured.stdout == "".join(f"line {i}\n" for i in range(100))
        assert await pool.run(quick, 20, timeout=60) == 21
        assert rt.nodes[0].channels[0].pid == worker_pid  # resumed, not restarted



async def test_a_host_that_vanishes_fails_its_node_naming_it(make_netns_hosts):
    """Everything in the host's namespace is killed and the namespace deleted (a machine gone): the next
    call on it raises WorkerLost naming that host."""
    import os
    import signal
    import subprocess

    hosts = make_netns_hosts(2)
    async with sky.Pool(provider=ssh_for(hosts, connect_timeout=3, reconnect_timeout=5), nodes=2,
                        output=None) as pool:
        assert await pool.broadcast(quick, 1) == [2, 2]
        gone = hosts[1]
        pids = subprocess.run(["ip", "netns", "pids", gone.netns], capture_output=True, text=True).stdout.split()
        assert pids, f"nothing runs in {gone.netns}?"
        for pid in pids:
            os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", gone.netns], check=True)
        with anyio.fail_after(60), pytest.raises(sky.WorkerLost, match=gone.host):
            await pool.broadcast(quick, 2, timeout=30)
