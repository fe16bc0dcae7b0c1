"""sky.AWS(endpoint=...) through FakeEC2FaultProxy (a FAKE: moto_server behind a proxy that answers chosen
calls with real EC2's un-namespaced error bodies), in the loopback-only namespace.

Every test lists the whole moto account afterwards: no instance, group, key pair or placement group left.
"""

from __future__ import annotations

import pytest

from skyhive.providers.base import ClusterSpec, ProvisionError, RetryPolicy
from skyhive.providers.cloud.aws import AWS, client_token
from skyhive.providers.cloud.base import CloudTimeouts
from tests.infra.fake_service_quotas import FakeServiceQuotas
from tests.infra.moto_ec2 import NOTHING_LEFT, ec2_client, leftovers

pytestmark = [pytest.mark.loopback_only, pytest.mark.anyio]

FAST = CloudTimeouts(poll=0.05, running=30, terminate=30, cleanup=30, visibility_grace=3)


def aws(moto, **kw) -> AWS:
    kw.setdefault("instance_type", "t3.micro")
    kw.setdefault("zones", ["us-east-1a", "us-east-1b"])
    provider = AWS(region="us-east-1", image=moto.image, ssh_cidr="192.0.2.1/32", endpoint=moto.endpoint,
                   timeouts=FAST, **kw)
    provider.retry = RetryPolicy(attempts=5, initial_delay=0.01, max_delay=0.05)
    return provider


def ever_made(moto, pool_id: str) -> list[str]:
    """Every instance moto ever made for the pool, terminated ones included."""
    tag = [{"Name": "tag:skyhive-pool", "Values": [pool_id]}]
    return [i["InstanceId"] for r in ec2_client(moto.upstream).describe_instances(Filters=tag)["Reservations"]
            for i in r["Instances"]]


def left(moto) -> dict[str, int]:
    return leftovers(moto.upstream, proxy=moto.proxy)


@pytest.mark.parametrize("after_forward", [False, True], ids=["refused", "answer-lost"])
@pytest.mark.parametrize("failures", [1, 2, 3])
async def test_throttled_run_instances_never_makes_more_instances_than_nodes(fake_ec2_proxy, failures, after_forward):
    # RequestLimitExceeded (HTTP 503, EC2's body) on the first `failures` RunInstances calls: refused (nothing
    # made), or after moto made the instances (the answer lost). Either way: 3 instances for 3 nodes, ever.
    moto = fake_ec2_proxy
    moto.proxy.fail("RunInstances", "RequestLimitExceeded", at=1, times=failures, after_forward=after_forward)
    provider = aws(moto)
    spec = ClusterSpec(pool_id="p-thr", nodes=3)
    handles = await provider.create(spec)
    assert sorted(h.node for h in handles) == [0, 1, 2]
    assert len(ever_made(moto, "p-thr")) == 3  # peak live <= nodes: nothing was ever made twice
    runs = moto.proxy.actions("RunInstances")
    assert all(p["MinCount"] == p["MaxCount"] for p in runs)
    # refused: each retry asks again for all 3 with the same token; answer lost: the first call made them,
    # the count by tag adopts them and no second RunInstances is sent
    assert len(runs) == (failures + 1 if not after_forward else 1)
    assert {p["ClientToken"] for p in runs} == {client_token("p-thr", "us-east-1a", 1, [0, 1, 2])}
    tags = {i["InstanceId"]: {t["Key"]: t["Value"] for t in i["Tags"]}
            for r in ec2_client(moto.upstream).describe_instances()["Reservations"] for i in r["Instances"]}
    assert sorted(t["skyhive-node"] for t in tags.values()) == ["0", "1", "2"]
    await provider.down("p-thr")
    assert left(moto) == NOTHING_LEFT


async def test_only_the_missing_nodes_are_asked_for_after_a_partial_pool(fake_ec2_proxy):
    # node 1 of the pool already runs (found by tag): a launch of [0, 1, 2] asks for 2, not 3
    moto = fake_ec2_proxy
    provider = aws(moto)
    spec = ClusterSpec(pool_id="p-part", nodes=3)
    await provider.prepare(spec)
    (first,) = await provider.launch(spec, [1])
    moto.proxy.fail("RunInstances", "RequestLimitExceeded", at=2)
    handles = await provider.launch(spec, [0, 1, 2])
    assert [h.node for h in handles] == [0, 1, 2] and handles[1].provider_id == first.provider_id
    assert [p["MaxCount"] for p in moto.proxy.actions("RunInstances")] == ["1", "2", "2"]
    assert len(ever_made(moto, "p-part")) == 3
    await provider.down("p-part")
    assert left(moto) == NOTHING_LEFT


