"""The boot-time limit is each cloud provider's `boot_limit` option (seconds; None or 0: off, with a warning),
validated with an error naming the value, shown in the plan and the dry run, and the chosen value is what
reaches the node: AWS's user data (moto), GCE's startup-script (FakeGCE), Azure's auto-shutdown schedule
(FakeARM, rule A10). A bootstrap that builds a big environment for longer than an hour needs a longer limit.

As in test_cloud_boot_limit.py, moto and FakeGCE run no boot script: the limit's line is run under `sh` with a
FAKE ``shutdown`` on PATH (what it would schedule).
"""

from __future__ import annotations

import base64
import logging
import math
import subprocess
import time

import anyio
import pytest

from skyhive.cli import main
from skyhive.providers.base import ClusterSpec
from skyhive.providers.cloud import gcp_end
from skyhive.providers.cloud.aws import AWS
from skyhive.providers.cloud.azure import Azure
from skyhive.providers.cloud.azure_end import BACKSTOP
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.cloud.boot import BOOT_MARKER
from skyhive.providers.cloud.gcp import GCP
from skyhive.runtime.commands.plan import _describe
from skyhive.runtime.commands.taskfile import loads
from tests.cloud.fake_arm import FakeARM
from tests.cloud.fake_gce import FakeGCE
from tests.cloud.fake_http import install_fakes
from tests.infra.moto_ec2 import NOTHING_LEFT, ec2_client, leftovers

pytestmark = [pytest.mark.loopback_only]

FAST = CloudTimeouts(poll=0.01, running=30, terminate=30, cleanup=30, visibility_grace=1)
CLOUDS = {"AWS": AWS, "GCP": GCP, "Azure": Azure}


def _scheduled(script: str, tmp_path) -> list[str]:
    """The script's limit line (none: []), run by `sh` with a FAKE `shutdown` (records its arguments) first on
    PATH, at a first boot (the marker moved into `tmp_path`, absent): what it asked `shutdown` to do."""
    lines = [ln for ln in script.splitlines() if "shutdown" in ln]
    if not lines:
        return []
    (line,) = lines
    assert script.splitlines()[1] == line  # first, before anything that may fail or hang
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    calls = tmp_path / "calls"
    fake = bin_dir / "shutdown"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{calls}"\n')
    fake.chmod(0o755)
    done = subprocess.run(["sh", "-c", line.replace(BOOT_MARKER, str(tmp_path / "boot-done"))], capture_output=True,
                          text=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=30)
    assert done.returncode == 0, done.stderr
    return calls.read_text().splitlines() if calls.exists() else []


