"""`skyhive down` after a killed client of an SSH pool: the detached workers on the hosts are stopped.

Against real OpenSSH (tests/infra: a fresh loopback sshd whose login user is not root). The hosts are
this machine, so the tests look at the login user's processes and files directly; `down` itself only
reaches them over SSH (the local sweep of `down` skips other users' processes).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import secrets
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import asyncssh
import pytest

from skyhive.runtime.events.log import pool_log_path, read_log
from skyhive.runtime.events.types import NodeStateChanged, PoolStarted, to_json
from skyhive.runtime.events.state import fold
from tests.infra.sshd import find_free_port
from tests.procs import state_of

pytestmark = [pytest.mark.slow]

SKYHIVE = [sys.executable, "-m", "skyhive"]

HOLDER = textwrap.dedent("""\
    import os, subprocess, sys, time
    import skyhive as sky

    host, key, known_hosts, name = sys.argv[1:5]

    def start():
        # ignores SIGTERM and leaves the worker's session: `down` must find it by the pool id
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
        child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        return os.getpid(), child.pid

    with sky.Pool(provider=sky.SSH(hosts=[host], key=key, known_hosts=known_hosts), nodes=1, name=name) as pool:
        worker, child = pool.run(start)
        print("ready", pool.id, worker, child, flush=True)
        time.sleep(600)
""")


def skyhive(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SKYHIVE, *args], capture_output=True, text=True, timeout=180)


def running(pid: int) -> bool:
    """`pid` exists and is not a zombie (read from /proc/PID/stat: a zombie has stopped running)."""
    return state_of(pid) not in (None, "Z")


def pool_processes(pool_id: str) -> set[int]:
    """Running processes (zombies excluded) that belong to `pool_id`: the pool id in their
    `COMPUTE_POOL` environment, or one of its sockets on their command line."""
    needle = f'"pool_id":{json.dumps(pool_id)}'.encode()
    sock = re.compile(rb"(^|/)" + re.escape(pool_id.encode()) + rb"-\d+-\d+\.sock$")
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        mine = any(item.startswith(b"COMPUTE_POOL=") and needle in item for item in env)
        if (mine or any(sock.search(a) for a in argv)) and running(int(entry)):
            found.add(int(entry))
    return found


def still_running(pids: set[int], timeout: float = 10.0) -> set[int]:
    """Those of `pids` still running (not gone, not zombies) after at most `timeout`."""
    deadline = time.monotonic() + timeout
    left = {p for p in pids if running(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = {p for p in left if running(p)}
    return left


def pool_files(server, pool_id: str) -> list[Path]:
    """The pool's entries in the login user's socket directories (sockets, their .log/.exit files)."""
    dirs = [Path(server.home) / ".skyhive" / "run", Path(f"/tmp/skyhive-{server.user}")]
    pattern = re.compile(re.escape(pool_id) + r"(-\d+-\d+\.sock(\..*)?)?")
    return sorted(p for d in dirs if d.is_dir() for p in d.iterdir() if pattern.fullmatch(p.name))


def coll_dirs(server, pool_id: str) -> list[Path]:
    """The directories of the pool's collections' forwarded sockets on the host
    (runtime/kinds/ssh/collections.py), which a killed client leaves."""
    from skyhive.providers.ssh_sweep import collections_prefix

    return sorted((Path(server.home) / ".skyhive" / "run").glob(f"{collections_prefix(pool_id)}-*-n0"))


def start_holder(tmp_path: Path, server, name: str) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    proc = subprocess.Popen(
        [sys.executable, str(script), f"{server.user}@{server.host}:{server.port}", str(server.client_key),
         str(server.known_hosts_path), name],
        stdout=subprocess.PIPE, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
    return proc, lines


def kill_pool_processes(pool_id: str) -> None:
    """Test cleanup, whatever happened: SIGKILL what is left of the pool on this machine."""
    for pid in pool_processes(pool_id):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_down_stops_the_detached_workers_of_a_killed_client_and_leaves_other_pools_alone(make_sshd, tmp_path):
    server = make_sshd()
    tag = secrets.token_hex(3)
    victim, other = f"down-{tag}", f"down-{tag}-1"  # the other's id starts with the victim's
    holders = {}
    try:
        for name in (victim, other):
            holders[name] = start_holder(tmp_path, server, name)
        ready = {}
        for name, (proc, lines) in holders.items():
            line = lines.get(timeout=180)
            assert line.startswith("ready"), f"holder of {name} said {line!r} (exit {proc.poll()})"
            _, pool_id, worker, child = line.split()
            assert pool_id == name
            ready[name] = (int(worker), int(child))
        listed = skyhive("ls")
        row = next(ln for ln in listed.stdout.splitlines() if ln.startswith(victim + " "))
        assert row.split()[1:6] == ["ssh", "1:", "1", "ready", "running"]

        for proc, _ in holders.values():
            proc.send_signal(signal.SIGKILL)
            proc.wait()

        # the client is gone; by design its detached worker (and what its task started) keeps running
        worker, child = ready[victim]
        assert running(worker) and running(child)
        before = pool_processes(victim)
        assert {worker, child} <= before
        assert [p.name.endswith(".sock") for p in pool_files(server, victim)].count(True) == 1
        assert len(coll_dirs(server, victim)) == len(coll_dirs(server, other)) == 1  # their sshd forwards died
        other_before = pool_processes(other)
        assert set(ready[other]) <= other_before
        assert f"client gone (skyhive down {victim})" in skyhive("ls").stdout

        cleaned = skyhive("down", victim)
        assert cleaned.returncode == 0, cleaned.stderr
        # stopped over SSH by the provider, not by the local sweep (which leaves other users' processes)
        assert f"{victim}: stopped (0 leftover processes killed, 1 provider nodes destroyed)" in cleaned.stdout
        assert still_running(before) == set()  # SIGTERM, then SIGKILL for the child that ignores it
        assert pool_processes(victim) == set()
        assert pool_files(server, victim) == [] and coll_dirs(server, victim) == []

        state = fold(read_log(pool_log_path(victim)))
        assert state.status == "stopped" and [n.state for n in state.nodes] == ["terminated"]
        assert state.error.startswith("cleaned up by skyhive down: client process")
        listed = skyhive("ls")
        assert victim + " " not in listed.stdout
        assert f"client gone (skyhive down {other})" in listed.stdout
        assert re.search(rf"^{re.escape(victim)} .*stopped", skyhive("ls", "-a").stdout, re.M)

        # the other pool on the same host: untouched
        assert still_running(other_before, timeout=0) == other_before
        assert pool_processes(other) == other_before
        assert any(p.name.endswith(".sock") for p in pool_files(server, other))
        assert len(coll_dirs(server, other)) == 1

        again = skyhive("down", victim)
        assert again.returncode == 0 and f"{victim}: already stopped" in again.stdout

        cleaned = skyhive("down", other)
        assert cleaned.returncode == 0, cleaned.stderr
        assert still_running(other_before) == set()
        assert pool_files(server, other) == [] and coll_dirs(server, other) == []
        assert "no pools running" in skyhive("ls").stdout
    finally:
        for proc, _ in holders.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for name in (victim, other):
            kill_pool_processes(name)


async def run_on(server, command: str):
    async with asyncssh.connect(**server.connect_options()) as conn:
        return await asyncio.wait_for(conn.run(command, check=False), 30)


def fake_log(pool_id: str, provider_config: dict, nodes: int) -> Path:
    """The log a client leaves when it is killed after its nodes came up (its pid no longer runs)."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    path = pool_log_path(pool_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    now = time.time()
    events = [PoolStarted(pool_id=pool_id, seq=0, ts=now, provider="ssh", nodes=nodes, processes_per_node=1,
                          pid=dead.pid, host=socket.gethostname(), provider_config=provider_config)]
    for i in range(nodes):
        events.append(NodeStateChanged(pool_id=pool_id, seq=len(events), ts=now, node=i, state="requested"))
    path.write_text("".join(to_json(e) + "\n" for e in events))
    return path


