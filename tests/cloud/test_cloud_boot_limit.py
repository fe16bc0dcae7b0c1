"""A cloud node whose client died between create and bootstrap ends itself by its boot-time limit (issue 38,
point 6): its boot script schedules a shutdown at boot (`boot.BOOT_LIMIT`, no credentials on the node), and
bootstrap lifts it last (`boot.BOOT_LIMIT_OFF`; that bootstrap runs it on real SSH hosts is checked by
tests/cloud/test_cloud_e2e.py's watchdog test).

Neither moto nor FakeGCE runs a boot script: each test checks that the create request carries the limit, runs
the limit's own line under `sh` with a FAKE ``shutdown`` on PATH (what it would schedule, and that a second boot
schedules nothing), then SIMULATES the node's OS shutdown as the cloud applies it — EC2 terminates an instance
whose InstanceInitiatedShutdownBehavior is ``terminate`` (done here by TerminateInstances, EC2's own effect),
GCE stops it (FakeGCE rule G17; here the fallback where ``systemd-run`` fails: by default a GCE node deletes
itself, run for real in tests/cloud/test_cloud_gcp_self_end.py) — and shows what the provider and `down` then
see. Nothing is bootstrapped: `create` alone is what a client killed right after its create had done.
"""

from __future__ import annotations

import base64
import json
import subprocess
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from skyhive.providers.base import ClusterSpec
from skyhive.providers.cloud import gcp_end
from skyhive.providers.cloud.aws import AWS
from skyhive.providers.cloud.azure import Azure
from skyhive.providers.cloud.azure_end import BACKSTOP
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.cloud.boot import BOOT_LIMIT, BOOT_LIMIT_OFF, BOOT_LIMIT_ON, BOOT_MARKER
from skyhive.providers.cloud.gcp import GCP
from tests.cloud.killed_client import kill_after_create
from tests.cloud.fake_arm import FakeARM
from tests.cloud.fake_do import FakeDO
from tests.cloud.fake_http import install_fakes
from tests.infra.moto_ec2 import NOTHING_LEFT, ec2_client, leftovers

pytestmark = [pytest.mark.loopback_only]

ROOT = Path(__file__).resolve().parents[2]
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


def test_a_gcp_node_without_systemd_run_stops_by_its_boot_time_limit_and_down_deletes_it(gce, tmp_path):
    """GCE's limit is a systemd timer that deletes the node (tests/cloud/test_cloud_gcp_self_end.py); on an
    image where ``systemd-run`` fails, the line falls back to a scheduled shutdown: GCE stops the node."""
    provider = GCP(region="us-east1", timeouts=FAST)
    handles = anyio.run(provider.create, ClusterSpec(pool_id="p-ttl-gce", nodes=2))
    assert {h.reach.boot_limit_off for h in handles} == {gcp_end.LIMIT_OFF}
    for body in gce.inserts:
        script = {i["key"]: i["value"] for i in body["metadata"]["items"]}["startup-script"]
        assert script.rstrip().endswith(f"touch {BOOT_MARKER}")  # a later boot finds the marker
    (line,) = [ln for ln in script.splitlines() if "systemd-run" in ln]
    assert line == gcp_end.limit_on(BOOT_LIMIT)
    lines = script.splitlines()
    assert lines.index(line) < lines.index(next(ln for ln in lines if "uv/install.sh" in ln))  # before uv's install
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "systemd-run").write_text("#!/bin/sh\nexit 1\n")  # FAKE: no systemd to run a timer
    (bin_dir / "shutdown").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{calls}"\n')  # FAKE: records
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    done = subprocess.run(["sh", "-c", line.replace(BOOT_MARKER, str(tmp_path / "boot-done"))], capture_output=True,
                          text=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=30)
    assert done.returncode == 0, done.stderr
    assert calls.read_text().splitlines() == [
        f"-h +{BOOT_LIMIT // 60} skyhive: boot-time limit, no client bootstrapped this node"]
    # SIMULATED: the limit is reached on each node, whose OS shuts down; GCE stops it (G17)
    for zone, name in list(gce.instances):
        gce.guest_shutdown(zone, name)
    states = [h.state for h in anyio.run(provider.list_owned, "p-ttl-gce")]
    assert states == ["stopped", "stopped"]  # the machines no longer bill; their disks do, until down
    gone = anyio.run(provider.down, "p-ttl-gce")
    assert sorted(h.node for h in gone) == [0, 1]
    assert gce.instances == {} and gce.firewalls == {}



