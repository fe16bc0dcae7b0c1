"""Pools over `sky.SSH` against real OpenSSH hosts (tests/infra): loopback sshd and namespace hosts."""

from __future__ import annotations

import logging
import os
import secrets
import socket
from pathlib import Path

import anyio
import pytest

import skyhive as sky
from skyhive.runtime.events.types import NodeStateChanged

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def ssh_for(hosts, **kw) -> sky.SSH:
    """A provider for test hosts (an Sshd, or NetnsHosts): their key, their known_hosts only."""
    hosts = list(hosts) if not hasattr(hosts, "connect_options") else [hosts]
    known = kw.pop("known_hosts", None)
    if known is None:
        known = hosts[0].known_hosts_path if len(hosts) == 1 else _known_file(hosts)
    return sky.SSH(
        hosts=[f"{h.user}@{h.host}:{h.port}" for h in hosts], key=str(hosts[0].client_key),
        known_hosts=str(known), connect_timeout=kw.pop("connect_timeout", 10), **kw,
    )


def _known_file(hosts) -> str:
    path = hosts[0].dir.parent / "known_hosts_all"
    path.write_text("".join(h.known_hosts_line + "\n" for h in hosts))
    return str(path)


def getenv(name: str) -> str | None:
    return os.environ.get(name)


def where() -> tuple[str, str, object]:
    info = sky.instance_info()
    return socket.gethostname(), os.environ.get("HOME", ""), info


async def test_broadcast_over_three_namespace_hosts(netns_hosts):
    async with sky.Pool(provider=ssh_for(netns_hosts), nodes=3) as pool:
        results = await pool.broadcast(where)
        again = await pool.run(lambda x: x * 2, 21)
    assert again == 42
    assert len(results) == 3
    addresses = [h.address for h in netns_hosts]
    for i, (hostname, home, info) in enumerate(results):
        assert hostname == netns_hosts[i].hostname  # it really ran on that host
        assert home == str(netns_hosts[i].home)
        assert info.node == i and info.total_nodes == 3
        assert info.head_addr == addresses[0]
        assert [p.addr for p in info.peers] == addresses
        assert info.peers[i].addr == addresses[i]


async def test_second_pool_reuses_the_environment(sshd_host):
    image = sky.Image(env={"SKYHIVE_TEST_FLAVOUR": "warm"}, setup=["echo built > marker"])
    details = []
    for _ in range(2):
        async with sky.Pool(provider=ssh_for(sshd_host), nodes=1, image=image) as pool:
            assert await pool.run(getenv, "SKYHIVE_TEST_FLAVOUR") == "warm"
            ready = [e for e in pool._runtime.log.recent if isinstance(e, NodeStateChanged) and e.state == "ready"]
            details.append(ready[0].detail)
    assert " built in " in details[0], details
    assert " cached " in details[1], details
    key = details[0].split()[1]
    assert (sshd_host.home / ".skyhive" / "envs" / key / ".ready").exists()


async def test_the_nodes_skyhive_directory_is_private(sshd_host):
    state = sshd_host.home / ".skyhive"
    if state.exists():
        state.chmod(0o755)  # left open by an older bootstrap: made private again
    async with sky.Pool(provider=ssh_for(sshd_host), nodes=1, output=None) as pool:
        assert await pool.run(getenv, "HOME") == str(sshd_host.home)
    assert oct(state.stat().st_mode & 0o777) == "0o700"


async def test_env_and_secrets_reach_the_worker_and_secrets_are_never_logged(sshd_host, caplog, skyhive_home):
    caplog.set_level(logging.DEBUG)
    secret = f"s3cr3t-{secrets.token_hex(6)}"
    image = sky.Image(env={"PLAIN_VAR": "visible"}, secrets={"API_TOKEN": secret},
                      setup=[f'test "$API_TOKEN" = {secret} && echo "token ok: $API_TOKEN"'])
    async with sky.Pool(provider=ssh_for(sshd_host), nodes=1, image=image) as pool:
        assert await pool.run(getenv, "API_TOKEN") == secret
        assert await pool.run(getenv, "PLAIN_VAR") == "visible"
        print_secret = await pool.run(lambda: print(os.environ["API_TOKEN"]), capture=False)
        assert print_secret is None
    assert "skyhive.runtime.worker.server" in caplog.text  # the command lines were logged ...
    assert secret not in caplog.text  # ... without the secret (the environment goes on stdin)
    for path in Path(skyhive_home, "pools").glob("*.jsonl"):
        assert secret not in path.read_text()


async def test_example_ssh_hosts_runs(sshd_host, capsys):
    import runpy

    module = runpy.run_path(str(Path(__file__).resolve().parents[3] / "examples" / "ssh_hosts.py"), run_name="example")
    places = await module["main"]([f"{sshd_host.user}@{sshd_host.host}:{sshd_host.port}", "--key",
                                   str(sshd_host.client_key), "--known-hosts", str(sshd_host.known_hosts_path)])
    assert [p[1] for p in places] == [0]
    assert "squares: [0, 1, 4, 9, 16, 25, 36, 49, 64, 81]" in capsys.readouterr().out


def count_up(n):
    for i in range(n):
        yield i * i


def pid_after(seconds):
    import time

    time.sleep(seconds)
    return os.getpid()


async def test_streaming_and_concurrency_over_ssh(sshd_host):
    """A generator's items (protocol `Item` frames) cross the resumable SSH link; task slots of
    `sky.Worker(concurrency=3, executor="process")` are three detached workers on the host."""
    async with sky.Pool(provider=ssh_for(sshd_host), nodes=1,
                        worker=sky.Worker(concurrency=3, executor="process")) as pool:
        got = [x async for x in pool.stream(count_up, 5)]
        pids = await (sky.gather(*(sky.compute(pid_after)(0.5) for _ in range(3))) >> pool)
        assert len(await pool.broadcast(os.getpid)) == 1
    assert got == [0, 1, 4, 9, 16]
    assert len(set(pids)) == 3
