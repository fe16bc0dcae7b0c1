"""`skyhive stop` and `skyhive start` of a named pool on real SSH hosts (issue 29): the sshd hosts in
network namespaces of the SSH tests (tests/infra). The `two_hosts` fixture (tests/clusters/test_ssh_clusters.py)
takes every pool down after the test and checks that nothing of it is left on the hosts (processes,
socket directories, jobs' working directories) or here.
"""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest

from tests.infra.sshd import process_alive
from tests.clusters.test_clusters import skyhive, write
from tests.clusters.test_ssh_clusters import TASK, cluster_processes, key, socket_dirs, two_hosts  # noqa: F401 - a fixture
from tests.kinds.ssh.test_ssh_pool import ssh_for

pytestmark = [pytest.mark.slow]


def _record(home: str, name: str = "train") -> dict:
    return json.loads((Path(home) / "clusters" / name / "record.json").read_text())


def _caches(hosts) -> list[tuple[str, int, float]]:
    """The bootstrap caches on the hosts (built environments, shipped runtimes): path, inode, mtime."""
    found = []
    for h in hosts:
        for kind in ("envs", "rt"):
            for p in sorted((h.home / ".skyhive" / kind).iterdir()):
                found.append((str(p), p.stat().st_ino, p.stat().st_mtime))
    return found


