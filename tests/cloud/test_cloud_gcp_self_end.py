"""A GCE node ends itself by deleting its own instance (issue 38: "on GCP the watchdog deletes rather than
stops"; done-when 6 for GCP): `providers/cloud/gcp_end.py`'s self-end script, written by the startup-script
and run by the boot-time limit's timer and by the idle watchdog, asks the VM's metadata server for a token of
the instance's service account and DELETEs the instance; refused, it shuts the guest down (GCE stops it).

The script runs for real (``sh``, the machine's ``curl``) against FakeGCE over HTTP on 127.0.0.1
(`tests/cloud/fake_gce_node.py`: the VM's metadata server, rule G18, and the Compute API with rules G19
scopes and G20 IAM), its base URLs pointed there by the two variables the script reads. FAKE on PATH:
``shutdown`` and ``systemd-run`` (record their arguments: the test machine is not the node) and ``sudo``
(runs its command). SIMULATED: a timer firing is the test running the command ``systemd-run`` was given; a
guest shutdown is FakeGCE's G17.
"""

from __future__ import annotations

import json
import stat
import subprocess
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from skyhive.providers.base import ClusterSpec
from skyhive.providers.cloud import gcp_end
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.cloud.boot import BOOT_LIMIT, BOOT_MARKER
from skyhive.providers.cloud.gcp import GCP
from tests.cloud.killed_client import kill_after_create
from tests.cloud.fake_gce import FakeGCE
from tests.cloud.fake_gce_node import GCENode

pytestmark = [pytest.mark.loopback_only]

ROOT = Path(__file__).resolve().parents[2]
FAST = CloudTimeouts(poll=0.01, running=30, terminate=30, cleanup=30, visibility_grace=1)
COMPUTE_SCOPE = "https://www.googleapis.com/auth/compute"


