"""Recovery time of a managed job on Local or SSH hosts: a node's worker SIGKILLed → the job running again.

    python -m bench.managed_recovery [--runs 3] [--ssh] [--nodes 1|2]

`--ssh` (root: tests/infra's sshd hosts in network namespaces, created and removed here): a 1-node job
on [host a, host b]; a's worker is killed and the job recovers on b (warm: b's environment is built by
a first job before the measured runs).

`--nodes 2`: a 2-node job (on Local; with `--ssh` on [a, b, c]); node 1's worker is killed and only that
node is replaced in the job's pool (docs/jobs.md), then both ranks' programs start again. Its phases:
detection (the kill → the `replaced` event), new node ready (→ the pool's next `running`: the
replacement up, the other rank's script stopped), job restarted (→ the later of the two ranks' programs
started again).

Phases, from the job's events and the program's own start file: detection (the kill → the `lost`
event), new node ready (`lost` → the new attempt's `running`: its pool up), old attempt stopped (`lost` →
the lost attempt's `stopped`: its pool torn down and swept, beside the new one's provisioning), job
restarted (the later of the two → the program started again, past the workdir/setup steps). Uses a
throwaway SKYHIVE_HOME.
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
    return _phases(evs, killed, restarted)


def _phases(evs: list[dict], killed: float, restarted: float) -> dict[str, float]:
    lost = next(e["time"] for e in evs if e["kind"] == "lost")
    running = [e["time"] for e in evs if e["kind"] == "running"][1]
    # (`stopped`: since the replacement is provisioned beside the lost attempt's teardown; before, the
    # teardown came before `lost`)
    stopped = next((e["time"] for e in evs if e["kind"] == "stopped"), lost)
    return {"detection": lost - killed, "new node ready": running - lost, "old attempt stopped": stopped - lost,
            "job restarted": restarted - max(running, stopped), "total": restarted - killed}


def _events(home: str, job: int) -> list[dict]:
    path = Path(home) / "managed" / str(job) / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def one_ssh(home: str, tmp: str, hosts: list) -> dict[str, float]:
    """One recovery on SSH hosts: the program's start files are in each host's home (the job's node
    folder there: the hosts share this machine's file system)."""
    import skyhive as sky
    from tests.kinds.ssh.test_ssh_pool import ssh_for

    os.environ["SKYHIVE_HOME"] = home
    path = Path(tmp) / "task.yaml"
    path.write_text(TASK)
    a, b = hosts
    job = sky.jobs.launch(str(path), provider=ssh_for([a, b], connect_timeout=3, reconnect_timeout=4))
    ck = lambda h: h.home / ".skyhive" / "work" / f"managed-job{job}" / "checkpoints"  # noqa: E731
    first = ck(a) / "started.0"
    while not first.exists() or len(first.read_text().split()) < 2:
        time.sleep(0.01)
    worker = int(first.read_text().split()[0])
    killed = time.time()
    os.kill(worker, signal.SIGKILL)
    again = ck(b) / "started.0"  # the other host: its own folder (no bucket here), so it runs on: cancelled
    while not again.exists() or len(again.read_text().split()) < 2:
        time.sleep(0.01)
    restarted = float(again.read_text().split()[1])
    evs = _events(home, job)
    sky.jobs.cancel(job)
    return _phases(evs, killed, restarted)


GANG = """\
name: gang
num_nodes: 2
run: |
  exec python3 -c '
  import os, time
  d = os.environ["SKYHIVE_CHECKPOINT_DIR"]; rank = os.environ["SKYPILOT_NODE_RANK"]
  n = len([f for f in os.listdir(d) if f.startswith("started.%s." % rank)])
  open(os.path.join(d, "started.%s.%d" % (rank, n)), "w").write("%d %r" % (os.getppid(), time.time()))
  time.sleep(600)
  '
"""


def _started(path: Path) -> float | None:
    try:
        words = path.read_text().split()
    except FileNotFoundError:
        return None
    return float(words[1]) if len(words) >= 2 else None


def one_gang(home: str, tmp: str, hosts: list | None = None) -> dict[str, float]:
    """A 2-node job, node 1's worker killed, replaced in place (on SSH hosts: b by the spare c)."""
    import skyhive as sky

    os.environ["SKYHIVE_HOME"] = home
    path = Path(tmp) / "gang.yaml"
    path.write_text(GANG)
    if hosts is None:
        job = sky.jobs.launch(str(path))
        folder = Path(home) / "managed" / str(job) / "checkpoints"
        first = {0: folder / "started.0.0", 1: folder / "started.1.0"}
        again = {0: folder / "started.0.1", 1: folder / "started.1.1"}
    else:
        from tests.kinds.ssh.test_ssh_pool import ssh_for

        a, b, c = hosts
        job = sky.jobs.launch(str(path), provider=ssh_for([a, b, c], connect_timeout=3, reconnect_timeout=4))
        ck = lambda h: h.home / ".skyhive" / "work" / f"managed-job{job}" / "checkpoints"  # noqa: E731
        first = {0: ck(a) / "started.0.0", 1: ck(b) / "started.1.0"}
        again = {0: ck(a) / "started.0.1", 1: ck(c) / "started.1.0"}  # c's own folder: its first start
    while any(_started(p) is None for p in first.values()):
        time.sleep(0.01)
    worker = int(first[1].read_text().split()[0])
    killed = time.time()
    os.kill(worker, signal.SIGKILL)
    while any(_started(p) is None for p in again.values()):
        time.sleep(0.01)
    restarted = max(t for t in (_started(p) for p in again.values()) if t is not None)
    evs = _events(home, job)
    sky.jobs.cancel(job)
    replaced = next(e["time"] for e in evs if e["kind"] == "replaced")
    running = [e["time"] for e in evs if e["kind"] == "running"][1]
    return {"detection": replaced - killed, "new node ready": running - replaced,
            "job restarted": restarted - running, "total": restarted - killed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ssh", action="store_true", help="on sshd hosts in network namespaces (root)")
    parser.add_argument("--nodes", type=int, choices=(1, 2), default=1,
                        help="2: a 2-node job whose lost node is replaced in place")
    args = parser.parse_args()
    rows: list[dict[str, float]] = []
    if args.ssh:
        from tests.infra.netns import NetnsHosts
        from tests.infra.sshd import SshTestEnv

        env = SshTestEnv.create()
        hosts = NetnsHosts(env, args.nodes + 1)
        try:
            hosts.create()
            with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as tmp:
                os.chmod(home, 0o700)
                for i in range(args.runs + 1):  # the first warms every host's environment
                    row = one_gang(home, tmp, list(hosts)) if args.nodes == 2 else one_ssh(home, tmp, list(hosts))
                    if i:
                        rows.append(row)
        finally:
            hosts.close()
            env.close()
    else:
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as tmp:
                os.chmod(home, 0o700)
                rows.append(one_gang(home, tmp) if args.nodes == 2 else one(home, tmp))
    where = "SSH hosts (network namespaces, warm)" if args.ssh else "Local"
    what = "a 2-node job, one node replaced in place" if args.nodes == 2 else "a 1-node job"
    print(f"managed job recovery on {where}, {what}, {args.runs} runs: median (min-max) seconds")
    for phase in rows[0]:
        values = [r[phase] for r in rows]
        print(f"  {phase:<20} {statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
