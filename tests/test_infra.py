"""The real-OpenSSH test infrastructure works: tests/infra (sshd.py, netns.py, fixtures.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.infra.netns import STATE_DIR, NetnsHosts, cleanup_stale, leftovers
from tests.infra.sshd import (
    DEFAULT_USER,
    InfraUnavailable,
    Sshd,
    check_sshd_support,
    descendants,
    infra_lock,
    process_alive,
)

if "tests.infra.fixtures" not in sys.modules:  # tests/conftest.py may already have loaded them
    pytest_plugins = ["tests.infra.fixtures"]

asyncssh = pytest.importorskip("asyncssh")

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"  # asyncssh runs on asyncio only


async def run(server, command: str, **connect_overrides) -> str:
    with anyio.fail_after(15):
        async with asyncssh.connect(**server.connect_options(**connect_overrides)) as conn:
            result = await conn.run(command, check=True)
            return result.stdout


# --------------------------------------------------------------------------------------------
# one sshd on loopback


async def test_login_as_test_user(sshd_host):
    assert sshd_host.host == "127.0.0.1" and sshd_host.port > 0
    assert sshd_host.user == DEFAULT_USER
    assert (await run(sshd_host, "id -un")).strip() == DEFAULT_USER
    assert (await run(sshd_host, "id -u")).strip() != "0"
    # a home of this run's own (the system one only where mount namespaces are not allowed), writable
    probe = 'echo $HOME; f="$HOME/.skyhive-infra-probe"; touch "$f" && rm "$f" && echo writable'
    assert (await run(sshd_host, probe)).split() == [str(sshd_host.home), "writable"]
    assert oct(sshd_host.client_key.stat().st_mode & 0o777) == "0o600"
    assert sshd_host.known_hosts_path.read_text() == f"[127.0.0.1]:{sshd_host.port} {sshd_host.host_public_key}\n"


async def test_other_pinned_host_key_is_refused(sshd_host):
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    pinned = asyncssh.import_known_hosts(f"[{sshd_host.host}]:{sshd_host.port} {other}\n")
    with anyio.fail_after(15), pytest.raises(asyncssh.HostKeyNotVerifiable):
        await asyncssh.connect(**sshd_host.connect_options(known_hosts=pinned))


async def test_unknown_client_key_is_refused(sshd_host):
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    with anyio.fail_after(15), pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect(**sshd_host.connect_options(client_keys=[stranger]))


async def test_kill_sessions_drops_connections_but_keeps_listening(make_sshd):
    server = make_sshd()
    with anyio.fail_after(15):
        conn = await asyncssh.connect(**server.connect_options())
        try:
            await conn.create_process("cat")  # ends when its stdin closes
            assert server.session_pids()
            killed = server.kill_sessions()
            assert killed and not any(process_alive(p) for p in killed)
            await conn.wait_closed()  # the client sees the connection drop
        finally:
            conn.close()
    assert server.running
    assert (await run(server, "id -un")).strip() == DEFAULT_USER  # and it still accepts new ones


async def test_rotate_host_key_on_same_port(make_sshd):
    server = make_sshd()
    old_line, port = server.known_hosts_line, server.port
    new_key = server.rotate_host_key()
    assert server.port == port and new_key != old_line.split(" ", 1)[1]
    with anyio.fail_after(15), pytest.raises(asyncssh.HostKeyNotVerifiable):
        await asyncssh.connect(**server.connect_options(known_hosts=asyncssh.import_known_hosts(old_line + "\n")))
    assert (await run(server, "id -un")).strip() == DEFAULT_USER  # known_hosts_path now pins the new key


def test_not_root_is_reported_as_unavailable(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(InfraUnavailable, match="root"):
        check_sshd_support()


# --------------------------------------------------------------------------------------------
# namespace hosts

_IDENTITY = "; ".join(
    [
        "cat /proc/sys/kernel/hostname",
        "echo $HOME",
        "id -un",
        "/usr/sbin/ip -4 -o addr show",
        "echo ROUTES",
        "/usr/sbin/ip -4 route show",
        "echo RESOLVE",
        "getent hosts $(cat /proc/sys/kernel/hostname)",
    ]
)


async def test_netns_hosts_have_their_own_identity(netns_hosts):
    assert len(netns_hosts) == 3
    assert len({h.address for h in netns_hosts}) == 3
    outputs: dict[int, str] = {}

    async def probe(h):
        outputs[h.index] = await run(h, _IDENTITY)

    async with anyio.create_task_group() as tg:
        for h in netns_hosts:
            tg.start_soon(probe, h)
    for h in netns_hosts:
        out = outputs[h.index]
        head, routes = out.split("ROUTES\n")
        routes, resolve = routes.split("RESOLVE\n")
        lines = head.splitlines()
        assert lines[0] == h.hostname
        assert lines[1] == str(h.home) and h.home.is_dir()
        assert lines[2] == h.user
        addrs = sorted(line.split()[3] for line in lines[3:])
        assert addrs == sorted(["127.0.0.1/8", f"{h.address}/24"]), out
        # no route out: only the private subnet, no default route
        assert routes.split() == [netns_hosts.subnet, *"dev eth0 proto kernel scope link src".split(), h.address]
        # its own hostname resolves to its own address (gloo needs this)
        assert resolve.split() == [h.address, h.hostname]


async def test_netns_hosts_reach_each_other_on_port_22(netns_hosts):
    results: dict[tuple[int, int], str] = {}

    async def probe(src, dst):
        cmd = f"timeout 5 bash -c 'exec 3<>/dev/tcp/{dst.address}/22 && head -c 8 <&3'"
        results[src.index, dst.index] = await run(src, cmd)

    async with anyio.create_task_group() as tg:
        for src in netns_hosts:
            for dst in netns_hosts:
                if src is not dst:
                    tg.start_soon(probe, src, dst)
    assert len(results) == 6
    assert set(results.values()) == {"SSH-2.0-"}


async def test_netns_known_hosts_file_pins_every_host(netns_hosts):
    path = netns_hosts.known_hosts_file()
    lines = path.read_text().splitlines()
    assert lines == [f"{h.address} {h.host_public_key}" for h in netns_hosts]
    outs = [await run(h, "cat /proc/sys/kernel/hostname", known_hosts=str(path)) for h in netns_hosts]
    assert [o.strip() for o in outs] == [h.hostname for h in netns_hosts]


# --------------------------------------------------------------------------------------------
# tear-down leaves nothing


async def test_teardown_leaves_no_process_namespace_or_file(ssh_test_env):
    server = Sshd(ssh_test_env)
    hosts = NetnsHosts(ssh_test_env, 2)
    try:
        server.start()
        try:
            hosts.create()
        except InfraUnavailable as e:
            pytest.skip(f"network-namespace hosts unavailable: {e}")
        targets = [server, *hosts]
        with anyio.fail_after(15):
            conns = [await asyncssh.connect(**t.connect_options()) for t in targets]
            for conn in conns:
                await conn.create_process("cat")
        listeners = [t.pid if isinstance(t, Sshd) else t.sshd.pid for t in targets]
        tree = [p for pid in listeners for p in descendants(pid)]
        assert len(tree) >= 3 * len(targets)  # per connection: sshd [priv], sshd user@notty, cat
        dirs = [server.dir, hosts.dir, *(h.home for h in hosts)]
        names = [h.netns for h in hosts]
    finally:
        server.close()
        hosts.close()
    for conn in conns:
        conn.close()
    assert not [p for p in listeners + tree if process_alive(p)]
    assert not leftovers(hosts.token)
    assert not set(names) & set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    assert not [d for d in dirs if Path(d).exists()]
    assert not (STATE_DIR / f"{hosts.token}.json").exists()
    hosts.close()  # idempotent
    server.close()


def test_stale_leftovers_of_a_dead_run_are_cleaned(ssh_test_env):
    hosts = NetnsHosts(ssh_test_env, 1)
    try:
        try:
            hosts.create()
        except InfraUnavailable as e:
            pytest.skip(f"network-namespace hosts unavailable: {e}")
        dead = subprocess.Popen(["true"])
        dead.wait()
        record = STATE_DIR / f"{hosts.token}.json"
        with infra_lock():  # (a parallel run's set-up would clean it up too)
            record.write_text(record.read_text().replace(f'"pid": {os.getpid()}', f'"pid": {dead.pid}'))
            assert leftovers(hosts.token)
            assert hosts.token in cleanup_stale()
        assert not leftovers(hosts.token)
        assert not hosts.dir.exists()
    finally:
        hosts.close()  # after the cleanup: nothing left to do, no error


async def test_another_runs_account_changes_do_not_move_this_runs_homes(sshd_host, netns_hosts):
    """Another suite on the machine adds and removes its accounts (rewriting /etc/passwd) while this
    run's servers are up: every session still sees this run's own home. (With homes given by a
    bind-mounted copy of /etc/passwd, the rewrite dropped the mount and sessions fell back to the
    account's system home.)"""
    other = f"skyt{os.getpid()}s{900 + os.getpid() % 99}"  # the name pattern the stale sweep removes
    # what another run's start and end do: useradd, userdel — each writes a new /etc/passwd
    subprocess.run(["useradd", "--no-create-home", other], check=True, capture_output=True)
    subprocess.run(["userdel", other], check=True, capture_output=True)
    for server, home in [(sshd_host, sshd_host.home), *((h, h.home) for h in netns_hosts)]:
        assert (await run(server, "echo $HOME")).strip() == str(home)
        assert (await run(server, "id -un")).strip() == server.user
