"""Named pools that outlive the command (issue 15): detached Local workers, the record, keep/attach,
`skyhive launch -c` / `exec` / `status` / `down`, all with real processes.

Every test ends by taking its pools down and checking that no process started under its state
directory is left running, and that no socket or record is left behind.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.procs import Lines, state_of

SKYHIVE = [sys.executable, "-m", "skyhive"]
TASKS = Path(__file__).resolve().parents[2] / "examples" / "tasks"


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


def sigkill_a_busy_attached_client(name: str, tmp_path: Path, env: dict[str, str] | None = None) -> Path:
    """Attach to pool `name` from another process, start a task on both of its workers, and SIGKILL
    that client while the tasks run; the file each task marked with an "x" as it started."""
    marks = tmp_path / "running"
    client = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time, skyhive as sky

        def busy(path):
            with open(path, "a") as fh:
                fh.write("x")
            time.sleep(60)

        with sky.Pool.attach({name!r}, output=None) as pool:
            pool.broadcast(busy, {str(marks)!r})
        """)], cwd=tmp_path, env=env)
    try:
        wait_for(lambda: marks.exists() and marks.read_text() == "xx", what="the task to run on both workers")
        client.send_signal(signal.SIGKILL)
    finally:
        client.wait(timeout=10)
    return marks


def record(home: str, name: str) -> dict:
    return json.loads((Path(home) / "clusters" / name / "record.json").read_text())


@pytest.fixture
def clean(skyhive_home):
    """Takes every named pool down at the end and checks nothing is left: processes, sockets, records."""
    yield skyhive_home
    from skyhive.runtime.clusters import record as records
    from skyhive.runtime.control.pools import down_cluster

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
    work = Path(skyhive_home) / "work"
    assert not work.exists() or list(work.iterdir()) == [], "job working directories left behind"


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
    marks = sigkill_a_busy_attached_client("train", tmp_path)
    again = python("""
        import os, skyhive as sky
        with sky.Pool.attach("train", output=None, wait=30) as pool:
            print(sorted(pool.broadcast(os.getpid)))
        """, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1]) == pids  # the busy tasks were cancelled, same workers
    assert marks.read_text() == "xx"  # and not run again
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


