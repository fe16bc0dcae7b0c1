"""Named pools on SSH hosts (issue 15): real OpenSSH sshd in network namespaces (tests/infra), the
workers detached on the hosts outlive the client, another process attaches (pinned host keys,
takeover: the same remote pids), `skyhive launch -c`/`exec`/`queue`/`status`/`down` work on them.

Every test ends with the `ssh_clean` fixture: every pool is taken down, and on every host no process of
the pool is left (none carries the pool's `SKYHIVE_CLUSTER` mark or serves one of its sockets), no
socket directory, no job working directory; locally no record and no process of the state directory.
The namespace hosts share this machine's process table and file system, so that is checked directly.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import skyhive as sky
from tests.infra.sshd import process_alive
from tests.clusters.test_clusters import python, running_under, wait_for, write
from tests.kinds.ssh.test_ssh_pool import ssh_for

pytestmark = [pytest.mark.slow]


def cluster_marked(prefix: str = "c-") -> list[int]:
    """Live processes (any user) whose environment marks them as a named pool's (`SKYHIVE_CLUSTER`) with a
    socket directory named `prefix...`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = fh.read()
            with open(f"/proc/{entry}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state in ("Z", "X"):
            continue
        for var in environ.split(b"\0"):
            if var.startswith(b"SKYHIVE_CLUSTER=") and os.path.basename(var.decode(errors="replace")).startswith(prefix):
                found.append(int(entry))
    return found


def key(name: str, home: str) -> str:
    """The socket directory name of this state directory's pool `name` on its hosts: every process check
    is scoped to it (the namespace hosts share this machine's process table with other test runs, which
    may have a pool of the same name)."""
    from skyhive.runtime.nodes.keep import cluster_key

    return cluster_key(name, home)


def socket_dirs(hosts, name: str) -> list[Path]:
    return [p for h in hosts for p in (h.home / ".skyhive" / "run").glob(f"c-{name}-*")]


@pytest.fixture
def two_hosts(netns_hosts, skyhive_home):
    hosts = list(netns_hosts)[:2]
    yield hosts
    from skyhive.runtime.clusters import record as records
    from skyhive.runtime.control.pools import down_cluster

    names = records.names()
    for name in names:
        down_cluster(name, quiet=True)
    deadline = time.monotonic() + 10
    ours = [key(name, skyhive_home) for name in names]
    while (running_under(skyhive_home) or any(cluster_processes(p) for p in ours)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running_under(skyhive_home) == [], "local processes left running"
    for prefix in ours:
        assert cluster_processes(prefix) == [], "pool processes (workers, jobs, watchdogs) left running on the hosts"
    assert records.names() == []
    for name in names:
        assert socket_dirs(hosts, name) == [], "socket directories left on the hosts"
    for h in hosts:
        work = h.home / ".skyhive" / "work"
        assert not work.exists() or list(work.iterdir()) == [], f"job working directories left on {h.hostname}"


def counted() -> int:
    return sky.counter("n").increment()


def collection_dirs(hosts) -> list[Path]:
    """The hosts' directories of pool "train"'s forwarded socket of sky.dict & co., as this state
    directory's clients make them (runtime/kinds/ssh/collections.py)."""
    from skyhive.runtime.collections.store import socket_path
    from skyhive.paths import state_dir
    from skyhive.runtime.kinds.ssh.collections import directory_name

    names = [directory_name(key("train", str(state_dir())), socket_path("train"), node) for node in range(len(hosts))]
    return [p for h in hosts for name in names for p in (h.home / ".skyhive" / "run").glob(name)]


def kept_pool_pids(hosts) -> list[int]:
    with sky.Pool(provider=ssh_for(hosts), nodes=2, name="train", keep=True, output=None) as pool:
        assert sorted(pool.broadcast(counted)) == [1, 2]  # the collections reach a named pool's hosts
        assert len(collection_dirs(hosts)) == 2  # by a socket on each (removed when the client leaves)
        return sorted(pool.broadcast(os.getpid))


def test_a_kept_ssh_pool_outlives_its_block_and_another_process_takes_it_over(two_hosts, skyhive_home, tmp_path):
    hosts = two_hosts
    pids = kept_pool_pids(hosts)
    assert all(process_alive(p) for p in pids)  # the block is over: the workers on the hosts run on
    rec = json.loads((Path(skyhive_home) / "clusters" / "train" / "record.json").read_text())
    assert rec["provider"] == "ssh" and sorted(w["pid"] for w in rec["workers"]) == pids
    assert set(rec["host_keys"]) == {"0", "1"} and all(k.startswith("ssh-") for k in rec["host_keys"].values())
    assert rec["provider_info"]["key"] == str(hosts[0].client_key)  # the key's path, never the key
    key_text = hosts[0].client_key.read_text()
    assert key_text.strip().splitlines()[1] not in json.dumps(rec)
    for sock in (w["socket"] for w in rec["workers"]):
        assert oct(os.stat(sock).st_mode & 0o777) == "0o600" and oct(os.stat(os.path.dirname(sock)).st_mode & 0o777) == "0o700"
    assert oct(os.stat(Path(skyhive_home) / "clusters" / "train" / "record.json").st_mode & 0o777) == "0o600"
    again = python("""
        import os, skyhive as sky
        with sky.Pool.attach("train", output=None) as pool:
            print(sorted(pool.broadcast(os.getpid)))
            print(pool.run(sum, [1, 2, 3]))
            print(sorted(pool.broadcast(lambda: sky.counter("n").increment())))
        """, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    lines = again.stdout.strip().splitlines()
    assert json.loads(lines[-3]) == pids and lines[-2] == "6"  # the same remote processes
    assert json.loads(lines[-1]) == [1, 2]  # this client's collections (empty at first), reached by the old workers
    assert collection_dirs(hosts) == []  # removed when each client left
    assert all(process_alive(p) for p in pids)  # detached again
    # a third client shuts it down with keep=False: the workers end, the pool is forgotten
    with sky.Pool.attach("train", keep=False, output=None) as pool:
        assert sorted(pool.broadcast(os.getpid)) == pids
    wait_for(lambda: not any(process_alive(p) for p in pids), 30, "the workers to exit")
    assert not (Path(skyhive_home) / "clusters" / "train").exists()
    assert collection_dirs(hosts) == []


def test_a_changed_host_key_is_refused_on_attach(two_hosts, skyhive_home, tmp_path):
    kept_pool_pids(two_hosts)
    path = Path(skyhive_home) / "clusters" / "train" / "record.json"
    rec = json.loads(path.read_text())
    good = rec["host_keys"]["0"]
    other = rec["host_keys"]["0"].split()[0] + " " + "AAAAC3NzaC1lZDI1NTE5AAAAI" + "A" * 43
    rec["host_keys"]["0"] = other
    path.write_text(json.dumps(rec))
    try:
        with sky.Pool.attach("train", output=None) as pool:
            pool.broadcast(os.getpid)
    except Exception as exc:  # noqa: BLE001 - the error's text is the point
        assert "host key" in str(exc) and two_hosts[0].host in str(exc), exc
    else:
        raise AssertionError("attach with another host key than the pinned one was not refused")
    finally:
        rec["host_keys"]["0"] = good
        path.write_text(json.dumps(rec))  # so that the fixture can take the pool down


def test_a_sigkilled_attached_client_leaves_the_ssh_pool_healthy(two_hosts, skyhive_home, tmp_path):
    hosts = two_hosts
    pids = kept_pool_pids(hosts)
    client = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import os, time, skyhive as sky

        def busy():
            with open(os.path.expanduser("~/busy-mark"), "a") as fh:
                fh.write("x")
            time.sleep(60)

        with sky.Pool.attach("train", output=None) as pool:
            pool.broadcast(busy)
        """)], cwd=tmp_path)
    marks = [h.home / "busy-mark" for h in hosts]
    try:
        wait_for(lambda: all(m.exists() and m.read_text() == "x" for m in marks), 60, "the task on both hosts")
        client.send_signal(signal.SIGKILL)
    finally:
        client.wait(timeout=10)
    assert len(collection_dirs(hosts)) == 2  # the killed client could not remove its collections' sockets
    try:
        again = python("""
            import os, skyhive as sky
            with sky.Pool.attach("train", output=None, wait=30) as pool:
                print(sorted(pool.broadcast(os.getpid)))
            """, cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout.strip().splitlines()[-1]) == pids
        assert all(m.read_text() == "x" for m in marks)  # the busy task was cancelled, not run again
        assert collection_dirs(hosts) == []  # the next client made them again, and removed them as it left
    finally:
        for m in marks:
            m.unlink(missing_ok=True)


def test_down_stops_the_workers_and_what_their_jobs_started_on_every_host(two_hosts, skyhive_home, tmp_path):
    from skyhive.runtime.control.pools import down_cluster

    hosts = two_hosts
    pids = kept_pool_pids(hosts)

    def orphan() -> int:  # a job's process in a session of its own: the worker's group does not hold it
        return subprocess.Popen(["sleep", "300"], start_new_session=True).pid

    with sky.Pool.attach("train", output=None) as pool:
        orphans = pool.broadcast(orphan)
    assert all(process_alive(p) for p in orphans)
    assert socket_dirs(hosts, "train")
    ended = down_cluster("train", quiet=True)
    assert ended >= 4
    for p in pids + orphans:
        wait_for(lambda p=p: not process_alive(p), 10, f"process {p} to end")
    assert socket_dirs(hosts, "train") == [], [(d, [(f.name, f.read_text()[-1500:]) for f in d.iterdir()]) for d in socket_dirs(hosts, "train")]
    assert not (Path(skyhive_home) / "clusters" / "train").exists()


def test_a_provider_that_cannot_keep_a_pool_is_named_with_the_reason():
    from skyhive.providers.slurm import Slurm

    with pytest.raises(ValueError, match=r"provider 'slurm' cannot keep a pool: a Slurm allocation ends"):
        sky.Pool(provider=Slurm(), nodes=1, name="train", keep=True)


TASK = """\
    name: hello
    num_nodes: 2
    setup: |
      echo "setup on $(hostname)"
    run: |
      echo "run $SKYPILOT_NODE_RANK on $(hostname) under $PPID"
    """


def test_launch_c_exec_queue_logs_status_down_on_ssh_hosts(two_hosts, skyhive_home, tmp_path):
    """`skyhive launch -c train` on two SSH hosts (in this process: the test hosts need their own key and
    known_hosts, which the CLI takes from the default places), then the other commands as their own
    processes, which find the hosts, key path and pinned host keys in the pool's record."""
    import io

    from skyhive.runtime.control.pools import launch_cluster
    from skyhive.runtime.commands.taskfile import loads
    from tests.clusters.test_clusters import skyhive

    hosts = two_hosts
    write(tmp_path / "t.yaml", TASK)
    task = loads(textwrap.dedent(TASK), cwd=str(tmp_path))
    out, err = io.StringIO(), io.StringIO()
    code = launch_cluster(task, "train", provider=ssh_for(hosts), out=out, err=err)
    assert code == 0, out.getvalue() + err.getvalue()
    assert "creating pool train: 2 ssh nodes" in err.getvalue()
    for n, h in enumerate(hosts):
        assert f"setup on {h.hostname}" in out.getvalue()
        assert f"run {n} on {h.hostname}" in out.getvalue()
    pids = sorted(w["pid"] for w in json.loads((Path(skyhive_home) / "clusters" / "train" / "record.json")
                                               .read_text())["workers"])
    assert all(process_alive(p) for p in pids)

    ex = skyhive("exec", "train", "t.yaml", cwd=tmp_path)
    assert ex.returncode == 0, ex.stdout + ex.stderr
    assert "setup on" not in ex.stdout  # exec: no setup
    parents = {int(ln.rsplit(" ", 1)[1]) for ln in ex.stdout.splitlines() if " under " in ln}
    assert parents == set(pids)  # run by the same remote workers
    queue = skyhive("queue", "train", cwd=tmp_path)
    assert [ln.split()[:3] for ln in queue.stdout.splitlines()[1:]] == [["1", "hello", "SUCCEEDED"],
                                                                      ["2", "hello", "SUCCEEDED"]]
    # launch -c again with -i: the same pool (same workers), each host's autostop watchdog started
    again = io.StringIO()
    assert launch_cluster(task, "train", idle_minutes=30, provider=ssh_for(hosts), out=again, err=again) == 0
    assert "reusing pool train" in again.getvalue()
    watchdogs = lambda: [p for p in cluster_processes(key("train", skyhive_home))  # noqa: E731
                         if "worker.watchdog" in cmdline(p)]
    wait_for(lambda: len(watchdogs()) == 2, 10, "one watchdog on each host (the starter's parent exits)")
    first = watchdogs()
    assert launch_cluster(task, "train", idle_minutes=40, provider=ssh_for(hosts), out=again, err=again) == 0
    wait_for(lambda: len(watchdogs()) == 2, 10, "one watchdog on each host")
    assert not set(first) & set(watchdogs())  # replaced, not added
    logs = skyhive("logs", "train", "2", cwd=tmp_path)
    assert logs.returncode == 0 and f"run 1 on {hosts[1].hostname}" in logs.stdout
    status = skyhive("status", cwd=tmp_path)
    row = next(ln for ln in status.stdout.splitlines() if ln.startswith("train "))
    assert " UP " in row and " 2 " in row and hosts[0].host in row, status.stdout
    # the pool's worker on host 1 dies: status says so
    os.kill(pids[1], signal.SIGKILL)
    wait_for(lambda: not process_alive(pids[1]), 10, "the worker to die")
    status = skyhive("status", cwd=tmp_path)
    assert "DEGRADED (1 of 2 workers gone)" in status.stdout, status.stdout
    down = skyhive("down", "train", cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert not any(process_alive(p) for p in pids)
    assert socket_dirs(hosts, "train") == []
    assert "no named pools" in skyhive("status", cwd=tmp_path).stdout


@pytest.mark.parametrize("down", [False, True], ids=["autostop", "autodown"])
def test_autostop_on_ssh_hosts_stops_the_idle_workers_there(two_hosts, skyhive_home, tmp_path, monkeypatch, down):
    """`launch -c idle -i 3 [--down]` on SSH hosts: each host's watchdog (started there, counting the
    connections to the pool's sockets) keeps the workers while a client is attached, stops them when
    idle; `status` then says STOPPED (autostop), or with --down forgets the pool (and cleans the hosts)."""
    import io

    from skyhive.runtime.control.pools import launch_cluster, status_rows
    from skyhive.runtime.commands.taskfile import loads

    from skyhive.runtime.clusters import record as records
    from skyhive.runtime.clusters.named import set_autostop

    # no timing margin: until the test's client is attached an autostop "minute" is an hour (the job's end
    # and the attach may be seconds apart on a loaded machine); then -i 3 is three seconds
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "3600")
    hosts = two_hosts
    task = loads(textwrap.dedent(TASK), cwd=str(tmp_path))
    out = io.StringIO()
    assert launch_cluster(task, "idle", idle_minutes=3, down=down, provider=ssh_for(hosts), out=out, err=out) == 0, \
        out.getvalue()
    watchdogs = lambda: [p for p in cluster_processes(key("idle", skyhive_home))  # noqa: E731
                         if "worker.watchdog" in cmdline(p)]
    wait_for(lambda: len(watchdogs()) == 2, 10, "one watchdog on each host (the starter's parent exits)")
    with sky.Pool.attach("idle", output=None) as pool:
        pids = sorted(pool.broadcast(os.getpid))
        monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "1")
        set_autostop(records.load("idle"), 3, down)  # (what `launch -c -i 3` does): 3 s idle from now
        time.sleep(6)  # longer than the idle time, attached: the pool stays
        assert sorted(pool.broadcast(os.getpid)) == pids
    for p in pids:
        wait_for(lambda p=p: not process_alive(p), 60, f"worker {p} to be stopped by autostop")
    marks = lambda: [m for h in hosts for m in (h.home / ".skyhive" / "run").glob("c-idle-*.autostop")]  # noqa: E731
    wait_for(lambda: len(marks()) == 2, 30, "each host's watchdog to finish stopping the pool")
    rows = status_rows()
    if down:
        assert rows == [], (rows, [(d, list(d.iterdir()) if d.is_dir() else d.read_text()) for d in socket_dirs(hosts, "idle")])
        assert not (Path(skyhive_home) / "clusters" / "idle").exists()
        assert socket_dirs(hosts, "idle") == []
        wait_for(lambda: cluster_processes(key("idle", skyhive_home)) == [], 10, "the hosts' autostop scripts to finish")
    else:
        assert [(r["name"], r["state"]) for r in rows] == [("idle", "STOPPED (autostop)")]
        with pytest.raises(sky.PoolGone, match=r"pool 'idle' was stopped by autostop .*`skyhive launch -c idle "
                                               r"TASK.yaml` starts it again"):
            sky.Pool.attach("idle", output=None)


def attach_locks(hosts, name: str) -> list[Path]:
    return [d / "attach.lock" for d in socket_dirs(hosts, name)]


def lock_free(path: Path) -> bool:
    """Whether nobody holds a lock on `path` (flock: the hosts share this machine's file system)."""
    import fcntl

    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fh, fcntl.LOCK_UN)
        return True


def test_autostop_on_ssh_hosts_waits_for_a_client_that_is_attaching(two_hosts, skyhive_home, tmp_path, monkeypatch):
    """A client attaching holds a shared lock on the pool's attach lock on each host for as long as it is
    attached; the autostop there does nothing while one is held (the moment between the client's SSH login
    and its first connection to a worker's socket, which is all the watchdog counts), and stops the pool
    once it is free."""
    import fcntl
    import io

    from skyhive.runtime.control.pools import launch_cluster
    from skyhive.runtime.commands.taskfile import loads

    from skyhive.runtime.clusters import record as records
    from skyhive.runtime.clusters.named import set_autostop

    hosts = two_hosts
    task = loads(textwrap.dedent(TASK), cwd=str(tmp_path))
    out = io.StringIO()
    assert launch_cluster(task, "idle", provider=ssh_for(hosts), out=out, err=out) == 0, out.getvalue()
    with sky.Pool.attach("idle", output=None) as pool:
        pids = pool.broadcast(os.getpid)  # node order: host 0, host 1
        locks = attach_locks(hosts, "idle")
        assert len(locks) == 2 and not any(lock_free(p) for p in locks)  # held by this client on both hosts
    wait_for(lambda: all(lock_free(p) for p in locks), 10, "the client's holds to end with its connections")
    with open(locks[0], "a") as held:  # a client logged in on host 0, not yet connected to a worker
        fcntl.flock(held, fcntl.LOCK_SH)
        # the same pool, now with autostop. No timing margin: while the launch's own job attaches and
        # runs, an autostop "minute" is an hour; the short limit (2 s) is set once that client has left
        monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "3600")
        assert launch_cluster(task, "idle", idle_minutes=2, provider=ssh_for(hosts), out=out, err=out) == 0, \
            out.getvalue()
        monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "1")
        set_autostop(records.load("idle"), 2, False)  # (what `launch -c -i 2` does): 2 s idle from now
        wait_for(lambda: not process_alive(pids[1]), 60, "host 1's autostop to stop its worker")
        wd = hosts[0].home / ".skyhive" / "run" / f"{key('idle', skyhive_home)}.wd"
        wait_for(lambda: any("a client is attaching: not now" in p.read_text() for p in wd.glob("*.log")), 60,
                 "host 0's watchdog to find the lock held and watch on")
        assert process_alive(pids[0])  # host 0's worker is still there
        fcntl.flock(held, fcntl.LOCK_UN)
    wait_for(lambda: not any(process_alive(p) for p in pids), 60, "host 0's autostop once the lock is free")


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def cluster_processes(prefix: str) -> list[int]:
    """Live processes of named pools whose socket directory starts with `prefix`: marked in their
    environment, or naming the directory (or its watchdog's) on their command line."""
    found = set(cluster_marked(prefix))
    for entry in os.listdir("/proc"):
        if entry.isdigit() and f"/{prefix}" in cmdline(int(entry)) and process_alive(int(entry)):
            found.add(int(entry))
    return sorted(found)


