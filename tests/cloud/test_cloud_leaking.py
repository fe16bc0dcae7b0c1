"""A teardown the provider does not confirm is never recorded as done (issue 22, point 1).

EC2 on moto_server behind `FakeEC2FaultProxy` (a FAKE front that answers chosen actions with the
error AWS sends): while `TerminateInstances` and `DeleteSecurityGroup` keep failing with
`InternalError`, closing the pool leaves its nodes `terminating` and the pool `leaking` — the caller
gets `TeardownIncomplete` naming the instance ids, `skyhive ls` (without -a) shows the pool, `skyhive
down` fails and leaves it so; once EC2 answers again, `skyhive down` finishes it and nothing is left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import skyhive as sky
from skyhive.providers.base import RetryPolicy
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
    return subprocess.run([sys.executable, "-m", "skyhive", *args], cwd=ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)


def listed(pool: str, *flags: str) -> dict | None:
    done = skyhive("ls", "--json", *flags)
    assert done.returncode == 0, done.stderr
    return next((e for e in map(json.loads, done.stdout.splitlines()) if e["pool"] == pool), None)


def instance_ids(pool: str, endpoint: str) -> list[str]:
    tag = [{"Name": "tag:skyhive-pool", "Values": [pool]}]
    return sorted(i["InstanceId"] for r in ec2_client(endpoint).describe_instances(Filters=tag)["Reservations"]
                  for i in r["Instances"] if i["State"]["Name"] == "running")


def test_a_failed_teardown_leaves_the_pool_leaking_until_down_finishes_it(moto_server, skyhive_home):
    with FakeEC2FaultProxy(moto_server.endpoint) as proxy:
        aws = LocalMappedAWS(region="us-east-1", instance_type="t3.micro", image=moto_server.image,
                             endpoint=proxy.endpoint, ssh_cidr="192.0.2.1/32",
                             timeouts=CloudTimeouts(poll=0.05, terminate=10, cleanup=5))
        aws.retry = RetryPolicy(attempts=2, initial_delay=0.01, max_delay=0.02)
        with pytest.raises(sky.TeardownIncomplete) as err:
            with sky.Pool(provider=aws, nodes=2, name="p-leak", output=None) as pool:
                assert pool.broadcast(os.getpid) is not None
                ids = instance_ids("p-leak", moto_server.endpoint)
                assert len(ids) == 2
                before = {a: len(proxy.actions(a)) for a in ("TerminateInstances", "DeleteSecurityGroup")}
                for action in before:  # every call from now on answered with EC2's InternalError
                    proxy.fail(action, "InternalError", at=before[action] + 1, times=10**9)
                raise RuntimeError("the user's own error")
        refused = {a: len(proxy.actions(a)) - n for a, n in before.items()}
        # each node's terminate, then the cleanup's terminate-by-tag, all refused (the group's delete is not
        # even tried while tagged instances still run)
        assert refused["TerminateInstances"] >= 3
        # the caller is told what may still run, with the ids, and the error the block raised
        message = str(err.value)
        assert sorted(err.value.leaked[:-1]) == ids  # every instance, in node order
        ids = list(err.value.leaked[:-1])
        assert err.value.pool_id == "p-leak" and err.value.leaked == (*ids, "shared resources")
        for instance in ids:
            assert instance in message
        assert "skyhive down p-leak" in message and "InternalError" in message
        assert "The pool closed because of: RuntimeError: the user's own error" in message
        assert isinstance(err.value.__cause__, RuntimeError)
        # nothing was recorded as done that EC2 did not confirm
        assert count_pool("p-leak", moto_server.endpoint) == {"instances": 2, "groups": 1, "keys": 1}
        state = fold(read_log(pool_log_path("p-leak")))
        assert state.status == "leaking" and state.leaked == (*ids, "shared resources")
        assert [n.state for n in state.nodes] == ["terminating", "terminating"]
        assert all("InternalError" in n.detail for n in state.nodes)

        entry = listed("p-leak")  # shown without -a
        assert entry is not None and entry["status"] == "leaking" and entry["leaked"] == [*ids, "shared resources"]
        table = skyhive("ls").stdout
        assert "p-leak" in table and f"leaking: {ids[0]}, {ids[1]}" in table

        # down while EC2 still fails: an error, and the pool stays leaking (not "already stopped")
        failed = skyhive("down", "p-leak")
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert "p-leak" in failed.stderr and "InternalError" in failed.stderr
        assert count_pool("p-leak", moto_server.endpoint)["instances"] == 2
        assert listed("p-leak")["status"] == "leaking"
        forced = skyhive("down", "--force", "p-leak")  # not even --force records a known leak done
        assert forced.returncode == 1 and "InternalError" in forced.stderr, forced.stdout + forced.stderr
        assert listed("p-leak")["status"] == "leaking"

        # EC2 answers again: down retries, the provider confirms, and only then is the pool stopped
        proxy.faults.clear()
        done = skyhive("down", "p-leak")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "2 provider nodes destroyed" in done.stdout
        assert count_pool("p-leak", moto_server.endpoint) == NOTHING
        assert listed("p-leak") is None
        state = fold(read_log(pool_log_path("p-leak")))
        assert state.status == "stopped" and state.leaked == ()
        assert [n.state for n in state.nodes] == ["terminated", "terminated"]
        again = skyhive("down", "p-leak")
        assert again.returncode == 0 and "already stopped" in again.stdout


def test_a_teardown_that_succeeds_is_not_leaking(moto_server, skyhive_home):
    with FakeEC2FaultProxy(moto_server.endpoint) as proxy:
        aws = LocalMappedAWS(region="us-east-1", instance_type="t3.micro", image=moto_server.image,
                             endpoint=proxy.endpoint, ssh_cidr="192.0.2.1/32", timeouts=CloudTimeouts(poll=0.05))
        with sky.Pool(provider=aws, nodes=1, name="p-fine", output=None) as pool:
            pool.run(os.getpid)
    state = fold(read_log(pool_log_path("p-fine")))
    assert state.status == "stopped" and state.leaked == () and [n.state for n in state.nodes] == ["terminated"]
    assert count_pool("p-fine", moto_server.endpoint) == NOTHING
    assert listed("p-fine") is None
