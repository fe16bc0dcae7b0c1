"""`resources.autostop.hook` on SSH hosts (issue 39): the watchdog on the head host runs the hook before it
stops the pool there — in the jobs' directory, as node 0, with its time limit — and what the hook printed
and its exit status come back through the head host's autostop mark: the next `skyhive status` keeps them in
the pool's `autostop-hook.log`. Real OpenSSH sshd in network namespaces (tests/infra, the `two_hosts`
fixture of test_ssh_clusters.py, which also checks that nothing of the pool is left on the hosts).

No timing margin: the pool is launched with an hour-long autostop "minute" (nothing fires while the test
looks at it), then its watchdogs are started again with a one-second minute."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import pytest

from skyhive.runtime.clusters import record as records
from skyhive.runtime.clusters.named import set_autostop
from skyhive.runtime.commands.taskfile import loads
from skyhive.runtime.control.pools import launch_cluster, status_rows
from tests.clusters.test_clusters import wait_for
from tests.clusters.test_ssh_clusters import cluster_processes, key, two_hosts  # noqa: F401
from tests.infra.sshd import process_alive
from tests.kinds.ssh.test_ssh_pool import ssh_for

pytestmark = [pytest.mark.slow]

HOOKED = """\
    num_nodes: 2
    resources:
      autostop:
        idle_minutes: 2
        hook: |
          echo "checkpoint from node $SKYPILOT_NODE_RANK in $(basename "$PWD")"
          for s in "$HOME"/.skyhive/run/c-hooked-*/n0-w0.sock; do [ -S "$s" ] && echo "worker socket still there"; done
          {tail}
        hook_timeout: {timeout}
    run: echo trained
    """


def _launch(hosts, tmp_path, monkeypatch, tail: str, timeout: int) -> list[int]:
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "3600")
    task = loads(textwrap.dedent(HOOKED.format(tail=tail, timeout=timeout)), cwd=str(tmp_path))
    out = io.StringIO()
    assert launch_cluster(task, "hooked", provider=ssh_for(hosts), out=out, err=out) == 0, out.getvalue()
    rec = records.load("hooked")
    assert rec.autostop_minutes == 2  # the task file's autostop, honoured
    return sorted(w.pid for w in rec.workers)


def _scripts(hosts) -> list[str]:
    return [next((h.home / ".skyhive" / "run").glob("c-hooked-*.wd/autostop.sh")).read_text() for h in hosts]


def _wait_stopped(hosts, pids: list[int]) -> None:
    for p in pids:
        wait_for(lambda p=p: not process_alive(p), 120, f"worker {p} to be stopped by autostop")
    marks = lambda: [m for h in hosts for m in (h.home / ".skyhive" / "run").glob("c-hooked-*.autostop")]  # noqa: E731
    wait_for(lambda: len(marks()) == 2, 60, "each host's watchdog to finish stopping the pool")


def test_the_head_hosts_watchdog_runs_the_hook_before_it_stops_the_pool(two_hosts, skyhive_home, tmp_path,
                                                                        monkeypatch):
    hosts = two_hosts
    pids = _launch(hosts, tmp_path, monkeypatch, "exit 4", 60)
    head, other = _scripts(hosts)
    assert "checkpoint from node" in head and "timeout --kill-after=10 60 bash -c" in head
    assert "checkpoint from node" not in other  # the hook runs on the head node only
    assert not list((hosts[0].home / ".skyhive" / "run").glob("c-hooked-*.autostop"))  # nothing ran yet

    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "1")
    set_autostop(records.load("hooked"), 2, False)  # (what `launch -c -i 2` does): 2 s idle from now
    _wait_stopped(hosts, pids)
    mark = next((hosts[0].home / ".skyhive" / "run").glob("c-hooked-*.autostop")).read_text()
    # it ran while the pool was up (its worker's socket was there), in the jobs' directory, as node 0; it
    # failed, and the pool stopped all the same
    assert mark.splitlines()[:4] == ["autostop", "hook: exit 4", "checkpoint from node 0 in hooked",
                                     "worker socket still there"]
    assert next((hosts[1].home / ".skyhive" / "run").glob("c-hooked-*.autostop")).read_text() == "autostop\n"

    rows = status_rows()
    assert [(r["name"], r["state"]) for r in rows] == [("hooked", "STOPPED (autostop)")]
    report = (Path(skyhive_home) / "clusters" / "hooked" / "autostop-hook.log").read_text()
    assert report.startswith("hook: exit 4\ncheckpoint from node 0 in hooked\n")


def test_a_hook_past_its_time_limit_is_ended_and_the_pool_stops(two_hosts, skyhive_home, tmp_path, monkeypatch):
    hosts = two_hosts
    pids = _launch(hosts, tmp_path, monkeypatch, "exec sleep 600", 1)
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "1")
    set_autostop(records.load("hooked"), 2, False)
    _wait_stopped(hosts, pids)
    mark = next((hosts[0].home / ".skyhive" / "run").glob("c-hooked-*.autostop")).read_text()
    assert mark.splitlines()[1] == "hook: exit 124"  # timeout(1)'s status: ended at its limit
    wait_for(lambda: cluster_processes(key("hooked", skyhive_home)) == [], 30, "the hook's sleep to be ended")
