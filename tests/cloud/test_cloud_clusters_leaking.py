"""A named cloud pool whose teardown EC2 does not confirm is never forgotten (issue 22, point 1).

`skyhive launch -c`/`Pool(name=, keep=True)` on AWS keeps its instance ids in the record; `skyhive
down NAME` terminates them by id. EC2 on moto_server behind `FakeEC2FaultProxy` (a FAKE front that
answers chosen actions with the error AWS sends): while `TerminateInstances` and `DeleteSecurityGroup`
fail with `InternalError`, `down` exits non-zero naming the instance ids and the cause, the record stays
(marked leaking), `skyhive ls` (without -a) and `skyhive status` show it, and not even `--force`
forgets it; once EC2 answers again, `down` finishes it and moto lists nothing of the pool."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import skyhive as sky
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.runtime.events.log import pool_log_path, read_log
from skyhive.runtime.events.state import fold
from tests.cloud.cloud_fakes import LocalMappedAWS
from tests.infra.ec2_fault_proxy import FakeEC2FaultProxy
from tests.infra.moto_ec2 import count_pool, ec2_client

pytestmark = [pytest.mark.loopback_only]

ROOT = Path(__file__).resolve().parents[2]
NOTHING = {"instances": 0, "groups": 0, "keys": 0}


def skyhive(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "skyhive", *args], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=300)


def states(endpoint: str, ids: list[str]) -> list[str]:
    reservations = ec2_client(endpoint).describe_instances(InstanceIds=ids)["Reservations"]
    return sorted(i["State"]["Name"] for r in reservations for i in r["Instances"])


def listed(pool: str) -> dict | None:
    done = skyhive("ls", "--json")
    assert done.returncode == 0, done.stderr
    return next((e for e in map(json.loads, done.stdout.splitlines()) if e["pool"] == pool), None)


def failing(proxy: FakeEC2FaultProxy, *actions: str) -> None:
    """Every call of `actions` from now on answered with EC2's InternalError."""
    for action in actions:
        proxy.fail(action, "InternalError", at=len(proxy.actions(action)) + 1, times=10**9)


def test_a_named_aws_pool_whose_termination_fails_stays_leaking_until_down_finishes_it(moto_server, skyhive_home):
    with FakeEC2FaultProxy(moto_server.endpoint) as proxy:
        aws = LocalMappedAWS(region="us-east-1", instance_type="t3.micro", image=moto_server.image,
                             endpoint=proxy.endpoint, ssh_cidr="192.0.2.1/32",
                             timeouts=CloudTimeouts(poll=0.05, terminate=10, cleanup=5))
        with sky.Pool(provider=aws, nodes=2, name="train", keep=True, output=None) as pool:
            pool.broadcast(os.getpid)
        record = Path(skyhive_home) / "clusters" / "train" / "record.json"
        ids = json.loads(record.read_text())["provider_info"]["instances"]
        assert len(ids) == 2 and states(moto_server.endpoint, ids) == ["running", "running"]

        terminates = len(proxy.actions("TerminateInstances"))
        failing(proxy, "TerminateInstances", "DeleteSecurityGroup")
        failed = skyhive("down", "train")
        assert failed.returncode != 0, failed.stdout + failed.stderr
        assert "train" in failed.stderr and "InternalError" in failed.stderr, failed.stderr
        for instance in ids:
            assert instance in failed.stderr
        assert len(proxy.actions("TerminateInstances")) > terminates  # tried, and refused
        # nothing recorded as done that EC2 did not confirm: the record stays, marked leaking
        assert record.is_file()
        assert json.loads(record.read_text())["leaking"] == [*ids, "shared resources"]
        assert states(moto_server.endpoint, ids) == ["running", "running"]
        assert count_pool("train", moto_server.endpoint) == {"instances": 2, "groups": 1, "keys": 1}
        entry = listed("train")  # shown without -a
        assert entry is not None and entry["status"] == "leaking" and entry["leaked"] == [*ids, "shared resources"]
        leaking = fold(read_log(pool_log_path("train")))
        assert leaking.status == "leaking"
        # the node rows too: not `terminated` while EC2 has not confirmed it
        assert [n.state for n in leaking.nodes] == ["ready", "ready"], [n.state for n in leaking.nodes]
        assert f"leaking: {ids[0]}, {ids[1]}" in skyhive("ls").stdout
        status = skyhive("status")
        assert status.returncode == 0 and "train" in status.stdout and "LEAKING" in status.stdout, status.stdout

        forced = skyhive("down", "--force", "train")  # not even --force forgets instances that still run
        assert forced.returncode != 0 and "InternalError" in forced.stderr, forced.stdout + forced.stderr
        assert record.is_file() and listed("train")["status"] == "leaking"
        assert states(moto_server.endpoint, ids) == ["running", "running"]

        # the instances terminate, but the security group still cannot be deleted: still leaking
        proxy.faults.clear()
        failing(proxy, "DeleteSecurityGroup")
        half = skyhive("down", "train")
        assert half.returncode != 0 and "InternalError" in half.stderr, half.stdout + half.stderr
        assert set(states(moto_server.endpoint, ids)) <= {"terminated", "shutting-down"}
        assert record.is_file() and json.loads(record.read_text())["leaking"] == ["shared resources"]
        assert "security group and key pair" in half.stderr
        assert listed("train")["status"] == "leaking"
        assert count_pool("train", moto_server.endpoint) == {"instances": 0, "groups": 1, "keys": 1}

        # EC2 answers again: down retries, the provider confirms, and only then is the pool forgotten
        proxy.faults.clear()
        done = skyhive("down", "train")
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"pool train: down (instances {ids[0]}, {ids[1]} terminated)" in done.stderr
        assert count_pool("train", moto_server.endpoint) == NOTHING
        assert not record.exists()
        assert listed("train") is None
        assert "train" not in skyhive("status").stdout
        state = fold(read_log(pool_log_path("train")))
        assert state.status == "stopped" and state.leaked == ()
        assert [n.state for n in state.nodes] == ["terminated", "terminated"]
        again = skyhive("down", "train")  # the record forgotten, its log closed
        assert again.returncode == 0 and "already stopped" in again.stdout, again.stdout + again.stderr
