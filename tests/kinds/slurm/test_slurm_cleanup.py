"""Every way out of a Slurm pool ends with no job in squeue and no process in any node namespace:
a SIGKILLed client (workers exit, `skyhive down` cancels, or the time limit does), and cancellation
while pending, starting, running and tearing down."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import skyhive as sky
from tests.infra.slurm import SlurmCluster
from tests.kinds.slurm.test_slurm_pool import _occupy, assert_clean
from tests.procs import Lines

pytestmark = pytest.mark.anyio

CLIENT = textwrap.dedent("""
    import sys, time, anyio, skyhive as sky

    def work():
        time.sleep(300)

    async def main():
        provider = sky.Slurm(time_limit=int(sys.argv[2]))
        async with sky.Pool(provider=provider, nodes=2, name=sys.argv[1]) as pool:
            print("open", flush=True)
            await pool.broadcast(work)

    anyio.run(main)
""")


def _pool_jobs(cluster: SlurmCluster, pool: str) -> list[tuple[str, str, str]]:
    return [j for j in cluster.jobs() if j[1] == f"skyhive-{pool}"]


def _sruns(job: str) -> list[int]:
    """srun processes on this machine for `job` (the client's children, reparented once it dies)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                if cmd and cmd[0].endswith(b"srun") and f"--jobid={job}".encode() in cmd:
                    found.append(int(entry))
    return found


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:g} s")
        time.sleep(0.1)


@contextlib.contextmanager
def _killed_client(tmp_path: Path, cluster: SlurmCluster, pool: str, minutes: int) -> Iterator[str]:
    """Start a client that opens a 2-node pool and runs a long task, SIGKILL it mid-task; yields the job id."""
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    proc = subprocess.Popen([sys.executable, str(script), pool, str(minutes)], stdout=subprocess.PIPE, text=True)
    try:
        Lines(proc.stdout).wait_for(lambda line: line.strip() == "open", 120, "the client opened its pool")
        _wait(lambda: len(cluster.worker_processes()) == 2, 30, "a worker on each node")
        (job, _name, state), = _pool_jobs(cluster, pool)
        assert state == "RUNNING"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        yield job
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_killed_clients_workers_exit_and_skyhive_down_cancels_the_allocation(
        tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    with _killed_client(tmp_path, slurm_cluster, "slurm-killed", 10) as job:
        _wait(lambda: not slurm_cluster.worker_processes(), 15, "the workers did not exit")
        _wait(lambda: not _sruns(job), 15, "the client's srun processes did not exit")
        assert [j[0] for j in _pool_jobs(slurm_cluster, "slurm-killed")] == [job]  # the allocation stays
        ls = subprocess.run([sys.executable, "-m", "skyhive", "ls"], capture_output=True, text=True, timeout=60)
        assert "slurm-killed" in ls.stdout and f"job {job} RUNNING" in ls.stdout, ls.stdout
        down = subprocess.run([sys.executable, "-m", "skyhive", "down", "slurm-killed"], capture_output=True,
                              text=True, timeout=60)
        assert down.returncode == 0, down.stderr
    assert _pool_jobs(slurm_cluster, "slurm-killed") == []
    assert_clean(slurm_cluster)


@pytest.mark.slow
def test_without_down_the_time_limit_ends_a_killed_clients_allocation(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    with _killed_client(tmp_path, slurm_cluster, "slurm-expire", 1):
        # Slurm's limits are whole minutes, checked every ~30 s: this takes 60-100 s
        _wait(lambda: not _pool_jobs(slurm_cluster, "slurm-expire"), 180, "the time limit did not end the job")
    assert_clean(slurm_cluster)


class SlowStart:
    """A plugin whose worker setup takes a minute: the pool stays in its starting phase."""

    @contextlib.contextmanager
    def around_app(self, info):
        time.sleep(60)
        yield


def long_task() -> None:
    time.sleep(300)


async def _cancel_when(cluster: SlurmCluster, pool_body, ready) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(pool_body)
        with anyio.fail_after(60):
            while not ready():
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()


async def test_cancelled_while_pending_leaves_no_job(slurm_cluster: SlurmCluster) -> None:
    blocker = _occupy(slurm_cluster)

    async def body() -> None:
        async with sky.Pool(provider=sky.Slurm(), nodes=2, name="slurm-cpending"):
            await anyio.sleep_forever()

    try:
        await _cancel_when(slurm_cluster, body, lambda: [j[2] for j in _pool_jobs(slurm_cluster, "slurm-cpending")]
                           == ["PENDING"])
        assert _pool_jobs(slurm_cluster, "slurm-cpending") == []
    finally:
        slurm_cluster.run("scancel", blocker, check=False)
    assert_clean(slurm_cluster)


async def test_cancelled_while_starting_leaves_nothing(slurm_cluster: SlurmCluster) -> None:
    async def body() -> None:
        async with sky.Pool(provider=sky.Slurm(), nodes=2, plugins=[SlowStart()], name="slurm-cstart"):
            raise AssertionError("the pool should not have opened")

    await _cancel_when(slurm_cluster, body, lambda: len(slurm_cluster.worker_processes()) == 2)
    assert_clean(slurm_cluster)


async def test_cancelled_while_running_leaves_nothing(slurm_cluster: SlurmCluster) -> None:
    running = anyio.Event()

    async def body() -> None:
        async with sky.Pool(provider=sky.Slurm(), nodes=2, name="slurm-crun") as pool:
            running.set()
            await pool.broadcast(long_task)

    await _cancel_when(slurm_cluster, body, running.is_set)
    assert_clean(slurm_cluster)


async def test_cancelled_while_tearing_down_leaves_nothing(slurm_cluster: SlurmCluster) -> None:
    closing = anyio.Event()

    async def body() -> None:
        async with sky.Pool(provider=sky.Slurm(), nodes=2, name="slurm-cdown") as pool:
            await pool.broadcast(time.sleep, 0)
            closing.set()

    await _cancel_when(slurm_cluster, body, closing.is_set)
    assert_clean(slurm_cluster)
