"""A named SSH pool given by `~/.ssh/config` aliases (SkyPilot's SSH Node Pools habit, issue 39 point 3):
the aliases are resolved once, when the pool is created (HostName, Port, User, IdentityFile, as `ssh -G`
says), and every later command uses what was resolved — `status` shows the port the pool used,
`skyhive ssh NAME --node 1` reaches node 1, the generated `ssh/NAME.config` names the address, port and
key, and `stop` then `start` finds the same hosts with their pinned host keys. The aliases are changed
(swapped) after the launch: a command that looked them up again would reach the wrong host, whose key
is not the pinned one.

Real OpenSSH sshd in network namespaces (tests/infra), listening on port 22922 as well as 22; the
commands run as processes of their own with a test-owned HOME whose ~/.ssh/config holds the aliases.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.clusters.test_clusters import running_under
from tests.clusters.test_ssh_clusters import cluster_processes, key, socket_dirs

pytestmark = [pytest.mark.slow]

PORT = 22922
TASK = """\
num_nodes: 2
run: echo "run $SKYPILOT_NODE_RANK on $(hostname)"
"""


def alias_config(hosts, order: tuple[int, int]) -> str:
    """`Host h1` and `Host h2` on port 22922: h1 is hosts[order[0]], h2 hosts[order[1]]."""
    blocks = []
    for name, index in zip(("h1", "h2"), order):
        h = hosts[index]
        blocks.append(f"Host {name}\n  HostName {h.address}\n  Port {PORT}\n  User {h.user}\n"
                      f"  IdentityFile {h.client_key}\n")
    return "".join(blocks)


@pytest.fixture
def alias_hosts(make_netns_hosts, skyhive_home, tmp_path):
    """Two namespace hosts whose sshd listens on 22922 too, a HOME whose ~/.ssh/config names them h1, h2;
    afterwards every named pool is taken down and nothing of it is left, here or on the hosts."""
    hosts = list(make_netns_hosts(2, extra_config=[f"Port {PORT}"]))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "config").write_text(alias_config(hosts, (0, 1)))
    yield hosts, home
    from skyhive.runtime.clusters import record as records
    from skyhive.runtime.control.pools import down_cluster

    names = records.names()
    for name in names:
        down_cluster(name, quiet=True)
    ours = [key(name, skyhive_home) for name in names]
    deadline = time.monotonic() + 30
    while (running_under(skyhive_home) or any(cluster_processes(p) for p in ours)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running_under(skyhive_home) == [], "local processes left running"
    for prefix in ours:
        assert cluster_processes(prefix) == [], "pool processes left running on the hosts"
    assert records.names() == []
    for name in names:
        assert socket_dirs(hosts, name) == [], "socket directories left on the hosts"


def cli(*args: str, home: Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "skyhive", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_an_ssh_pool_of_aliases_is_reached_as_resolved_at_creation_by_every_later_command(alias_hosts, tmp_path):
    from skyhive.paths import state_dir

    hosts, home = alias_hosts
    (tmp_path / "t.yaml").write_text(TASK)
    launched = cli("launch", "-y", "-c", "al", "--provider", "ssh", "t.yaml", "--hosts", "h1", "h2",
                   home=home, cwd=tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    for n, h in enumerate(hosts):
        assert f"run {n} on {h.hostname}" in launched.stdout, launched.stdout
    # the aliases now name the other host: what was resolved at creation must be used, not this
    (home / ".ssh" / "config").write_text(alias_config(hosts, (1, 0)))

    config = (state_dir() / "ssh" / "al.config").read_text()
    for n, h in enumerate(hosts):
        entry = config.split(f"Host {'al' if n == 0 else 'al-worker1'}\n", 1)[1].split("\nHost ", 1)[0]
        assert f"HostName {h.address}" in entry and f"Port {PORT}" in entry, config
        assert f"User {h.user}" in entry and f"IdentityFile {h.client_key}" in entry, config

    status = cli("status", home=home, cwd=tmp_path)
    row = next(ln for ln in status.stdout.splitlines() if ln.startswith("al "))
    assert f"{hosts[0].address}:{PORT}" in row and f"{hosts[1].address}:{PORT}" in row, status.stdout
    detail = cli("status", "al", home=home, cwd=tmp_path)
    assert f"node 1: {hosts[1].user}@{hosts[1].address}:{PORT}" in detail.stdout, detail.stdout
    ip = cli("status", "--ip", "al", home=home, cwd=tmp_path)
    assert ip.returncode == 0 and ip.stdout.strip() == hosts[0].address, ip.stdout + ip.stderr

    on_node = cli("ssh", "al", "--node", "1", "--", "hostname", home=home, cwd=tmp_path, timeout=60)
    assert on_node.returncode == 0 and on_node.stdout.strip() == hosts[1].hostname, on_node.stdout + on_node.stderr

    stopped = cli("stop", "-y", "al", home=home, cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    started = cli("start", "-y", "al", home=home, cwd=tmp_path)
    assert started.returncode == 0, started.stdout + started.stderr
    assert "does not match" not in started.stderr
    again = cli("exec", "al", "t.yaml", home=home, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    for n, h in enumerate(hosts):
        assert f"run {n} on {h.hostname}" in again.stdout, again.stdout
    on_head = cli("ssh", "al", "--", "hostname", home=home, cwd=tmp_path, timeout=60)
    assert on_head.returncode == 0 and on_head.stdout.strip() == hosts[0].hostname, on_head.stdout + on_head.stderr

    down = cli("down", "-y", "al", home=home, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert not (state_dir() / "ssh" / "al.config").exists()


def test_an_alias_is_resolved_as_ssh_G_says(tmp_path):
    """The resolution itself, compared with OpenSSH's own `ssh -G` for the same file (no connection)."""
    from skyhive.providers.ssh import SSH

    cfg = tmp_path / "config"
    cfg.write_text(textwrap.dedent("""\
        Host h1
          HostName 10.213.0.2
          Port 22922
          User alice
          IdentityFile /keys/h1
        Host *
          User nobody
        """))
    hosts, options = SSH(hosts=["h1", "bob@h2:2200"], ssh_config=str(cfg)).resolved()
    assert hosts == ["alice@10.213.0.2:22922", "bob@h2:2200"]
    assert options == [("/keys/h1", None), (None, None)]
    shown = subprocess.run(["ssh", "-G", "-F", str(cfg), "h1"], capture_output=True, text=True, timeout=30)
    if shown.returncode == 0:
        said = dict(ln.split(" ", 1) for ln in shown.stdout.splitlines() if " " in ln)
        assert (said["user"], said["hostname"], said["port"]) == ("alice", "10.213.0.2", "22922")
        assert said["identityfile"] == "/keys/h1"
    # recorded once, then nothing is looked up again (the file may change or go)
    again = SSH(hosts=hosts, ssh_config=None, host_options=options)
    assert again.resolved() == (hosts, options)
