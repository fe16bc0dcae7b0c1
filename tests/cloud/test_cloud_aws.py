"""sky.AWS against moto (in-process), inside a loopback-only network namespace.

Nodes are never connected to: moto's addresses are invented. Provider-level tests stop at `running`;
the pool test maps each instance to a local worker through a test-only subclass.
"""

from __future__ import annotations

import base64
import os
import stat

import pytest

from skyhive.providers.base import ClusterSpec, ProvisionError
from skyhive.providers.cloud.aws import AWS
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.cloud.keys import pool_key_dir
from tests.infra.moto_ec2 import NOTHING_LEFT, count_pool, ec2_client, leftovers

pytestmark = [pytest.mark.loopback_only, pytest.mark.anyio]

@pytest.fixture(autouse=True)
def nothing_left_in_the_account(moto_ec2):
    """After each test, the whole moto account is listed: no instance, group, key pair (or placement group)."""
    yield
    assert leftovers() == NOTHING_LEFT


FAST = CloudTimeouts(poll=0.05, running=30, terminate=30, cleanup=30, visibility_grace=2)


def aws(moto, **kw) -> AWS:
    kw.setdefault("instance_type", "t3.micro")
    return AWS(region="us-east-1", image=moto.image, ssh_cidr="192.0.2.1/32", endpoint=moto.endpoint,
               timeouts=FAST, **kw)


async def test_create_tags_and_down_leaves_nothing(moto_ec2):
    provider = aws(moto_ec2)
    spec = ClusterSpec(pool_id="p-aws1", nodes=2)
    handles = await provider.create(spec)
    assert [h.node for h in handles] == [0, 1]
    assert all(h.state == "running" and h.private_addr and h.public_addr for h in handles)
    assert count_pool("p-aws1") == {"instances": 2, "groups": 1, "keys": 1}
    client = ec2_client()
    reservations = client.describe_instances(Filters=[{"Name": "tag:skyhive-pool", "Values": ["p-aws1"]}])
    instances = [i for r in reservations["Reservations"] for i in r["Instances"]]
    tags = sorted({t["Key"]: t["Value"] for t in i["Tags"]}["skyhive-node"] for i in instances)
    assert tags == ["0", "1"]
    assert {i["InstanceType"] for i in instances} == {"t3.micro"}
    group = client.describe_security_groups(Filters=[{"Name": "tag:skyhive-pool", "Values": ["p-aws1"]}])
    perms = group["SecurityGroups"][0]["IpPermissions"]
    ssh = [p for p in perms if p.get("FromPort") == 22]
    assert ssh and ssh[0]["IpRanges"][0]["CidrIp"] == "192.0.2.1/32"
    assert any(p["IpProtocol"] == "-1" and p["UserIdGroupPairs"] for p in perms)
    key = pool_key_dir("p-aws1") / "id_ed25519"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(key.parent).st_mode) == 0o700
    assert handles[0].reach.key == str(key)

    found = await provider.down("p-aws1")
    assert sorted(h.provider_id for h in found) == sorted(h.provider_id for h in handles)
    assert count_pool("p-aws1") == {"instances": 0, "groups": 0, "keys": 0}
    assert not key.exists()
    assert await provider.down("p-aws1") == []  # idempotent



async def test_spot_terminate_on_shutdown_user_data_and_disk_are_requested(moto_ec2):
    provider = aws(moto_ec2, spot=True, disk_gb=40)
    await provider.create(ClusterSpec(pool_id="p-spot", nodes=1))
    try:
        client = ec2_client()
        tag = [{"Name": "tag:skyhive-pool", "Values": ["p-spot"]}]
        (instance,) = [i for r in client.describe_instances(Filters=tag)["Reservations"] for i in r["Instances"]]
        assert instance.get("InstanceLifecycle") == "spot"
        behaviour = client.describe_instance_attribute(InstanceId=instance["InstanceId"],
                                                       Attribute="instanceInitiatedShutdownBehavior")
        assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
        user_data = client.describe_instance_attribute(InstanceId=instance["InstanceId"], Attribute="userData")
        assert "UV_INSTALL_DIR=/usr/local/bin" in base64.b64decode(user_data["UserData"]["Value"]).decode()
        volume_id = instance["BlockDeviceMappings"][0]["Ebs"]["VolumeId"]
        assert client.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["Size"] == 40
        assert instance["SubnetId"] in {s["SubnetId"] for s in client.describe_subnets(
            Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"]}
    finally:
        await provider.down("p-spot")
    assert count_pool("p-spot") == {"instances": 0, "groups": 0, "keys": 0}


async def test_an_unknown_image_fails_naming_it_and_leaves_nothing(moto_ec2):
    provider = aws(moto_ec2)
    provider.image = "ami-00000000000000000"
    with pytest.raises(ProvisionError, match="ami-00000000000000000") as err:
        await provider.create(ClusterSpec(pool_id="p-noimage", nodes=1))
    # the region refused what was asked (an AMI is per region): a Fallback's next offer is tried (issue 38)
    assert err.value.kind == "refused" and err.value.code
    assert count_pool("p-noimage") == {"instances": 0, "groups": 0, "keys": 0}


async def test_partial_credentials_are_a_clear_error(moto_ec2, monkeypatch):
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(ProvisionError, match="Partial credentials found in env, missing: AWS_SECRET_ACCESS_KEY"):
        await aws(moto_ec2).create(ClusterSpec(pool_id="p-nocreds", nodes=1))
