"""moto as the EC2 endpoint for tests: in-process (`mock_aws`) and as a `moto_server` on 127.0.0.1.

Both refuse to start outside the loopback-only namespace of `tests.infra.loopback` (mark the test
``@pytest.mark.loopback_only``): moto's instances carry invented public addresses, and nothing in these
tests may ever reach one. Credentials are moto's dummies, set for the test only.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from .loopback import in_loopback_namespace

__all__ = ["MotoEC2", "moto_ec2", "moto_server", "fake_ec2_proxy", "register_image", "ec2_client", "count_pool",
           "leftovers"]

REGION = "us-east-1"


@dataclass
class MotoEC2:
    """An EC2 endpoint made by moto: `endpoint` is None in-process, else ``http://127.0.0.1:PORT``;
    `proxy` the `FakeEC2FaultProxy` in front of it (`endpoint` is then the proxy's, `upstream` moto's)."""

    image: str
    endpoint: str | None = None
    proxy: Any = None
    upstream: str | None = None


def _require_namespace() -> None:
    if not in_loopback_namespace():
        pytest.fail("moto tests must run in the loopback-only namespace: mark them @pytest.mark.loopback_only")


def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": REGION, "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def ec2_client(endpoint: str | None = None, region: str = REGION):  # type: ignore[no-untyped-def]
    """A boto3 EC2 client on the same moto (to check what exists independently of skyhive's code)."""
    import boto3

    return boto3.client("ec2", region_name=region, endpoint_url=endpoint)


def register_image(endpoint: str | None = None, region: str = REGION) -> str:
    """An AMI id that moto knows in `region` (default AMIs are not loaded: it saves seconds per test)."""
    client = ec2_client(endpoint, region)
    return client.register_image(Name="skyhive-test-image", RootDeviceName="/dev/sda1", Architecture="x86_64",
                                 VirtualizationType="hvm")["ImageId"]


def count_pool(pool_id: str, endpoint: str | None = None, region: str = REGION) -> dict[str, int]:
    """What moto holds for a pool, listed with boto3: instances not terminated, groups and key pairs."""
    client = ec2_client(endpoint, region)
    tag = [{"Name": "tag:skyhive-pool", "Values": [pool_id]}]
    live = [i for r in client.describe_instances(Filters=tag)["Reservations"] for i in r["Instances"]
            if i["State"]["Name"] not in ("terminated", "shutting-down")]
    groups = client.describe_security_groups(Filters=tag)["SecurityGroups"]
    keys = client.describe_key_pairs(Filters=tag)["KeyPairs"]
    named_keys = [k for k in client.describe_key_pairs()["KeyPairs"] if k["KeyName"] == f"skyhive-{pool_id}"]
    return {"instances": len(live), "groups": len(groups), "keys": max(len(keys), len(named_keys))}


@pytest.fixture
def moto_ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoEC2]:
    """In-process moto (every EC2 call of this process is answered by it) with one registered image."""
    _require_namespace()
    _env(monkeypatch)
    from moto import mock_aws

    with mock_aws():
        yield MotoEC2(image=register_image())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def moto_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoEC2]:
    """`moto_server` on 127.0.0.1 (a process of its own: other processes of the test share its state)."""
    _require_namespace()
    _env(monkeypatch)
    port = _free_port()
    # its log (a line per request) goes to a file: a pipe nobody reads fills and stops the server, and a
    # read of a pipe whose writer lives on never returns
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    err = log.read().decode(errors="replace")
                    pytest.fail(f"moto_server did not start on 127.0.0.1:{port}: {err[-2000:]}")
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        yield MotoEC2(image=register_image(endpoint), endpoint=endpoint)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def leftovers(endpoint: str | None = None, region: str = REGION, proxy: Any = None) -> dict[str, int]:
    """Everything skyhive may make, in the whole account (not one pool's tag): live instances, security
    groups other than the VPCs' default ones, key pairs, Elastic IPs, and (through the fake proxy) placement
    groups."""
    client = ec2_client(endpoint, region)
    live = [i for r in client.describe_instances()["Reservations"] for i in r["Instances"]
            if i["State"]["Name"] not in ("terminated", "shutting-down")]
    groups = [g for g in client.describe_security_groups()["SecurityGroups"] if g["GroupName"] != "default"]
    keys = client.describe_key_pairs()["KeyPairs"]
    placement = len(proxy.placement_groups) if proxy is not None else 0
    addresses = client.describe_addresses()["Addresses"]
    return {"instances": len(live), "groups": len(groups), "keys": len(keys), "placement_groups": placement,
            "addresses": len(addresses)}


NOTHING_LEFT = {"instances": 0, "groups": 0, "keys": 0, "placement_groups": 0, "addresses": 0}


@pytest.fixture
def fake_ec2_proxy(moto_server: MotoEC2) -> Iterator[MotoEC2]:
    """moto_server behind `FakeEC2FaultProxy` (real EC2 error bodies injected on demand, placement groups):
    `endpoint` is the proxy's; check with `upstream` (moto itself)."""
    from .ec2_fault_proxy import FakeEC2FaultProxy

    assert moto_server.endpoint is not None
    with FakeEC2FaultProxy(moto_server.endpoint) as proxy:
        yield MotoEC2(image=moto_server.image, endpoint=proxy.endpoint, proxy=proxy, upstream=moto_server.endpoint)