def test_stop_keeps_the_ssh_hosts_caches_and_work_start_runs_the_pool_again_down_after_stop_cleans(
        two_hosts, skyhive_home, tmp_path):
    """`skyhive stop` ends the workers (and their jobs) on every host and keeps what is on the disks: the
    bootstrap caches (the built venv) and the jobs' working directories; `skyhive start` (a process of
    its own, which finds the hosts, key and pinned host keys in the record) brings the same pool back on
    the same hosts from those caches and a job runs; a second stop and `down` leave nothing on the hosts
    (the fixture checks processes, socket directories and working directories)."""
    from skyhive.runtime.control.pools import launch_cluster
    from skyhive.runtime.commands.taskfile import loads

    hosts = two_hosts
    write(tmp_path / "t.yaml", TASK)
    task = loads(textwrap.dedent(TASK) + "envs:\n  GREETING: hello\n", cwd=str(tmp_path))
    out = io.StringIO()
    assert launch_cluster(task, "train", provider=ssh_for(hosts), out=out, err=out) == 0, out.getvalue()
    pids = sorted(w["pid"] for w in _record(skyhive_home)["workers"])
    assert len(pids) == 2 and all(process_alive(p) for p in pids)
    caches = _caches(hosts)
    assert any("/envs/" in c[0] for c in caches) and any("/rt/" in c[0] for c in caches)
    # a file a job left in its working directory on node 1
    left = skyhive("ssh", "train", "--node", "1", "--", "echo kept > mine.txt; pwd", cwd=tmp_path)
    assert left.returncode == 0, left.stderr
    work1 = Path(left.stdout.strip())
    assert work1 == hosts[1].home / ".skyhive" / "work" / "train" / "node-1"

    stopped = skyhive("stop", "-y", "train", cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    assert "pool train: stopped" in stopped.stderr and "caches kept" in stopped.stderr, stopped.stderr
    assert not any(process_alive(p) for p in pids)
    assert cluster_processes(key("train", skyhive_home)) == []  # nothing of the pool runs on the hosts
    assert socket_dirs(hosts, "train") == []
    assert _caches(hosts) == caches  # the venv and runtime untouched
    assert (work1 / "mine.txt").read_text() == "kept\n"  # the disks are kept, the work too
    status = skyhive("status", cwd=tmp_path)
    assert "STOPPED (stop)" in status.stdout, status.stdout
    refused = skyhive("exec", "train", "t.yaml", cwd=tmp_path)
    assert refused.returncode == 1 and "not running" in refused.stderr, refused.stderr
    # the hosts are still reachable through the pool's entries while it is stopped
    reached = skyhive("ssh", "train", "--node", "1", "--", "cat mine.txt", cwd=tmp_path)
    assert reached.returncode == 0 and reached.stdout == "kept\n", reached.stderr

    started = skyhive("start", "-y", "train", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    assert "pool train: started (2 nodes)" in started.stderr
    rec = _record(skyhive_home)
    again = sorted(w["pid"] for w in rec["workers"])
    assert len(again) == 2 and all(process_alive(p) for p in again) and not set(again) & set(pids)
    assert rec["provider_info"]["hosts"] == [f"{h.user}@{h.host}:{h.port}" for h in hosts]  # the same hosts
    assert _caches(hosts) == caches  # started from the caches: nothing rebuilt, nothing shipped again
    ran = skyhive("exec", "train", "t.yaml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    parents = {int(ln.rsplit(" ", 1)[1]) for ln in ran.stdout.splitlines() if " under " in ln}
    assert parents == set(again)  # run by the new workers, one on each host
    for n, h in enumerate(hosts):
        assert f"run {n} on {h.hostname}" in ran.stdout, ran.stdout
    queue = skyhive("queue", "train", cwd=tmp_path)
    assert [ln.split()[:3] for ln in queue.stdout.splitlines()[1:]] == [["1", "hello", "SUCCEEDED"],
                                                                      ["2", "hello", "SUCCEEDED"]]
    # stopped again, then down: nothing of the pool left on the hosts (and here: the fixture checks)
    assert skyhive("stop", "-y", "train", cwd=tmp_path).returncode == 0
    assert not any(process_alive(p) for p in again)
    down = skyhive("down", "-y", "train", cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert not (hosts[1].home / ".skyhive" / "work" / "train").exists()
    assert socket_dirs(hosts, "train") == [] and cluster_processes(key("train", skyhive_home)) == []
    assert not (Path(skyhive_home) / "ssh" / "train.config").exists()
    assert sorted(p.name for p in (Path(skyhive_home) / "ssh").glob("train.*")) == []  # `start`'s train.hosts too
    assert "no named pools" in skyhive("status", cwd=tmp_path).stdout


@pytest.mark.parametrize("down", [False, True], ids=["stop", "down"])
def test_the_autostop_script_on_a_cloud_instance_shuts_it_down_and_keeps_its_work_unless_down(down):
    """The watchdog on a cloud instance has no cloud credentials: its autostop stops the pool's processes,
    leaves its mark and shuts the OS down (the instance was made to stop on that, or to terminate with
    --down: tests/clusters/test_access_cloud.py checks that against moto). A stopping instance keeps the jobs'
    working directories (its disk stays); the mark an earlier autostop left on that disk is removed when
    the watchdog starts again (`skyhive start`), or the restarted pool would be taken as autostopped."""
    from skyhive.runtime.clusters.record import ClusterRecord, WorkerEntry
    from skyhive.runtime.kinds.ssh.keep import _watchdog_script

    run = "/home/u/.skyhive/run"
    rec = ClusterRecord(name="idle", provider="aws", nodes=1, processes_per_node=1, cwd="/", socket_dir="",
                        created=0.0, workers=(WorkerEntry(node=0, rank=0, pid=1, socket=f"{run}/c-idle-1/n0-w0.sock"),),
                        autostop_minutes=5, autostop_down=down, cluster="c-idle-1",
                        provider_info={"instances": ["i-1"], "cloud": {"shutdown_command": "sudo poweroff"}})
    script = _watchdog_script(rec, 0, 300)
    starter, _, stop = script.partition("cat > \"$WD/autostop.sh\"")
    assert f"rm -f -- {run}/c-idle-1.autostop\n" in starter  # a stale mark goes before the watchdog starts
    body = stop.split("SKYHIVE_AUTOSTOP_EOF")[1]
    assert body.index(f"echo autostop > {run}/c-idle-1.autostop") < body.index("sudo poweroff")
    assert ('rm -rf -- "$HOME/.skyhive/work/"idle' in body) == down
