"""sky.Slurm on a real Slurm cluster (slurmctld + 2 slurmd nodes in network namespaces): one allocation
per pool, workers as srun steps, pending reasons, refusals, and nothing left after the pool."""

from __future__ import annotations

import socket
import subprocess
import time

import anyio
import pytest

import skyhive as sky
from skyhive.providers.base import ClusterSpec
from skyhive.runtime.events.log import pool_log_path, read_log
from skyhive.runtime.events.types import NodeProgress
from skyhive.providers.slurm import Slurm, SlurmError, gres_for
from tests.infra.slurm import SlurmCluster

pytestmark = pytest.mark.anyio


def where() -> dict:
    import os

    info = sky.instance_info()
    try:  # sky.dict & co. are not served to Slurm nodes: the first call says so (docs/collections.md)
        collections = sky.counter("c").increment()
    except RuntimeError as exc:
        collections = str(exc)
    return {"collections": collections, "host": socket.gethostname(), "addrs": subprocess.check_output(["hostname", "-I"], text=True).split(),
            "node": info.node, "head": info.head_addr, "job": os.environ.get("SLURM_JOB_ID"),
            "slurm_node": os.environ.get("SLURMD_NODENAME")}


def assert_clean(cluster: SlurmCluster) -> None:
    jobs, procs = cluster.wait_clean(30)  # a step whose srun was killed may linger for MessageTimeout
    assert jobs == [], f"jobs left: {jobs}"
    assert procs == {}, f"processes left in node namespaces: {cluster.describe_processes(procs)}"


async def test_broadcast_runs_on_each_slurm_node_and_the_job_ends_with_the_pool(slurm_cluster: SlurmCluster) -> None:
    nodes = slurm_cluster.nodes
    async with sky.Pool(provider=sky.Slurm(), nodes=2, name="slurm-bcast") as pool:
        results = await pool.broadcast(where)
        jobs = slurm_cluster.jobs()
    assert len(jobs) == 1 and jobs[0][1:] == ("skyhive-slurm-bcast", "RUNNING")
    job_id = jobs[0][0]
    assert [r["node"] for r in results] == [0, 1]
    assert all(r["collections"].startswith("sky.dict/set/counter/queue/barrier/lock are not served to Slurm nodes")
               for r in results), results
    assert [(r["host"], r["slurm_node"], r["addrs"]) for r in results] == [(n.name, n.name, [n.address]) for n in nodes]
    assert {r["head"] for r in results} == {nodes[0].address}
    assert {r["job"] for r in results} == {job_id}
    assert_clean(slurm_cluster)


async def test_a_pool_larger_than_the_partition_fails_at_once_with_slurms_reason(slurm_cluster: SlurmCluster) -> None:
    # (which of the two Slurm gives depends on which of its checks saw the job first: both mean "never")
    with pytest.raises(sky.ProvisionError, match="'(PartitionConfig|PartitionNodeLimit)'") as err:
        async with sky.Pool(provider=sky.Slurm(pending_timeout=300), nodes=3, name="slurm-toobig"):
            pass
    assert "never start" in str(err.value)
    assert_clean(slurm_cluster)


async def test_an_impossible_gres_is_refused_by_sbatch_quoting_slurm(slurm_cluster: SlurmCluster) -> None:
    with pytest.raises(SlurmError, match="Requested node configuration is not available"):
        async with sky.Pool(provider=sky.Slurm(gres="gpu:9"), nodes=1, name="slurm-gres9"):
            pass
    assert_clean(slurm_cluster)


def _occupy(cluster: SlurmCluster) -> str:
    """Hold every node with an exclusive job of our own; its job id once it runs."""
    job = cluster.run("sbatch", "--parsable", "--exclusive", "-N2", "--time=5", "-J", "blocker",
                      "--output=/dev/null", "--wrap", "sleep 300").stdout.strip()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if (job, "blocker", "RUNNING") in cluster.jobs():
            return job
        time.sleep(0.05)
    raise AssertionError(f"the blocker job {job} did not start: {cluster.jobs()}")


