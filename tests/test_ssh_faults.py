"""Issue 9.12 (part; the vanished host and the replacement policy are not built yet): a real sshd restarted on the host in the middle of a pool. The worker daemon runs
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