@pytest.fixture
def azure(monkeypatch):
    """sky.Azure on libcloud's ARM driver, its HTTP answered by `FakeARM` (as in test_cloud_azure.py)."""
    from libcloud.compute.drivers.azure_arm import AzureNodeDriver

    arm = FakeARM("99999999")
    install_fakes(monkeypatch, arm)
    provider = Azure(ssh_cidr="192.0.2.1/32", timeouts=FAST)
    provider._driver = AzureNodeDriver("77777777-7777-7777-7777-777777777777", "99999999",
                                       "55555555-5555-5555-5555-555555555555", "p4ssw0rd", region="eastus")
    return provider, arm


def _schedules(arm: FakeARM) -> dict[str, dict]:
    return {key.rsplit("/", 1)[-1]: body for key, body in arm.resources.items()
            if "/providers/microsoft.devtestlab/schedules/" in key}


def test_an_azure_node_never_bootstrapped_is_deallocated_by_its_auto_shutdown_and_a_bootstrapped_one_is_not(azure):
    provider, arm = azure
    before = time.time()
    handles = anyio.run(provider.create, ClusterSpec(pool_id="p-ttl-az", nodes=2))
    after = time.time()
    schedules = _schedules(arm)
    assert sorted(schedules) == ["shutdown-computevm-node-0", "shutdown-computevm-node-1"]
    times = {s["properties"]["dailyRecurrence"]["time"] for s in schedules.values()}
    limit = BOOT_LIMIT + BACKSTOP  # the backstop of the node's own self-end timer (test_cloud_azure_end.py)
    allowed = {time.strftime("%H%M", time.gmtime(t)) for t in range(int(before + limit), int(after + limit) + 61)}
    assert len(times) == 1 and times <= allowed  # an hour (and the backstop's minutes) from the create, UTC
    (at,) = times
    assert all(s["properties"]["timeZoneId"] == "UTC" for s in schedules.values())
    # node 0's client bootstrapped it (the pool calls this after bootstrap); node 1's client died before
    anyio.run(provider.bootstrapped, handles[0])
    assert sorted(_schedules(arm)) == ["shutdown-computevm-node-1"]
    anyio.run(provider.bootstrapped, handles[0])  # again: nothing left to lift, no error
    assert arm.clock_reaches(at) == ["node-1"]  # the time of day passes: Azure deallocates node 1 only
    states = {h.node: h.state for h in anyio.run(provider.list_owned, "p-ttl-az")}
    assert states == {0: "running", 1: "stopped"}  # deallocated: its compute no longer bills
    anyio.run(provider.down, "p-ttl-az")
    assert arm.resources == {}  # the group, its VMs and the schedule went with it


def test_fake_arm_refuses_an_auto_shutdown_schedule_azure_would_refuse(azure):
    """A10 as the fake encodes it: what skyhive sends passes, each field changed is refused."""
    from skyhive.providers.cloud import azure_shutdown

    provider, arm = azure
    handles = anyio.run(provider.create, ClusterSpec(pool_id="p-ttl-az2", nodes=1))
    del arm.refused[:]  # the VM's role assignment (the fake's caller is a Contributor): not this test's
    vm = provider._path("p-ttl-az2", "/providers/Microsoft.Compute/virtualMachines/node-0")
    good = azure_shutdown.schedule_body(vm, "eastus")
    wrong = {"InvalidScheduleName": (azure_shutdown.schedule_path(vm).replace("shutdown-computevm-", "autostop-"), good),
             "InvalidScheduleTaskType": (azure_shutdown.schedule_path(vm), {**good, "properties": {**good["properties"],
                                                                               "taskType": "LabVmsShutdownTask"}}),
             "InvalidScheduleTime": (azure_shutdown.schedule_path(vm), {**good, "properties": {**good["properties"],
                                                                               "dailyRecurrence": {"time": "25:00"}}}),
             "ResourceNotFound": (azure_shutdown.schedule_path(vm).replace("node-0", "node-9"),
                        {**good, "properties": {**good["properties"], "targetResourceId": vm.replace("node-0", "node-9")}})}
    for code, (path, body) in wrong.items():
        with pytest.raises(Exception, match=code):
            provider.arm(path, azure_shutdown.SCHEDULES_API, "PUT", body)
    assert len(arm.refused) == len(wrong)
    anyio.run(provider.down, "p-ttl-az2")
    assert handles and arm.resources == {}


