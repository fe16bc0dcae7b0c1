"""Errors moto cannot produce (capacity, quota, throttling), injected by a labelled fake driver wrapper
around the real libcloud driver talking to moto: what the provider does, and that nothing is left."""

from __future__ import annotations

import pytest

from skyhive.providers.base import ClusterSpec, ProvisionError, RetryPolicy
from skyhive.providers.cloud.aws import AWS
from skyhive.providers.cloud.base import CloudTimeouts
from tests.cloud.cloud_fakes import FaultInjectingFakeDriver
from tests.infra.moto_ec2 import NOTHING_LEFT, count_pool, ec2_client, leftovers

pytestmark = [pytest.mark.loopback_only, pytest.mark.anyio]

@pytest.fixture(autouse=True)
def nothing_left_in_the_account(moto_ec2):
    """After each test, the whole moto account is listed: no instance, group, key pair (or placement group)."""
    yield
    assert leftovers() == NOTHING_LEFT


A, B = "us-east-1a", "us-east-1b"
NOTHING = {"instances": 0, "groups": 0, "keys": 0}


def faulty(moto, faults) -> tuple[AWS, FaultInjectingFakeDriver]:
    aws = AWS(region="us-east-1", zones=[A, B], instance_type="t3.micro", image=moto.image, ssh_cidr="192.0.2.1/32",
              timeouts=CloudTimeouts(poll=0.05, running=30, terminate=30, cleanup=30, visibility_grace=2))
    aws.retry = RetryPolicy(attempts=4, initial_delay=0.01, max_delay=0.02)
    fake = FaultInjectingFakeDriver(aws.driver, faults)
    aws._driver = fake
    return aws, fake


def zones_of(pool_id: str) -> list[str]:
    tag = [{"Name": "tag:skyhive-pool", "Values": [pool_id]}]
    return sorted(i["Placement"]["AvailabilityZone"] for r in ec2_client().describe_instances(Filters=tag)["Reservations"]
                  for i in r["Instances"] if i["State"]["Name"] == "running")


async def test_capacity_in_zone_a_moves_to_zone_b(moto_ec2):
    # one RunInstances per zone attempt, for both nodes: zone a has no room, both go to b
    aws, fake = faulty(moto_ec2, {A: ["InsufficientInstanceCapacity"]})
    handles = await aws.create(ClusterSpec(pool_id="p-cap", nodes=2))
    assert fake.create_calls == [A, B] and fake.create_counts == [2, 2]
    assert [h.extra["zone"] for h in handles] == [B, B]
    assert zones_of("p-cap") == [B, B]
    await aws.down("p-cap")
    assert count_pool("p-cap") == NOTHING


async def test_quota_stops_at_once_naming_the_quota(moto_ec2):
    aws, fake = faulty(moto_ec2, {A: ["VcpuLimitExceeded"]})
    with pytest.raises(ProvisionError, match=r"quota VcpuLimitExceeded reached in us-east-1a \(no other zone tried\)") as err:
        await aws.create(ClusterSpec(pool_id="p-quota", nodes=2))
    assert fake.create_calls == [A]
    # the quota is named, with how to raise it (t3 is a standard type)
    assert "Running On-Demand Standard" in str(err.value) and "--quota-code L-1216C47A" in str(err.value)
    assert (err.value.code, err.value.kind, err.value.zones_tried) == ("VcpuLimitExceeded", "quota", (A,))
    assert count_pool("p-quota") == NOTHING


async def test_transient_errors_are_retried_in_the_same_zone(moto_ec2):
    aws, fake = faulty(moto_ec2, {A: ["RequestLimitExceeded", "InternalError"]})
    handles = await aws.create(ClusterSpec(pool_id="p-retry", nodes=2))
    assert fake.create_calls == [A, A, A]  # only the RunInstances call is retried, for both nodes
    assert fake.create_counts == [2, 2, 2]
    assert [h.extra["zone"] for h in handles] == [A, A]
    await aws.down("p-retry")
    assert count_pool("p-retry") == NOTHING


