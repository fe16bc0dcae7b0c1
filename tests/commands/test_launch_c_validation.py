"""`skyhive launch -c NAME` checks everything it can before it creates the named pool, and a failure
after creation takes the new pool down again (issue 22, point 2): nothing is left — no record, no
worker, no agent, no pool log that says the pool runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyhive.runtime.control import pools as clusters
from skyhive.runtime.events.inventory import scan
from skyhive.runtime.clusters import record as records
from skyhive.runtime.commands.taskfile import load
from tests.clusters.test_clusters import clean, running_under, skyhive, write  # noqa: F401 - `clean` is a fixture

BAD = {
    "secret": ("secrets:\n  TOKEN:\n", "secrets.TOKEN has no value: pass it with --secret TOKEN=VALUE"),
    "env": ("envs:\n  EPOCHS:\n", "envs.EPOCHS has no value: pass it with --env EPOCHS=VALUE"),
}


@pytest.mark.parametrize("bad", sorted(BAD))
def test_a_task_that_cannot_run_creates_no_pool(tmp_path, clean, bad):
    text, problem = BAD[bad]
    task = write(tmp_path / "task.yaml", "num_nodes: 2\nresources:\n  cloud: local\n" + text + "run: echo hi\n")
    done = skyhive("launch", "-y", "-c", "never", str(task), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"skyhive: error: {task}:") and problem in line, line
    assert "creating pool" not in done.stderr
    assert records.names() == []
    assert running_under(clean) == []
    assert scan(include_stopped=True) == []  # not even a pool log


def test_a_missing_file_mount_creates_no_pool(tmp_path, clean):
    task = write(tmp_path / "task.yaml", f"resources:\n  cloud: local\nfile_mounts:\n  /data: {tmp_path}/nope\n"
                                         "run: echo hi\n")
    done = skyhive("launch", "-y", "-c", "never", str(task), cwd=tmp_path)
    assert done.returncode != 0 and "nope" in done.stderr, done.stdout + done.stderr
    assert "creating pool" not in done.stderr
    assert records.names() == [] and running_under(clean) == [] and scan(include_stopped=True) == []


def test_a_failure_after_creation_takes_the_new_pool_down(tmp_path, clean, monkeypatch):
    task = load(write(tmp_path / "task.yaml", "num_nodes: 2\nresources:\n  cloud: local\nrun: echo hi\n"))
    seen: list[int] = []

    def agent_fails(name: str) -> None:
        seen.extend(w.pid for w in records.load(name).workers)  # the pool was made: its workers run
        raise RuntimeError("the agent could not start (injected by the test)")

    monkeypatch.setattr(clusters, "ensure_agent", agent_fails)
    with pytest.raises(RuntimeError, match="injected by the test"):
        clusters.launch_cluster(task, "short", detach_run=True)
    assert len(seen) == 2
    assert records.names() == []
    assert running_under(clean) == []
    (entry,) = scan(include_stopped=True)
    assert entry.pool_id.startswith("short") and entry.state.status == "stopped"
