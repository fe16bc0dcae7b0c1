"""`accelerator="gpu:2"` on Slurm: any two GPUs per node, Slurm's own spelling. "gpu" is no model
name: the request is `--gres=gpu:2` (a `gpu:gpu:2` is refused by Slurm: "Requested node configuration is
not available"). On the real Slurm test cluster (2 nodes, 2 fake GPUs each, see tests/infra/slurm.py)."""

from __future__ import annotations

import os

import pytest

import skyhive as sky
from skyhive.providers.accelerators import mismatch, parse
from skyhive.providers.base import ClusterSpec
from skyhive.providers.slurm import Slurm, gres_for
from tests.infra.slurm import SlurmCluster

pytestmark = pytest.mark.anyio


def accelerators() -> tuple[int, str]:
    return sky.instance_info().accelerators, os.environ.get("CUDA_VISIBLE_DEVICES", "")


def test_the_generic_gpu_names_no_model_in_the_gres_request() -> None:
    assert gres_for("gpu:2", None) == "gpu:2"
    assert gres_for("GPU:2", None) == "gpu:2"
    assert gres_for("gpu", None) == "gpu:1"
    assert gres_for("A100:2", None) == "gpu:a100:2"  # a model is still a gres type
    plan = Slurm().plan(ClusterSpec(pool_id="p", nodes=2, accelerator="gpu:2"))
    assert plan["summary"].endswith("gres gpu:2 per node")
    # Local and SSH: any GPU satisfies "gpu:2"; a node without one is still warned about
    assert mismatch(parse("gpu:2"), ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"), where="n") is None
    assert "gpu:2" in (mismatch(parse("gpu:2"), ("NVIDIA A100-SXM4-80GB",), where="n") or "")


async def test_a_pool_asking_for_any_two_gpus_gets_two_per_node(slurm_cluster: SlurmCluster) -> None:
    async with sky.Pool(provider=sky.Slurm(), nodes=2, accelerator="gpu:2", name="slurm-anygpu",
                        output=None) as pool:
        results = await pool.broadcast(accelerators)
        [(job_id, _, state)] = slurm_cluster.jobs()
        job = slurm_cluster.run("scontrol", "show", "job", job_id).stdout
    assert state == "RUNNING"
    assert "gres:gpu:2" in job or "gres/gpu=2" in job, job
    assert "gpu:gpu" not in job
    assert results == [(2, "0,1"), (2, "0,1")]
    jobs, procs = slurm_cluster.wait_clean(30)
    assert jobs == [] and procs == {}