DO_CLIENT = textwrap.dedent("""
    import os, sys
    import pytest
    import skyhive as sky
    from skyhive.providers.cloud.base import CloudTimeouts
    from skyhive.providers.cloud.digitalocean import DigitalOcean
    from tests.cloud.fake_do import FakeDO
    from tests.cloud.fake_http import install_fakes
    from tests.cloud.killed_client import saving

    state = sys.argv[1]

    Saving = saving(FakeDO, state)  # FAKE whose account outlives this process (it is SIGKILLed)
    fake = Saving()
    install_fakes(pytest.MonkeyPatch(), fake)
    os.environ["DIGITALOCEAN_ACCESS_TOKEN"] = fake.token
    do = DigitalOcean(ssh_cidr="192.0.2.1/32", timeouts=CloudTimeouts(poll=0.01, running=30))
    with sky.Pool(provider=do, nodes=2, name="p-do-killed") as pool:  # never gets past connecting
        print("UNEXPECTED: the pool came up", flush=True)
""")


def test_a_digitalocean_pool_killed_right_after_create_is_seen_and_finished_by_down(monkeypatch, skyhive_home,
                                                                                     tmp_path, capsys):
    """Without a node token (the default; with one, see test_cloud_do_self_end.py) nothing ends a droplet (a
    powered-off droplet bills: there is no boot-time limit to set), so the honest answer is that the leak is
    seen: the pool's record is written before the create, and `skyhive ls` / `skyhive down` find the droplets
    by tag and delete them."""
    from skyhive.cli import main

    state = tmp_path / "do-account.pickle"
    kill_after_create(DO_CLIENT, [str(state)], state, lambda path: len(FakeDO.load(path).droplets) == 2,
                      "its droplets")
    fake = FakeDO.load(state)
    assert len(fake.droplets) == 2 and all("skyhive-pool:p-do-killed" in d["tags"] for d in fake.droplets.values())
    install_fakes(monkeypatch, fake)
    monkeypatch.setenv("DIGITALOCEAN_ACCESS_TOKEN", fake.token)
    capsys.readouterr()
    assert main(["ls", "--json"]) == 0
    (entry,) = [e for e in map(json.loads, capsys.readouterr().out.splitlines()) if e["pool"] == "p-do-killed"]
    assert (entry["provider"], entry["status"]) == ("digitalocean", "client gone")
    assert main(["down", "p-do-killed"]) == 0
    assert fake.droplets == {} and fake.firewalls == {} and fake.keys == {}
    assert not any(t.startswith("skyhive-pool:") for t in fake.tags)


@pytest.mark.parametrize(("cancel_ok", "still_scheduled", "lifted"), [
    (True, False, True), (False, False, True), (False, True, False)])
def test_lifting_fails_only_while_a_shutdown_stays_scheduled(tmp_path, cancel_ok, still_scheduled, lifted):
    """BOOT_LIMIT_OFF under `sh`, with FAKE `sudo` (runs the command) and `shutdown -c` (succeeds or not) on
    PATH, and systemd-logind's schedule file moved into `tmp_path`: a node bootstrapped again (nothing left to
    cancel) is fine; a shutdown that stays scheduled fails bootstrap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sudo").write_text('#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n')
    (bin_dir / "shutdown").write_text(f"#!/bin/sh\nexit {0 if cancel_ok else 1}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    scheduled = tmp_path / "scheduled"
    if still_scheduled:
        scheduled.touch()
    command = BOOT_LIMIT_OFF.replace("/run/systemd/shutdown/scheduled", str(scheduled))
    assert command != BOOT_LIMIT_OFF
    done = subprocess.run(["sh", "-c", command], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=30)
    assert (done.returncode == 0) is lifted
