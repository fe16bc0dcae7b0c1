"""Company accounts (a zone without a subnet, no default VPC, an explicit subnet or group), multi-node GPU
pools (cluster placement group, EFA) and default images by GPU generation: sky.AWS against moto_server
behind FakeEC2FaultProxy (a FAKE proxy; it also serves placement groups, which moto lacks), in the
loopback-only namespace. Every test lists the whole account afterwards."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from skyhive.cli import main
from skyhive.providers.base import ClusterSpec, ProvisionError, RetryPolicy
from skyhive.providers.cloud import aws_images
from skyhive.providers.cloud.aws import AWS
from skyhive.providers.cloud.aws_network import public_address
from skyhive.providers.cloud.base import CloudTimeouts
from tests.infra.moto_ec2 import NOTHING_LEFT, ec2_client, leftovers

pytestmark = [pytest.mark.loopback_only, pytest.mark.anyio]

FAST = CloudTimeouts(poll=0.05, running=30, terminate=30, cleanup=30, visibility_grace=2)


def aws(moto, **kw) -> AWS:
    kw.setdefault("instance_type", "t3.micro")
    kw.setdefault("image", moto.image)
    provider = AWS(region="us-east-1", ssh_cidr="192.0.2.1/32", endpoint=moto.endpoint, timeouts=FAST, **kw)
    provider.retry = RetryPolicy(attempts=3, initial_delay=0.01, max_delay=0.02)
    return provider


def left(moto) -> dict[str, int]:
    return leftovers(moto.upstream, proxy=moto.proxy)


def instances(moto, pool_id: str) -> list[dict]:
    tag = [{"Name": "tag:skyhive-pool", "Values": [pool_id]}]
    return [i for r in ec2_client(moto.upstream).describe_instances(Filters=tag)["Reservations"]
            for i in r["Instances"] if i["State"]["Name"] != "terminated"]


def drop_default_vpc(client) -> None:
    (vpc,) = [v["VpcId"] for v in client.describe_vpcs()["Vpcs"] if v["IsDefault"]]
    for subnet in client.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]:
        client.delete_subnet(SubnetId=subnet["SubnetId"])
    for igw in client.describe_internet_gateways(Filters=[{"Name": "attachment.vpc-id", "Values": [vpc]}])[
            "InternetGateways"]:
        client.detach_internet_gateway(InternetGatewayId=igw["InternetGatewayId"], VpcId=vpc)
        client.delete_internet_gateway(InternetGatewayId=igw["InternetGatewayId"])
    client.delete_vpc(VpcId=vpc)


async def test_a_zone_whose_default_subnet_is_gone_is_skipped_and_named(fake_ec2_proxy):
    moto = fake_ec2_proxy
    client = ec2_client(moto.upstream)
    (gone,) = client.describe_subnets(Filters=[{"Name": "availability-zone", "Values": ["us-east-1a"]},
                                               {"Name": "default-for-az", "Values": ["true"]}])["Subnets"]
    client.delete_subnet(SubnetId=gone["SubnetId"])
    provider = aws(moto, zones=["us-east-1a", "us-east-1b"])
    handles = await provider.create(ClusterSpec(pool_id="p-nosub", nodes=2))
    assert {h.extra["zone"] for h in handles} == {"us-east-1b"}
    await provider.down("p-nosub")
    # only zone a, whose subnet is gone: refused, naming it and what to pass
    only_a = aws(moto, zones=["us-east-1a"])
    with pytest.raises(ProvisionError, match=r"us-east-1a \(no subnet in vpc-.*pass subnet=/subnets= or vpc="):
        await only_a.create(ClusterSpec(pool_id="p-nosub2", nodes=1))
    assert left(moto) == NOTHING_LEFT


async def test_no_default_vpc_needs_a_subnet_and_an_explicit_one_is_used(fake_ec2_proxy):
    moto = fake_ec2_proxy
    client = ec2_client(moto.upstream)
    drop_default_vpc(client)
    with pytest.raises(ProvisionError, match="has no default VPC .*pass vpc='vpc-...' or subnet='subnet-...'"):
        await aws(moto).create(ClusterSpec(pool_id="p-novpc", nodes=1))
    assert left(moto) == NOTHING_LEFT
    vpc = client.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    subnet = client.create_subnet(VpcId=vpc, CidrBlock="10.42.1.0/24", AvailabilityZone="us-east-1c")["Subnet"]
    provider = aws(moto, subnet=subnet["SubnetId"])
    handles = await provider.create(ClusterSpec(pool_id="p-sub", nodes=2))
    assert {h.extra["zone"] for h in handles} == {"us-east-1c"}
    assert {i["SubnetId"] for i in instances(moto, "p-sub")} == {subnet["SubnetId"]}
    (group,) = client.describe_security_groups(Filters=[{"Name": "tag:skyhive-pool", "Values": ["p-sub"]}])[
        "SecurityGroups"]
    assert group["VpcId"] == vpc
    await provider.down("p-sub")
    assert left(moto) == NOTHING_LEFT


async def test_a_vpc_without_subnet_takes_subnets_that_reach_an_internet_gateway(fake_ec2_proxy):
    """Issue 38 point 7: a company VPC whose zone c has only a private subnet (its own route table, no route
    to the internet gateway) and whose zone d has a private one and a public one (the main table: 0.0.0.0/0
    to the igw): the pool goes to zone d's public subnet; zone c alone is refused naming its private subnet."""
    moto = fake_ec2_proxy
    client = ec2_client(moto.upstream)
    vpc = client.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    igw = client.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    client.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
    (main,) = client.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["RouteTables"]
    client.create_route(RouteTableId=main["RouteTableId"], DestinationCidrBlock="0.0.0.0/0", GatewayId=igw)
    closed = client.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]  # local routes only

    def subnet(cidr: str, zone: str, private: bool) -> str:
        sid = client.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]["SubnetId"]
        if private:
            client.associate_route_table(RouteTableId=closed, SubnetId=sid)
        return sid

    only_private_c = subnet("10.42.1.0/24", "us-east-1c", private=True)
    subnet("10.42.2.0/24", "us-east-1d", private=True)
    public_d = subnet("10.42.3.0/24", "us-east-1d", private=False)
    for private_first in ("10.42.4.0/24", "10.42.5.0/24"):  # more private ones in d: whichever id sorts first
        subnet(private_first, "us-east-1d", private=True)
    provider = aws(moto, vpc=vpc, zones=["us-east-1c", "us-east-1d"])
    handles = await provider.create(ClusterSpec(pool_id="p-igw", nodes=2))
    assert {h.extra["zone"] for h in handles} == {"us-east-1d"}
    assert {i["SubnetId"] for i in instances(moto, "p-igw")} == {public_d}
    await provider.down("p-igw")
    with pytest.raises(ProvisionError, match=rf"us-east-1c \(its subnets {only_private_c} have no route to an "
                                             r"internet gateway\).*pass subnet="):
        await aws(moto, vpc=vpc, zones=["us-east-1c"]).create(ClusterSpec(pool_id="p-igw2", nodes=1))
    assert left(moto) == NOTHING_LEFT


