"""`skyhive stop`/`start` and `resources.ports` of a named pool on AWS (issue 29), against moto_server in
the loopback-only namespace, the instances reached as local workers through the test-only
`LocalMappedAWS` (tests/cloud_fakes.py, FAKE reach: moto's instances have nothing behind them). What
the cloud holds is checked with boto3, independently of skyhive's code; the `cloud_clean` fixture
(tests/test_cloud_clusters.py) takes every pool down and checks that no instance is left.
"""

from __future__ import annotations

import io
import os
import textwrap

import pytest

import skyhive as sky
from tests.infra.moto_ec2 import count_pool, ec2_client
from tests.test_cloud_clusters import alive, aws, cloud_clean, record, states  # noqa: F401 - cloud_clean: a fixture

pytestmark = [pytest.mark.loopback_only]


def test_stop_keeps_the_instances_start_runs_the_same_ones_and_down_after_stop_leaves_nothing(
        cloud_clean, skyhive_home, tmp_path):
    from skyhive.runtime.commands.clusters import down_cluster, status_rows
    from skyhive.runtime.commands.pause import start_cluster, stop_cluster

    server = cloud_clean
    with sky.Pool(provider=aws(server), nodes=2, name="train", keep=True, output=None) as pool:
        pids = sorted(pool.broadcast(os.getpid))
    ids = record(skyhive_home, "train")["provider_info"]["instances"]
    assert states(server, ids) == ["running", "running"]
    err = io.StringIO()
    stop_cluster("train", provider=aws(server), err=err)
    assert states(server, ids) == ["stopped", "stopped"]  # stopped, not terminated: the disks are kept
    assert "billed for storage only" in err.getvalue()
    assert not any(alive(p) for p in pids)
    assert [r["state"] for r in status_rows()] == ["STOPPED (stop)"]
    with pytest.raises(sky.PoolGone, match=r"stopped by `skyhive stop train`: `skyhive start train`"):
        sky.Pool.attach("train", output=None)
    start_cluster("train", provider=aws(server), err=err)
    assert states(server, ids) == ["running", "running"]
    assert record(skyhive_home, "train")["provider_info"]["instances"] == ids  # the same instances
    with sky.Pool.attach("train", output=None) as pool:  # usable again: new workers on them
        again = sorted(pool.broadcast(os.getpid))
        assert pool.run(sum, [1, 2, 3]) == 6
    assert len(again) == 2 and not set(again) & set(pids)
    # stopped again, then down: nothing left (the fixture checks the instances too)
    stop_cluster("train", provider=aws(server), err=err)
    assert states(server, ids) == ["stopped", "stopped"]
    down_cluster("train", quiet=True)
    assert states(server, ids) == ["terminated", "terminated"]
    assert count_pool("train", server.endpoint) == {"instances": 0, "groups": 0, "keys": 0}


def test_a_provider_that_cannot_stop_says_so_and_nothing_is_touched(cloud_clean, skyhive_home):
    from skyhive.runtime.commands.pause import stop_cluster

    class NoStop(type(aws(cloud_clean))):  # a cloud that declares it cannot stop its machines
        can_stop = False

    server = cloud_clean
    with sky.Pool(provider=aws(server), nodes=1, name="train", keep=True, output=None) as pool:
        [pid] = pool.broadcast(os.getpid)
    ids = record(skyhive_home, "train")["provider_info"]["instances"]
    provider = NoStop(region="us-east-1", instance_type="t3.micro", image=server.image, endpoint=server.endpoint,
                      ssh_cidr="192.0.2.1/32")
    with pytest.raises(ValueError, match=r"pool 'train': provider 'aws' cannot stop its machines .*`skyhive down "
                                         r"train`"):
        stop_cluster("train", provider=provider)
    assert states(server, ids) == ["running"] and alive(pid)


def test_resources_ports_open_on_the_security_group_for_the_client_only_and_go_at_down(
        cloud_clean, skyhive_home, tmp_path):
    from skyhive.runtime.commands.clusters import down_cluster, launch_cluster
    from skyhive.runtime.commands.taskfile import loads

    server = cloud_clean
    task = loads(textwrap.dedent("""\
        name: nb
        resources:
          ports: [8888, "6006-6007"]
        run: echo ok
        """), cwd=str(tmp_path))
    out = io.StringIO()
    assert launch_cluster(task, "train", provider=aws(server), out=out, err=out) == 0, out.getvalue()
    assert "opened 6006-6007/tcp from 192.0.2.1/32, 8888/tcp from 192.0.2.1/32" in out.getvalue()
    client = ec2_client(server.endpoint)
    [group] = client.describe_security_groups(Filters=[{"Name": "tag:skyhive-pool", "Values": ["train"]}])[
        "SecurityGroups"]
    rules = sorted((p.get("FromPort"), p.get("ToPort"), tuple(r["CidrIp"] for r in p.get("IpRanges", ())))
                   for p in group["IpPermissions"] if p.get("IpProtocol") == "tcp")
    assert rules == [(22, 22, ("192.0.2.1/32",)), (6006, 6007, ("192.0.2.1/32",)), (8888, 8888, ("192.0.2.1/32",))]
    down_cluster("train", quiet=True)
    assert count_pool("train", server.endpoint)["groups"] == 0  # the rules went with the pool's group
