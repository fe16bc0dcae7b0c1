"""Named pools that outlive the command (issue 15): detached Local workers, the record, keep/attach,
`skyhive launch -c` / `exec` / `status` / `down`, all with real processes.

Every test ends by taking its pools down and checking that no process started under its state
directory is left running, and that no socket or record is left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.procs import state_of

SKYHIVE = [sys.executable, "-m", "skyhive"]
TASKS = Path(__file__).resolve().parent.parent / "examples" / "tasks"


def skyhive(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SKYHIVE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def python(code: str, *, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def running_under(home: str) -> list[int]:
    """Live (not zombie) processes started with this state directory: workers, agents, their children."""
    found = []
    needle = f"SKYHIVE_HOME={home}\0".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = fh.read() + b"\0"
        except OSError:
            continue
        if needle in environ and state_of(int(entry)) not in (None, "Z"):
            found.append(int(entry))
    return found


def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def record(home: str, name: str) -> dict:
    return json.loads((Path(home) / "clusters" / name / "record.json").read_text())


@pytest.fixture
def clean(skyhive_home):
    """Takes every named pool down at the end and checks nothing is left: processes, sockets, records."""
    yield skyhive_home
    from skyhive.runtime.clusters import record as records
    from skyhive.runtime.commands.clusters import down_cluster

    socket_dirs = []
    for name in records.names():
        try:
            socket_dirs.append(records.load(name).socket_dir)
        finally:
            down_cluster(name, quiet=True)
    deadline = time.monotonic() + 10
    while running_under(skyhive_home) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running_under(skyhive_home) == [], "processes left running"
    assert records.names() == []
    for d in socket_dirs:
        assert not os.path.exists(d), f"socket directory {d} left behind"


SIMPLE = """\
    name: hello
    num_nodes: 2
    resources:
      cloud: local
    setup: |
      echo "setup on node $SKYPILOT_NODE_RANK"
    run: |
      echo "hello from node $SKYPILOT_NODE_RANK of $SKYPILOT_NUM_NODES worker $PPID"
    """


def _worker_pids(home: str, name: str) -> list[int]:
    return sorted(w["pid"] for w in record(home, name)["workers"])


# ---- (a) detached Local nodes, the record, keep / attach ---------------------------------------------


def test_kept_pool_outlives_its_block_and_is_attached_from_another_process(tmp_path, clean):
    home = clean
    created = python("""
        import os, skyhive as sky
        with sky.Pool(provider=sky.Local(), nodes=2, name="keepme", keep=True, output=None) as pool:
            print(sorted(pool.broadcast(os.getpid)))
        """, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    pids = json.loads(created.stdout.strip().splitlines()[-1])
    assert pids == _worker_pids(home, "keepme")
    assert all(state_of(p) not in (None, "Z") for p in pids)  # the block is over, the workers are not
    rec_dir = Path(home) / "clusters" / "keepme"
    assert oct(rec_dir.stat().st_mode & 0o777) == "0o700"
    sock_dir = Path(record(home, "keepme")["socket_dir"])
    assert oct(sock_dir.stat().st_mode & 0o777) == "0o700"
    assert oct((rec_dir / "record.json").stat().st_mode & 0o777) == "0o600"

    attached = python("""
        import os, skyhive as sky
        with sky.Pool.attach("keepme", output=None) as pool:
            print(sorted(pool.broadcast(os.getpid)))
        """, cwd=tmp_path)
    assert attached.returncode == 0, attached.stderr
    assert json.loads(attached.stdout.strip().splitlines()[-1]) == pids  # the same worker processes

    from skyhive.runtime.events.log import read_log
    from skyhive.runtime.events.state import fold

    events = list(read_log(Path(home) / "pools" / "keepme.jsonl"))
    kinds = [e.kind for e in events]
    assert kinds.count("pool_started") == 2 and kinds.count("pool_detached") == 2  # both clients, one log
    assert [e.seq for e in events] == list(range(len(events)))  # numbered on across clients
    assert fold(events).status == "detached"

    gone = python("""
        import skyhive as sky
        with sky.Pool.attach("keepme", keep=False, output=None) as pool:
            pool.broadcast(abs, -1)
        """, cwd=tmp_path)
    assert gone.returncode == 0, gone.stderr
    assert wait_for(lambda: all(state_of(p) in (None, "Z") for p in pids), what="workers to exit")
    assert not (rec_dir / "record.json").exists()


def test_sigkilled_attached_client_leaves_the_pool_healthy(tmp_path, clean):
    home = clean
    task = write(tmp_path / "t.yaml", SIMPLE)
    first = skyhive("launch", "-c", "train", str(task), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    pids = _worker_pids(home, "train")
    client = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import time, skyhive as sky
        with sky.Pool.attach("train", output=None) as pool:
            print("attached", flush=True)
            pool.broadcast(time.sleep, 60)
        """)], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "attached"
        time.sleep(0.5)  # the broadcast is running on both workers
        client.send_signal(signal.SIGKILL)
    finally:
        client.wait(timeout=10)
    again = python("""
        import os, skyhive as sky
        with sky.Pool.attach("train", output=None, wait=30) as pool:
            print(sorted(pool.broadcast(os.getpid)))
        """, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1]) == pids  # the sleeps were cancelled, same workers
    status = skyhive("status", cwd=tmp_path)
    assert "train" in status.stdout and "UP" in status.stdout


def test_attach_errors_name_the_pool(tmp_path, clean):
    home = clean
    unknown = python("""
        import skyhive as sky
        try:
            sky.Pool.attach("nosuch")
        except sky.PoolNotFound as exc:
            print("PoolNotFound:", exc)
        """, cwd=tmp_path)
    assert "PoolNotFound: no named pool 'nosuch'" in unknown.stdout, unknown.stderr
    made = python("""
        import skyhive as sky
        with sky.Pool(provider=sky.Local(), nodes=1, name="dies", keep=True, output=None) as pool:
            pass
        try:
            sky.Pool(provider=sky.Local(), nodes=1, name="dies", keep=True)
        except sky.PoolExists as exc:
            print("PoolExists:", exc)
        """, cwd=tmp_path)
    assert "PoolExists: pool 'dies' already runs" in made.stdout, made.stderr
    for pid in _worker_pids(home, "dies"):
        os.killpg(pid, signal.SIGKILL)
    dead = python("""
        import skyhive as sky
        try:
            sky.Pool.attach("dies")
        except sky.PoolGone as exc:
            print("PoolGone:", exc)
        """, cwd=tmp_path)
    assert "PoolGone: pool 'dies': its workers died" in dead.stdout, dead.stderr
    assert "skyhive down dies" in dead.stdout
    bad = python("""
        import skyhive as sky
        for kw in ({"keep": True}, {"keep": True, "name": "no/slash"}, {"name": "x", "autostop": 5}):
            try:
                sky.Pool(provider=sky.Local(), **kw)
            except ValueError as exc:
                print("ValueError:", exc)
        """, cwd=tmp_path)
    lines = bad.stdout.splitlines()
    assert len(lines) == 3, bad.stderr
    assert "needs a name=" in lines[0] and "'no/slash' cannot name a pool" in lines[1] and "keep=True" in lines[2]