async def test_an_existing_security_group_is_used_and_kept(fake_ec2_proxy):
    moto = fake_ec2_proxy
    client = ec2_client(moto.upstream)
    vpc = next(v["VpcId"] for v in client.describe_vpcs()["Vpcs"] if v["IsDefault"])
    mine = client.create_security_group(GroupName="company-ssh", Description="theirs", VpcId=vpc)["GroupId"]
    provider = aws(moto, security_group=mine, zones=["us-east-1a"])
    await provider.create(ClusterSpec(pool_id="p-sg", nodes=1))
    (run,) = moto.proxy.actions("RunInstances")
    assert run["NetworkInterface.1.SecurityGroupId.1"] == mine
    assert not moto.proxy.actions("CreateSecurityGroup")
    await provider.down("p-sg")
    assert [g["GroupId"] for g in client.describe_security_groups(GroupIds=[mine])["SecurityGroups"]] == [mine]
    client.delete_security_group(GroupId=mine)
    assert left(moto) == NOTHING_LEFT


@pytest.mark.parametrize("itype,cards", [("p4d.24xlarge", 4), ("p5.48xlarge", 32)])
async def test_multi_node_efa_on_every_card_a_placement_group_and_elastic_ips_all_gone_after(fake_ec2_proxy,
                                                                                             itype, cards):
    """EFA on every network card (EC2 User Guide: ENA primary at card 0 device 0, EFA-only at card 0
    device 1 and at device 0 of every further card); with several interfaces EC2 gives no public address
    (the fake refuses AssociatePublicIpAddress and hides moto's), so each node is reachable through its
    own Elastic IP on its primary interface, released with the pool."""
    moto = fake_ec2_proxy
    pool = f"p-{itype.split('.')[0]}"
    provider = aws(moto, instance_type=itype, zones=["us-east-1a"])
    handles = await provider.create(ClusterSpec(pool_id=pool, nodes=2))
    assert moto.proxy.placement_log == [f"create skyhive-{pool}"]
    (run,) = moto.proxy.actions("RunInstances")
    assert run["Placement.GroupName"] == f"skyhive-{pool}" and run["MaxCount"] == "2"
    nics = {}
    for key, value in run.items():
        if key.startswith("NetworkInterface."):
            n, _, name = key[len("NetworkInterface."):].partition(".")
            nics.setdefault(int(n), {})[name] = value
    layout = [(nic["NetworkCardIndex"], nic["DeviceIndex"], nic["InterfaceType"]) for _, nic in sorted(nics.items())]
    assert layout == [("0", "0", "interface"), ("0", "1", "efa-only")] + [(str(c), "0", "efa-only")
                                                                          for c in range(1, cards)]
    assert not any("AssociatePublicIpAddress" in nic for nic in nics.values())
    (egress,) = moto.proxy.actions("AuthorizeSecurityGroupEgress")  # EFA: all traffic out to the group itself
    assert egress["IpPermissions.1.Groups.1.GroupId"] == egress["GroupId"]
    client = ec2_client(moto.upstream)
    eips = {{t["Key"]: t["Value"] for t in a["Tags"]}["skyhive-node"]: a for a in client.describe_addresses()["Addresses"]}
    assert sorted(eips) == ["0", "1"]
    for h in handles:  # reachable: the handle's address is its own Elastic IP, on its primary interface
        eip = eips[str(h.node)]
        assert h.public_addr == h.reach.host == eip["PublicIp"]
        (primary,) = [n for i in instances(moto, pool) if i["InstanceId"] == h.provider_id
                      for n in i["NetworkInterfaces"] if n["Attachment"]["DeviceIndex"] == 0]
        assert eip["NetworkInterfaceId"] == primary["NetworkInterfaceId"]
    running = [await provider.wait_running(h, lambda state: None) for h in handles]  # listed by tag again
    assert sorted(h.public_addr for h in running) == sorted(a["PublicIp"] for a in eips.values())
    # p5: `skyhive down` from another process, which knows the Elastic IPs only from the key pair's marker
    downer = provider if cards == 4 else aws(moto, instance_type=itype, zones=["us-east-1a"])
    await downer.down(pool)
    assert moto.proxy.placement_log == [f"create skyhive-{pool}", f"delete skyhive-{pool}"]
    assert len(moto.proxy.actions("ReleaseAddress")) == 2
    assert left(moto) == NOTHING_LEFT  # Elastic IPs released too