def test_file_mounts_reach_every_ssh_host_of_a_named_pool_before_setup(two_hosts, skyhive_home, tmp_path):
    """`launch -c` with file_mounts on SSH hosts: a directory and a file are on each host before setup
    reads them (setup runs with `set -e`), and `run` sees them too."""
    import io

    from skyhive.runtime.control.pools import launch_cluster
    from tests.commands.test_cli_launch import by_node
    from tests.storage.test_file_mounts import _sources, home_mounts_task

    hosts = two_hosts
    _sources(tmp_path)
    marks = "setup-marks.txt"
    task = home_mounts_task(tmp_path, marks)
    out = io.StringIO()
    try:
        assert launch_cluster(task, "mnt", provider=ssh_for(hosts), out=out, err=out) == 0, out.getvalue()
        nodes = by_node(out.getvalue())
        for n, host in enumerate(hosts):
            assert f"setup on {host.hostname}: payload-A config-C 640" in nodes[n]
            assert f"run {n}: payload-A config-C b.bin,inner made-by-setup" in nodes[n]
            assert (host.home / marks).read_text().split() == [str(n)]
            assert (host.home / "mounted" / "dir" / "b.bin").read_bytes() == (tmp_path / "data" / "b.bin").read_bytes()
    finally:
        for host in hosts:
            shutil.rmtree(host.home / "mounted", ignore_errors=True)
            (host.home / marks).unlink(missing_ok=True)