def _warned_off(caplog, pool_id: str) -> bool:
    return any(r.levelno == logging.WARNING and "boot_limit is off" in r.getMessage() and pool_id in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("cloud", sorted(CLOUDS))
@pytest.mark.parametrize("value", [-1, 30, 599, 86401, 1e9, float("nan"), float("inf"), "2h", True, [3600]])
def test_a_boot_limit_outside_what_works_is_refused_naming_the_value(cloud, value):
    with pytest.raises(ValueError) as raised:
        CLOUDS[cloud](boot_limit=value)
    message = str(raised.value)
    assert f"{cloud}(boot_limit=...)" in message and repr(value) in message


@pytest.mark.parametrize("cloud", sorted(CLOUDS))
def test_the_boot_limit_is_an_option_recorded_with_the_pool_and_shown_in_the_plan(cloud, caplog):
    cls = CLOUDS[cloud]
    default, longer, off, zero = cls(), cls(boot_limit=3 * 3600 + 1), cls(boot_limit=None), cls(boot_limit=0)
    assert (default.boot_limit, longer.boot_limit, off.boot_limit, zero.boot_limit) == (3600, 10801, None, None)
    for provider in (default, longer, off):  # `skyhive down` rebuilds the provider from its describe()
        assert cls.from_description(provider.describe()).boot_limit == provider.boot_limit
    spec = ClusterSpec(pool_id="p-plan", nodes=2)
    assert default.plan(spec)["boot_limit"].startswith("60 min after boot")
    assert longer.plan(spec)["boot_limit"].startswith("181 min after boot")  # whole minutes, rounded up
    assert not _warned_off(caplog, "p-plan")
    assert off.plan(spec)["boot_limit"].startswith("off (a client killed before bootstrap leaves its nodes running")
    assert _warned_off(caplog, "p-plan")  # said when the pool is planned
    task = loads("run: echo hi\n", source="t.yaml")
    lines = _describe(task, longer, longer.plan(spec))
    assert "  boot-time limit: 181 min after boot (a node no client bootstrapped by then shuts itself down)" in lines


def test_the_dry_run_shows_the_boot_time_limit(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.yaml").write_text("run: echo hi\n")
    assert main(["launch", "t.yaml", "--provider", "aws", "--instance-type", "t3.micro", "--dryrun"]) == 0
    out = capsys.readouterr().out
    assert "  boot-time limit: 60 min after boot (a node no client bootstrapped by then shuts itself down)" in out
    assert "nothing was created" in out


def _aws_user_data(instance_id: str) -> str:
    data = ec2_client().describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    return base64.b64decode(data["UserData"]["Value"]).decode()


@pytest.mark.anyio
async def test_an_aws_boot_limit_reaches_each_node_user_data_and_none_turns_it_off(moto_ec2, tmp_path, caplog):
    common = dict(region="us-east-1", instance_type="t3.micro", image=moto_ec2.image, ssh_cidr="192.0.2.1/32",
                  endpoint=moto_ec2.endpoint, timeouts=FAST)
    longer, off = AWS(boot_limit=2 * 3600, **common), AWS(boot_limit=None, **common)
    try:
        handles = await longer.create(ClusterSpec(pool_id="p-bl-aws", nodes=2))
        scripts = {_aws_user_data(h.provider_id) for h in handles}
        assert len(scripts) == 1
        (script,) = scripts
        assert _scheduled(script, tmp_path / "longer") == [
            "-h +120 skyhive: boot-time limit, no client bootstrapped this node"]
        assert not _warned_off(caplog, "p-bl-aws")
        (bare,) = await off.create(ClusterSpec(pool_id="p-bl-aws-off", nodes=1))
        script = _aws_user_data(bare.provider_id)
        assert "uv/install.sh" in script and _scheduled(script, tmp_path / "off") == []  # nothing scheduled
        assert _warned_off(caplog, "p-bl-aws-off")
    finally:
        await longer.down("p-bl-aws")
        await off.down("p-bl-aws-off")
    assert leftovers() == NOTHING_LEFT


def _startup_scripts(gce: FakeGCE) -> set[str]:
    return {{i["key"]: i["value"] for i in body["metadata"]["items"]}["startup-script"] for body in gce.inserts}


def test_a_gcp_boot_limit_reaches_the_startup_script_and_none_turns_it_off(gce, tmp_path, caplog):
    """GCE's limit is a systemd timer that runs the node's self-end script (`gcp_end.limit_on`; what it does is
    tests/cloud/test_cloud_gcp_self_end.py's): `boot_limit` in seconds reaches it; none arms nothing."""
    longer = GCP(region="us-east1", timeouts=FAST, boot_limit=90 * 60 + 30)
    anyio.run(longer.create, ClusterSpec(pool_id="p-bl-gce", nodes=2))
    (script,) = _startup_scripts(gce)
    armed = [ln for ln in script.splitlines() if "systemd-run" in ln]
    assert armed == [gcp_end.limit_on(90 * 60 + 30)] and "--on-active=5430s" in armed[0]
    assert "shutdown -h +91 " in armed[0]  # where systemd-run fails: a scheduled shutdown, in whole minutes
    anyio.run(longer.down, "p-bl-gce")
    assert gce.instances == {}
    gce.inserts.clear()
    off = GCP(region="us-east1", timeouts=FAST, boot_limit=0)
    anyio.run(off.create, ClusterSpec(pool_id="p-bl-gce-off", nodes=1))
    (script,) = _startup_scripts(gce)
    assert script.rstrip().endswith(f"touch {BOOT_MARKER}")
    assert "systemd-run" not in script and "shutdown -h +" not in script  # nothing armed
    assert _warned_off(caplog, "p-bl-gce-off")
    anyio.run(off.down, "p-bl-gce-off")
    assert gce.instances == {} and gce.firewalls == {}


def _azure(monkeypatch, arm: FakeARM, boot_limit) -> Azure:  # type: ignore[no-untyped-def]
    from libcloud.compute.drivers.azure_arm import AzureNodeDriver

    provider = Azure(ssh_cidr="192.0.2.1/32", timeouts=FAST, boot_limit=boot_limit)
    provider._driver = AzureNodeDriver("77777777-7777-7777-7777-777777777777", "99999999",
                                       "55555555-5555-5555-5555-555555555555", "p4ssw0rd", region="eastus")
    return provider


def _schedules(arm: FakeARM) -> dict[str, dict]:
    return {key.rsplit("/", 1)[-1]: body for key, body in arm.resources.items()
            if "/providers/microsoft.devtestlab/schedules/" in key}


def test_an_azure_boot_limit_sets_the_auto_shutdown_time_and_none_puts_no_schedule(monkeypatch, caplog):
    arm = FakeARM("99999999")
    install_fakes(monkeypatch, arm)
    limit = 5 * 3600
    longer = _azure(monkeypatch, arm, limit)
    before = time.time()
    anyio.run(longer.create, ClusterSpec(pool_id="p-bl-az", nodes=1))
    after = time.time()
    (schedule,) = _schedules(arm).values()
    at = schedule["properties"]["dailyRecurrence"]["time"]
    allowed = {time.strftime("%H%M", time.gmtime(math.ceil(t / 60) * 60))
               for t in range(int(before) + limit + BACKSTOP, int(after) + limit + BACKSTOP + 2)}
    assert at in allowed  # five hours (and the self-end timer's backstop) from the create (UTC), not the default hour
    assert arm.clock_reaches(at) == ["node-0"]  # reached: Azure deallocates the VM no client bootstrapped
    anyio.run(longer.down, "p-bl-az")
    assert arm.resources == {}

    off = _azure(monkeypatch, arm, None)
    (handle,) = anyio.run(off.create, ClusterSpec(pool_id="p-bl-az-off", nodes=1))
    assert _schedules(arm) == {} and _warned_off(caplog, "p-bl-az-off")
    anyio.run(off.bootstrapped, handle)  # nothing to lift, no error
    assert {h.state for h in anyio.run(off.list_owned, "p-bl-az-off")} == {"running"}
    anyio.run(off.down, "p-bl-az-off")
    assert arm.resources == {}
