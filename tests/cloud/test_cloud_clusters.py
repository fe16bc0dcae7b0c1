"""Named pools on AWS (moto_server on 127.0.0.1, in the loopback-only namespace): `Pool(aws, name=,
keep=True)` keeps the instances and their (detached) workers; another process attaches without asking
the cloud (the record holds the instance ids and how the nodes are reached); `down NAME` terminates
every recorded instance; autostop of a cloud pool terminates them too.

The instances are moto's (real EC2 API calls, nothing behind them): their nodes are reached through
the test-only `LocalMappedAWS` (tests/cloud/cloud_fakes.py, FAKE reach), i.e. as local worker processes. So
the SSH side of a kept cloud pool (KeptSSHReach on an instance, the watchdog there) is exercised by
tests/clusters/test_ssh_clusters.py on real sshd hosts, not here. Every test checks with boto3, independently of
skyhive's code, that nothing of the pool is left running in moto.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import skyhive as sky
from skyhive.providers.cloud.base import CloudTimeouts
from tests.cloud.cloud_fakes import LocalMappedAWS
from tests.infra.moto_ec2 import count_pool, ec2_client
from tests.clusters.test_clusters import running_under, sigkill_a_busy_attached_client, wait_for

pytestmark = [pytest.mark.loopback_only]

ROOT = Path(__file__).resolve().parents[2]


def aws(server) -> LocalMappedAWS:
    return LocalMappedAWS(region="us-east-1", instance_type="t3.micro", image=server.image, endpoint=server.endpoint,
                          ssh_cidr="192.0.2.1/32", timeouts=CloudTimeouts(poll=0.05))


def states(server, ids: list[str]) -> list[str]:
    reservations = ec2_client(server.endpoint).describe_instances(InstanceIds=ids)["Reservations"]
    return sorted(i["State"]["Name"] for r in reservations for i in r["Instances"])


def record(home: str, name: str) -> dict:
    return json.loads((Path(home) / "clusters" / name / "record.json").read_text())


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.fixture
def cloud_clean(moto_server, skyhive_home):
    yield moto_server
    from skyhive.runtime.clusters import record as records
    from skyhive.runtime.control.pools import down_cluster

    for name in records.names():
        down_cluster(name, quiet=True)
    deadline = time.monotonic() + 10
    while ours(skyhive_home) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ours(skyhive_home) == [], "processes left running"
    assert records.names() == []
    for name in ("train", "idle"):
        assert count_pool(name, moto_server.endpoint)["instances"] == 0, f"instances of {name} left running"


def ours(home: str) -> list[int]:
    """`running_under(home)` but moto_server (started by the fixture in this environment)."""
    def cmd(pid: int) -> bytes:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                return fh.read()
        except OSError:
            return b""
    return [p for p in running_under(home) if b"moto.server" not in cmd(p)]


def python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_kept_aws_pool_keeps_its_instances_attach_needs_no_cloud_and_down_terminates_them(
        cloud_clean, skyhive_home, tmp_path):
    server = cloud_clean
    with sky.Pool(provider=aws(server), nodes=2, name="train", keep=True, output=None) as pool:
        pids = sorted(pool.broadcast(os.getpid))
    rec = record(skyhive_home, "train")
    ids = rec["provider_info"]["instances"]
    assert rec["provider"] == "aws" and len(ids) == 2 and states(server, ids) == ["running", "running"]
    assert "AWS_SECRET_ACCESS_KEY" not in json.dumps(rec) and "testing" not in json.dumps(rec)
    from skyhive.runtime.control.pools import status_rows

    [row] = status_rows()
    assert row["state"] == "UP" and row["where"] == "aws:" + ",".join(ids)

    # another process without cloud credentials: attach needs only the record
    code = """
        import os, skyhive as sky
        with sky.Pool.attach("train", output=None) as pool:
            print(sorted(pool.broadcast(os.getpid)))
        """
    env_blocked = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    again = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, env=dict(env_blocked, PYTHONPATH=str(ROOT)))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1]) == pids

    # a client SIGKILLed while attached and busy leaves the pool healthy
    sigkill_a_busy_attached_client("train", tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert states(server, ids) == ["running", "running"]
    third = python("""
        import os, skyhive as sky
        with sky.Pool.attach("train", output=None, wait=30) as pool:
            print(sorted(pool.broadcast(os.getpid)))
        """, tmp_path)
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout.strip().splitlines()[-1]) == pids

    down = subprocess.run([sys.executable, "-m", "skyhive", "down", "train"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert down.returncode == 0, down.stderr
    assert set(states(server, ids)) <= {"terminated", "shutting-down"}
    assert count_pool("train", server.endpoint) == {"instances": 0, "groups": 0, "keys": 0}
    assert not any(alive(p) for p in pids)


def shutdown_behaviors(server, ids: list[str]) -> list[str]:
    client = ec2_client(server.endpoint)
    return [client.describe_instance_attribute(InstanceId=i, Attribute="instanceInitiatedShutdownBehavior")[
        "InstanceInitiatedShutdownBehavior"]["Value"] for i in ids]


def test_autodown_of_a_kept_aws_pool_terminates_its_instances(cloud_clean, skyhive_home, monkeypatch):
    """Autostop with --down: the instances terminated (and made to terminate on an OS shutdown, the
    watchdog's way on an instance, when the autostop changes from stop to down)."""
    server = cloud_clean
    from skyhive.runtime.clusters import record as records
    from skyhive.runtime.clusters.named import set_autostop

    # no timing margin: while the test checks the running pool an autostop "minute" is an hour; then
    # autostop=2 is two seconds
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "3600")
    with sky.Pool(provider=aws(server), nodes=2, name="idle", keep=True, autostop=2, output=None) as pool:
        pids = sorted(pool.broadcast(os.getpid))
    ids = record(skyhive_home, "idle")["provider_info"]["instances"]
    assert states(server, ids) == ["running", "running"]
    assert shutdown_behaviors(server, ids) == ["stop", "stop"]  # autostop without --down: they stop
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "1")
    set_autostop(records.load("idle"), 2, True)  # as `launch -c idle -i 2 --down` on the running pool
    assert shutdown_behaviors(server, ids) == ["terminate", "terminate"]
    wait_for(lambda: not (Path(skyhive_home) / "clusters" / "idle").exists(), 90, "autostop to take the pool down")
    assert set(states(server, ids)) <= {"terminated", "shutting-down"}
    assert not any(alive(p) for p in pids)


