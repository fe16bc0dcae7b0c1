"""The plugins on Slurm nodes exactly as elsewhere: the seeds' DDP example (torch, gloo) on two nodes,
one worker per fake GPU, a JAX runtime across the nodes, and the pool's accelerator as a gres."""

from __future__ import annotations

import importlib.util
import os

import pytest

import skyhive as sky
from examples.torch_ddp import train
from tests.infra.slurm import SlurmCluster
from tests.kinds.slurm.test_slurm_pool import assert_clean

pytestmark = pytest.mark.anyio
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed in the client venv (pip install torch==2.13.0)")


@needs_torch
async def test_ddp_example_on_two_slurm_nodes_ends_with_identical_parameters(slurm_cluster: SlurmCluster) -> None:
    async with sky.Pool(provider=sky.Slurm(), nodes=2, plugins=[sky.plugins.torch()], name="slurm-ddp") as pool:
        results = await pool.broadcast(train, 2, 64, 0.2, timeout=300)
    assert [r["rank"] for r in results] == [0, 1]
    assert {r["world_size"] for r in results} == {2}
    assert len({r["params"] for r in results}) == 1
    assert not set(results[0]["samples"]) & set(results[1]["samples"])
    assert_clean(slurm_cluster)


def gpus() -> tuple[int, int, str, str]:
    info = sky.instance_info()
    import torch.distributed as dist

    return info.node, info.local_rank, os.environ.get("CUDA_VISIBLE_DEVICES", ""), str(dist.get_rank())


@needs_torch
async def test_two_workers_per_node_each_see_their_own_gpu(slurm_cluster: SlurmCluster) -> None:
    provider = sky.Slurm(gres="gpu:2")
    async with sky.Pool(provider=provider, nodes=2, processes_per_node=2, plugins=[sky.plugins.torch()],
                        name="slurm-gpus") as pool:
        results = await pool.broadcast(gpus, timeout=300)
    assert sorted(results) == [(0, 0, "0", "0"), (0, 1, "1", "1"), (1, 0, "0", "2"), (1, 1, "1", "3")]
    assert_clean(slurm_cluster)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed in the client venv")
async def test_two_slurm_nodes_form_one_jax_runtime(slurm_cluster: SlurmCluster) -> None:
    from tests.plugins.test_plugins_jax import gather_from_every_process

    async with sky.Pool(provider=sky.Slurm(), nodes=2, plugins=[sky.plugins.jax()], name="slurm-jax") as pool:
        results = await pool.broadcast(gather_from_every_process, 7, timeout=300)
    pids = [r["pid"] for r in results]
    assert [(r["count"], r["index"]) for r in results] == [(2, 0), (2, 1)]
    assert all(r["gathered"] == [[7, pids[0]], [107, pids[1]]] for r in results)
    assert {r["env"]["JAX_COORDINATOR_ADDRESS"].split(":")[0] for r in results} == {slurm_cluster.nodes[0].address}
    assert_clean(slurm_cluster)


def accelerators() -> tuple[int, str]:
    return sky.instance_info().accelerators, os.environ.get("CUDA_VISIBLE_DEVICES", "")


async def test_the_pools_accelerator_becomes_a_gres_and_reaches_instance_info(slurm_cluster: SlurmCluster) -> None:
    async with sky.Pool(provider=sky.Slurm(), nodes=2, accelerator="A100:2", name="slurm-accel") as pool:
        results = await pool.broadcast(accelerators)
        job = slurm_cluster.run("scontrol", "show", "job", slurm_cluster.jobs()[0][0]).stdout
    assert "gpu:a100:2" in job
    assert results == [(2, "0,1"), (2, "0,1")]
    assert_clean(slurm_cluster)
