"""Issue 40, point 1: elastic pools, with Skyward's own program (its guide "Auto-Scaling — start small, grow
under load, shrink when idle"). On today's main `sky.ComputePool(provider=…, nodes=(1, 4))` raised
`ValueError: Pool(nodes=(1, 4)): need a positive number of nodes`.

The program runs as written, with the audit's rules (`import skyward` → `import skyhive`, the cloud →
`sky.Local()`) and its durations shortened to fit a test (its 30 s tasks, 50 of them, its 2 and 1 minute
sleeps): what is checked is what it prints that does not depend on a loaded machine's timing, and the
pool's events (grown under load, given back when idle, back to its min)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.procs import alive, worker_pids

#: Skyward's program, after the audit's substitutions; SECONDS/COUNT/LOAD/IDLE are the shortened durations
PROGRAM = '''\
"""Auto-Scaling — start small, grow under load, shrink when idle."""

from time import sleep

import skyhive as sky
from skyhive.api import Worker


@sky.compute
def heavy_work(seconds: int) -> str:
    sleep(seconds)
    info = sky.instance_info()
    return f"node-{info.node}"


if __name__ == "__main__":
    with sky.ComputePool(
        provider=sky.Local(),
        nodes=(1, 4),
        worker=Worker(concurrency=2),
        vcpus=1,
        memory_gb=1,
        autoscale_idle_timeout=IDLE,
        autoscale_cooldown=20
    ) as pool:
        print(f"initial: {pool.current_nodes()} node(s)")

        futures = [heavy_work(SECONDS) > pool for _ in range(COUNT)]

        sleep(LOAD)
        print(f"under load: {pool.current_nodes()} node(s)")

        nodes_used = {f.result() for f in futures}
        print(f"work ran on: {nodes_used}")

        sleep(LOAD)
        print(f"after idle: {pool.current_nodes()} node(s)")
'''


def test_skywards_autoscaling_program_runs_on_local(tmp_path: Path):
    script = tmp_path / "autoscaling.py"
    script.write_text(PROGRAM.replace("IDLE", "1").replace("SECONDS", "2").replace("COUNT", "24")
                      .replace("LOAD", "3"))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "initial: 1 node(s)", done.stdout
    assert re.fullmatch(r"under load: [1-4] node\(s\)", lines[1]), done.stdout
    used = eval(lines[2].removeprefix("work ran on: "))  # noqa: S307 - the set the program printed
    assert used and used <= {"node-0", "node-1", "node-2", "node-3"}, done.stdout
    assert re.fullmatch(r"after idle: [1-4] node\(s\)", lines[3]), done.stdout
    # the pool's events: it grew under load (never past 4 nodes) and gave its idle nodes back
    logs = list((Path(os.environ["SKYHIVE_HOME"]) / "pools").glob("*.jsonl"))
    assert len(logs) == 1
    events = [json.loads(line) for line in logs[0].read_text().splitlines()]
    scaled = [(e["change"], e["node"], e["reason"]) for e in events if e["type"] == "node_scaled"]
    grown = [n for change, n, _ in scaled if change == "grow"]
    assert grown and set(grown) <= {1, 2, 3}, scaled
    assert all(reason.startswith("grow: ") and "tasks waiting" in reason for c, _, reason in scaled if c == "grow")
    nodes = {e["node"] for e in events if e["type"] == "node_state"}
    assert nodes <= {0, 1, 2, 3}
    assert events[-1]["type"] == "pool_stopped" and not events[-1]["leaked"]
    pool_id = events[0]["pool_id"]
    deadline = time.monotonic() + 60
    while [p for p in worker_pids(pool_id) if alive(p)] and time.monotonic() < deadline:  # nothing left running
        time.sleep(0.05)
    assert not [p for p in worker_pids(pool_id) if alive(p)]
