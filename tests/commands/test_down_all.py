"""`skyhive down -a` takes everything down, as SkyPilot's does (issue 36, point 2): every pool, named ones
included, ends with nothing running and no record, after the usual question on a terminal (`-y` skips it).
A `launch -c NAME` that made nothing leaves nothing in the name: the next pool of that name is the one
`ls` and `down` read. Real processes; the AWS attempt runs in a loopback-only namespace without
credentials (nothing leaves this machine)."""

from __future__ import annotations

import json
import os
import pty
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skyhive.runtime.clusters import record as records
from skyhive.runtime.events.inventory import scan
from skyhive.runtime.events.log import pool_log_path
from skyhive.runtime.events.types import NodeStateChanged, PoolDetached, PoolStarted, PoolStopped, to_json
from tests.clusters.test_clusters import SKYHIVE, clean, running_under, skyhive, wait_for, write  # noqa: F401 - a fixture
from tests.procs import state_of

TASK = "num_nodes: 2\nresources:\n  cloud: local\nrun: echo hi from $SKYPILOT_NODE_RANK\n"


def launch(name: str, tmp_path: Path) -> None:
    done = skyhive("launch", "-y", "-c", name, "-d", str(write(tmp_path / "task.yaml", TASK)), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"job 1 (task) queued on pool {name}" in done.stderr


def state_of_pool(name: str, tmp_path: Path) -> str:
    done = skyhive("status", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in map(json.loads, done.stdout.splitlines())}
    return str(rows[name]["state"]) if name in rows else ""


def test_down_all_takes_every_named_pool_down_and_forgets_it(tmp_path, clean):
    launch("alpha", tmp_path)
    launch("beta", tmp_path)
    assert state_of_pool("alpha", tmp_path) == state_of_pool("beta", tmp_path) == "UP"
    assert running_under(clean)

    done = skyhive("down", "-a", cwd=tmp_path)  # off a terminal: nothing asked
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pool alpha: down" in done.stderr and "pool beta: down" in done.stderr
    assert records.names() == []  # no record: not `STOPPED (workers gone)`
    assert running_under(clean) == []
    assert "no named pools" in skyhive("status", cwd=tmp_path).stdout
    assert {e.pool_id: e.status for e in scan(include_stopped=True)} == {"alpha": "stopped", "beta": "stopped"}
    again = skyhive("down", "--all", cwd=tmp_path)
    assert again.returncode == 0 and "no pools to clean up" in again.stdout, again.stdout + again.stderr

    launch("alpha", tmp_path)  # the name is free again: a new pool, which runs jobs
    assert state_of_pool("alpha", tmp_path) == "UP"
    done = skyhive("exec", "alpha", str(tmp_path / "task.yaml"), cwd=tmp_path)
    assert done.returncode == 0 and "hi from 0" in done.stdout, done.stdout + done.stderr


def on_a_terminal(*args: str, answer: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`skyhive ARGS` with a terminal for its stdin, on which `answer` is typed."""
    main, child = pty.openpty()
    try:
        os.write(main, answer.encode())
        proc = subprocess.run([*SKYHIVE, *args], stdin=child, capture_output=True, text=True, timeout=180, cwd=cwd)
    finally:
        os.close(child)
        os.close(main)
    return proc


def test_down_all_asks_first_on_a_terminal_and_yes_skips_the_question(tmp_path, clean):
    launch("alpha", tmp_path)
    refused = on_a_terminal("down", "-a", answer="n\n", cwd=tmp_path)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "Take down every pool: alpha (named)?" in refused.stderr
    assert "aborted: nothing was taken down" in refused.stderr
    assert state_of_pool("alpha", tmp_path) == "UP" and records.names() == ["alpha"]

    done = on_a_terminal("down", "-a", "-y", answer="", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Take down" not in done.stderr and "pool alpha: down" in done.stderr
    assert records.names() == [] and running_under(clean) == []


@pytest.mark.loopback_only
def test_a_launch_that_made_nothing_leaves_nothing_in_the_name(tmp_path, clean):
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(home), AWS_EC2_METADATA_DISABLED="true")  # no credentials anywhere, nothing to ask
    task = write(tmp_path / "task.yaml", "run: echo hi\n")
    failed = subprocess.run([*SKYHIVE, "launch", "-y", "-c", "jq", "--infra", "aws", str(task)], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=180)
    assert failed.returncode == 1 and "aws: no credentials found" in failed.stderr, failed.stdout + failed.stderr
    assert records.names() == []
    assert not pool_log_path("jq").exists()  # not a stopped AWS pool named jq either
    assert scan(include_stopped=True) == []

    done = subprocess.run([*SKYHIVE, "launch", "-y", "-c", "jq", "--infra", "local", str(task)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "hi" in done.stdout, done.stdout + done.stderr
    listed = subprocess.run([*SKYHIVE, "ls", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=60)
    (row,) = map(json.loads, listed.stdout.splitlines())
    assert (row["pool"], row["provider"], row["machine"], row["cost"]) == ("jq", "local", None, None)

    down = subprocess.run([*SKYHIVE, "down", "-a"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "pool jq: down" in down.stderr
    assert records.names() == [] and running_under(clean) == []


@pytest.mark.loopback_only
def test_a_failed_launch_over_a_dead_pool_leaves_its_log_closed_not_kept(tmp_path, clean):
    """A named pool whose workers died is taken down by the next `launch -c` of its name; when that launch
    makes nothing, its lines are cut and the dead pool's log still ends stopped (not `kept (named pool)`)."""
    launch("jq", tmp_path)
    for w in records.load("jq").workers:
        os.kill(w.pid, signal.SIGKILL)
    wait_for(lambda: all(state_of(w.pid) in (None, "Z") for w in records.load("jq").workers), what="workers to die")
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(home), AWS_EC2_METADATA_DISABLED="true")
    failed = subprocess.run([*SKYHIVE, "launch", "-y", "-c", "jq", "--infra", "aws", str(tmp_path / "task.yaml")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert failed.returncode == 1 and "aws: no credentials found" in failed.stderr, failed.stdout + failed.stderr
    assert records.names() == []
    (entry,) = scan(include_stopped=True)
    assert (entry.pool_id, entry.status, entry.state.provider) == ("jq", "stopped", "local")
    assert entry.state.error == "skyhive down jq"  # (`launch -c` took the dead pool down first)
    assert running_under(clean) == []


def test_ls_reads_the_pool_that_now_has_the_name(tmp_path):
    """A log holding an AWS pool that ran and was taken down, then a Local pool of the same name (attached
    again since): `ls` shows the Local pool's provider, no machine and no price."""
    now = time.time()
    events = [
        PoolStarted(pool_id="jq", seq=0, ts=now - 100, provider="aws", nodes=1, processes_per_node=1, pid=1,
                    host=socket.gethostname(), provider_config={"provider": "aws", "region": "us-east-1"},
                    plan={"instance_type": "t3a.medium", "cost_per_hour": 0.0376}),
        NodeStateChanged(pool_id="jq", seq=1, ts=now - 99, node=0, state="requested"),
        NodeStateChanged(pool_id="jq", seq=2, ts=now - 98, node=0, state="provisioning"),
        NodeStateChanged(pool_id="jq", seq=3, ts=now - 97, node=0, state="running", provider_id="i-0abc"),
        NodeStateChanged(pool_id="jq", seq=4, ts=now - 90, node=0, state="terminating"),
        NodeStateChanged(pool_id="jq", seq=5, ts=now - 89, node=0, state="terminated"),
        PoolStopped(pool_id="jq", seq=6, ts=now - 88, error="skyhive down jq"),
        PoolStarted(pool_id="jq", seq=7, ts=now - 50, provider="local", nodes=1, processes_per_node=1,
                    pid=os.getpid(), host=socket.gethostname(), provider_config={"provider": "local"}),
        NodeStateChanged(pool_id="jq", seq=8, ts=now - 49, node=0, state="running", provider_id="local-jq-0"),
        PoolDetached(pool_id="jq", seq=9, ts=now - 40, pid=os.getpid()),
        PoolStarted(pool_id="jq", seq=10, ts=now - 10, provider="local", nodes=1, processes_per_node=1,
                    pid=os.getpid(), host=socket.gethostname(), provider_config={"provider": "local"}),
    ]
    path = pool_log_path("jq")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(to_json(ev) + "\n" for ev in events))
    (entry,) = scan()
    assert entry.started is not None and entry.started.seq == 7  # the Local pool, as it was created
    assert (entry.state.provider, entry.machine, entry.cost(now), entry.billed_from) == ("local", "", None, now - 49)
    listed = subprocess.run([*SKYHIVE, "ls", "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    (row,) = map(json.loads, listed.stdout.splitlines())
    assert (row["provider"], row["machine"], row["cost"]) == ("local", None, None)