async def test_no_capacity_anywhere_names_every_zone_tried(moto_ec2):
    aws, fake = faulty(moto_ec2, {A: ["InsufficientInstanceCapacity"], B: ["InsufficientInstanceCapacity"]})
    with pytest.raises(ProvisionError, match=r"no capacity for nodes \[0, 1\] in any zone.*zones tried: us-east-1a, us-east-1b") as err:
        await aws.create(ClusterSpec(pool_id="p-nocap", nodes=2))
    assert fake.create_calls == [A, B]
    assert (err.value.code, err.value.kind, err.value.zones_tried) == ("InsufficientInstanceCapacity", "capacity", (A, B))
    cleaned = err.value.cleaned_up
    assert not any(item.startswith("instance i-") for item in cleaned)  # RunInstances is all or nothing
    assert any(item.startswith("security group sg-") for item in cleaned)
    assert "key pair skyhive-p-nocap" in cleaned
    assert count_pool("p-nocap") == NOTHING


async def test_fatal_error_stops_without_trying_other_zones(moto_ec2):
    aws, fake = faulty(moto_ec2, {A: ["InvalidParameterValue"]})
    with pytest.raises(ProvisionError, match="InvalidParameterValue") as err:
        await aws.create(ClusterSpec(pool_id="p-fatal", nodes=2))
    assert fake.create_calls == [A]
    # a refusal of the request (400): no other zone here; a Fallback would try its next offer (issue 38)
    assert err.value.kind == "refused" and err.value.cleaned_up
    assert count_pool("p-fatal") == NOTHING


async def test_transient_errors_that_never_stop_give_up_after_the_policy(moto_ec2):
    aws, fake = faulty(moto_ec2, {"*": ["Throttling"] * 10})
    with pytest.raises(ProvisionError, match="Throttling") as err:
        await aws.create(ClusterSpec(pool_id="p-throttle", nodes=1))
    assert fake.create_calls == [A] * 4  # attempts=4, then it is a failure, and no other zone is tried
    assert err.value.kind == "transient"
    assert count_pool("p-throttle") == NOTHING


async def test_an_instance_not_yet_listed_is_still_terminated(moto_ec2):
    # EC2 lists a new instance late, and refuses to terminate it as NotFound until it does: a fresh
    # instance must not be taken for gone (the "created a moment ago, forgotten" leak)
    aws, fake = faulty(moto_ec2, {})
    fake.invisible_for = 3
    spec = ClusterSpec(pool_id="p-late", nodes=1)
    await aws.prepare(spec)
    (handle,) = await aws.launch(spec, [0])
    await aws.terminate([handle])
    assert fake.terminate_calls.count(handle.provider_id) >= 2  # NotFound at first, retried once visible
    tag = [{"Name": "tag:skyhive-pool", "Values": ["p-late"]}]
    states = [i["State"]["Name"] for r in ec2_client().describe_instances(Filters=tag)["Reservations"]
              for i in r["Instances"]]
    assert states == ["terminated"]
    await aws.cleanup("p-late")
    assert count_pool("p-late") == NOTHING


async def test_cancelled_while_the_create_call_runs_leaves_nothing(moto_ec2):
    # the cancellation lands while RunInstances is in flight: the instance it makes has no handle
    # anywhere, and must be found by tag and terminated
    import threading

    import anyio
    from anyio.from_thread import run_sync as from_thread

    aws, fake = faulty(moto_ec2, {})
    in_create = anyio.Event()
    created_after_cancel = threading.Event()

    def on_create() -> None:
        from_thread(in_create.set)
        created_after_cancel.wait(5)

    fake.on_create = on_create
    spec = ClusterSpec(pool_id="p-midcreate", nodes=1)
    await aws.prepare(spec)
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def launch() -> None:
            with scope:
                await aws.launch(spec, [0])

        tg.start_soon(launch)
        await in_create.wait()
        scope.cancel()
        created_after_cancel.set()
    assert scope.cancelled_caught
    assert count_pool("p-midcreate")["instances"] == 0
    await aws.cleanup("p-midcreate")
    assert count_pool("p-midcreate") == NOTHING
