"""Recovery time of a managed job on Local: a node's worker SIGKILLed → the job running again.

    python -m bench.managed_recovery [--runs 3]

Phases, from the job's events and the program's own start file: detection (the kill → the `lost`
event), new node ready (`lost` → the new attempt's `running`: its pool up), job restarted (`running` →
the program started again, past the workdir/setup steps). Uses a throwaway SKYHIVE_HOME.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASK = """\
name: bench
run: |
  exec python3 -c '
  import os, time
  d = os.environ["SKYHIVE_CHECKPOINT_DIR"]
  n = len([f for f in os.listdir(d) if f.startswith("started.")])
  open(os.path.join(d, "started.%d" % n), "w").write("%d %r" % (os.getppid(), time.time()))
  time.sleep(0 if n else 600)
  '
"""


def one(home: str, tmp: str) -> dict[str, float]:
    env = {**os.environ, "SKYHIVE_HOME": home}
    path = Path(tmp) / "task.yaml"
    path.write_text(TASK)
    out = subprocess.run([sys.executable, "-m", "skyhive", "jobs", "launch", str(path), "-y"], env=env,
                         capture_output=True, text=True, check=True)
    job = int(out.stdout.split("managed job ", 1)[1].split()[0])
    d = Path(home) / "managed" / str(job)
    first = d / "checkpoints" / "started.0"
    while not first.exists() or not first.read_text():
        time.sleep(0.01)
    worker = int(first.read_text().split()[0])
    killed = time.time()
    os.kill(worker, signal.SIGKILL)
    again = d / "checkpoints" / "started.1"
    while not again.exists() or len(again.read_text().split()) < 2:
        time.sleep(0.01)
    restarted = float(again.read_text().split()[1])
    while True:
        evs = [json.loads(line) for line in (d / "events.jsonl").read_text().splitlines()]
        if any(e["kind"] in ("succeeded", "failed", "cancelled") for e in evs):
            break
        time.sleep(0.05)
    lost = next(e["time"] for e in evs if e["kind"] == "lost")
    running = [e["time"] for e in evs if e["kind"] == "running"][1]
    return {"detection": lost - killed, "new node ready": running - lost, "job restarted": restarted - running,
            "total": restarted - killed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows: list[dict[str, float]] = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as tmp:
            rows.append(one(home, tmp))
    print(f"managed job recovery on Local, {args.runs} runs: median (min-max) seconds")
    for phase in rows[0]:
        values = [r[phase] for r in rows]
        print(f"  {phase:<15} {statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