async def test_the_elastic_ip_quota_is_named_and_what_was_allocated_is_released(fake_ec2_proxy):
    moto = fake_ec2_proxy
    moto.proxy.fail("AllocateAddress", "AddressLimitExceeded", at=2)  # the second node's address
    provider = aws(moto, instance_type="p4d.24xlarge", zones=["us-east-1a"])
    with pytest.raises(ProvisionError) as err:
        await provider.create(ClusterSpec(pool_id="p-eip", nodes=2))
    assert err.value.kind == "quota" and "'EC2-VPC Elastic IPs' (L-0263D0A3" in str(err.value)
    assert "efa=False" in str(err.value)
    assert len(moto.proxy.actions("ReleaseAddress")) == 1  # the first node's, released with the pool
    assert left(moto) == NOTHING_LEFT


async def test_one_node_or_cpu_pools_get_no_placement_group_and_no_efa(fake_ec2_proxy):
    moto = fake_ec2_proxy
    for pool, itype, nodes in (("p-one", "p4d.24xlarge", 1), ("p-cpu", "c5n.18xlarge", 2)):
        provider = aws(moto, instance_type=itype, zones=["us-east-1a"])
        await provider.create(ClusterSpec(pool_id=pool, nodes=nodes))
        await provider.down(pool)
    assert moto.proxy.placement_log == []
    assert not any("NetworkInterface.1.InterfaceType" in run for run in moto.proxy.actions("RunInstances"))
    with pytest.raises(ProvisionError, match="efa=True but t3.micro has no EFA"):
        await aws(moto, efa=True).create(ClusterSpec(pool_id="p-efa", nodes=2))
    assert left(moto) == NOTHING_LEFT


