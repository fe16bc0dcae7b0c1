"""A DigitalOcean droplet that ends itself with a scoped node token (issue 38, point 6; `providers/cloud/do_end.py`).

The droplet's own part is shell, and runs for real here: the self-end block of the user data FakeDO received is
run under `sh` (its paths moved into `tmp_path`; a FAKE `systemd-run` records the timer it would arm, a FAKE
`shutdown` records a power-off), then the timer's command — the self-end script, with curl — is run as the
timer would at the limit (a FAKE clock: the test fires it), against FakeDO served on 127.0.0.1 (`FakeDOServer`:
the API, and the droplet's metadata service, rule D15), with the account's scoped tokens (D14). Only the
base URLs are pointed at the fake (``SKYHIVE_DO_API``, ``SKYHIVE_DO_METADATA``); the shipped defaults are
DigitalOcean's.
"""

from __future__ import annotations

import json
import logging
import re
import stat
import subprocess
import textwrap
from pathlib import Path

import anyio
import pytest

from skyhive.providers.base import ClusterSpec, ProvisionError
from skyhive.providers.cloud import do_end
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.cloud.boot import BOOT_LIMIT, BOOT_SCRIPT
from skyhive.providers.cloud.digitalocean import DigitalOcean
from tests.cloud.killed_client import kill_after_create
from tests.cloud.fake_do import FakeDO, FakeDOServer
from tests.cloud.fake_http import install_fakes

pytestmark = [pytest.mark.loopback_only]

ROOT = Path(__file__).resolve().parents[2]
FAST = CloudTimeouts(poll=0.01, running=30, terminate=30, cleanup=30, visibility_grace=1)
#: a token made with droplet:delete and the scopes DigitalOcean requires with it (scopes page)
NODE_SCOPES = {"droplet:delete", "droplet:read", "regions:read", "sizes:read", "actions:read", "image:read"}
NODE_TOKEN = "dop_v1_node_scoped_0123456789"