def test_launch_c_on_aws_runs_the_task_exec_reuses_the_instances_and_status_shows_them(
        cloud_clean, skyhive_home, tmp_path):
    import io

    from skyhive.runtime.control.pools import down_cluster, exec_task, launch_cluster, status_rows
    from skyhive.runtime.commands.taskfile import loads

    server = cloud_clean
    text = ("name: hello\nnum_nodes: 2\nsetup: echo \"setup $SKYPILOT_SETUP_NODE_RANK\"\n"
            "run: echo \"run $SKYPILOT_NODE_RANK of $SKYPILOT_NUM_NODES in $SKYPILOT_CLUSTER_INFO\"\n")
    task = loads(text, cwd=str(tmp_path))
    out = io.StringIO()
    assert launch_cluster(task, "train", provider=aws(server), out=out, err=out) == 0, out.getvalue()
    assert "creating pool train: 2 aws nodes" in out.getvalue()
    assert "run 1 of 2" in out.getvalue() and '"cloud": "aws"' in out.getvalue()
    ids = record(skyhive_home, "train")["provider_info"]["instances"]
    assert states(server, ids) == ["running", "running"]
    assert shutdown_behaviors(server, ids) == ["terminate", "terminate"]  # no autostop: an OS shutdown ends them
    out = io.StringIO()
    assert exec_task(task, "train", out=out, err=out) == 0, out.getvalue()
    assert "setup" not in out.getvalue() and "run 0 of 2" in out.getvalue()
    assert record(skyhive_home, "train")["provider_info"]["instances"] == ids  # the same instances
    [row] = status_rows()
    assert (row["state"], row["where"]) == ("UP", "aws:" + ",".join(ids))
    down_cluster("train", quiet=True)
    assert set(states(server, ids)) <= {"terminated", "shutting-down"}
