"""SkyPilot's two torchrun task files (static ranks, and c10d rendezvous), written for this machine,
train to completion through `skyhive launch`: 2 Local nodes, CPU, gloo, one process per node."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

TASKS = Path(__file__).resolve().parents[2] / "examples" / "tasks"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                       reason="torch is not installed in this environment (pip install -e '.[torch]')"),
]


@pytest.mark.parametrize("task", ["train.yaml", "train-rdzv.yaml"])
def test_torchrun_task_file_trains_on_two_local_nodes(task, skyhive_home):
    done = subprocess.run([sys.executable, "-m", "skyhive", "launch", task], cwd=TASKS, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "[node 0] Starting distributed training, head node: 127.0.0.1" in lines
    finished = [ln for ln in lines if "training complete" in ln]
    # one trainer per node, two ranks in all, and each one checked that DDP kept the ranks in step
    assert sorted(ln.split("] ", 1)[1].split(" (")[0] for ln in finished) == ["rank 0 of 2", "rank 1 of 2"]
    assert {ln.split("]")[0] for ln in finished} == {"[node 0", "[node 1"}
