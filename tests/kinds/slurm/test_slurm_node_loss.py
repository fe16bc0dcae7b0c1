"""A Slurm node lost while its worker still runs (its slurmd killed: the job step goes on, the
controller flags the node as not responding only after SlurmdTimeout's pings fail, and later ends the
job): the pool's error names the Slurm node and the cause — its slurmd refusing connections, seen
directly in Mode 1 within seconds, not the controller's late verdict nor "exited with status 0" once
Slurm ended the job — and nothing of the pool is left on the healthy node or in the queue after the
close.

A cluster of its own (tests/infra/slurm.py: real slurmctld and slurmd in namespaces), since one of its
daemons is killed."""

from __future__ import annotations

import os
import socket
import time

import anyio
import pytest

import skyhive as sky
from tests.infra.slurm import SlurmCluster, check_slurm_support
from tests.infra.sshd import InfraUnavailable, process_alive

pytestmark = pytest.mark.anyio


def host() -> tuple[str, int]:
    return socket.gethostname(), os.getpid()


def slow(seconds: float) -> None:
    time.sleep(seconds)


@pytest.fixture
def own_cluster():
    try:
        check_slurm_support()
    except InfraUnavailable as e:
        pytest.skip(f"Slurm test cluster unavailable: {e}")
    before = os.environ.get("SLURM_CONF")
    with SlurmCluster(2, gpus=0) as cluster:
        os.environ.update(cluster.env)
        try:
            yield cluster
        finally:
            if before is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = before


async def test_a_node_whose_slurmd_died_is_named_with_the_cause(own_cluster: SlurmCluster) -> None:
    cluster = own_cluster
    lost_node = cluster.nodes[1]
    async with sky.Pool(provider=sky.Slurm(), nodes=2, name="slurm-lost", output=None, max_restarts=0) as pool:
        placed = dict(await pool.broadcast(host))
        assert set(placed) == {n.name for n in cluster.nodes}
        lost_node.proc.kill()  # its slurmd: the step (and our worker in it) goes on
        lost_node.proc.wait()
        killed = time.monotonic()
        with anyio.fail_after(600), pytest.raises(sky.WorkerLost) as lost:
            await pool.broadcast(slow, 600)
        print(f"the loss was reported {time.monotonic() - killed:.1f} s after slurmd was killed")
    # no worker outlives the pool: not even the one under the dead slurmd, which Slurm cannot end
    assert not process_alive(placed[lost_node.name])
    message = str(lost.value)
    assert (f"Slurm node {lost_node.name}: its slurmd does not accept connections "
            f"(refused at {lost_node.address}:6818); the node is lost") in message, message
    assert "node 1" in message and "exited with status 0" not in message, message
    # the close cancelled the job: Slurm lists it at most as COMPLETING on the lost node (until its
    # controller marks that node DOWN, SlurmdTimeout later), and then not at all
    left = cluster.run("squeue", "-h", "-o", "%i|%T|%N").stdout.split()
    assert all(line.endswith(f"|COMPLETING|{lost_node.name}") for line in left), left
    with anyio.fail_after(600):
        while cluster.jobs():
            await anyio.sleep(1)
    # the healthy node has nothing of the pool left
    healthy = cluster.nodes[0]
    assert placed[healthy.name] not in healthy.pids()
    assert [p for p in healthy.pids() if p != healthy.proc.pid] == []
