"""Impossible pool sizes are refused at once, naming the limit, before anything is created: no pool
log, no named pool record, no worker (issue 22, point 5)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import skyhive as sky
from skyhive.providers.limits import DEFAULT_MAX_NODES, ENV_MAX_NODES

SKYHIVE = [sys.executable, "-m", "skyhive"]


def created(home: str) -> list[str]:
    """Everything under the test's SKYHIVE_HOME (nothing may be created by a refused pool)."""
    return sorted(str(p.relative_to(home)) for p in Path(home).rglob("*"))


def test_a_pool_of_a_billion_nodes_is_refused_at_once_naming_the_limit(skyhive_home):
    began = time.monotonic()
    with pytest.raises(ValueError, match=rf"Pool\(nodes=1000000000\): 1000000000 nodes is more than the local "
                                         rf"provider allows one pool \({DEFAULT_MAX_NODES}; {ENV_MAX_NODES}"):
        sky.Pool(nodes=10**9)
    with pytest.raises(ValueError, match=r"more than the simulated provider allows one pool \(100000;"):
        sky.Pool(provider=sky.Simulated(), nodes=10**9)
    assert time.monotonic() - began < 5  # not a bound on speed: it used to take over ten minutes
    assert created(skyhive_home) == []


def test_the_configured_maximum_is_the_bound(monkeypatch, skyhive_home):
    monkeypatch.setenv(ENV_MAX_NODES, "3")
    with pytest.raises(ValueError, match=r"Pool\(nodes=4\): 4 nodes is more than the local provider allows one pool \(3;"):
        sky.Pool(nodes=4)
    assert sky.Pool(nodes=3).nodes == 3
    with pytest.raises(ValueError, match=r"more than the simulated provider allows one pool \(3;"):
        sky.Pool(provider=sky.Simulated(), nodes=4)
    with pytest.raises(ValueError, match=r"more than the fallback provider allows one pool \(3;"):
        sky.Pool(provider=[sky.Local(), sky.Simulated()], nodes=4)
    monkeypatch.setenv(ENV_MAX_NODES, "many")
    with pytest.raises(ValueError, match=rf"{ENV_MAX_NODES}='many': need a positive whole number"):
        sky.Pool(nodes=1)
    assert created(skyhive_home) == []


@pytest.mark.parametrize("cluster", [[], ["-c", "huge"]], ids=["launch", "launch-c"])
@pytest.mark.parametrize("text,flags,problem", [
    ("num_nodes: 100000000000\n", [], "num_nodes: 100000000000 nodes is more than the local provider allows one "
                                      f"pool ({DEFAULT_MAX_NODES};"),
    ("num_nodes: 1e11\n", [], "num_nodes: expected a positive whole number, got '1e11'"),
    ("", ["--nodes", "100000000000"], "num_nodes: 100000000000 nodes is more than the local provider"),
], ids=["whole", "float", "flag"])
def test_a_task_of_impossible_size_exits_2_naming_the_limit_and_creates_nothing(tmp_path, skyhive_home, cluster,
                                                                                   text, flags, problem):
    task = tmp_path / "task.yaml"
    task.write_text(text + "run: echo hi\n")
    began = time.monotonic()
    done = subprocess.run([*SKYHIVE, "launch", "-y", *cluster, *flags, str(task)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"skyhive: error: {task}") and problem in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert time.monotonic() - began < 60  # it hung for minutes (then MemoryError) before
    assert created(skyhive_home) == []
