"""Elastic pools (issue 40, point 1 and done-when 2): `Pool(nodes=(min, max), autoscale_idle_timeout=)`
starts with `min` nodes, grows while calls wait for a free worker (up to `max`), gives back nodes idle for
the timeout (never below `min`), and says why in its events. Local nodes here; SSH in
tests/kinds/ssh/test_ssh_elastic.py, a moto EC2 pool in tests/cloud/test_cloud_elastic.py.

The tasks block on a file the test writes (no sleep-and-assert); every wait is on a condition, with a
generous deadline."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

import skyhive as sky
from skyhive.runtime.events.log import EventLog, pool_log_path, read_log
from skyhive.runtime.events.types import NodeScaled
from tests.procs import alive, worker_pids

DEADLINE = 120.0  # a loaded machine: generous, and only ever waited on a condition


def held(i: int, folder: str) -> tuple[int, int]:
    """Say it started, then wait until the test releases it: a long task whose end the test decides."""
    import pathlib
    import time

    import skyhive

    path = pathlib.Path(folder)
    (path / f"started-{i}").write_text("")
    while not (path / "release").exists():
        time.sleep(0.02)
    return i, skyhive.instance_info().node


def node_of() -> int:
    import skyhive

    return skyhive.instance_info().node


def wait_until(what: str, condition) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE:g} s: {what}")
        time.sleep(0.05)


def scaled(pool_id: str) -> list[tuple[str, int, str]]:
    """The pool's `NodeScaled` events in its log: (change, node, reason)."""
    return [(e.change, e.node, e.reason) for e in read_log(pool_log_path(pool_id)) if isinstance(e, NodeScaled)]


def test_a_local_pool_grows_to_max_for_waiting_tasks_and_shrinks_back_when_idle(tmp_path: pathlib.Path):
    folder = str(tmp_path)
    with sky.Pool(provider=sky.Local(), nodes=(1, 3), autoscale_idle_timeout=1, output=None) as pool:
        pool_id = pool.id
        assert pool.current_nodes() == 1 and "nodes=1 of (1, 3)" in repr(pool)
        futures = [pool.submit(held, i, folder) for i in range(3)]  # three long tasks at once
        wait_until("3 tasks running", lambda: len(list(tmp_path.glob("started-*"))) == 3)
        assert pool.current_nodes() == 3 and "nodes=3 of (1, 3)" in repr(pool)
        assert pool.statistics()["members"] == [0, 1, 2]
        pids = worker_pids(pool_id)
        assert len(pids) == 3
        (tmp_path / "release").write_text("")
        ran = sorted(f.result(timeout=DEADLINE) for f in futures)
        assert [i for i, _ in ran] == [0, 1, 2] and sorted(n for _, n in ran) == [0, 1, 2]  # one per node
        wait_until("back to 1 node", lambda: pool.current_nodes() == 1)
        assert pool.statistics()["members"] == [0] and pool.statistics()["elastic"] == (1, 3)
        assert pool.broadcast(node_of) == [0]  # the nodes present at the call (ranked among them)
        assert pool.map(abs, [-1, -2, -3]) == [1, 2, 3]  # what is there, and the queue
        # a node leaves the members when it starts draining; its teardown ends a moment later
        wait_until("the given-back nodes terminated", lambda: [n.state for n in pool.state.nodes][1:] == ["terminated"] * 2)
        nodes = pool.state.nodes
        assert [n.state for n in nodes] == ["ready", "terminated", "terminated"]  # node 0, the start's, stays
        listed = subprocess.run([sys.executable, "-m", "skyhive", "ls"], capture_output=True, text=True, timeout=120)
        assert "(elastic 1..3)" in listed.stdout, listed.stdout + listed.stderr
    events = scaled(pool_id)
    grown = sorted(n for change, n, _ in events if change == "grow")
    shrunk = sorted(n for change, n, _ in events if change == "shrink")
    assert grown == [1, 2] and shrunk == [1, 2], events
    for change, _, reason in events:  # (the autoscaler may have seen the second task wait before the third)
        if change == "grow":
            assert re.fullmatch(r"grow: [12] tasks? waiting, 0 slots free on 1 ready node", reason), reason
        else:
            assert re.fullmatch(r"shrink: idle \d+s \(autoscale_idle_timeout=1\)", reason), reason
    shown = subprocess.run([sys.executable, "-m", "skyhive", "events", pool_id], capture_output=True, text=True,
                           timeout=120)  # the view that lists events says why each node came and went
    assert shown.returncode == 0 and shown.stdout.count('"type":"node_scaled"') == 4, shown.stdout + shown.stderr
    assert '"change":"grow","reason":"grow: ' in shown.stdout and '"change":"shrink","reason":"shrink: idle' in shown.stdout
    replayed = EventLog.replay(pool_log_path(pool_id))
    assert [n.state for n in replayed.nodes] == ["terminated"] * 3 and replayed.status == "stopped"
    wait_until("no worker of the pool left", lambda: not [p for p in pids | worker_pids(pool_id) if alive(p)])


