"""An Azure VM ends itself through ARM with its own managed identity (issue 38, point 6;
`providers/cloud/azure_end.py`): its idle watchdog and its boot-time limit run the node's self-end script.

The script is run for real (``sh``, curl) against FakeARM served on loopback (`fake_serve.py`): its instance
metadata service as the VM sees it (rule A13) and ARM (A14), through the script's two base-URL variables;
the boot script's own lines (writing the script, arming the timer) run under ``sh`` with the script's path
and the first-boot marker moved into the test's directory and a FAKE ``systemd-run`` on PATH that records
what it would arm — the fake clock: the test then runs what the timer would run. FakeARM's caller is a
Contributor unless a test says otherwise (A12).
"""

from __future__ import annotations

import base64
import json
import logging
import stat
import subprocess
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from skyhive.providers.base import ClusterSpec
from skyhive.providers.cloud import azure_end
from skyhive.providers.cloud.azure import Azure
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.cloud.boot import BOOT_LIMIT, BOOT_MARKER
from tests.cloud.killed_client import kill_after_create
from tests.cloud.fake_arm import FakeARM
from tests.cloud.fake_http import install_fakes
from tests.cloud.fake_serve import serve

pytestmark = [pytest.mark.loopback_only]

ROOT = Path(__file__).resolve().parents[2]
SUB = "99999999"
FAST = CloudTimeouts(poll=0.01, running=30, terminate=30, cleanup=30, visibility_grace=1)
VM_CONTRIBUTOR = f"/subscriptions/{SUB}/providers/Microsoft.Authorization/roleDefinitions/{azure_end.VM_CONTRIBUTOR}"


@pytest.fixture
def azure(monkeypatch):
    from libcloud.compute.drivers.azure_arm import AzureNodeDriver

    arm = FakeARM(SUB)
    install_fakes(monkeypatch, arm)
    provider = Azure(ssh_cidr="192.0.2.1/32", timeouts=FAST)
    provider._driver = AzureNodeDriver("77777777-7777-7777-7777-777777777777", SUB,
                                       "55555555-5555-5555-5555-555555555555", "p4ssw0rd", region="eastus")
    return provider, arm


def _vm_path(arm: FakeARM, name: str) -> str:
    (path,) = [v["id"] for k, v in arm.resources.items() if k.endswith(f"/virtualmachines/{name}")]
    return path


