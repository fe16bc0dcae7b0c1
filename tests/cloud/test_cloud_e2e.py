"""End to end: a sky.AWS pool (moto) whose instances are mapped, by a test-only hook, to the tests' own
sshd hosts in network namespaces; it really bootstraps workers over SSH, broadcasts, runs DDP on 2
nodes and tears down — instances gone in moto, workers gone on the hosts.

The client runs inside a third namespace host, which has no default route: moto's invented addresses
are unreachable from it by construction.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from tests.procs import Lines

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed in the client venv"),
    pytest.mark.skipif(importlib.util.find_spec("moto") is None, reason="moto is not installed (dev extra)"),
]

ROOT = Path(__file__).resolve().parents[2]


def test_aws_pool_on_namespace_hosts_bootstraps_trains_and_leaves_nothing(make_netns_hosts, skyhive_home):
    hosts = make_netns_hosts(3, per_host_home=False)
    client, nodes = hosts[0], [hosts[1], hosts[2]]
    known = Path(nodes[0].dir).parent / "known_hosts_e2e"
    known.write_text("".join(h.known_hosts_line + "\n" for h in nodes))
    marker_dir = Path(tempfile.mkdtemp(prefix="skyhive-ready-"))
    marker_dir.chmod(0o777)  # the ready command runs as the nodes' login user
    config = {"hosts": [[h.address, h.user] for h in nodes], "key": str(nodes[0].client_key),
              "known_hosts": str(known), "marker_dir": str(marker_dir)}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SKYHIVE_HOME": skyhive_home}
    done = client.run([sys.executable, "-m", "tests.cloud.cloud_e2e_client", json.dumps(config)], check=False,
                      timeout=1200, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["inside"] == {"instances": 2, "groups": 1, "keys": 1}
    assert seen["after"] == {"instances": 0, "groups": 0, "keys": 0}
    assert seen["placed"] == [[nodes[0].hostname, 0], [nodes[1].hostname, 1]]
    assert seen["counted"] == [1, 2]  # one sky.counter for both cloud nodes (docs/collections.md)
    assert [d for d in seen["collections"] if os.path.exists(d)] == [], "collections' sockets left on the hosts"
    assert seen["world"] == [2, 2] and seen["heads"] == [nodes[0].address] * 2 and seen["same_params"]
    for host in nodes:  # the workers are gone on the hosts (processes in that host's network namespace)
        assert workers_in(host.netns) == [], f"{host.hostname}: workers left"
    # bootstrap ran each node's ready command (a cloud node's wait for cloud-init) before looking at it
    assert sorted(os.listdir(marker_dir)) == sorted(f"ready-{h.hostname}" for h in nodes)
    shutil.rmtree(marker_dir, ignore_errors=True)


def workers_in(netns: str, wait: float = 10.0) -> list[str]:
    """Command lines of skyhive workers still in this namespace, after waiting up to `wait` s for them."""
    deadline = time.monotonic() + wait
    while True:
        pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout.split()
        found = []
        for pid in pids:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "skyhive.runtime.worker" in cmdline and not _zombie(pid):
                found.append(cmdline)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _zombie(pid: str) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_idle_watchdog_keeps_a_connected_node_and_shuts_down_one_whose_client_was_killed(make_netns_hosts,
                                                                                          skyhive_home, tmp_path):
    hosts = make_netns_hosts(3, per_host_home=False)
    client, nodes = hosts[0], [hosts[1], hosts[2]]
    known = Path(nodes[0].dir).parent / "known_hosts_wd"
    known.write_text("".join(h.known_hosts_line + "\n" for h in nodes))
    marker_dir = Path(tempfile.mkdtemp(prefix="skyhive-watchdog-"))
    marker_dir.chmod(0o777)  # the shutdown command runs as the nodes' login user
    lifted_dir = Path(tempfile.mkdtemp(prefix="skyhive-lifted-"))
    lifted_dir.chmod(0o777)
    idle = 3.0
    config = {"mode": "watchdog", "idle": idle, "marker_dir": str(marker_dir), "lifted_dir": str(lifted_dir),
              "key": str(nodes[0].client_key),
              "hosts": [[h.address, h.user] for h in nodes], "known_hosts": str(known)}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SKYHIVE_HOME": skyhive_home}
    proc = subprocess.Popen(client.exec_argv([sys.executable, "-m", "tests.cloud.cloud_e2e_client", json.dumps(config)]),
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    try:
        try:
            line = out.wait_for("FIRED DURING LONG TASK:", 300, "the client's long task")
        except AssertionError as e:
            proc.kill()
            pytest.fail(f"the client did not run its long task: {e}\n{err.rest()[-4000:]}")
        assert json.loads(line.split(":", 1)[1]) == [[], []]  # connected for 3x idle: no watchdog fired
        assert sorted(os.listdir(marker_dir)) == []
        # bootstrap lifted each node's boot-time limit (its `boot_limit_off`, here a marker), the watchdog taking over
        assert sorted(os.listdir(lifted_dir)) == sorted(h.hostname for h in nodes)
        proc.kill()  # SIGKILL: its SSH connections drop, nothing of skyhive runs on the client any more
        proc.wait(30)
        deadline = time.monotonic() + idle + 5 + 20  # idle, one check interval, slack
        while sorted(os.listdir(marker_dir)) != sorted(h.hostname for h in nodes) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert sorted(os.listdir(marker_dir)) == sorted(h.hostname for h in nodes)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for host in nodes:  # the detached workers (they would idle out only after 10 min)
            for pid in subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True,
                                      text=True).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        shutil.rmtree(marker_dir, ignore_errors=True)
        shutil.rmtree(lifted_dir, ignore_errors=True)