def _tools(tmp_path: Path) -> tuple[Path, Path]:
    """A bin folder with FAKE `shutdown`, `systemd-run` (each appends "NAME ARGS" to the calls file) and
    `sudo` (runs its command); (bin folder, calls file)."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in ("shutdown", "systemd-run"):
        (bin_dir / tool).write_text(f'#!/bin/sh\nprintf "%s\\n" "{tool} $*" >> "{calls}"\n')
    (bin_dir / "sudo").write_text('#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return bin_dir, calls


def _calls(calls: Path) -> list[str]:
    return calls.read_text().splitlines() if calls.exists() else []


def _boot(script: str, tmp_path: Path, *, booted_before: bool = False) -> tuple[Path, list[str]]:
    """The startup-script's lines before uv's install (the self-end script written, the limit armed), run by
    `sh` with the script's path and the first-boot marker moved into `tmp_path` and the FAKE tools first on
    PATH: (the self-end script written, what was asked of `systemd-run`/`shutdown`)."""
    head = script.split("command -v uv", 1)[0]
    assert gcp_end.END_SCRIPT in head
    tmp_path.mkdir(parents=True, exist_ok=True)
    end, marker = tmp_path / "skyhive-end", tmp_path / "boot-done"
    if booted_before:
        marker.touch()
    bin_dir, calls = _tools(tmp_path)
    done = subprocess.run(["sh", "-c", head.replace(gcp_end.END_SCRIPT, str(end)).replace(BOOT_MARKER, str(marker))],
                          capture_output=True, text=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=30)
    assert done.returncode == 0, done.stderr
    return end, _calls(calls)


def _end(end: Path, node: GCENode, tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run the self-end script for real (sh, curl) as node `node`, FAKE `shutdown` first on PATH."""
    bin_dir, calls = _tools(tmp_path)
    done = subprocess.run(["sh", str(end)], capture_output=True, text=True, timeout=120,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", **node.env})
    return done, _calls(calls)


def _startup_script(body: dict) -> str:
    return {i["key"]: i["value"] for i in body["metadata"]["items"]}["startup-script"]


def _gone(provider: GCP, pool_id: str) -> None:
    """Wait (generous deadline) until the provider lists no node of the pool (G14: STOPPING, then gone)."""
    deadline = time.monotonic() + 60
    while anyio.run(provider.list_owned, pool_id):
        assert time.monotonic() < deadline, "the instance was not deleted"
        time.sleep(0.05)


def test_a_default_gcp_node_deletes_its_own_instance_with_its_service_account_token(gce, tmp_path):
    provider = GCP(region="us-east1", timeouts=FAST)  # the default configuration
    (handle,) = anyio.run(provider.create, ClusterSpec(pool_id="p-end", nodes=1))
    (body,) = gce.inserts
    assert body["serviceAccounts"] == [{"email": "default", "scopes": [COMPUTE_SCOPE]}]  # the one scope
    assert handle.reach.shutdown_command == gcp_end.SHUTDOWN_COMMAND  # the idle watchdog runs the script
    assert handle.reach.boot_limit_off == gcp_end.LIMIT_OFF
    script = _startup_script(body)
    assert script.splitlines()[0] == "#!/bin/sh" and script.rstrip().endswith(f"touch {BOOT_MARKER}")
    end, asked = _boot(script, tmp_path / "boot")
    assert asked == [f"systemd-run --quiet --unit={gcp_end.TIMER} --on-active={BOOT_LIMIT}s {end}"]
    assert stat.S_IMODE(end.stat().st_mode) == 0o700 and end.read_text() == gcp_end.end_script()
    zone, name = handle.provider_id.split("/")
    with GCENode(gce, zone, name) as node:
        done, shut = _end(end, node, tmp_path / "end")
    assert done.returncode == 0 and shut == [], done.stderr  # deleted: no fallback shutdown
    assert f"DELETE /compute/v1/projects/proj-1/zones/{zone}/instances/{name}" in node.seen
    assert "ya29" not in done.stdout + done.stderr  # the token is never printed
    assert f"deleting instance {name}" in done.stderr
    _gone(provider, "p-end")  # its boot disk went with it (autoDelete)
    anyio.run(provider.down, "p-end")
    assert gce.instances == {} and gce.firewalls == {}


def _no_account(gce: FakeGCE, zone: str, name: str) -> None:
    """The pool was created with GCP(service_account=None) (see the test)."""


def _read_only_scope(gce: FakeGCE, zone: str, name: str) -> None:
    """The instance's scopes were narrowed (`gcloud compute instances set-service-account --scopes=compute-ro`)."""
    gce.instances[(zone, name)]["serviceAccounts"][0]["scopes"] = [f"{COMPUTE_SCOPE}.readonly"]


def _no_role(gce: FakeGCE, zone: str, name: str) -> None:
    """The organization enforces iam.automaticIamGrantsForDefaultServiceAccounts: the default service account
    has no role that allows compute.instances.delete."""
    gce.denied.add(gce.default_service_account)


@pytest.mark.parametrize(("account", "refuse", "why"), [
    (None, _no_account, "no service account token"),
    ("default", _read_only_scope, "refused (HTTP 403)"),
    ("default", _no_role, "refused (HTTP 403)")])
def test_a_node_whose_delete_is_refused_shuts_down_and_gce_stops_it(gce, tmp_path, account, refuse, why):
    provider = GCP(region="us-east1", timeouts=FAST, service_account=account)
    (handle,) = anyio.run(provider.create, ClusterSpec(pool_id="p-end-no", nodes=1))
    (body,) = gce.inserts
    assert ("serviceAccounts" in body) is (account is not None)
    zone, name = handle.provider_id.split("/")
    refuse(gce, zone, name)
    end, _ = _boot(_startup_script(body), tmp_path / "boot")
    with GCENode(gce, zone, name) as node:
        done, shut = _end(end, node, tmp_path / "end")
    assert shut == ["shutdown -h now skyhive: this node ends itself"], done.stderr  # the fallback: a stop
    assert why in done.stderr and "ya29" not in done.stdout + done.stderr
    if refuse is _read_only_scope:  # G19: the scope, before any IAM check
        assert gce.refused[-1] == "Request had insufficient authentication scopes."
    if refuse is _no_role:  # G20
        assert gce.refused[-1] == (f"Required 'compute.instances.delete' permission for "
                                   f"'projects/proj-1/zones/{zone}/instances/{name}'")
    if account is None:
        assert not any(p.startswith("DELETE") for p in node.seen)
        assert "GET /computeMetadata/v1/instance/service-accounts/default/token" in node.seen  # answered 404
    gce.guest_shutdown(zone, name)  # SIMULATED: the guest's shutdown; GCE stops the instance (G17)
    (stopped,) = anyio.run(provider.list_owned, "p-end-no")
    assert stopped.state == "stopped"  # still there, its disk billing: `down` ends it
    anyio.run(provider.down, "p-end-no")
    assert gce.instances == {} and gce.firewalls == {}


def test_the_metadata_server_refuses_a_request_without_its_header(gce, tmp_path):
    """G18 as the script relies on it: without `Metadata-Flavor: Google` no token is given."""
    provider = GCP(region="us-east1", timeouts=FAST)
    (handle,) = anyio.run(provider.create, ClusterSpec(pool_id="p-end-md", nodes=1))
    zone, name = handle.provider_id.split("/")
    with GCENode(gce, zone, name) as node:
        url = f"{node.endpoint}/computeMetadata/v1/instance/service-accounts/default/token"
        bare = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url], capture_output=True,
                              text=True, timeout=60)
        flavored = subprocess.run(["curl", "-sf", "-H", "Metadata-Flavor: Google", url], capture_output=True,
                                  text=True, timeout=60)
    assert bare.stdout == "403" and gce.node_tokens.keys() == {json.loads(flavored.stdout)["access_token"]}
    anyio.run(provider.down, "p-end-md")
    assert gce.instances == {}


