"""Issue 40, point 2: alternative Specs. In Skyward each `sky.Spec` of a pool is a candidate of its own —
the first that can be had, or the cheapest — and Specs may differ in allocation (or accelerator, vCPUs,
memory). The issue's program, on moto (two AWS regions in a loopback-only namespace): a spot Spec and an
on-demand one; each candidate launches with its own Spec's allocation, a full spot region moves on to
the on-demand one, and nothing is left in either region."""

from __future__ import annotations

import pytest

import skyhive as sky
from skyhive.providers.base import RetryPolicy
from skyhive.providers.cloud.base import CloudTimeouts
from tests.cloud.cloud_fakes import FaultInjectingFakeDriver, LocalMappedAWS
from tests.infra.moto_ec2 import count_pool, ec2_client, register_image

pytestmark = [pytest.mark.loopback_only, pytest.mark.anyio]

EAST, WEST = "us-east-1", "us-west-2"
NOTHING = {"instances": 0, "groups": 0, "keys": 0}


def regional(region: str, faults: dict | None = None) -> LocalMappedAWS:
    aws = LocalMappedAWS(region=region, zones=[region + "a", region + "b"], image=register_image(region=region),
                         instance_type="t3.micro", ssh_cidr="192.0.2.1/32",
                         timeouts=CloudTimeouts(poll=0.05, visibility_grace=2))
    aws.retry = RetryPolicy(attempts=2, initial_delay=0.01)
    if faults:
        aws._driver = FaultInjectingFakeDriver(aws.driver, faults)
    return aws


def lifecycles(pool_id: str, region: str) -> list[str]:
    tag = [{"Name": "tag:skyhive-pool", "Values": [pool_id]},
           {"Name": "instance-state-name", "Values": ["pending", "running"]}]
    reservations = ec2_client(region=region).describe_instances(Filters=tag)["Reservations"]
    return [i.get("InstanceLifecycle", "on-demand") for r in reservations for i in r["Instances"]]


def node_index() -> int:
    return sky.instance_info().node


async def test_a_spot_spec_then_an_on_demand_one_as_skywards_program(moto_ec2):
    east, west = regional(EAST), regional(WEST)
    pool = sky.ComputePool(sky.Spec(provider=east, allocation="spot"), sky.Spec(provider=west, allocation="on-demand"),
                           selection="first", name="p-specs-first")
    candidates = pool.provider.providers
    assert [type(c).__name__ for c in candidates] == ["SpecProvider", "SpecProvider"]
    assert [c.overrides for c in candidates] == [{"allocation": "spot", "spot": True},
                                                 {"allocation": "on-demand", "spot": False}]
    async with pool:
        assert await pool.broadcast(node_index) == [0]
        assert lifecycles("p-specs-first", EAST) == ["spot"]  # the first Spec, with its own allocation
        assert count_pool("p-specs-first", region=WEST) == NOTHING
    assert count_pool("p-specs-first", region=EAST) == count_pool("p-specs-first", region=WEST) == NOTHING


async def test_a_full_spot_region_moves_on_to_the_on_demand_spec(moto_ec2):
    east = regional(EAST, {"*": ["InsufficientInstanceCapacity"] * 10})
    west = regional(WEST)
    async with sky.ComputePool(sky.Spec(provider=east, allocation="spot"),
                               sky.Spec(provider=west, allocation="on-demand"),
                               selection="cheapest", name="p-specs-cheap") as pool:
        assert await pool.broadcast(node_index) == [0]
        assert pool.provider.chosen.inner is west and "aws us-east-1: capacity" in pool.provider.skipped[0]
        assert lifecycles("p-specs-cheap", WEST) == ["on-demand"]
        assert count_pool("p-specs-cheap", region=EAST) == NOTHING
    assert count_pool("p-specs-cheap", region=EAST) == count_pool("p-specs-cheap", region=WEST) == NOTHING


def test_specs_that_differ_in_accelerator_plan_each_their_own_machine():
    aws = sky.AWS(region=EAST)
    pool = sky.ComputePool(sky.Spec(provider=aws, accelerator="A100:8"), sky.Spec(provider=aws, accelerator="T4"),
                           selection="cheapest")
    from skyhive.providers.base import ClusterSpec

    asked = ClusterSpec(pool_id="plan", nodes=1, accelerator="A100:8")
    plans = [c.plan(asked) for c in pool.provider.providers]
    assert [p["accelerator"] for p in plans] == ["T4", "A100"]  # the cheaper T4 first, each its own request
    assert plans[0]["price_per_hour"] < plans[1]["price_per_hour"]


def test_cheapest_compares_a_spot_price_with_an_on_demand_one():
    aws = sky.AWS(region=EAST)
    pool = sky.ComputePool(sky.Spec(provider=aws, accelerator="T4", allocation="on-demand"),
                           sky.Spec(provider=aws, accelerator="T4", allocation="spot"), selection="cheapest")
    assert [c.overrides["allocation"] for c in pool.provider.providers] == ["spot", "on-demand"]
    assert pool.allocation == "spot"  # the pool reports its first candidate's values


def test_specs_must_still_agree_on_the_number_of_nodes():
    with pytest.raises(ValueError, match="must agree on nodes"):
        sky.ComputePool(sky.Spec(provider=sky.Local(), nodes=2), sky.Spec(provider=sky.Simulated(), nodes=3))
