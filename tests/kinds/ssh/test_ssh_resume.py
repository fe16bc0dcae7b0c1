"""A dropped SSH connection loses nothing: the detached worker keeps running, the client resumes."""

from __future__ import annotations

import os
import stat
import time

import anyio
import pytest

import skyhive as sky
from skyhive.runtime.events.types import WorkerStateChanged
from tests.infra.sshd import process_alive
from tests.kinds.ssh.test_ssh_pool import ssh_for

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def chatty(n: int, pause: float) -> str:
    for i in range(n):
        print(f"line {i}", flush=True)
        time.sleep(pause)
    return f"done after {n} lines"


def quick(x: int) -> int:
    return x + 1


async def test_cutting_the_connection_mid_task_loses_nothing(make_sshd):
    server = make_sshd()
    async with sky.Pool(provider=ssh_for(server), nodes=1, output=None) as pool:
        rt = pool._runtime
        transport = rt.nodes[0].transport
        worker_pid = rt.nodes[0].channels[0].pid
        results: dict[str, object] = {}

        async def call() -> None:
            results["a"] = await pool.run(chatty, 150, 0.01, capture=True, timeout=60)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await anyio.sleep(0.4)
            for _ in range(2):  # twice: the second drop hits the resumed stream
                killed = await anyio.to_thread.run_sync(server.kill_sessions)
                assert killed, "no sshd session to kill"
                # sent while the connection is down: recorded, and delivered after the resume
                results.setdefault("b", await pool.run(quick, 41, timeout=60))
                await anyio.sleep(0.3)
        captured = results["a"]
        assert captured.value == "done after 150 lines"
        assert captured.stdout == "".join(f"line {i}\n" for i in range(150))  # all, in order, once
        assert results["b"] == 42
        assert transport.connects >= 3  # it really reconnected, twice
        assert rt.nodes[0].channels[0].pid == worker_pid  # the same worker process throughout
        starts = [e for e in rt.log.recent if isinstance(e, WorkerStateChanged) and e.state == "starting"]
        assert len(starts) == 1
        assert await pool.run(quick, 1) == 2


class _Sink:
    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> None:
        pass


async def test_daemon_socket_is_private_and_it_exits_when_idle(sshd_host):
    async with sky.Pool(provider=ssh_for(sshd_host, idle_timeout=1.0), nodes=1) as pool:
        transport = pool._runtime.nodes[0].transport
        worker = await transport.start_worker(["python3"], {}, _Sink(), label="abandoned worker")
        sock = worker.socket
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(sock)).st_mode) == 0o700
        assert process_alive(worker.pid)
        worker.link.close()  # the client goes away without a word, as after a crash
        with anyio.fail_after(20):
            while process_alive(worker.pid):
                await anyio.sleep(0.1)
        assert not os.path.exists(sock)
        assert await pool.run(quick, 1) == 2  # the pool's own worker has a client: it stays


async def test_sshd_restarted_mid_task_the_pool_resumes(make_sshd):
    """The host's sshd itself goes away mid-task (every session with it) and comes back a moment later
    on the same address with the same host key: the detached worker ran on, the client reconnects and
    the task's result and every output line arrive, from the same worker process."""
    server = make_sshd()
    async with sky.Pool(provider=ssh_for(server), nodes=1, output=None) as pool:
        rt = pool._runtime
        worker_pid = rt.nodes[0].channels[0].pid
        results: dict[str, object] = {}

        async def call() -> None:
            results["a"] = await pool.run(chatty, 100, 0.02, capture=True, timeout=90)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await anyio.sleep(0.4)
            await anyio.to_thread.run_sync(server.stop)
            assert process_alive(worker_pid)  # detached from sshd: it keeps working
            await anyio.sleep(0.5)
            await anyio.to_thread.run_sync(server.start)
        captured = results["a"]
        assert captured.value == "done after 100 lines"
        assert captured.stdout == "".join(f"line {i}\n" for i in range(100))
        assert rt.nodes[0].channels[0].pid == worker_pid
        assert await pool.run(quick, 1) == 2

