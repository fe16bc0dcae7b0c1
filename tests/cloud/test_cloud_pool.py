"""A sky.AWS pool (moto, in a loopback-only namespace) through the whole runtime: creates, runs, leaves
nothing — on a normal exit, on an exception, and when cancelled at each stage of its life.

Instances are mapped to local workers by `LocalMappedAWS` (a labelled fake reach): moto's addresses are
invented and never connected to.
"""

from __future__ import annotations

import json
import os

import anyio
import pytest

import skyhive as sky
from skyhive.providers.cloud.base import CloudTimeouts
from tests.cloud.cloud_fakes import LocalMappedAWS, StagedLocalAWS, cancel_now
from tests.infra.moto_ec2 import count_pool

pytestmark = [pytest.mark.loopback_only, pytest.mark.anyio]

FAST = CloudTimeouts(poll=0.05, running=30, terminate=30, cleanup=30, visibility_grace=2)


def node_index() -> int:
    return sky.instance_info().node


def provider(moto, **kw) -> LocalMappedAWS:
    return LocalMappedAWS(region="us-east-1", image=moto.image, ssh_cidr="192.0.2.1/32", timeouts=FAST, **kw)


async def test_two_node_pool_runs_and_leaves_nothing(moto_ec2, skyhive_home):
    aws = provider(moto_ec2)
    async with sky.Pool(provider=aws, nodes=2, name="p-pool2", cpus=2, memory_gb=4) as pool:
        assert count_pool("p-pool2") == {"instances": 2, "groups": 1, "keys": 1}
        assert await pool.broadcast(node_index) == [0, 1]
    assert count_pool("p-pool2") == {"instances": 0, "groups": 0, "keys": 0}
    with open(os.path.join(skyhive_home, "pools", "p-pool2.jsonl")) as fh:
        started = next(e for e in map(json.loads, fh) if e["type"] == "pool_started")
    assert started["plan"]["instance_type"] == "t3a.medium"  # the cheapest x86 type with 2 vCPU, 4 GB
    assert started["plan"]["price_per_hour"] > 0
    assert started["plan"]["cost_per_hour"] == pytest.approx(2 * started["plan"]["price_per_hour"])
    assert started["provider_config"]["provider"] == "aws"


async def test_exception_in_the_pool_leaves_nothing(moto_ec2):
    with pytest.raises(ZeroDivisionError):
        async with sky.Pool(provider=provider(moto_ec2), nodes=2, name="p-exc"):
            1 / 0  # noqa: B018
    assert count_pool("p-exc") == {"instances": 0, "groups": 0, "keys": 0}


@pytest.mark.parametrize("stage", ["requested", "prepared", "launch", "launched", "running", "ready", "terminate"])
async def test_cancellation_at_each_stage_leaves_nothing(moto_ec2, stage):
    pool_id = f"p-cancel-{stage}"
    with anyio.CancelScope() as scope:

        async def on_stage(now: str) -> None:
            if now == stage:
                await cancel_now(scope)

        aws = provider(moto_ec2, on_stage=on_stage)
        async with sky.Pool(provider=aws, nodes=2, name=pool_id):
            if stage == "ready":
                aws.stages.append("ready")
                await cancel_now(scope)
            await anyio.sleep_forever() if stage != "terminate" else None
    assert scope.cancelled_caught or stage == "terminate"
    assert stage in aws.stages
    assert count_pool(pool_id) == {"instances": 0, "groups": 0, "keys": 0}


@pytest.mark.parametrize("stage", ["connecting", "bootstrapping"])
async def test_cancellation_as_a_node_connects_or_bootstraps_leaves_nothing(moto_ec2, stage):
    pool_id = f"p-cancel-{stage}"
    seen: dict[str, int] = {}
    with anyio.CancelScope() as scope:

        async def on_stage(now: str) -> None:
            if now == stage:
                seen[stage] = count_pool(pool_id)["instances"]  # what runs as the cancellation lands
                await cancel_now(scope)

        aws = StagedLocalAWS(region="us-east-1", image=moto_ec2.image, ssh_cidr="192.0.2.1/32", timeouts=FAST,
                             on_stage=on_stage)
        async with sky.Pool(provider=aws, nodes=2, name=pool_id):
            await anyio.sleep_forever()  # pragma: no cover - never reached: cancelled while starting
    assert scope.cancelled_caught
    assert seen[stage] == 2  # the instances existed when it was cancelled...
    assert count_pool(pool_id) == {"instances": 0, "groups": 0, "keys": 0}  # ...and none is left


async def test_accelerator_the_region_lacks_fails_before_anything_is_made(moto_ec2):
    aws = provider(moto_ec2)
    with pytest.raises(sky.ProvisionError, match=r"A100:2.*A100 is offered \(per node\) in: .*us-east-1 \(x8\)"):
        async with sky.Pool(provider=aws, nodes=1, name="p-noacc", accelerator="A100:2"):
            pass
    assert aws.stages == []
    assert count_pool("p-noacc") == {"instances": 0, "groups": 0, "keys": 0}


def gpus() -> int:
    return sky.instance_info().accelerators


async def test_a_gpu_pool_gets_the_type_and_reports_its_gpu_count(moto_ec2, skyhive_home):
    # moto accepts any instance type; no GPU exists here, the count comes from the machine table. moto has
    # no placement groups (the default for multi-node GPU pools): tested through the fake proxy in
    # test_cloud_aws_network instead
    aws = provider(moto_ec2, placement_group=False)
    async with sky.Pool(provider=aws, nodes=2, name="p-gpu", accelerator="T4",
                        plugins=[sky.plugins.torch()]) as pool:
        assert await pool.broadcast(gpus) == [1, 1]
        assert pool.accelerator == "T4"
    client_types = {e["plan"]["instance_type"] for e in map(json.loads, open(os.path.join(
        skyhive_home, "pools", "p-gpu.jsonl"))) if e["type"] == "pool_started"}
    assert client_types == {"g4dn.xlarge"}
    assert count_pool("p-gpu") == {"instances": 0, "groups": 0, "keys": 0}
