"""`skyhive stop`/`start` and `resources.ports` of a named pool on AWS (issue 29), against moto_server in
the loopback-only namespace, the instances reached as local workers through the test-only
`LocalMappedAWS` (tests/cloud/cloud_fakes.py, FAKE reach: moto's instances have nothing behind them). What
the cloud holds is checked with boto3, independently of skyhive's code; the `cloud_clean` fixture
(tests/cloud/test_cloud_clusters.py) takes every pool down and checks that no instance is left.
"""

from __future__ import annotations

import io
import os
import textwrap

import pytest

import skyhive as sky
from tests.infra.moto_ec2 import count_pool, ec2_client
from tests.cloud.test_cloud_clusters import alive, aws, cloud_clean, record, states  # noqa: F401 - cloud_clean: a fixture

pytestmark = [pytest.mark.loopback_only]


def test_stop_keeps_the_instances_start_runs_the_same_ones_and_down_after_stop_leaves_nothing(
        cloud_clean, skyhive_home, tmp_path):
    from skyhive.runtime.control.pools import down_cluster, status_rows
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
    from skyhive.runtime.control.pools import down_cluster, launch_cluster
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


def _port_rules(server, name: str = "train") -> list[tuple]:
    client = ec2_client(server.endpoint)
    groups = client.describe_security_groups(Filters=[{"Name": "tag:skyhive-pool", "Values": [name]}])["SecurityGroups"]
    return sorted((p.get("FromPort"), p.get("ToPort"), tuple(r["CidrIp"] for r in p.get("IpRanges", ())))
                  for g in groups for p in g["IpPermissions"] if p.get("IpProtocol") == "tcp")


def test_a_kept_pool_opens_its_ports_as_a_named_one_keeps_them_across_stop_and_start_and_closes_them_at_down(
        cloud_clean, skyhive_home, caplog):
    """`Pool(keep=True, ports=...)`: the ports opened on the pool's security group for the client only (as
    `launch -c` does with `resources.ports`), listed as its endpoints, opened again without a duplicate
    at `skyhive start`, gone with the group when the library takes the pool down."""
    from skyhive.runtime.commands.pause import start_cluster, stop_cluster
    from skyhive.runtime.clusters.ports import endpoints

    server = cloud_clean
    with pytest.raises(ValueError, match=r"Pool\(ports=\.\.\.\) applies to a kept pool \(keep=True and a name\)"):
        sky.Pool(provider=aws(server), nodes=1, ports=8888)
    with pytest.raises(ValueError, match=r"Pool\(ports='http'\): expected a port"):
        sky.Pool(provider=aws(server), nodes=1, name="train", keep=True, ports="http")
    assert count_pool("train", server.endpoint) == {"instances": 0, "groups": 0, "keys": 0}  # refused before
    with sky.Pool(provider=aws(server), nodes=1, name="train", keep=True, ports=[8888, "6006-6007"],
                  output=None) as pool:
        assert pool.run(sum, [1, 2]) == 3
    want = [(22, 22, ("192.0.2.1/32",)), (6006, 6007, ("192.0.2.1/32",)), (8888, 8888, ("192.0.2.1/32",))]
    assert _port_rules(server) == want
    assert [e["port"] for e in endpoints("train")] == [6006, 6007, 8888]
    err = io.StringIO()
    stop_cluster("train", provider=aws(server), err=err)
    with caplog.at_level("INFO", logger="skyhive.providers.aws"):
        start_cluster("train", provider=aws(server), err=err)  # the pool is created over the same instances anew
    assert _port_rules(server) == want  # opened again: each rule once (EC2 refused the duplicates)
    assert "8888-8888/tcp from 192.0.2.1/32 was open already" in caplog.text
    with sky.Pool.attach("train", keep=False, output=None) as pool:  # the library's down
        assert pool.run(sum, [3, 4]) == 7
    assert count_pool("train", server.endpoint) == {"instances": 0, "groups": 0, "keys": 0}


def test_autostop_of_a_kept_aws_pool_stops_its_instances_and_start_runs_them_again(
        cloud_clean, skyhive_home, monkeypatch):
    """Autostop without --down stops a cloud pool (SkyPilot's `-i`): its instances are made to stop on an
    OS shutdown (what the watchdog on an instance, which has no cloud credentials, does), and a watchdog
    on this machine stops them through the API; either way they are `stopped`, not terminated, `status`
    says STOPPED (autostop), `start` runs the same instances, `down` terminates them.

    moto records the shutdown behaviour (RunInstances, DescribeInstanceAttribute) and models the state
    changes of StopInstances/StartInstances/TerminateInstances; it has no operating system, so an OS
    shutdown never happens there: its outcome under `stop` (the instance `stopped`) is made here with
    StopInstances, after the workers are killed as the machine's halt would."""
    import signal

    from skyhive.runtime.clusters import record as records
    from skyhive.runtime.clusters.named import set_autostop
    from skyhive.runtime.control.pools import down_cluster, status_rows
    from skyhive.runtime.commands.pause import start_cluster
    from tests.cloud.test_cloud_clusters import shutdown_behaviors
    from tests.clusters.test_clusters import wait_for

    server = cloud_clean
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "3600")  # no timing margin: an hour until the test is ready
    with sky.Pool(provider=aws(server), nodes=2, name="idle", keep=True, autostop=2, output=None) as pool:
        pids = sorted(pool.broadcast(os.getpid))
    ids = record(skyhive_home, "idle")["provider_info"]["instances"]
    assert shutdown_behaviors(server, ids) == ["stop", "stop"]
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "1")
    set_autostop(records.load("idle"), 2, False)
    wait_for(lambda: record(skyhive_home, "idle").get("stopped") == "autostop", 90, "autostop to stop the pool")
    assert states(server, ids) == ["stopped", "stopped"]  # not terminated: the disks are kept
    assert not any(alive(p) for p in pids)
    assert [r["state"] for r in status_rows()] == ["STOPPED (autostop)"]
    with pytest.raises(sky.PoolGone, match=r"stopped by autostop .*`skyhive start idle`"):
        sky.Pool.attach("idle", output=None)
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "3600")
    err = io.StringIO()
    start_cluster("idle", provider=aws(server), err=err)
    assert states(server, ids) == ["running", "running"]
    assert record(skyhive_home, "idle")["provider_info"]["instances"] == ids  # the same instances
    with sky.Pool.attach("idle", output=None) as pool:
        again = sorted(pool.broadcast(os.getpid))
    assert len(again) == 2 and not set(again) & set(pids)
    # the watchdog on an instance shuts its OS down: the machine halts (its processes end) and EC2 stops
    # it (shutdown behaviour `stop`); the client learns it from the cloud
    for pid in again:
        os.kill(pid, signal.SIGKILL)
    ec2_client(server.endpoint).stop_instances(InstanceIds=ids)
    wait_for(lambda: states(server, ids) == ["stopped", "stopped"], 30, "the instances to stop")
    assert [r["state"] for r in status_rows()] == ["STOPPED (autostop)"]
    down_cluster("idle", quiet=True)
    assert states(server, ids) == ["terminated", "terminated"]
    assert count_pool("idle", server.endpoint) == {"instances": 0, "groups": 0, "keys": 0}