def _tools(bin_dir: Path, calls: Path) -> None:
    """FAKE `systemd-run` and `shutdown`: each records its name and arguments in `calls`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("systemd-run", "shutdown"):
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\nprintf "%s %s\\n" {name} "$*" >> "{calls}"\n')
        tool.chmod(0o755)


def _boot(user_data: str, node: Path) -> tuple[list[str], Path]:
    """The self-end block of `user_data` run under `sh` as cloud-init would at first boot (paths under `node`,
    FAKE tools on PATH): (what the FAKE tools were asked, the self-end script's path)."""
    head, rest = user_data.split("\n", 1)
    assert head == "#!/bin/sh"
    block = rest[: rest.index(BOOT_SCRIPT.split("\n", 1)[1])]  # before the boot script's own lines (uv)
    assert do_end.TOKEN_PATH in block and do_end.END_PATH in block
    end, token_dir = node / "skyhive-end", node / "etc-skyhive"
    moved = block.replace(do_end.END_PATH, str(end)).replace(do_end.TOKEN_PATH.rsplit("/", 1)[0], str(token_dir))
    calls = node / "calls"
    _tools(node / "bin", calls)
    done = subprocess.run(["sh", "-c", moved], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{node / 'bin'}:/usr/bin:/bin"})
    assert done.returncode == 0 and done.stdout == "" and done.stderr == "", (done.stdout, done.stderr)
    token_file = token_dir / Path(do_end.TOKEN_PATH).name
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and stat.S_IMODE(token_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(end.stat().st_mode) == 0o700
    return calls.read_text().splitlines(), end


def _fire(end: Path, server: FakeDOServer, droplet_id: int, node: Path) -> subprocess.CompletedProcess:
    """The boot-time limit's timer fires (FAKE clock): the self-end script runs, curl against the fake."""
    env = {"PATH": f"{node / 'bin'}:/usr/bin:/bin", "SKYHIVE_DO_API": server.endpoint,
           "SKYHIVE_DO_METADATA": server.metadata_url(droplet_id)}
    return subprocess.run([str(end)], capture_output=True, text=True, timeout=120, env=env)


DO_CLIENT = textwrap.dedent("""
    import os, sys
    import pytest
    import skyhive as sky
    from skyhive.providers.cloud.base import CloudTimeouts
    from skyhive.providers.cloud.digitalocean import DigitalOcean
    from tests.cloud.fake_do import FakeDO
    from tests.cloud.fake_http import install_fakes
    from tests.cloud.killed_client import saving

    state, node_token, scopes = sys.argv[1], sys.argv[2], set(sys.argv[3].split(","))

    Saving = saving(FakeDO, state)  # FAKE whose account outlives this process (it is SIGKILLed)
    fake = Saving(scoped={node_token: scopes})
    install_fakes(pytest.MonkeyPatch(), fake)
    os.environ["DIGITALOCEAN_ACCESS_TOKEN"] = fake.token
    os.environ["DIGITALOCEAN_NODE_TOKEN"] = node_token  # the default way: the environment
    do = DigitalOcean(ssh_cidr="192.0.2.1/32", timeouts=CloudTimeouts(poll=0.01, running=30))
    with sky.Pool(provider=do, nodes=2, name="p-do-ends") as pool:  # never gets past connecting
        print("UNEXPECTED: the pool came up", flush=True)
""")


def _killed_after_create(state: Path, scopes: set[str]) -> FakeDO:
    """A client (its own process) creates a 2-droplet pool with a node token from DIGITALOCEAN_NODE_TOKEN and
    is SIGKILLed as soon as both droplets exist: the account it left."""
    kill_after_create(DO_CLIENT, [str(state), NODE_TOKEN, ",".join(sorted(scopes))], state,
                      lambda path: len(FakeDO.load(path).droplets) == 2, "its droplets")
    return FakeDO.load(state)


def _ls(capsys) -> list[dict]:
    from skyhive.cli import main

    capsys.readouterr()
    assert main(["ls", "--json"]) == 0
    return [e for e in map(json.loads, capsys.readouterr().out.splitlines()) if e["pool"] == "p-do-ends"]


def _nothing_left(fake: FakeDO) -> None:
    assert fake.droplets == {} and fake.firewalls == {} and fake.keys == {}
    assert not any(t.startswith("skyhive-pool:") for t in fake.tags)


def test_droplets_whose_client_was_killed_right_after_create_delete_themselves_by_the_boot_time_limit(
        monkeypatch, skyhive_home, tmp_path, capsys):
    from skyhive.cli import main

    fake = _killed_after_create(tmp_path / "account.pickle", NODE_SCOPES)
    assert len(fake.droplets) == 2
    for path in Path(skyhive_home).rglob("*"):  # the pool's record and logs: never the node token
        assert not path.is_file() or NODE_TOKEN.encode() not in path.read_bytes(), path
    with FakeDOServer(fake) as server:
        for droplet_id, droplet in list(fake.droplets.items()):
            node = tmp_path / f"node-{droplet_id}"
            calls, end = _boot(droplet["user_data"], node)
            assert calls == [f"systemd-run --unit={do_end.TIMER} --on-active={BOOT_LIMIT}s {end}"]
            done = _fire(end, server, droplet_id, node)
            assert done.returncode == 0, done.stderr
            assert f"droplet {droplet_id} deleted (HTTP 204)" in done.stderr and NODE_TOKEN not in done.stderr
            assert (node / "calls").read_text().splitlines() == calls  # no power-off: deleted
            assert droplet_id not in fake.droplets
    assert fake.droplets == {}
    assert fake.forbidden == [("GET", "/v2/account")]  # the check before create: the token cannot read the account
    install_fakes(monkeypatch, fake)
    monkeypatch.setenv("DIGITALOCEAN_ACCESS_TOKEN", fake.token)
    (entry,) = _ls(capsys)  # the record stays until down: the pool's firewall, key and tag are still there
    assert entry["provider"] == "digitalocean"
    assert main(["down", "p-do-ends"]) == 0  # the droplets are gone already: down removes the rest
    _nothing_left(fake)
    assert _ls(capsys) == []


def test_a_node_token_without_droplet_delete_powers_the_droplet_off_and_down_finishes_it(monkeypatch, tmp_path,
                                                                                         capsys):
    """The refusal: DigitalOcean answers 403 (D14); the script falls back to `shutdown -h now`; the droplet is
    off but billed (D16): `skyhive ls` shows it, `skyhive down` deletes it."""
    from skyhive.cli import main

    fake = _killed_after_create(tmp_path / "account.pickle", NODE_SCOPES - {"droplet:delete"})
    with FakeDOServer(fake) as server:
        for droplet_id, droplet in list(fake.droplets.items()):
            node = tmp_path / f"node-{droplet_id}"
            calls, end = _boot(droplet["user_data"], node)
            done = _fire(end, server, droplet_id, node)
            assert done.returncode == 0
            assert f"DELETE droplet {droplet_id} refused (HTTP 403); powering off instead" in done.stderr
            assert (node / "calls").read_text().splitlines() == [*calls, "shutdown -h now"]
            fake.guest_shutdown(droplet_id)  # SIMULATED: the OS powered off (D16)
    assert fake.forbidden == [("GET", "/v2/account"), *(("DELETE", f"/v2/droplets/{i}") for i in fake.droplets)]
    assert {d["status"] for d in fake.droplets.values()} == {"off"}
    install_fakes(monkeypatch, fake)
    monkeypatch.setenv("DIGITALOCEAN_ACCESS_TOKEN", fake.token)
    (entry,) = _ls(capsys)
    assert entry["provider"] == "digitalocean"
    assert main(["down", "p-do-ends"]) == 0
    _nothing_left(fake)


def test_the_self_end_script_powers_off_when_it_cannot_learn_its_droplet_id_or_reach_the_api(tmp_path):
    fake = FakeDO(scoped={NODE_TOKEN: NODE_SCOPES})
    provider = DigitalOcean(node_token=NODE_TOKEN)
    calls, end = _boot(provider.user_data(), tmp_path)
    with FakeDOServer(fake) as server:
        done = _fire(end, server, 99, tmp_path)  # no such droplet: its metadata answers nothing
    assert done.returncode == 0 and "no droplet id from" in done.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [*calls, "shutdown -h now"]
    assert fake.requests == []  # nothing was sent to the API


@pytest.fixture
def do(monkeypatch):
    fake = FakeDO(scoped={NODE_TOKEN: NODE_SCOPES, "dop_v1_reads_all": NODE_SCOPES | {"account:read"},
                          "dop_v1_no_read": {"droplet:delete"}})
    install_fakes(monkeypatch, fake)
    monkeypatch.setenv("DIGITALOCEAN_ACCESS_TOKEN", fake.token)
    return fake


@pytest.mark.parametrize(("token", "says"), [
    ("dop_v1_fake", "is the account's token"), ("dop_v1_revoked", "refused by DigitalOcean (401"),
    ("dop_v1_no_read", "cannot read droplets (403)"), ("dop_v1_reads_all", "can read the account")])
def test_a_node_token_that_must_not_go_on_a_node_is_refused_before_anything_is_created(do, token, says):
    provider = DigitalOcean(node_token=token, ssh_cidr="192.0.2.1/32", timeouts=FAST)
    with pytest.raises(ProvisionError, match=re.escape(says)) as caught:
        anyio.run(provider.create, ClusterSpec(pool_id="p-do-bad", nodes=1))
    assert caught.value.kind == "fatal" and token not in str(caught.value)
    assert do.create_calls == 0 and do.keys == {} and do.droplets == {}
    anyio.run(provider.down, "p-do-bad")
    assert do.firewalls == {} and not any(t.startswith("skyhive-pool:") for t in do.tags)


def test_with_a_node_token_the_plan_reach_and_description_say_so_and_never_hold_it(do, caplog):
    provider = DigitalOcean(node_token=NODE_TOKEN, ssh_cidr="192.0.2.1/32", timeouts=FAST)
    spec = ClusterSpec(pool_id="p-do-tok", nodes=1)
    with caplog.at_level(logging.DEBUG):
        plan = provider.plan(spec)
        (handle,) = anyio.run(provider.create, spec)
    assert plan["boot_limit"].startswith("60 min after boot; idle watchdog 30 min (the droplet deletes itself")
    assert handle.reach.shutdown_command == f"sudo -n {do_end.END_PATH}" and handle.reach.idle_shutdown == 1800
    assert handle.reach.boot_limit_off == do_end.LIMIT_OFF
    assert NODE_TOKEN not in json.dumps(plan) + json.dumps(provider.describe()) + caplog.text
    assert "cannot end themselves" not in caplog.text
    rebuilt = DigitalOcean.from_description(provider.describe())  # what `skyhive down` rebuilds from the record
    assert rebuilt.node_token is None and rebuilt.boot_limit == BOOT_LIMIT
    anyio.run(provider.down, "p-do-tok")
    _nothing_left(do)


def test_without_a_node_token_droplets_cannot_end_themselves_and_a_warning_says_so_once_per_pool(do, caplog):
    provider = DigitalOcean(ssh_cidr="192.0.2.1/32", timeouts=FAST)
    spec = ClusterSpec(pool_id="p-do-none", nodes=2)
    with caplog.at_level(logging.WARNING):
        plan = provider.plan(spec)
        handles = anyio.run(provider.create, spec)
    warned = [r for r in caplog.records if "cannot end themselves" in r.getMessage()]
    assert len(warned) == 1 and do_end.NODE_TOKEN_ENV in warned[0].getMessage()
    assert plan["boot_limit"].startswith("off: no node token")
    assert [d["user_data"] for d in do.droplets.values()] == [BOOT_SCRIPT, BOOT_SCRIPT]  # no token, no timer
    # no watchdog; the lift still runs at bootstrap (nothing to stop here: it succeeds, see the lift's test)
    assert {(h.reach.idle_shutdown, h.reach.boot_limit_off) for h in handles} == {(0.0, do_end.LIMIT_OFF)}
    anyio.run(provider.down, "p-do-none")
    _nothing_left(do)


@pytest.mark.parametrize(("stop_ok", "still_active", "lifted"), [
    (True, False, True), (False, False, True), (False, True, False)])
def test_lifting_the_timer_fails_only_while_it_stays_armed(tmp_path, stop_ok, still_active, lifted):
    """LIMIT_OFF under `sh` with FAKE `sudo` (runs the command) and `systemctl` (`stop` succeeds or not;
    `is-active` answers as the timer is): a droplet bootstrapped again (no timer left) is fine."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sudo").write_text('#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n')
    (bin_dir / "systemctl").write_text(
        f'#!/bin/sh\ncase "$1" in stop) exit {0 if stop_ok else 1};; is-active) exit {0 if still_active else 3};; '
        'esac\nexit 1\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    done = subprocess.run(["sh", "-c", do_end.LIMIT_OFF], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=30)
    assert (done.returncode == 0) is lifted


def test_option_values(do):
    with pytest.raises(ValueError, match=r"DigitalOcean\(boot_limit=...\)"):
        DigitalOcean(boot_limit=5)
    provider = DigitalOcean(node_token=NODE_TOKEN, boot_limit=None, idle_timeout=None)
    plan = provider.plan(ClusterSpec(pool_id="p-do-opt", nodes=1))
    assert plan["boot_limit"].startswith("none; no idle watchdog (the droplet deletes itself")
    assert "systemd-run" not in provider.user_data() and do_end.END_PATH in provider.user_data()
    with pytest.raises(ProvisionError, match="newline or quote"):
        DigitalOcean(node_token="dop'x").user_data()
