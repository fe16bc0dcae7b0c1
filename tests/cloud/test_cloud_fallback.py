"""Fallback across providers and regions (`Pool(provider=[a, b])`) on moto, in a loopback-only namespace:
capacity, quota and an accelerator a region lacks move on to the next provider; a fatal error stops;
nothing is left in any region; which provider was used and why the others were skipped is recorded."""

from __future__ import annotations

import json
import os

import pytest

import skyhive as sky
from skyhive.providers.base import RetryPolicy
from skyhive.providers.cloud.aws import AWS
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.fallback import Fallback
from skyhive.providers.registry import from_description
from tests.cloud.cloud_fakes import FaultInjectingFakeDriver, LocalMappedAWS
from tests.infra.moto_ec2 import count_pool, register_image

pytestmark = [pytest.mark.loopback_only, pytest.mark.anyio]

EAST, WEST = "us-east-1", "us-west-2"
NOTHING = {"instances": 0, "groups": 0, "keys": 0}


def regional(region: str, faults: dict | None = None, **kw) -> LocalMappedAWS:
    kw.setdefault("instance_type", "t3.micro")
    aws = LocalMappedAWS(region=region, zones=[region + "a", region + "b"], image=register_image(region=region),
                         ssh_cidr="192.0.2.1/32", timeouts=CloudTimeouts(poll=0.05, visibility_grace=2), **kw)
    aws.retry = RetryPolicy(attempts=2, initial_delay=0.01)
    if faults:
        aws._driver = FaultInjectingFakeDriver(aws.driver, faults)
    return aws


def progress_states(home: str, pool_id: str) -> list[str]:
    with open(os.path.join(home, "pools", f"{pool_id}.jsonl")) as fh:
        return [e.get("provider_state", "") for e in map(json.loads, fh) if e["type"] == "node_progress"]


def node_index() -> int:
    return sky.instance_info().node


@pytest.mark.parametrize("code", ["InsufficientInstanceCapacity", "VcpuLimitExceeded"])
async def test_capacity_or_quota_in_the_first_region_moves_to_the_next(moto_ec2, skyhive_home, code):
    east = regional(EAST, {"*": [code] * 10})
    west = regional(WEST)
    pool_id = f"p-fb-{code[:5].lower()}"
    async with sky.Pool(provider=[east, west], nodes=2, name=pool_id) as pool:
        assert await pool.broadcast(node_index) == [0, 1]
        assert count_pool(pool_id, region=WEST)["instances"] == 2
        assert count_pool(pool_id, region=EAST) == NOTHING  # its key pair and group went when it was skipped
        assert pool.provider.chosen is west and len(pool.provider.skipped) == 1
    assert count_pool(pool_id, region=EAST) == count_pool(pool_id, region=WEST) == NOTHING
    skipped = [s for s in progress_states(skyhive_home, pool_id) if s.startswith("using aws us-west-2")]
    assert len(skipped) == 2 and f"skipped aws us-east-1: {'capacity' if 'Capacity' in code else 'quota'}" in skipped[0]


async def test_a_region_without_the_accelerator_is_skipped(moto_ec2, skyhive_home):
    north = regional("eu-north-1", instance_type=None)  # offers no A100
    east = regional(EAST, instance_type=None)
    async with sky.Pool(provider=[north, east], nodes=1, name="p-fb-acc", accelerator="A100") as pool:
        assert pool.provider.chosen is east
        assert "no instance type in eu-north-1 has accelerator A100" in pool.provider.skipped[0]
    assert count_pool("p-fb-acc", region=EAST) == NOTHING


async def test_a_fatal_error_stops_without_trying_the_next(moto_ec2):
    """Credentials or permissions refused (403): no other offer would do better; nothing else is tried."""
    east = regional(EAST, {"*": ["UnauthorizedOperation"]})
    west = regional(WEST)
    with pytest.raises(sky.ProvisionError, match="UnauthorizedOperation"):
        async with sky.Pool(provider=[east, west], nodes=1, name="p-fb-fatal"):
            pass
    assert west.stages == []
    assert count_pool("p-fb-fatal", region=EAST) == count_pool("p-fb-fatal", region=WEST) == NOTHING


async def test_a_refusal_of_the_offer_moves_on_to_the_next(moto_ec2):
    """A refusal of what was asked for in one region (InvalidParameterValue: a machine or image that region
    will not run) says nothing of the next candidate (issue 38): it is tried, and the reason is kept."""
    east = regional(EAST, {"*": ["InvalidParameterValue"]})
    west = regional(WEST)
    async with sky.Pool(provider=[east, west], nodes=1, name="p-fb-refused") as pool:
        assert pool.provider.chosen is west
        (skipped,) = pool.provider.skipped
        assert skipped.startswith("aws us-east-1: refused: ") and "InvalidParameterValue" in skipped
    assert count_pool("p-fb-refused", region=EAST) == count_pool("p-fb-refused", region=WEST) == NOTHING


async def test_every_provider_full_is_one_error_naming_each(moto_ec2):
    east = regional(EAST, {"*": ["InsufficientInstanceCapacity"] * 10})
    west = regional(WEST, {"*": ["InsufficientInstanceCapacity"] * 10})
    with pytest.raises(sky.ProvisionError, match=r"no provider could launch.*aws us-east-1: capacity.*aws us-west-2: capacity"):
        async with sky.Pool(provider=[east, west], nodes=1, name="p-fb-full"):
            pass
    assert count_pool("p-fb-full", region=EAST) == count_pool("p-fb-full", region=WEST) == NOTHING


def test_skyhive_down_rebuilds_every_candidate_from_the_log():
    fallback = Fallback([AWS(region=EAST, instance_type="t3.micro"), AWS(region=WEST, spot=True)])
    rebuilt = from_description(json.loads(json.dumps(fallback.describe())))
    assert isinstance(rebuilt, Fallback)
    assert [(p.region, p.spot, p.instance_type) for p in rebuilt.providers] == [(EAST, False, "t3.micro"),
                                                                               (WEST, True, None)]


def test_a_fallback_needs_providers():
    with pytest.raises(TypeError, match="non-empty list of skyhive providers"):
        Fallback([])
    with pytest.raises(TypeError, match="non-empty list of skyhive providers"):
        sky.Pool(provider=["aws"], nodes=1)