async def test_an_instance_left_tagged_is_terminated_by_the_pools_cleanup(fake_ec2_proxy):
    # whatever a pool made is gone when it ends, by tag: not by the handles anyone holds
    moto = fake_ec2_proxy
    provider = aws(moto)
    spec = ClusterSpec(pool_id="p-stray", nodes=1)
    await provider.prepare(spec)
    await provider.launch(spec, [0])  # its handle is dropped here
    assert left(moto)["instances"] == 1
    await provider.cleanup("p-stray")
    assert left(moto) == NOTHING_LEFT


@pytest.mark.parametrize("code", ["InvalidGroup.NotFound", "InvalidKeyPair.NotFound"])
async def test_not_found_right_after_creation_is_retried(fake_ec2_proxy, code):
    # EC2 is eventually consistent: the group / key pair just made may be unknown to RunInstances for a while
    moto = fake_ec2_proxy
    moto.proxy.fail("RunInstances", code, at=1)
    moto.proxy.fail("AuthorizeSecurityGroupIngress", "InvalidGroup.NotFound", at=1)
    provider = aws(moto)
    handles = await provider.create(ClusterSpec(pool_id="p-ec", nodes=2))
    assert len(handles) == 2
    assert len(moto.proxy.actions("RunInstances")) == 2
    assert len(moto.proxy.actions("AuthorizeSecurityGroupIngress")) == 3  # ssh (twice), then the pool's own rule
    await provider.down("p-ec")
    assert left(moto) == NOTHING_LEFT


async def test_not_found_that_lasts_past_the_grace_is_fatal_and_leaves_nothing(fake_ec2_proxy):
    moto = fake_ec2_proxy
    moto.proxy.fail("RunInstances", "InvalidGroup.NotFound", at=1, times=10_000)
    provider = aws(moto, zones=["us-east-1a"])
    provider.timeouts = CloudTimeouts(poll=0.2, running=30, terminate=30, cleanup=30, visibility_grace=1)
    with pytest.raises(ProvisionError, match="InvalidGroup.NotFound") as err:
        await provider.create(ClusterSpec(pool_id="p-ec2", nodes=1))
    # no other zone or retry here; a 4xx refusal of the create call, so a Fallback's next offer (which makes
    # its own group) would be tried (issue 38)
    assert err.value.kind == "refused" and err.value.code == "InvalidGroup.NotFound"
    assert left(moto) == NOTHING_LEFT


