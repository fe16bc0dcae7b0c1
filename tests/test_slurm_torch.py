"""The seeds' DDP example (torch plugin, gloo) on two Slurm nodes; one worker per fake GPU."""

from __future__ import annotations

import importlib.util
import os

import pytest

import skyhive as sky
from examples.torch_ddp import train
from tests.infra.slurm import SlurmCluster
from tests.test_slurm_pool import assert_clean

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                       reason="torch is not installed in the client venv (pip install torch==2.13.0)"),
]


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


async def test_two_workers_per_node_each_see_their_own_gpu(slurm_cluster: SlurmCluster) -> None:
    provider = sky.Slurm(gres="gpu:2")
    async with sky.Pool(provider=provider, nodes=2, processes_per_node=2, plugins=[sky.plugins.torch()],
                        name="slurm-gpus") as pool:
        results = await pool.broadcast(gpus, timeout=300)
    assert sorted(results) == [(0, 0, "0", "0"), (0, 1, "1", "1"), (1, 0, "0", "2"), (1, 1, "1", "3")]
    assert_clean(slurm_cluster)