@pytest.mark.parametrize(("itype", "image_key"), [("p3.2xlarge", "gpu-proprietary"), ("g4dn.xlarge", "gpu-oss"),
                                                  ("p5.48xlarge", "gpu-oss"), ("t3.micro", "cpu")])
async def test_the_default_image_follows_the_gpu_generation(fake_ec2_proxy, monkeypatch, itype, image_key):
    moto = fake_ec2_proxy
    client = ec2_client(moto.upstream)
    registered = {}
    for key, spec in aws_images.IMAGES.items():  # the account's own copies, named as AWS names them
        name = spec.name.replace("*", " 20250101")
        registered[key] = client.register_image(Name=name, RootDeviceName="/dev/sda1", Architecture="x86_64",
                                                VirtualizationType="hvm")["ImageId"]
        owner = client.describe_images(ImageIds=[registered[key]])["Images"][0]["OwnerId"]  # moto's account
        monkeypatch.setitem(aws_images.IMAGES, key, dataclasses.replace(spec, owner=owner))
    provider = aws(moto, instance_type=itype, image=None, zones=["us-east-1a"])
    (handle,) = await provider.create(ClusterSpec(pool_id="p-img", nodes=1))
    (run,) = moto.proxy.actions("RunInstances")
    assert run["ImageId"] == registered[image_key]
    assert handle.reach.user == aws_images.IMAGES[image_key].user  # the V100's Amazon Linux 2: ec2-user
    await provider.down("p-img")
    for image in registered.values():
        client.deregister_image(ImageId=image)
    assert left(moto) == NOTHING_LEFT


async def test_an_image_given_wins_and_the_login_user_follows_it(fake_ec2_proxy):
    moto = fake_ec2_proxy
    client = ec2_client(moto.upstream)
    al2023 = client.register_image(Name="al2023-ami-2023.6.20250101.0-kernel-6.1-x86_64", RootDeviceName="/dev/xvda",
                                   Architecture="x86_64", VirtualizationType="hvm")["ImageId"]
    provider = aws(moto, instance_type="p3.2xlarge", image=al2023, zones=["us-east-1a"])
    (handle,) = await provider.create(ClusterSpec(pool_id="p-al", nodes=1))
    assert moto.proxy.actions("RunInstances")[0]["ImageId"] == al2023
    assert handle.reach.user == "ec2-user"
    await provider.down("p-al")
    client.deregister_image(ImageId=al2023)
    assert left(moto) == NOTHING_LEFT


def test_a_failed_public_address_lookup_names_ssh_cidr():
    # in the loopback-only namespace nothing answers: the lookup fails as behind a proxy or offline
    with pytest.raises(ProvisionError, match=r"cannot find this client's public address .*pass ssh_cidr="):
        public_address("http://127.0.0.1:9/", timeout=2)


def test_dryrun_gpus_t4_region_us_east_2_plans_g4dn_xlarge(tmp_path, capsys, monkeypatch):
    (tmp_path / "t.yaml").write_text("run: echo hi\n")
    monkeypatch.chdir(tmp_path)
    code = main(["launch", "t.yaml", "--cloud", "aws", "--gpus", "T4", "--region", "us-east-2", "--dryrun"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "g4dn.xlarge" in out and "$0.526/h" in out
    assert not (Path(os.environ["SKYHIVE_HOME"]) / "pools").exists() or not list(
        (Path(os.environ["SKYHIVE_HOME"]) / "pools").iterdir())