async def test_a_busy_cluster_reports_pending_resources_then_runs(slurm_cluster: SlurmCluster) -> None:
    blocker = _occupy(slurm_cluster)
    provider = Slurm()
    spec = ClusterSpec(pool_id="slurm-busy", nodes=2)
    seen: list[str] = []
    handles = await provider.launch(spec, range(2))
    try:
        async with anyio.create_task_group() as tg:
            async def free_when_pending() -> None:
                with anyio.fail_after(30):
                    while "pending (Resources)" not in seen:
                        await anyio.sleep(0.05)
                slurm_cluster.run("scancel", blocker)

            tg.start_soon(free_when_pending)
            with anyio.fail_after(60):
                running = [await provider.wait_running(h, seen.append) for h in handles]
        assert seen[-1] == "running" and "pending (Resources)" in seen
        assert [h.reach.node_name for h in running] == [n.name for n in slurm_cluster.nodes]
        assert [h.private_addr for h in running] == [n.address for n in slurm_cluster.nodes]
    finally:
        await provider.terminate(handles)
        slurm_cluster.run("scancel", blocker, check=False)
    assert_clean(slurm_cluster)


async def test_a_busy_cluster_times_out_with_the_pending_reason_and_cancels_the_job(slurm_cluster: SlurmCluster) -> None:
    blocker = _occupy(slurm_cluster)
    try:
        with pytest.raises(sky.SlurmError, match=r"still pending \(Resources\) after pending_timeout=1"):
            async with sky.Pool(provider=sky.Slurm(pending_timeout=1), nodes=2, name="slurm-wait"):
                pass
        assert [j for j in slurm_cluster.jobs() if j[1] == "skyhive-slurm-wait"] == []
        # each node showed Slurm's reason as its provider state while it waited
        progress = [e for e in read_log(pool_log_path("slurm-wait")) if isinstance(e, NodeProgress)]
        assert {(e.node, e.provider_state) for e in progress} >= {(0, "pending (Resources)"), (1, "pending (Resources)")}
    finally:
        slurm_cluster.run("scancel", blocker, check=False)
    assert_clean(slurm_cluster)


async def test_the_allocation_has_a_time_limit_and_the_accelerator_becomes_a_gres(slurm_cluster: SlurmCluster) -> None:
    provider = Slurm(time_limit="0:07:00")
    handles = await provider.launch(ClusterSpec(pool_id="slurm-limit", nodes=1, accelerator="A100:2"), [0])
    try:
        with anyio.fail_after(30):
            await provider.wait_running(handles[0], lambda _s: None)
        job = slurm_cluster.run("scontrol", "show", "job", handles[0].extra["job_id"]).stdout
        assert "TimeLimit=00:07:00" in job
        assert "gres:gpu:a100:2" in job or "gres/gpu:a100=2" in job
        assert handles[0].accelerators == 2 and handles[0].accelerator == "A100"
    finally:
        await provider.terminate(handles)
    assert_clean(slurm_cluster)


async def test_the_allocation_is_cancelled_once_all_its_nodes_are_given_back(slurm_cluster: SlurmCluster) -> None:
    provider = Slurm()
    handles = await provider.launch(ClusterSpec(pool_id="slurm-halves", nodes=2), range(2))
    try:
        with anyio.fail_after(30):
            running = [await provider.wait_running(h, lambda _s: None) for h in handles]
        await provider.terminate(running[:1])  # one node: the other still runs in the allocation
        assert [j[1:] for j in slurm_cluster.jobs()] == [("skyhive-slurm-halves", "RUNNING")]
        await provider.terminate(running[1:])
        assert slurm_cluster.jobs() == []
    finally:
        await provider.terminate(handles)
    assert_clean(slurm_cluster)


def test_bad_settings_are_refused_naming_them() -> None:
    for bad in (0, "UNLIMITED", "infinite", "1:xx"):
        with pytest.raises(ValueError, match="time_limit"):
            Slurm(time_limit=bad)
    with pytest.raises(ValueError, match="sbatch_args"):
        Slurm(sbatch_args="--exclusive")
    with pytest.raises(ValueError, match="accelerator 'A100:x'"):
        gres_for("A100:x", None)
    assert gres_for("H100", None) == "gpu:h100:1"
    plan = Slurm(partition="gpu", time_limit="2:00:00").plan(ClusterSpec(pool_id="p", nodes=2, accelerator="A100:4"))
    assert plan["summary"] == ("one Slurm allocation: 2 nodes, partition gpu, time limit 2:00:00, "
                               "gres gpu:a100:4 per node")
    assert gres_for("A100:4", "gpu:2") == "gpu:2"