def test_launch_c_on_a_cloud_provider_is_refused_naming_it_and_why(tmp_path, skyhive_home):
    """No cloud call, no record: the refusal comes before anything is built."""
    from skyhive.errors import LaunchError
    from skyhive.runtime.control.pools import launch_cluster
    from skyhive.runtime.commands.taskfile import loads

    task = loads("resources:\n  cloud: gcp\nrun: echo hi\n", cwd=str(tmp_path))
    with pytest.raises(LaunchError, match=r"launch -c train: provider 'gcp' cannot keep a named pool: kept cloud "
                                          r"pools are built and tested for aws only"):
        launch_cluster(task, "train")
    assert not (Path(skyhive_home) / "clusters").exists()


def test_a_client_killed_while_creating_an_ssh_pool_leaves_nothing_after_down(two_hosts, skyhive_home, tmp_path):
    """SIGKILL the creating client as soon as a worker runs on a host (the record may or may not list the
    workers yet): the pool is recorded from before its first worker starts, so `skyhive down train` as
    another process finds the hosts and leaves nothing there (checked by the fixture), not even the
    directory of the collections' forwarded socket the killed client made on a host before its worker
    started (its sshd forward died with the client's connection); another pool's such directory on the
    same host stays."""
    from skyhive.providers.ssh_sweep import collections_prefix
    from tests.clusters.test_clusters import skyhive
    from tests.kinds.ssh.test_ssh_pool import _known_file

    hosts = two_hosts
    known = _known_file(hosts)
    client = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time, skyhive as sky
        ssh = sky.SSH(hosts={[f"{h.user}@{h.host}:{h.port}" for h in hosts]!r}, key={str(hosts[0].client_key)!r},
                      known_hosts={known!r}, connect_timeout=10)
        with sky.Pool(provider=ssh, nodes=2, name="train", keep=True, output=None) as pool:
            time.sleep(60)
        """)], cwd=tmp_path)
    try:
        mine = key("train", skyhive_home)  # not another run's pool "train"
        wait_for(lambda: any("skyhive.runtime.worker.server" in cmdline(p) for p in cluster_processes(mine)),
                 60, "a worker to start on a host")
        client.send_signal(signal.SIGKILL)
    finally:
        client.wait(timeout=10)
    assert (Path(skyhive_home) / "clusters" / "train" / "record.json").exists()
    assert collection_dirs(hosts)  # made before the worker it is for starts: the killed client left them
    others = [h.home / ".skyhive" / "run" / f"{collections_prefix(key('other', skyhive_home))}-0123456789ab-n0"
              for h in hosts]  # another pool's (same user, same hosts)
    for d in others:
        d.mkdir(mode=0o700)
        (d / "s.sock").write_text("")
    try:
        down = skyhive("down", "train", cwd=tmp_path)
        assert down.returncode == 0, down.stderr
        assert cluster_processes(key("train", skyhive_home)) == [] and socket_dirs(hosts, "train") == []
        assert collection_dirs(hosts) == []
        assert all((d / "s.sock").exists() for d in others)
    finally:
        for d in others:
            shutil.rmtree(d, ignore_errors=True)


def test_an_unreachable_host_is_unknown_in_status_and_down_keeps_the_record_until_it_answers(two_hosts, skyhive_home):
    from skyhive.errors import SSHError
    from skyhive.runtime.control.pools import down_cluster, status_rows

    hosts = two_hosts
    with sky.Pool(provider=ssh_for(hosts, connect_timeout=3), nodes=2, name="train", keep=True, output=None) as pool:
        pids = sorted(pool.broadcast(os.getpid))
    hosts[1].set_link(False)
    try:
        [row] = status_rows()
        assert row["state"] == "UNKNOWN (1 host unreachable)"
        with pytest.raises(SSHError, match=rf"pool 'train': could not stop it everywhere: host \S*{hosts[1].host}"):
            down_cluster("train", quiet=True)
        assert (Path(skyhive_home) / "clusters" / "train" / "record.json").exists()  # kept: down again later
    finally:
        hosts[1].set_link(True)
    down_cluster("train", quiet=True)
    assert not any(process_alive(p) for p in pids)


def test_a_client_attaching_while_autostop_runs_waits_for_it_and_is_told_the_pool_stopped(two_hosts, skyhive_home):
    """The host's autostop holds the attach lock exclusively while it stops the pool (here: the test holds
    it, then leaves the autostop mark, as the script does): a client attaching meanwhile waits on that
    host, then fails saying the pool was stopped by autostop there — it never takes over a pool being
    stopped."""
    import fcntl
    import threading

    hosts = two_hosts
    with sky.Pool(provider=ssh_for(hosts), nodes=2, name="train", keep=True, output=None):
        pass
    [lock, _] = attach_locks(hosts, "train")
    result: dict[str, object] = {}

    def attach() -> None:
        try:
            with sky.Pool.attach("train", output=None) as pool:
                result["pids"] = pool.broadcast(os.getpid)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            result["error"] = exc

    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # "the autostop runs on host 0"
        client = threading.Thread(target=attach)
        client.start()
        waiting = lambda: [p for p in os.listdir("/proc") if p.isdigit()  # noqa: E731
                           and f"flock -s {lock} " in cmdline(int(p))]
        wait_for(lambda: waiting(), 60, "the attaching client to wait for the lock on host 0")
        assert client.is_alive() and not result
        (lock.parent.parent / f"{lock.parent.name}.autostop").write_text("autostop\n")
    client.join(60)
    assert not client.is_alive()
    assert "pids" not in result, result
    assert re.search(r"pool 'train' was stopped by autostop on \S+ while this client attached", str(result["error"])), \
        repr(result["error"])


def test_attach_names_a_host_whose_worker_is_gone_and_records_only_live_workers(two_hosts, skyhive_home):
    """Taking a kept pool over finds each worker on its host by the command line that serves its socket
    (issue 42: `launch -c` once recorded a pid that was not alive). The finding script's own command line
    names the socket and the worker module too: it found itself whenever its /proc entry came first in
    the glob's (text) order — always when no worker serves the socket (a dead worker "taken over" under
    the script's pid, not refused), and when a live one's pid sorted after it (pid 9999 before 10000 or a
    pid wrapped past pid_max): the record then held a pid gone a moment later."""
    from skyhive.errors import ProvisionError

    hosts = two_hosts
    pids = kept_pool_pids(hosts)
    rec = json.loads((Path(skyhive_home) / "clusters" / "train" / "record.json").read_text())
    by_node = {w["node"]: w["pid"] for w in rec["workers"]}
    with sky.Pool.attach("train", output=None) as pool:  # every worker taken over: the record names them
        assert sorted(pool.broadcast(os.getpid)) == pids
    rec = json.loads((Path(skyhive_home) / "clusters" / "train" / "record.json").read_text())
    assert sorted(w["pid"] for w in rec["workers"]) == pids and all(process_alive(p) for p in pids)
    os.kill(by_node[1], signal.SIGKILL)  # node 1's worker dies (its socket file stays)
    wait_for(lambda: not process_alive(by_node[1]), 30, "node 1's worker to die")
    with pytest.raises(ProvisionError) as info:
        with sky.Pool.attach("train", output=None):
            pass
    assert "node 1 worker 0" in str(info.value) and hosts[1].host in str(info.value)
    assert "is gone (nobody serves" in str(info.value)
    rec = json.loads((Path(skyhive_home) / "clusters" / "train" / "record.json").read_text())
    assert [w["pid"] for w in rec["workers"] if w["node"] == 0] == [by_node[0]]  # node 0's, untouched