def _boot(arm: FakeARM, name: str, where: Path) -> tuple[Path, list[str]]:
    """Run VM `name`'s boot script up to its self-end timer (the rest installs uv) under `sh`, its paths moved
    into `where`, a FAKE systemd-run first on PATH: (the self-end script written, systemd-run's arguments)."""
    vm = arm.resources[_vm_path(arm, name).lower()]
    script = base64.b64decode(vm["properties"]["osProfile"]["customData"]).decode()
    head, sep, _ = script.partition("\numask 022\n")
    assert sep and head.startswith("#!/bin/sh\n")
    where.mkdir(parents=True)
    end, calls, bin_dir = where / "skyhive-end", where / "calls", where / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemd-run").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{calls}"\n')
    (bin_dir / "systemd-run").chmod(0o755)
    head = head.replace(azure_end.END_PATH, str(end)).replace(BOOT_MARKER, str(where / "boot-done"))
    assert azure_end.END_PATH not in head
    done = subprocess.run(["sh", "-c", head], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return end, calls.read_text().splitlines() if calls.exists() else []


def _end(arm: FakeARM, name: str, end: Path, *args: str) -> subprocess.CompletedProcess:
    """The self-end script run for real as VM `name` would (its IMDS and ARM: the fake on loopback)."""
    with serve(arm.imds(_vm_path(arm, name)), "169.254.169.254") as imds, serve(arm, "management.azure.com") as api:
        return subprocess.run(["sh", str(end), *args], capture_output=True, text=True, timeout=120,
                              env={"PATH": "/usr/bin:/bin", "SKYHIVE_IMDS": imds, "SKYHIVE_ARM": api})


def test_a_granted_vm_ends_itself_when_idle_and_its_token_reaches_only_its_own_vm(azure, tmp_path):
    provider, arm = azure
    arm.caller_role = "Owner"  # may write role assignments
    handles = anyio.run(provider.create, ClusterSpec(pool_id="p-end", nodes=2))
    for handle in handles:  # bootstrap starts the watchdog, which runs the self-end script
        assert (handle.reach.idle_shutdown, handle.reach.shutdown_command) == (1800.0, azure_end.SHUTDOWN_COMMAND)
        assert handle.reach.boot_limit_off == azure_end.BOOT_LIMIT_OFF
    assert "deletes itself" in provider.plan(ClusterSpec(pool_id="p-end", nodes=2))["idle_watchdog"]
    scopes = sorted(a["properties"]["scope"] for a in arm.assignments.values())
    assert scopes == [_vm_path(arm, "node-0"), _vm_path(arm, "node-1")]  # each VM's role: on itself only
    for a in arm.assignments.values():
        vm = arm.resources[a["properties"]["scope"].lower()]
        assert a["properties"]["principalId"] == vm["identity"]["principalId"]
        assert (a["properties"]["roleDefinitionId"], a["properties"]["principalType"]) == (VM_CONTRIBUTOR,
                                                                                         "ServicePrincipal")
    end, _ = _boot(arm, "node-0", tmp_path / "n0")
    assert stat.S_IMODE(end.stat().st_mode) == 0o700 and end.read_text() == azure_end.end_script()
    # node-0's own token may not end node-1 (its role is scoped to node-0)
    with serve(arm.imds(_vm_path(arm, "node-0")), "169.254.169.254") as imds:
        token = json.loads(subprocess.run(
            ["curl", "-sS", "-H", "Metadata: true", f"{imds}/metadata/identity/oauth2/token?api-version=2018-02-01"
             "&resource=https%3A%2F%2Fmanagement.azure.com%2F"], capture_output=True, text=True, timeout=60).stdout)
    status, answer = arm.answer("DELETE", f"https://management.azure.com{_vm_path(arm, 'node-1')}?api-version=x",
                                {"Authorization": f"Bearer {token['access_token']}"}, None)
    assert (status, answer["error"]["code"]) == (403, "AuthorizationFailed")
    done = _end(arm, "node-0", end, "idle")  # what the watchdog runs, node 0 idle
    assert done.returncode == 0, done.stderr
    assert "idle: ARM deletes this VM (200)" in done.stderr and token["access_token"] not in done.stderr
    assert [h.node for h in anyio.run(provider.list_owned, "p-end")] == [1]  # its NIC and address went too
    assert not [k for k in arm.resources if "/node-0" in k]
    anyio.run(provider.down, "p-end")
    assert arm.resources == {} and arm.assignments == {}  # the orphaned assignments too (A12)


def test_without_permission_to_grant_the_role_there_is_no_watchdog_and_the_schedule_deallocates(azure, tmp_path,
                                                                                                caplog):
    provider, arm = azure  # the fake's caller is a Contributor: no Microsoft.Authorization/roleAssignments/write
    caplog.set_level(logging.WARNING)
    handles = anyio.run(provider.create, ClusterSpec(pool_id="p-noend", nodes=2))
    warned = [r.getMessage() for r in caplog.records if "has no idle watchdog" in r.getMessage()]
    assert len(warned) == 1 and "Microsoft.Authorization/roleAssignments/write" in warned[0]  # once per pool
    assert "none" in provider.plan(ClusterSpec(pool_id="p-noend", nodes=2))["idle_watchdog"]
    assert {h.reach.idle_shutdown for h in handles} == {0.0}  # no watchdog started
    assert arm.assignments == {}
    end, armed = _boot(arm, "node-1", tmp_path / "n1")  # the boot-time timer is armed all the same
    assert armed[:1] == [f"--unit={azure_end.TIMER_UNIT}"] and armed[-2:] == [str(end), "boot-limit"]
    done = _end(arm, "node-1", end, "boot-limit")  # the timer fires: ARM refuses the VM's identity
    assert done.returncode == 1 and "refused this VM's identity: delete 403, deallocate 403" in done.stderr
    states = {h.node: h.state for h in anyio.run(provider.list_owned, "p-noend")}
    assert states == {0: "running", 1: "running"}
    (schedule,) = [v for k, v in arm.resources.items() if k.endswith("/shutdown-computevm-node-1")]
    assert arm.clock_reaches(schedule["properties"]["dailyRecurrence"]["time"]) == ["node-0", "node-1"]
    assert {h.state for h in anyio.run(provider.list_owned, "p-noend")} == {"stopped"}  # deallocated: as before
    anyio.run(provider.down, "p-noend")
    assert arm.resources == {} and arm.assignments == {}


def test_the_boot_time_timer_is_armed_at_first_boot_only_for_what_is_left_of_the_limit(azure, tmp_path):
    provider, arm = azure
    before = time.time()
    anyio.run(provider.create, ClusterSpec(pool_id="p-timer", nodes=1))
    _, armed = _boot(arm, "node-0", tmp_path / "first")
    (left,) = [a.removeprefix("--on-active=").removesuffix("s") for a in armed if a.startswith("--on-active=")]
    assert BOOT_LIMIT - (time.time() - before) - 5 <= int(left) <= BOOT_LIMIT  # from the create, not the boot
    again = tmp_path / "again"
    again.mkdir()
    (again / "boot-done").touch()  # a later boot: the marker is there
    vm = arm.resources[_vm_path(arm, "node-0").lower()]
    script = base64.b64decode(vm["properties"]["osProfile"]["customData"]).decode().partition("\numask 022\n")[0]
    bin_dir = again / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemd-run").write_text(f'#!/bin/sh\ntouch "{again}/armed"\n')
    (bin_dir / "systemd-run").chmod(0o755)
    script = script.replace(azure_end.END_PATH, str(again / "end")).replace(BOOT_MARKER, str(again / "boot-done"))
    subprocess.run(["sh", "-c", script], check=True, timeout=30, env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert not (again / "armed").exists()
    anyio.run(provider.down, "p-timer")
    assert arm.resources == {}


@pytest.mark.parametrize(("stop_ok", "active", "lifted"), [(True, False, True), (False, False, True),
                                                           (False, True, False)])
def test_lifting_the_timer_fails_only_while_it_stays_active(tmp_path, stop_ok, active, lifted):
    """azure_end.BOOT_LIMIT_OFF under `sh`, FAKE `sudo` and `systemctl` on PATH: a node bootstrapped again (no
    timer left to stop) is fine; a timer still active fails bootstrap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sudo").write_text('#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n')
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\ncase "$1" in stop) exit {0 if stop_ok else 5};; '
                                       f'is-active) exit {0 if active else 3};; esac\nexit 1\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    done = subprocess.run(["sh", "-c", azure_end.BOOT_LIMIT_OFF], env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
                          timeout=30)
    assert (done.returncode == 0) is lifted


def test_fake_arm_refuses_what_arm_refuses_in_identities_and_role_assignments(azure):
    """A11-A13 as the fake encodes them."""
    provider, arm = azure
    arm.caller_role = "Owner"
    arm.principal_lag = 2  # the new identity is not replicated for its first assignment attempt
    anyio.run(provider.create, ClusterSpec(pool_id="p-rules", nodes=1))
    vm = _vm_path(arm, "node-0")
    principal = arm.resources[vm.lower()]["identity"]["principalId"]
    put = {"properties": {"roleDefinitionId": VM_CONTRIBUTOR, "principalId": principal}}
    other = f"{vm}/providers/Microsoft.Authorization/roleAssignments/00000000-0000-0000-0000-000000000001"
    with pytest.raises(Exception, match="PrincipalNotFound"):  # young, and no principalType
        provider.arm(other, azure_end.AUTH_API, "PUT", put)
    with pytest.raises(Exception, match="RoleAssignmentExists"):  # skyhive's own assignment has it already
        provider.arm(other, azure_end.AUTH_API, "PUT", {"properties": {**put["properties"],
                                                                       "principalType": "ServicePrincipal"}})
    with pytest.raises(Exception, match="InvalidRoleAssignmentId"):
        provider.arm(f"{vm}/providers/Microsoft.Authorization/roleAssignments/skyhive", azure_end.AUTH_API, "PUT", put)
    imds = arm.imds(vm)
    token_url = ("http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01"
                 "&resource=https://management.azure.com/")
    assert imds.answer("GET", token_url, {}, None)[0] == 400  # no Metadata header
    assert imds.answer("GET", token_url, {"Metadata": "true"}, None)[0] == 200
    provider.terminate_sync("p-rules/node-0")  # the identity goes with its VM
    assert imds.answer("GET", token_url, {"Metadata": "true"}, None)[1]["error_description"] == "Identity not found"
    arm.caller_role = "Contributor"
    anyio.run(provider.down, "p-rules")  # a Contributor cannot delete the orphaned assignment: said, not fatal
    assert arm.resources == {} and len(arm.assignments) == 1
    arm.caller_role = "Owner"
    anyio.run(provider.down, "p-rules")
    assert arm.assignments == {}


KILLED_CLIENT = textwrap.dedent("""
    import sys
    import pytest
    import skyhive as sky
    from skyhive.providers.cloud.azure import Azure
    from skyhive.providers.cloud.base import CloudTimeouts
    from tests.cloud.fake_arm import FakeARM
    from tests.cloud.fake_http import install_fakes
    from tests.cloud.killed_client import saving

    state = sys.argv[1]

    Saving = saving(FakeARM, state)  # FAKE whose account outlives this process (it is SIGKILLed)
    fake = Saving("99999999")
    fake.caller_role = "Owner"
    install_fakes(pytest.MonkeyPatch(), fake)
    az = Azure(ssh_cidr="192.0.2.1/32", timeouts=CloudTimeouts(poll=0.01, running=30))
    with sky.Pool(provider=az, nodes=2, name="p-az-killed") as pool:  # never gets past connecting
        print("UNEXPECTED: the pool came up", flush=True)
""")


def test_an_azure_pool_killed_right_after_create_deletes_itself_at_its_boot_time_limit(monkeypatch, skyhive_home,
                                                                                      tmp_path, capsys):
    """Done-when 6 on Azure: the client is SIGKILLed once its VMs, their role assignments and schedules exist;
    each VM's boot-time timer (the fake clock: the test runs what it armed) deletes the VM through ARM with
    its identity; `skyhive down` then finds nothing but the group and the orphaned assignments, and deletes
    them."""
    from skyhive.cli import main

    state = tmp_path / "arm.pickle"
    def created(path: Path) -> bool:
        fake = FakeARM.load(path)
        return len(fake.assignments) == 2 and sum("/schedules/" in k for k in fake.resources) == 2

    kill_after_create(KILLED_CLIENT, [str(state)], state, created, "its VMs",
                      env={"AZURE_TENANT_ID": "77777777-7777-7777-7777-777777777777", "AZURE_SUBSCRIPTION_ID": SUB,
                           "AZURE_CLIENT_ID": "55555555-5555-5555-5555-555555555555",
                           "AZURE_CLIENT_SECRET": "p4ssw0rd"})
    arm = FakeARM.load(state)
    for name in ("node-0", "node-1"):
        end, armed = _boot(arm, name, tmp_path / name)
        assert armed[:2] == [f"--unit={azure_end.TIMER_UNIT}", armed[1]] and armed[1].startswith("--on-active=")
        done = _end(arm, name, Path(armed[-2]), armed[-1])  # the fake clock reaches the limit: the timer fires
        assert done.returncode == 0 and "boot-limit: ARM deletes this VM" in done.stderr, done.stderr
    assert not [k for k in arm.resources if "/virtualmachines/" in k]
    install_fakes(monkeypatch, arm)
    for name, value in (("AZURE_TENANT_ID", "77777777-7777-7777-7777-777777777777"), ("AZURE_SUBSCRIPTION_ID", SUB),
                        ("AZURE_CLIENT_ID", "55555555-5555-5555-5555-555555555555"),
                        ("AZURE_CLIENT_SECRET", "p4ssw0rd")):
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    assert main(["ls", "--json"]) == 0
    (entry,) = [e for e in map(json.loads, capsys.readouterr().out.splitlines()) if e["pool"] == "p-az-killed"]
    assert entry["provider"] == "azure"
    assert main(["down", "p-az-killed"]) == 0
    assert arm.resources == {} and arm.assignments == {}


def test_the_dry_run_says_what_the_idle_watchdog_needs(tmp_path, monkeypatch, capsys):
    from skyhive.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.yaml").write_text("run: echo hi\n")
    assert main(["launch", "t.yaml", "--provider", "azure", "--dryrun"]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("  idle watchdog: ")]
    assert "deletes itself" in line and "Owner or User Access Administrator" in line


def test_a_role_assignment_refused_while_the_identity_replicates_is_retried(azure, monkeypatch):
    """ARM may still answer PrincipalNotFound for a new identity (the reference's replication delay): the
    assignment is sent again after a pause, and the pool gets its watchdog."""
    provider, arm = azure
    arm.caller_role = "Owner"
    monkeypatch.setattr(azure_end, "_PAUSE", 0.0)
    real, refusals = arm._assignments, []

    def replicating(method, path, data):  # FAKE: the first PUT finds the new principal not yet replicated
        if method == "PUT" and not refusals:
            refusals.append(path)
            return 400, {"error": {"code": "PrincipalNotFound", "message": "Principal does not exist in the "
                                   "directory (replication delay)."}}
        return real(method, path, data)

    monkeypatch.setattr(arm, "_assignments", replicating)
    (handle,) = anyio.run(provider.create, ClusterSpec(pool_id="p-lag", nodes=1))
    assert len(refusals) == 1 and len(arm.assignments) == 1 and handle.reach.idle_shutdown == 1800.0
    anyio.run(provider.down, "p-lag")
    assert arm.resources == {} and arm.assignments == {}


def test_a_vm_created_again_in_the_next_zone_gets_a_role_for_its_new_identity(monkeypatch):
    """A full zone (A7) deletes the VM and creates it again under the same name in the next zone: the new
    identity gets its own assignment (ARM refuses to change an assignment's principal), and down removes
    both."""
    from libcloud.compute.drivers.azure_arm import AzureNodeDriver

    arm = FakeARM(SUB)
    arm.caller_role = "Owner"
    arm.full_zones.add("1")
    install_fakes(monkeypatch, arm)
    provider = Azure(ssh_cidr="192.0.2.1/32", timeouts=FAST, zones=["1", "2"])
    provider._driver = AzureNodeDriver("77777777-7777-7777-7777-777777777777", SUB,
                                       "55555555-5555-5555-5555-555555555555", "p4ssw0rd", region="eastus")
    (handle,) = anyio.run(provider.create, ClusterSpec(pool_id="p-zone", nodes=1))
    vm = arm.resources[_vm_path(arm, "node-0").lower()]
    assert vm["zones"] == ["2"] and handle.reach.idle_shutdown == 1800.0
    principals = [a["properties"]["principalId"] for a in arm.assignments.values()]
    assert len(principals) == 2 and principals[-1] == vm["identity"]["principalId"]  # the first one's: orphaned
    anyio.run(provider.down, "p-zone")
    assert arm.resources == {} and arm.assignments == {}


def test_when_arm_refuses_the_vms_delete_the_script_deallocates_it(azure, tmp_path, monkeypatch):
    """The script's fallback: a delete ARM refuses (FAKE: 403 ``LinkedAuthorizationFailed``, as if the VM-scoped
    role did not cover its NIC) is followed by a deallocation, which ends the compute bill."""
    provider, arm = azure
    arm.caller_role = "Owner"
    anyio.run(provider.create, ClusterSpec(pool_id="p-dealloc", nodes=1))
    real = arm._authorized

    def no_linked_delete(token, method, path):
        if token in arm.vm_tokens and method == "DELETE":
            return 403, {"error": {"code": "LinkedAuthorizationFailed", "message": "The client has permission to "
                                   "perform action 'Microsoft.Compute/virtualMachines/delete' on scope "
                                   f"'{path}', however it does not have permission on the linked scope(s)."}}
        return real(token, method, path)

    monkeypatch.setattr(arm, "_authorized", no_linked_delete)
    end, _ = _boot(arm, "node-0", tmp_path / "n0")
    done = _end(arm, "node-0", end, "idle")
    assert done.returncode == 0 and "idle: ARM deallocates this VM (202; delete: 403)" in done.stderr, done.stderr
    assert [h.state for h in anyio.run(provider.list_owned, "p-dealloc")] == ["stopped"]  # deallocated, disk left
    anyio.run(provider.down, "p-dealloc")  # down finishes it
    assert arm.resources == {} and arm.assignments == {}
