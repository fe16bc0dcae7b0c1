"""`resources.autostop.hook` on a kept AWS pool (issue 39): honoured, not refused. The hook is saved with the
pool and installed with the autostop watchdog an instance runs (`runtime/kinds/ssh/keep.py`), where it runs
on the head node before the stop and before the instance powers itself off.

moto's instances have no OS (tests/cloud/test_cloud_clusters.py: their nodes are local worker processes),
so the watchdog on an instance is simulated: the script the pool's record gives the head instance's
watchdog is run here by `sh`, as the watchdog runs it once the pool is idle, with a stand-in worker (a
process carrying the pool's mark) and the record's power-off command replaced by one that writes down
when it ran."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from skyhive.runtime.clusters import record as records
from skyhive.runtime.commands.taskfile import loads
from skyhive.runtime.control.pools import launch_cluster
from skyhive.runtime.kinds.ssh.keep import _watchdog_script, hook_of
from tests.cloud.test_cloud_clusters import aws, cloud_clean, record, states  # noqa: F401
from tests.clusters.test_clusters import wait_for

pytestmark = [pytest.mark.loopback_only]

TASK = """\
name: hooked
resources:
  autostop:
    idle_minutes: 10
    hook: |
      echo "hook on node $SKYPILOT_NODE_RANK in $(basename "$PWD")" >> "$EVENTS"
      kill -0 "$WORKER" && echo "hook: the worker still runs" >> "$EVENTS"
    hook_timeout: 30
run: echo trained
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_an_aws_pools_hook_is_installed_with_the_watchdog_and_runs_before_the_stop(cloud_clean, skyhive_home,
                                                                                   tmp_path, monkeypatch):
    server = cloud_clean
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "3600")  # nothing fires while the test looks
    out = io.StringIO()
    code = launch_cluster(loads(TASK, cwd=str(tmp_path)), "idle", provider=aws(server), out=out, err=out)
    assert code == 0, out.getvalue()  # (refused with exit 2 before: "on SSH hosts and cloud machines ...")
    ids = record(skyhive_home, "idle")["provider_info"]["instances"]
    assert states(server, ids) == ["running"]
    rec = records.load("idle")
    assert rec.autostop_minutes == 10 and rec.provider_info["power_off"]
    hook = hook_of(str(records.cluster_dir("idle")))
    assert hook is not None and hook[1] == 30.0 and "hook on node" in hook[0]

    # the head instance's watchdog script, for this pool as the ssh kind keeps a cloud's instances, run here
    home = tmp_path / "instance-home"
    cluster = f"c-idle-{uuid.uuid4().hex[:12]}"
    run_dir = home / ".skyhive" / "run"
    (run_dir / cluster).mkdir(parents=True)
    (run_dir / f"{cluster}.wd").mkdir()  # (made by the watchdog's starter, which also writes the script there)
    events = tmp_path / "events"
    worker = subprocess.Popen(["sleep", "600"], env={**os.environ, "SKYHIVE_CLUSTER": str(run_dir / cluster)})
    try:
        on_instance = dataclasses.replace(
            rec, cluster=cluster, keeper="ssh",
            workers=(records.WorkerEntry(node=0, rank=0, pid=worker.pid, socket=str(run_dir / cluster / "n0-w0.sock")),),
            provider_info={**rec.provider_info, "power_off": f'echo power-off >> "$EVENTS"'})
        script = _watchdog_script(on_instance, 0, 600.0, hook=hook)
        assert f"--command \"sh $WD/autostop.sh\"" in script  # what the watchdog runs once the pool is idle
        [stop] = re.findall(r"<<'SKYHIVE_AUTOSTOP_EOF'\n(.*?)SKYHIVE_AUTOSTOP_EOF\n", script, re.S)
        env = {**os.environ, "HOME": str(home), "EVENTS": str(events), "WORKER": str(worker.pid)}
        done = subprocess.run(["sh", "-c", stop], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        worker.wait(timeout=30)  # stopped by the script's sweep
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert events.read_text().splitlines() == ["hook on node 0 in idle", "hook: the worker still runs", "power-off"]
    mark = (run_dir / f"{cluster}.autostop").read_text()
    assert mark.startswith("autostop\nhook: exit 0\n")
    assert not (run_dir / cluster).exists() and not (run_dir / f"{cluster}.wd").exists()
    assert (home / ".skyhive" / "work" / "idle").is_dir()  # an instance that stops keeps its disk, jobs' files too
