"""A cloud node whose client died between create and bootstrap ends itself by its boot-time limit (issue 38,
point 6): its boot script schedules a shutdown at boot (`boot.BOOT_LIMIT`, no credentials on the node), and
bootstrap lifts it last (`boot.BOOT_LIMIT_OFF`; that bootstrap runs it on real SSH hosts is checked by
tests/cloud/test_cloud_e2e.py's watchdog test).

Neither moto nor FakeGCE runs a boot script: each test checks that the create request carries the limit, runs
the limit's own line under `sh` with a FAKE ``shutdown`` on PATH (what it would schedule, and that a second boot
schedules nothing), then SIMULATES the node's OS shutdown as the cloud applies it — EC2 terminates an instance
whose InstanceInitiatedShutdownBehavior is ``terminate`` (done here by TerminateInstances, EC2's own effect),
GCE stops it (FakeGCE rule G17) — and shows what the provider and `down` then see. Nothing is bootstrapped:
`create` alone is what a client killed right after its create had done.
"""

from __future__ import annotations

import base64
import subprocess

import anyio
import pytest

from skyhive.providers.base import ClusterSpec
from skyhive.providers.cloud.aws import AWS
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.cloud.boot import BOOT_LIMIT, BOOT_LIMIT_OFF, BOOT_LIMIT_ON, BOOT_MARKER
from skyhive.providers.cloud.gcp import GCP
from tests.cloud.fake_gce import FakeGCE
from tests.cloud.fake_http import install_fakes
from tests.infra.moto_ec2 import NOTHING_LEFT, ec2_client, leftovers

pytestmark = [pytest.mark.loopback_only]

FAST = CloudTimeouts(poll=0.01, running=30, terminate=30, cleanup=30, visibility_grace=1)


def _scheduled(script: str, tmp_path, *, booted_before: bool) -> list[str]:
    """The boot script's limit line, run by `sh` with a FAKE `shutdown` (records its arguments) first on PATH
    and the first-boot marker moved into `tmp_path`: what it asked `shutdown` to do."""
    (line,) = [ln for ln in script.splitlines() if "shutdown" in ln]
    assert line == BOOT_LIMIT_ON
    tmp_path.mkdir(parents=True, exist_ok=True)
    marker = tmp_path / "boot-done"
    if booted_before:
        marker.touch()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "calls"
    fake = bin_dir / "shutdown"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{calls}"\n')
    fake.chmod(0o755)
    done = subprocess.run(["sh", "-c", line.replace(BOOT_MARKER, str(marker))], capture_output=True, text=True,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=30)
    assert done.returncode == 0, done.stderr
    return calls.read_text().splitlines() if calls.exists() else []


def _limit_comes_first(script: str) -> None:
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh" and lines[1] == BOOT_LIMIT_ON  # before anything that may fail or hang


@pytest.mark.anyio
async def test_an_aws_node_never_bootstrapped_terminates_by_its_boot_time_limit(moto_ec2, tmp_path):
    provider = AWS(region="us-east-1", instance_type="t3.micro", image=moto_ec2.image, ssh_cidr="192.0.2.1/32",
                   endpoint=moto_ec2.endpoint, timeouts=FAST)
    handles = await provider.create(ClusterSpec(pool_id="p-ttl-aws", nodes=2))
    try:
        assert {h.reach.boot_limit_off for h in handles} == {BOOT_LIMIT_OFF}  # bootstrap would lift it
        client = ec2_client()
        for handle in handles:
            data = client.describe_instance_attribute(InstanceId=handle.provider_id, Attribute="userData")
            script = base64.b64decode(data["UserData"]["Value"]).decode()
            _limit_comes_first(script)
            behavior = client.describe_instance_attribute(InstanceId=handle.provider_id,
                                                          Attribute="instanceInitiatedShutdownBehavior")
            assert behavior["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
        assert _scheduled(script, tmp_path, booted_before=False) == [
            f"-h +{BOOT_LIMIT // 60} skyhive: boot-time limit, no client bootstrapped this node"]
        # SIMULATED: the limit is reached on each node; EC2 applies the shutdown behaviour read above
        client.terminate_instances(InstanceIds=[h.provider_id for h in handles])
        with anyio.fail_after(60):
            while await provider.list_owned("p-ttl-aws"):
                await anyio.sleep(0.05)
    finally:
        await provider.down("p-ttl-aws")  # the pool's group and key pair (and any instance a failure left)
    assert leftovers() == NOTHING_LEFT


@pytest.fixture
def gce(monkeypatch, tmp_path):
    fake = FakeGCE(project="proj-1")
    install_fakes(monkeypatch, fake)
    key = tmp_path / "sa.json"
    fake.service_account_file(key)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    for name in ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    return fake


def test_a_gcp_node_never_bootstrapped_stops_by_its_boot_time_limit_and_down_deletes_it(gce, tmp_path):
    provider = GCP(region="us-east1", timeouts=FAST)
    handles = anyio.run(provider.create, ClusterSpec(pool_id="p-ttl-gce", nodes=2))
    assert {h.reach.boot_limit_off for h in handles} == {BOOT_LIMIT_OFF}
    for body in gce.inserts:
        script = {i["key"]: i["value"] for i in body["metadata"]["items"]}["startup-script"]
        _limit_comes_first(script)
        assert script.rstrip().endswith(f"touch {BOOT_MARKER}")  # a later boot finds the marker
    assert _scheduled(script, tmp_path / "first", booted_before=False) == [
        f"-h +{BOOT_LIMIT // 60} skyhive: boot-time limit, no client bootstrapped this node"]
    assert _scheduled(script, tmp_path / "again", booted_before=True) == []  # GCE reruns it at every boot
    # SIMULATED: the limit is reached on each node, whose OS shuts down; GCE stops it (G17)
    for zone, name in list(gce.instances):
        gce.guest_shutdown(zone, name)
    states = [h.state for h in anyio.run(provider.list_owned, "p-ttl-gce")]
    assert states == ["stopped", "stopped"]  # the machines no longer bill; their disks do, until down
    gone = anyio.run(provider.down, "p-ttl-gce")
    assert sorted(h.node for h in gone) == [0, 1]
    assert gce.instances == {} and gce.firewalls == {}