# ---- (b) launch -c / exec / status / down: seed 004's commands ---------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed in this environment (pip install -e '.[torch]')")
def test_seed_004_launch_c_exec_status_down(clean):
    """`sky launch -c train train.yaml`, `sky exec train train.yaml`, `sky status`, `sky down train`."""
    home = clean
    launched = skyhive("launch", "-y", "-c", "train", "train.yaml", cwd=TASKS, timeout=600)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert "ready on node" in launched.stdout  # setup ran
    assert sum("training complete" in ln for ln in launched.stdout.splitlines()) == 2, launched.stdout + launched.stderr
    pids = _worker_pids(home, "train")

    again = skyhive("exec", "train", "train.yaml", cwd=TASKS, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "ready on node" not in again.stdout  # no setup rerun
    assert sum("training complete" in ln for ln in again.stdout.splitlines()) == 2, again.stdout + again.stderr
    assert _worker_pids(home, "train") == pids and all(state_of(p) not in (None, "Z") for p in pids)

    status = skyhive("status", cwd=TASKS)
    row = next(ln for ln in status.stdout.splitlines() if ln.startswith("train "))
    assert " UP " in row and " 2 " in row

    down = skyhive("down", "train", cwd=TASKS)
    assert down.returncode == 0, down.stderr
    assert all(state_of(p) in (None, "Z") for p in pids)
    assert running_under(home) == []
    assert "no named pools" in skyhive("status", cwd=TASKS).stdout


def test_launch_c_reuses_a_matching_pool_and_exec_skips_setup(tmp_path, clean):
    home = clean
    task = write(tmp_path / "t.yaml", SIMPLE)
    first = skyhive("launch", "-y", "-c", "dev", str(task), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "creating pool dev" in first.stderr
    assert sorted(ln for ln in first.stdout.splitlines() if "setup on node" in ln) == [
        "[node 0] setup on node 0", "[node 1] setup on node 1"]  # each Local node its own home: setup on both
    pids = _worker_pids(home, "dev")
    workers = {int(ln.rsplit(" ", 1)[1]) for ln in first.stdout.splitlines() if "hello from" in ln}
    assert workers == set(pids)  # the run's parent process is the detached worker itself

    second = skyhive("launch", "-y", "-c", "dev", "-i", "30", str(task), cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "reusing pool dev" in second.stderr and _worker_pids(home, "dev") == pids
    assert "pool dev: autostop after 30 min idle" in second.stderr  # -i on a reused pool sets it
    watchdog = record(home, "dev")["watchdog_pid"]
    assert record(home, "dev")["autostop_minutes"] == 30 and state_of(watchdog) not in (None, "Z")

    ex = skyhive("exec", "dev", str(task), cwd=tmp_path)
    assert ex.returncode == 0, ex.stderr
    assert "setup on node" not in ex.stdout and "hello from node 1 of 2" in ex.stdout
    queue = skyhive("queue", "dev", cwd=tmp_path).stdout.splitlines()
    assert [ln.split()[:3] for ln in queue[1:]] == [["1", "hello", "SUCCEEDED"], ["2", "hello", "SUCCEEDED"],
                                                   ["3", "hello", "SUCCEEDED"]]


def test_named_pool_errors_name_the_pool(tmp_path, clean):
    task = write(tmp_path / "t.yaml", SIMPLE)
    unknown = skyhive("exec", "nosuch", str(task), cwd=tmp_path)
    assert unknown.returncode == 1 and "no named pool 'nosuch'" in unknown.stderr
    assert skyhive("queue", "nosuch", cwd=tmp_path).returncode == 1
    gone = skyhive("down", "nosuch", cwd=tmp_path)
    assert gone.returncode == 1 and "no pool 'nosuch'" in gone.stderr
    assert skyhive("launch", "-y", "-c", "shape", str(task), cwd=tmp_path).returncode == 0
    other = skyhive("launch", "-y", "-c", "shape", "--num-nodes", "3", str(task), cwd=tmp_path)
    assert other.returncode != 0
    assert "pool 'shape' exists with another shape (num_nodes: pool has 2, task asks 3" in other.stderr
    bigger = write(tmp_path / "big.yaml", SIMPLE.replace("num_nodes: 2", "num_nodes: 4"))
    assert "asks for 4 nodes; pool 'shape' has 2" in skyhive("exec", "shape", str(bigger), cwd=tmp_path).stderr
    # (fewer nodes than the pool has run on the first N: tests/clusters/test_cluster_exec.py)
    assert "add -c NAME" in skyhive("launch", "-y", "-d", str(task), cwd=tmp_path).stderr
    assert skyhive("logs", "shape", "99", cwd=tmp_path).stderr.count("pool 'shape' has no job 99") == 1
    failing = write(tmp_path / "fail.yaml", "name: fails\nnum_nodes: 2\nrun: |\n  echo before\n  exit 3\n")
    failed = skyhive("exec", "shape", str(failing), cwd=tmp_path)
    assert failed.returncode == 100 and re.search(r"run failed on node [01]: exit code 3", failed.stdout)
    assert skyhive("queue", "shape", cwd=tmp_path).stdout.splitlines()[-1].split()[:3] == ["2", "fails", "FAILED"]
    latest = skyhive("logs", "shape", cwd=tmp_path)  # followed (the default) to the failed job's end: 100
    assert latest.returncode == 100 and "[skyhive] job 2 failed" in latest.stdout
    now = skyhive("logs", "shape", "--no-follow", cwd=tmp_path)  # what is there, exit 0
    assert now.returncode == 0 and "[skyhive] job 2 failed" in now.stdout
    assert "not a named pool" in skyhive("logs", "plain-pool", "1", cwd=tmp_path).stderr
    bad = skyhive("launch", "-y", "-c", "bad/name", str(task), cwd=tmp_path)
    assert bad.returncode != 0 and "'bad/name' cannot name a pool" in bad.stderr


# ---- (c) the job queue: exec -d, queue, cancel, logs --follow ----------------------------------------


SLOW = """\
    name: slow
    num_nodes: 2
    resources:
      cloud: local
    run: |
      echo "start $SKYPILOT_TASK_ID"
      for i in $(seq 1 {n}); do echo "tick $i"; sleep 0.2; done
      echo "end"
    """


def test_queued_jobs_run_in_order_cancel_starts_the_next_and_logs_follow(tmp_path, clean):
    home = clean
    assert skyhive("launch", "-y", "-c", "q", str(write(tmp_path / "t.yaml", SIMPLE)), cwd=tmp_path).returncode == 0
    long = write(tmp_path / "long.yaml", SLOW.format(n=600))
    short = write(tmp_path / "short.yaml", SLOW.format(n=5))
    submitted = [skyhive("exec", "-d", "q", str(path), cwd=tmp_path) for path in (long, short, short)]
    assert all(s.returncode == 0 for s in submitted), [s.stderr for s in submitted]
    assert [int(s.stderr.split("job ")[1].split()[0]) for s in submitted] == [2, 3, 4]

    def states() -> dict[int, str]:
        return {int(ln.split()[0]): ln.split()[2] for ln in skyhive("queue", "q", cwd=tmp_path).stdout.splitlines()[1:]}

    wait_for(lambda: states()[2] == "RUNNING", what="job 2 to run")
    assert states()[3] == states()[4] == "PENDING"  # they wait their turn
    assert "tick" in wait_for(lambda: skyhive("logs", "q", "2", "--no-follow", cwd=tmp_path).stdout,
                                 what="job 2 output (running: not followed)")

    follower = subprocess.Popen([*SKYHIVE, "logs", "q", "3", "--follow"], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    cancelled = skyhive("cancel", "q", cwd=tmp_path)  # the running one
    assert cancelled.returncode == 0 and "job 2: cancelling" in cancelled.stderr
    out, err = follower.communicate(timeout=120)
    assert follower.returncode == 0, err
    lines = out.splitlines()
    assert lines[-1] == "[skyhive] job 3 succeeded (exit code 0)"  # followed to the job's end, then stopped
    assert sum(ln.endswith("tick 5") for ln in lines) == 2 and sum(ln.endswith("] end") for ln in lines) == 2
    wait_for(lambda: states()[4] == "SUCCEEDED", what="job 4")
    final = states()
    assert final[2] == "CANCELLED" and final[3] == "SUCCEEDED"
    from skyhive.runtime.clusters import jobs as jobq

    got = {j.id: j for j in jobq.list_jobs("q")}
    assert got[2].ended <= got[3].started and got[3].ended <= got[4].started  # one after another
    assert "tick 600" not in skyhive("logs", "q", "2", cwd=tmp_path).stdout
    # the cancelled job's commands are gone: only the two workers run under this state directory
    wait_for(lambda: sorted(running_under(home)) == _worker_pids(home, "q"), timeout=30, what="only the workers")
    pending = skyhive("exec", "-d", "q", str(long), cwd=tmp_path)
    assert pending.returncode == 0
    assert skyhive("cancel", "q", "--all", cwd=tmp_path).returncode == 0
    wait_for(lambda: states()[5] == "CANCELLED", what="job 5 cancelled")


# ---- (d) autostop ------------------------------------------------------------------------------------


@pytest.mark.parametrize("down", [False, True])
def test_autostop_ends_an_idle_pool_and_status_says_so(tmp_path, clean, monkeypatch, down):
    """No timing margin: while the test launches and checks, an autostop "minute" is an hour (the limit
    cannot pass under load); the short limit (2 s) is set only once the test's client is attached, so
    what the pool does past it is what an attached client, then none, makes it do."""
    from skyhive.runtime.clusters import record as records
    from skyhive.runtime.clusters.named import set_autostop

    home = clean
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "3600")
    args = ["launch", "-y", "-c", "idle", "-i", "2", *(["--down"] if down else []),
            str(write(tmp_path / "t.yaml", SIMPLE))]
    assert skyhive(*args, cwd=tmp_path).returncode == 0
    pids = _worker_pids(home, "idle")
    watchdog = record(home, "idle")["watchdog_pid"]
    assert "skyhive.runtime.worker.watchdog" in Path(f"/proc/{watchdog}/cmdline").read_text()
    row = next(ln for ln in skyhive("status", cwd=tmp_path).stdout.splitlines() if ln.startswith("idle "))
    assert "2 min" in row and (" (down)" in row) == down
    # an attached client is not idle: the pool stays up while it is attached (3 s, past the 2 s limit)
    go = tmp_path / "go"
    client = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time, skyhive as sky
        with sky.Pool.attach("idle", output=None) as pool:
            print("attached", flush=True)
            while not os.path.exists({str(go)!r}):
                time.sleep(0.05)
            time.sleep(3)
            print(sorted(pool.broadcast(os.getpid)), flush=True)
        """)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, errs = Lines(client.stdout), Lines(client.stderr)
    try:
        lines.wait_for(lambda line: line.strip() == "attached", 120, "the client attached")
        monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "1")  # a test "minute" is one second from now on
        watchdog = set_autostop(records.load("idle"), 2, down).watchdog_pid  # (what `launch -c -i` does)
        go.write_text("go")
        client.wait(timeout=120)
        out, err = lines.rest(), errs.rest()
    finally:
        client.kill()
    assert client.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == pids
    wait_for(lambda: all(state_of(p) in (None, "Z") for p in pids + [watchdog]), timeout=60,
             what="the idle workers and the watchdog to exit")
    status = skyhive("status", cwd=tmp_path).stdout
    from skyhive.runtime.events.log import read_log

    last = list(read_log(Path(home) / "pools" / "idle.jsonl"))[-1]
    assert last.kind == "pool_stopped" and last.error.startswith("autodown" if down else "autostop")
    if down:  # autodown: the pool is gone
        assert "idle " not in status
    else:
        row = next(ln for ln in status.splitlines() if ln.startswith("idle "))
        assert "STOPPED (autostop)" in row
        again = skyhive(*args, cwd=tmp_path)  # a stopped pool starts again with the next launch -c
        assert again.returncode == 0 and "starting it again" in again.stderr
        assert _worker_pids(home, "idle") != pids
    assert running_under(home) == [] or not down


def test_a_jobs_env_and_secrets_are_its_own_and_redacted(tmp_path, clean):
    home = clean
    task = write(tmp_path / "sec.yaml", """\
        name: sec
        envs:
          PLAIN: from-file
        secrets:
          TOKEN: null
        run: |
          echo "token=${TOKEN:-unset} plain=${PLAIN:-unset}"
        """)
    first = skyhive("launch", "-y", "-c", "sec", "--secret", "TOKEN=hunter2secret", str(task), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "token=*** plain=from-file" in first.stdout and "hunter2secret" not in first.stdout
    bare = write(tmp_path / "bare.yaml", "run: echo \"token=${TOKEN:-unset} plain=${PLAIN:-unset}\"\n")
    second = skyhive("exec", "sec", str(bare), cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "token=unset plain=unset" in second.stdout  # nothing of job 1 stayed in the workers
    for path in Path(home).rglob("*"):
        if path.is_file():
            assert b"hunter2secret" not in path.read_bytes(), f"the secret is in {path}"


def test_a_job_whose_agent_was_killed_fails_and_the_next_job_runs(tmp_path, clean):
    home = clean
    assert skyhive("launch", "-y", "-c", "orphan", str(write(tmp_path / "t.yaml", SIMPLE)), cwd=tmp_path).returncode == 0
    long = write(tmp_path / "long.yaml", SLOW.format(n=600))
    assert skyhive("exec", "-d", "orphan", str(long), cwd=tmp_path).returncode == 0
    from skyhive.runtime.clusters import jobs as jobq

    job = wait_for(lambda: next((j for j in jobq.list_jobs("orphan") if j.id == 2 and j.state == "RUNNING"), None),
                   what="job 2 to run")
    wait_for(lambda: "tick 2" in skyhive("logs", "orphan", "2", "--no-follow", cwd=tmp_path).stdout, what="job 2 output")
    os.kill(job.agent_pid, signal.SIGKILL)
    short = write(tmp_path / "short.yaml", SLOW.format(n=2))
    after = skyhive("exec", "orphan", str(short), cwd=tmp_path)
    assert after.returncode == 0, after.stdout + after.stderr  # took the workers over from the dead agent's job
    states = {j.id: j for j in jobq.list_jobs("orphan")}
    assert states[2].state == "FAILED" and f"its agent (pid {job.agent_pid}) died" in states[2].detail
    assert states[3].state == "SUCCEEDED"
    wait_for(lambda: sorted(running_under(home)) == _worker_pids(home, "orphan"), timeout=30,
             what="the dead agent's job's commands to be gone")


def test_a_kept_pool_that_cannot_be_recorded_is_torn_down(tmp_path, clean, monkeypatch):
    home = clean
    # the watchdog cannot start (a bad "minute"): the pool that just started must not stay behind
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "soon")
    done = python("""
        import skyhive as sky
        try:
            with sky.Pool(provider=sky.Local(), nodes=2, name="unrec", keep=True, autostop=1, output=None):
                print("entered")
        except ValueError as exc:
            print("ValueError:", exc)
        """, cwd=tmp_path)
    assert "entered" not in done.stdout and "SKYHIVE_AUTOSTOP_MINUTE='soon' is not a number" in done.stdout, done.stderr
    assert running_under(home) == []
    assert not (Path(home) / "clusters" / "unrec" / "record.json").exists()


def test_the_same_name_in_two_state_directories_are_two_pools(tmp_path, clean):
    """`down train` of one state directory leaves another state directory's pool "train" alone."""
    home = clean
    other = tmp_path / "other-home"
    other.mkdir(mode=0o700)
    task = write(tmp_path / "t.yaml", SIMPLE)
    env = {**os.environ, "SKYHIVE_HOME": str(other)}
    theirs = subprocess.run([*SKYHIVE, "launch", "-y", "-c", "same", str(task)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=180)
    try:
        assert theirs.returncode == 0, theirs.stderr
        their_pids = _worker_pids(str(other), "same")
        assert skyhive("launch", "-y", "-c", "same", str(task), cwd=tmp_path).returncode == 0
        assert _worker_pids(home, "same") != their_pids
        assert skyhive("down", "same", cwd=tmp_path).returncode == 0
        assert all(state_of(p) not in (None, "Z") for p in their_pids)  # the other pool still runs
    finally:
        subprocess.run([*SKYHIVE, "down", "same"], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert running_under(str(other)) == []


def test_jobs_wait_for_an_attached_client_and_a_waiting_job_can_be_cancelled(tmp_path, clean):
    assert skyhive("launch", "-y", "-c", "busy", str(write(tmp_path / "t.yaml", SIMPLE)), cwd=tmp_path).returncode == 0
    release = tmp_path / "release"
    client = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time, skyhive as sky
        with sky.Pool.attach("busy", output=None) as pool:
            print("attached", flush=True)
            while not os.path.exists({str(release)!r}):
                time.sleep(0.1)
        """)], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        Lines(client.stdout).wait_for(lambda line: line.strip() == "attached", 120, "the client attached")
        short = write(tmp_path / "short.yaml", SLOW.format(n=1))
        assert skyhive("exec", "-d", "busy", str(short), cwd=tmp_path).returncode == 0  # job 2
        assert skyhive("exec", "-d", "busy", str(short), cwd=tmp_path).returncode == 0  # job 3
        from skyhive.runtime.clusters import jobs as jobq

        time.sleep(1.0)  # the agent is up and waits for the pool
        assert [j.state for j in jobq.list_jobs("busy")][1:] == ["PENDING", "PENDING"]
        assert "job 2: cancelled" in skyhive("cancel", "busy", "2", cwd=tmp_path).stderr
        release.touch()
        assert client.wait(timeout=60) == 0
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    wait_for(lambda: jobq.load_job("busy", 3).state == "SUCCEEDED", what="job 3 after the client left")
    assert jobq.load_job("busy", 2).state == "CANCELLED" and jobq.load_job("busy", 2).started is None


def test_the_named_pool_example_runs_as_a_user_would(tmp_path, clean):
    home = clean
    example = str(TASKS.parent / "named_pool.py")
    runs = {step: subprocess.run([sys.executable, example, step], cwd=tmp_path, capture_output=True, text=True,
                                 timeout=120) for step in ("create", "attach")}
    assert runs["create"].returncode == 0, runs["create"].stderr
    assert "loaded rows per node: [500, 500]" in runs["create"].stdout
    attached = runs["attach"].stdout
    assert runs["attach"].returncode == 0 and "sum: 499500" in attached  # the data loaded by the first program
    pids = _worker_pids(home, "example")
    assert sorted(json.loads(attached.split("workers: ")[1].split(" sum")[0])) == pids
    down = subprocess.run([sys.executable, example, "down"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert down.returncode == 0 and "pool example is down" in down.stdout, down.stderr
    assert wait_for(lambda: all(state_of(p) in (None, "Z") for p in pids), what="the workers to exit")


def test_attach_takes_over_every_process_of_every_node(tmp_path, clean):
    """processes_per_node and sky.Worker(concurrency=) are in the record: an attached client uses all."""
    done = python("""
        import os, skyhive as sky
        with sky.Pool(provider=sky.Local(), nodes=2, processes_per_node=2, name="wide", keep=True, output=None,
                      worker=sky.Worker(concurrency=2, executor="process")) as pool:
            first = sorted(set(pool.map(lambda _: os.getpid(), range(200))))
        with sky.Pool.attach("wide", output=None) as pool:
            again = sorted(set(pool.map(lambda _: os.getpid(), range(200))))
            ranks = sorted(pool.broadcast(os.getpid))
        print(len(first), first == again, len(ranks), set(ranks) <= set(first))
        """, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["8", "True", "4", "True"]  # 2 nodes x 2 ranks x 2 slots; broadcast: 4 ranks


def test_a_worker_restarted_by_a_client_is_the_pools_worker(tmp_path, clean):
    """A worker killed while a client is attached is restarted on its socket; the pool stays usable
    from the next process, and down ends the new worker too."""
    home = clean
    done = python("""
        import os, signal, time, skyhive as sky
        with sky.Pool(provider=sky.Local(), nodes=1, name="phoenix", keep=True, output=None) as pool:
            old = pool.run(os.getpid)
            os.kill(old, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while True:  # the node's supervisor starts a new worker on the same socket
                try:
                    new = pool.run(os.getpid, retries=3)
                    break
                except sky.WorkerLost:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        print(old, new)
        """, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    old, new = map(int, done.stdout.split())
    assert old != new
    again = python("""
        import os, skyhive as sky
        with sky.Pool.attach("phoenix", output=None) as pool:
            print(pool.run(os.getpid))
        """, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert int(again.stdout.strip()) == new
    assert skyhive("down", "phoenix", cwd=tmp_path).returncode == 0
    assert state_of(new) in (None, "Z")


def test_a_followed_launch_returns_with_the_pool_free_for_the_next_client(tmp_path, clean):
    """`skyhive launch -c NAME task.yaml` (following its job) and then, at once, `Pool.attach(NAME)` (a script's
    next line, or the next command): the pool's job agent detaches a moment after the job's end; the launch
    waits for that, so the attach never meets `PoolInUse` naming the agent (a race a loaded machine lost)."""
    import io

    import skyhive as sky
    from skyhive.runtime.clusters.jobs import agent_pid
    from skyhive.runtime.commands.taskfile import loads
    from skyhive.runtime.control.pools import exec_task, launch_cluster

    task = loads(textwrap.dedent(SIMPLE), cwd=str(tmp_path))
    out = io.StringIO()
    for step in range(2):  # the launch, then an exec on the same pool
        run = launch_cluster if step == 0 else exec_task
        assert run(task, "free", out=out, err=out) == 0, out.getvalue()
        assert agent_pid("free") is None, f"the job agent still holds pool 'free' after the {run.__name__} returned"
        with sky.Pool.attach("free", output=None) as pool:  # wait=0: refused at once if anything holds it
            assert sorted(pool.broadcast(lambda: 1)) == [1, 1]