def test_a_node_with_a_running_task_is_never_given_back(tmp_path: pathlib.Path):
    folder = str(tmp_path)
    with sky.Pool(provider=sky.Local(), nodes=(1, 2), autoscale_idle_timeout=0.5, output=None) as pool:
        pool_id = pool.id
        first = pool.submit(held, 0, folder)
        second = pool.submit(held, 1, folder)
        wait_until("2 tasks running", lambda: len(list(tmp_path.glob("started-*"))) == 2)
        # both nodes busy for many idle timeouts: neither goes (each autoscaler look sees its task).
        # Waited on the autoscaler itself: it looked again after 4 idle timeouts had passed
        scaler = pool.pool._runtime.autoscaler
        before, began = scaled(pool_id), time.monotonic()
        wait_until("4 idle timeouts passed", lambda: time.monotonic() - began > 2.0)
        looks = scaler.looks
        wait_until("the autoscaler looked since", lambda: scaler.looks > looks + 1)
        assert [c for c, _, _ in scaled(pool_id)] == [c for c, _, _ in before] == ["grow"]
        assert pool.current_nodes() == 2
        (tmp_path / "release").write_text("")
        assert sorted(i for i, _ in (first.result(timeout=DEADLINE), second.result(timeout=DEADLINE))) == [0, 1]
        wait_until("back to 1 node", lambda: pool.current_nodes() == 1)
    assert [c for c, _, _ in scaled(pool_id)] == ["grow", "shrink"]


@pytest.mark.parametrize(("nodes", "error", "match"), [
    ((3, 1), ValueError, r"Pool\(nodes=\(3, 1\)\): the range's min 3 is more than its max 1"),
    ((0, 0), ValueError, r"Pool\(nodes=\(0, 0\)\): the range's min is 0: a pool starts with at least 1 node"),
    ((1, "4"), TypeError, r"Pool\(nodes=\(1, '4'\)\): the range's max '4' is a str, need whole numbers"),
    ((1.5, 4), TypeError, r"Pool\(nodes=\(1.5, 4\)\): the range's min 1.5 is a float"),
    ((1, 2, 3), ValueError, r"Pool\(nodes=\(1, 2, 3\)\): a range is two whole numbers \(min, max\), got 3 values"),
    (0, ValueError, r"Pool\(nodes=0\): need a positive number of nodes, or a range \(min, max\)"),
])
def test_bad_ranges_are_refused_naming_the_value(nodes, error, match):
    with pytest.raises(error, match=match):
        sky.Pool(provider=sky.Local(), nodes=nodes)
    with pytest.raises(error, match=match):
        sky.ComputePool(provider=sky.Local(), nodes=nodes)


def test_bad_elastic_settings_are_refused_naming_them():
    with pytest.raises(ValueError, match=r"Pool\(autoscale_idle_timeout=0\): need a positive number of seconds"):
        sky.Pool(provider=sky.Local(), nodes=(1, 2), autoscale_idle_timeout=0)
    with pytest.raises(TypeError, match=r"Pool\(autoscale_cooldown='5'\): need a number of seconds, got str"):
        sky.Pool(provider=sky.Local(), nodes=(1, 2), autoscale_cooldown="5")
    with pytest.raises(ValueError, match=r"Pool\(nodes=\(1, 3\), min_nodes=1\): an elastic range"):
        sky.Pool(provider=sky.Local(), nodes=(1, 3), min_nodes=1)
    with pytest.raises(ValueError, match=r"Pool\(nodes=\(1, 3\), replace_failed=True\)"):
        sky.Pool(provider=sky.Local(), nodes=(1, 3), replace_failed=True)
    with pytest.raises(ValueError, match=r"Pool\(nodes=\(1, 10001\)\): 10001 nodes is more than the local"):
        sky.Pool(provider=sky.Local(), nodes=(1, 10001))
    fixed = sky.Pool(provider=sky.Local(), nodes=(2, 2))  # an empty range is a fixed size
    assert (fixed.nodes, fixed.elastic) == (2, None) and "nodes=2 " in repr(fixed)
    assert "nodes=(1, 4)" in repr(sky.Pool(provider=sky.Local(), nodes=(1, 4)))
    assert os.environ["SKYHIVE_HOME"]  # (nothing was started: no pool log)
    assert not (pathlib.Path(os.environ["SKYHIVE_HOME"]) / "pools").exists()