def test_down_with_an_unreachable_host_names_it_and_fails_but_cleans_the_others(make_sshd):
    server = make_sshd()
    pool_id = f"lost-{secrets.token_hex(3)}"
    dead_port = find_free_port()
    good, bad = f"{server.user}@{server.host}:{server.port}", f"{server.user}@127.0.0.1:{dead_port}"
    # something of the pool left on the reachable host: a process with its COMPUTE_POOL, ignoring
    # SIGTERM, and a socket file
    info = json.dumps({"pool_id": pool_id, "node": 0}, separators=(",", ":"))
    run_dir = Path(server.home) / ".skyhive" / "run"
    start = (f"mkdir -p {run_dir} && touch {run_dir}/{pool_id}-1-1.sock; "
             f"{{ env COMPUTE_POOL='{info}' setsid sh -c 'trap \"\" TERM; exec sleep 600'; }} "
             f"</dev/null >/dev/null 2>&1 & echo $!")
    out = asyncio.run(run_on(server, start))
    assert out.exit_status == 0, out.stderr
    try:
        deadline = time.monotonic() + 10
        while not (left := pool_processes(pool_id)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left
        config = {"provider": "ssh", "hosts": [good, bad], "key": str(server.client_key),
                  "known_hosts": str(server.known_hosts_path), "python": None, "connect_timeout": 5}
        path = fake_log(pool_id, config, nodes=2)

        failed = skyhive("down", pool_id)
        assert failed.returncode == 1, failed
        assert "Traceback" not in failed.stderr
        assert f"host {bad}: cannot connect" in failed.stderr and "Connect call failed" in failed.stderr
        assert f"run `skyhive down {pool_id}` again" in failed.stderr
        assert good not in failed.stderr  # that host was cleaned
        assert still_running(left) == set()
        assert pool_files(server, pool_id) == []
        # nothing recorded: the pool still needs cleaning up, and says so
        assert fold(read_log(path)).status != "stopped"
        assert f"client gone (skyhive down {pool_id})" in skyhive("ls").stdout

        # only the hosts the pool used are visited: as a 1-node pool, the unreachable second host is not
        fake_log(pool_id, config, nodes=1)
        cleaned = skyhive("down", pool_id)
        assert cleaned.returncode == 0, cleaned.stderr
        assert fold(read_log(path)).status == "stopped"
    finally:
        kill_pool_processes(pool_id)