async def test_imdsv2_is_required_with_hop_limit_two(fake_ec2_proxy):
    moto = fake_ec2_proxy
    provider = aws(moto)
    (handle,) = await provider.create(ClusterSpec(pool_id="p-imds", nodes=1))
    (run,) = moto.proxy.actions("RunInstances")
    assert (run["MetadataOptions.HttpTokens"], run["MetadataOptions.HttpPutResponseHopLimit"]) == ("required", "2")
    (instance,) = [i for r in ec2_client(moto.upstream).describe_instances(InstanceIds=[handle.provider_id])
                   ["Reservations"] for i in r["Instances"]]
    assert instance["MetadataOptions"]["HttpTokens"] == "required"
    assert instance["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
    await provider.down("p-imds")
    assert left(moto) == NOTHING_LEFT


async def test_vcpu_quota_names_the_quota_and_how_to_raise_it(fake_ec2_proxy, monkeypatch):
    moto = fake_ec2_proxy
    moto.proxy.fail("RunInstances", "VcpuLimitExceeded", at=1)
    provider = aws(moto, instance_type="p3.2xlarge")
    with FakeServiceQuotas({"L-417A185B": 0}) as quotas:  # moto has no EC2 quotas: the labelled fake
        monkeypatch.setenv("AWS_ENDPOINT_URL_SERVICE_QUOTAS", quotas.endpoint)
        with pytest.raises(ProvisionError) as err:
            await provider.create(ClusterSpec(pool_id="p-vcpu", nodes=2))
        assert quotas.asked == [("us-east-1", "L-417A185B")]
    text = str(err.value)
    assert err.value.code == "VcpuLimitExceeded" and err.value.kind == "quota"
    assert "Running On-Demand P instances" in text and "--quota-code L-417A185B" in text
    # the quota's value as Service Quotas states it, and what the pool needs (2 x 8 vCPUs)
    assert "is 0 vCPUs (Service Quotas); the pool needs 16" in text and "--desired-value 16" in text
    assert len(moto.proxy.actions("RunInstances")) == 1  # no other zone: quotas are per region
    assert left(moto) == NOTHING_LEFT


async def test_a_launch_cancelled_while_it_retries_leaves_nothing(fake_ec2_proxy):
    # RunInstances made the 3 instances but its answer was lost; the caller cancels during the backoff.
    # The worker thread finishes its attempt (adopting and numbering them), then the launch's own
    # cancellation path terminates them by tag: nothing runs afterwards, even before the pool's cleanup
    import anyio

    moto = fake_ec2_proxy
    moto.proxy.fail("RunInstances", "RequestLimitExceeded", at=1, after_forward=True)
    provider = aws(moto, zones=["us-east-1a"])
    provider.retry = RetryPolicy(attempts=3, initial_delay=1.0, max_delay=1.0)
    spec = ClusterSpec(pool_id="p-cancel", nodes=3)
    await provider.prepare(spec)
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def launch() -> None:
            with scope:
                await provider.launch(spec, [0, 1, 2])

        tg.start_soon(launch)
        while moto.proxy.counts.get("RunInstances", 0) < 1:
            await anyio.sleep(0.01)
        scope.cancel()
    assert scope.cancelled_caught
    assert len(ever_made(moto, "p-cancel")) == 3
    assert left(moto)["instances"] == 0
    await provider.cleanup("p-cancel")
    assert left(moto) == NOTHING_LEFT


async def test_fixed_calls_are_skipped_only_where_their_answer_is_known(fake_ec2_proxy):
    """A pool prepared from nothing by this provider: no listing before ImportKeyPair, CreateSecurityGroup
    or the first RunInstances (nothing of the pool can exist), no DescribeAddresses with the listings, and
    its cleanup deletes what it made by name and id with one proving listing. Where the answer is not
    known — a second provider (another process) on the same pool, a create whose answer was lost —
    EC2's Duplicate sends it to the listings by tag, what runs is counted, nothing is doubled, the group
    keeps its rules, and nothing is left."""
    moto = fake_ec2_proxy
    proxy = moto.proxy
    spec = ClusterSpec(pool_id="p-calls", nodes=2)
    await aws(moto).create(spec)
    actions = [a for a, _ in proxy.calls]
    before_run = actions[:actions.index("RunInstances")]
    assert not {"DescribeKeyPairs", "DescribeSecurityGroups", "DescribeInstances"} & set(before_run), before_run
    assert "DescribeAddresses" not in actions
    other = aws(moto)  # another process resumes the same pool: nothing is known to it
    mark = len(proxy.calls)
    handles = await other.create(spec)
    later = [a for a, _ in proxy.calls[mark:]]
    assert "RunInstances" not in later and {"DescribeKeyPairs", "DescribeSecurityGroups", "DescribeInstances"} <= set(later)
    assert sorted(h.node for h in handles) == [0, 1] and len(ever_made(moto, "p-calls")) == 2
    await other.down("p-calls")  # made nothing itself: finds the key pair and the group by tag
    assert left(moto) == NOTHING_LEFT

    proxy.fail("CreateSecurityGroup", "InternalError", after_forward=True,  # the next one: made, answer lost
               at=proxy.counts["CreateSecurityGroup"] + 1)
    mark = len(proxy.calls)
    provider = aws(moto)
    await provider.create(ClusterSpec(pool_id="p-lost", nodes=1))
    (group,) = ec2_client(moto.upstream).describe_security_groups(
        Filters=[{"Name": "tag:skyhive-pool", "Values": ["p-lost"]}])["SecurityGroups"]
    assert {(p.get("FromPort"), p["IpProtocol"]) for p in group["IpPermissions"]} >= {(22, "tcp")}
    assert [a for a, _ in proxy.calls[mark:]].count("CreateSecurityGroup") == 2
    await provider.down("p-lost")
    assert left(moto) == NOTHING_LEFT