def test_a_second_boot_arms_no_limit_and_a_pool_that_keeps_its_disks_only_stops(gce, tmp_path):
    provider = GCP(region="us-east1", timeouts=FAST)
    anyio.run(provider.create, ClusterSpec(pool_id="p-end-2", nodes=1))
    script = _startup_script(gce.inserts[0])
    end, asked = _boot(script, tmp_path / "again", booted_before=True)  # GCE reruns it at every boot
    assert asked == [] and end.read_text() == gcp_end.end_script()  # the script is rewritten, no limit armed
    anyio.run(provider.down, "p-end-2")
    keeping = GCP(region="us-east1", timeouts=FAST)
    keeping.shutdown_behavior = "stop"  # what a kept pool with autostop (not --down) sets
    assert keeping.keeps_disks
    anyio.run(keeping.create, ClusterSpec(pool_id="p-end-keep", nodes=1))
    end, _ = _boot(_startup_script(gce.inserts[-1]), tmp_path / "keep")
    assert "DELETE" not in end.read_text()
    done = subprocess.run(["sh", str(end)], env={"PATH": f"{_tools(tmp_path / 'k')[0]}:/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    assert _calls(tmp_path / "k" / "calls") == ["shutdown -h now skyhive: this node ends itself"]
    anyio.run(keeping.down, "p-end-keep")
    assert gce.instances == {} and gce.firewalls == {}


@pytest.mark.parametrize("written", [True, False])
def test_the_idle_watchdog_command_runs_the_self_end_script_or_shuts_down_without_it(tmp_path, written):
    bin_dir, calls = _tools(tmp_path)
    end = tmp_path / "skyhive-end"
    if written:
        end.write_text(f'#!/bin/sh\nprintf "%s\\n" "skyhive-end" >> "{calls}"\n')
        end.chmod(0o700)
    command = gcp_end.SHUTDOWN_COMMAND.replace(gcp_end.END_SCRIPT, str(end))
    assert command != gcp_end.SHUTDOWN_COMMAND
    done = subprocess.run(["/bin/sh", "-c", command], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=30)
    assert done.returncode == 0
    assert _calls(calls) == (["skyhive-end"] if written else ["shutdown -h now"])


@pytest.mark.parametrize(("stop_ok", "timer_active", "shutdown_scheduled", "lifted"), [
    (True, False, False, True),    # the timer stopped
    (False, False, False, True),   # bootstrapped again: no timer left to stop
    (False, True, False, False),   # the timer stays armed: bootstrap fails
    (True, False, True, False)])   # a fallback shutdown stays scheduled: bootstrap fails
def test_lifting_the_gcp_limit_fails_only_while_it_stays_armed(tmp_path, stop_ok, timer_active, shutdown_scheduled,
                                                              lifted):
    """LIMIT_OFF under `sh` with FAKE `sudo`, `systemctl` (stop succeeds or not; is-active says the timer's
    state) and `shutdown -c` (fails), systemd-logind's schedule file moved into `tmp_path`."""
    bin_dir, _ = _tools(tmp_path)
    (bin_dir / "systemctl").write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$1" in stop) exit {0 if stop_ok else 5};; is-active) exit {0 if timer_active else 3};; esac
        exit 1
        """))
    (bin_dir / "shutdown").write_text("#!/bin/sh\nexit 1\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    scheduled = tmp_path / "scheduled"
    if shutdown_scheduled:
        scheduled.touch()
    command = gcp_end.LIMIT_OFF.replace("/run/systemd/shutdown/scheduled", str(scheduled))
    done = subprocess.run(["sh", "-c", command], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=30)
    assert (done.returncode == 0) is lifted


GCE_CLIENT = textwrap.dedent("""
    import sys
    import pytest
    import skyhive as sky
    from skyhive.providers.cloud.base import CloudTimeouts
    from skyhive.providers.cloud.gcp import GCP
    from tests.cloud.fake_gce import FakeGCE
    from tests.cloud.fake_http import install_fakes
    from tests.cloud.killed_client import saving

    state = sys.argv[1]

    Saving = saving(FakeGCE, state)  # FAKE whose account outlives this process (it is SIGKILLed)
    fake = Saving.load(state)
    install_fakes(pytest.MonkeyPatch(), fake)
    gcp = GCP(region="us-east1", timeouts=CloudTimeouts(poll=0.01, running=30))
    with sky.Pool(provider=gcp, nodes=2, name="p-gce-killed") as pool:  # never gets past connecting
        print("UNEXPECTED: the pool came up", flush=True)
""")


def test_a_gcp_pool_killed_right_after_create_deletes_itself_by_its_boot_time_limit(gce, monkeypatch, tmp_path,
                                                                                     capsys):
    """Done-when 6 on FakeGCE: the client is SIGKILLed once both instances exist (nothing bootstrapped); each
    node's boot-time timer fires (SIMULATED: the command the startup-script gave `systemd-run` is run) and the
    node deletes itself through the API; `skyhive down` then finds no instance and removes what is left (the
    firewall rules, the pool's key), and `skyhive ls` shows nothing."""
    from skyhive.cli import main
    from tests.cloud.fake_http import install_fakes

    state = tmp_path / "gce-project.pickle"
    gce.save(state)
    kill_after_create(GCE_CLIENT, [str(state)], state, lambda path: len(FakeGCE.load(path).instances) == 2,
                      "its instances")
    fake = FakeGCE.load(state)
    install_fakes(monkeypatch, fake)
    assert len(fake.instances) == 2
    for (zone, name), instance in sorted(fake.instances.items()):
        assert instance["serviceAccounts"] == [{"email": fake.default_service_account, "scopes": [COMPUTE_SCOPE]}]
        end, asked = _boot(_startup_script(instance), tmp_path / name)
        (timer,) = asked
        assert timer == f"systemd-run --quiet --unit={gcp_end.TIMER} --on-active={BOOT_LIMIT}s {end}"
        with GCENode(fake, zone, name) as node:  # SIMULATED: the timer fires an hour after boot
            done = subprocess.run(["sh", "-c", timer.split(f"--on-active={BOOT_LIMIT}s ", 1)[1]], capture_output=True,
                                  text=True, timeout=120, env={"PATH": f"{_tools(tmp_path / name)[0]}:/usr/bin:/bin",
                                                               **node.env})
        assert done.returncode == 0 and _calls(tmp_path / name / "calls") == [timer], done.stderr  # no shutdown
    assert {i["status"] for i in fake.instances.values()} == {"STOPPING"}  # G14: being deleted
    _gone(GCP(region="us-east1", timeouts=FAST), "p-gce-killed")  # then gone, by the nodes' own deletes
    capsys.readouterr()
    assert main(["down", "p-gce-killed"]) == 0
    said = capsys.readouterr().out
    assert "p-gce-killed" in said and "0 provider nodes destroyed" in said, said  # nothing left for down to end
    assert fake.instances == {} and fake.firewalls == {}
    assert main(["ls", "--json"]) == 0
    assert not [e for e in map(json.loads, capsys.readouterr().out.splitlines()) if e.get("pool") == "p-gce-killed"]
