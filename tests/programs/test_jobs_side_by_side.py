"""Issue 40, point 3: a named pool's jobs side by side when the resources they ask fit, FIFO otherwise.

SkyPilot's smoke test `test_job_queue` on Local, its YAML files as written (examples/job_queue/: the
cluster task's `cloud: aws` left out, the audit's rule; job.yaml verbatim: `accelerators: T4:0.5`, a
140-second loop): two half-GPU jobs run at once on the node's one GPU (a Local node without one counts
as one), the third waits; cancelling job 2 lets job 3 start; the ids are SkyPilot's (the cluster task
has no `run`: it is no job). The scheduler's own rules are checked directly below."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skyhive.runtime.commands.jobsched import Capacity, Demand, demand_of, to_start
from tests.clusters.test_clusters import clean  # noqa: F401 - a fixture

SKYHIVE = [sys.executable, "-m", "skyhive"]

CLUSTER_YAML = """\
# A dummy task for cluster creation.
#
# Runs a dummy task that provision a cluster.
#
# Usage:
#   sky launch -c jq cluster.yaml
#   sky exec jq job.yaml

resources:
  accelerators: K80
"""

JOB_YAML = """\
# A task submitted to an existing cluster.
#
# Runs a task on a existing cluster.
#
# Usage:
#   sky launch -c jq cluster.yaml
#   sky exec jq job.yaml

name: job

resources:
  accelerators: T4:0.5

setup: |
  echo "running setup"

run: |
  timestamp=$(date +%s)
  conda env list
  for i in {1..140}; do
    echo "$timestamp $i"
    sleep 1
  done
"""


def sky(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SKYHIVE, *args], cwd=cwd, capture_output=True, text=True, timeout=240, env=dict(os.environ))


def states(name: str, cwd: Path) -> dict[str, str]:
    rows = [ln.split() for ln in sky("queue", name, cwd=cwd).stdout.splitlines()[1:]]
    return {r[1]: r[2] for r in rows if len(r) >= 3}


def wait_for(name: str, cwd: Path, want: dict[str, str]) -> dict[str, str]:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        now = states(name, cwd)
        if all(now.get(k) == v for k, v in want.items()):
            return now
        time.sleep(0.3)
    raise AssertionError(f"pool {name}: never {want} (last: {now})")


def test_job_queue_as_skypilots_smoke_test(tmp_path, clean):
    (tmp_path / "cluster.yaml").write_text(CLUSTER_YAML)
    (tmp_path / "job.yaml").write_text(JOB_YAML)
    name = "t-jq"
    launched = sky("launch", "-y", "-c", name, "--infra", "local", "cluster.yaml", cwd=tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    for i in (1, 2, 3):
        queued = sky("exec", name, "-n", f"{name}-{i}", "-d", "job.yaml", cwd=tmp_path)
        assert queued.returncode == 0 and f"job {i} ({name}-{i})" in queued.stderr, queued.stderr
    now = wait_for(name, tmp_path, {f"{name}-1": "RUNNING", f"{name}-2": "RUNNING"})  # both at once
    assert now[f"{name}-3"] == "PENDING"  # a third half does not fit beside them
    time.sleep(2)  # (and it goes on waiting)
    assert states(name, tmp_path)[f"{name}-3"] == "PENDING"
    assert sky("cancel", "-y", name, "2", cwd=tmp_path).returncode == 0
    wait_for(name, tmp_path, {f"{name}-2": "CANCELLED", f"{name}-3": "RUNNING", f"{name}-1": "RUNNING"})
    assert sky("cancel", "-y", name, "3", cwd=tmp_path).returncode == 0
    assert sky("cancel", "-y", name, "1", cwd=tmp_path).returncode == 0
    wait_for(name, tmp_path, {f"{name}-1": "CANCELLED", f"{name}-3": "CANCELLED"})
    for i in (1, 3):  # each job's log holds its own loop's lines
        log = sky("logs", name, str(i), cwd=tmp_path).stdout
        assert " 1\n" in log and f"job {i} cancelled" in log, log


def test_cpu_jobs_that_fit_the_node_run_side_by_side(tmp_path, clean):
    name = "t-cpus"
    launched = sky("launch", "-y", "-c", name, "--infra", "local", "echo up", cwd=tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    for i in (1, 2):
        assert sky("exec", name, "-n", f"cpu-{i}", "-d", "--cpus", "1", "sleep 10000", cwd=tmp_path).returncode == 0
    assert sky("exec", name, "-n", "whole", "-d", "sleep 10000", cwd=tmp_path).returncode == 0  # states none
    wait_for(name, tmp_path, {"cpu-1": "RUNNING", "cpu-2": "RUNNING"})
    assert states(name, tmp_path)["whole"] == "PENDING"  # a job stating no resources has the pool to itself
    assert sky("cancel", "-y", name, "--all", cwd=tmp_path).returncode == 0
    wait_for(name, tmp_path, {"cpu-1": "CANCELLED", "cpu-2": "CANCELLED", "whole": "CANCELLED"})


def test_the_scheduler_counts_shares_cpus_memory_and_keeps_the_queue_order():
    node = Capacity(gpus=1, cpus=4, memory_gb=16, slots=8)
    half, cpus3, cpus2 = Demand(gpus=0.5), Demand(cpus=3), Demand(cpus=2)
    assert to_start([half, half, half], [], node) == 2  # two halves fill the GPU
    assert to_start([cpus3, cpus2], [], node) == 1  # 3 + 2 CPUs > 4
    assert to_start([cpus2, cpus2], [], node) == 2
    assert to_start([cpus3, half], [cpus2], node) == 0  # FIFO: the half GPU waits behind the CPU job
    assert to_start([Demand(memory_gb=10)] * 2, [], node) == 1
    assert to_start([Demand()], [half], node) == 0 and to_start([half], [Demand()], node) == 0  # exclusive
    assert to_start([Demand(gpus=2)], [], node) == 1  # alone it always starts (the node check says what lacks)
    assert to_start([half] * 3, [], Capacity(gpus=4, slots=2)) == 2  # no more than the workers' task slots
    assert demand_of({"gpus": 0.5, "cpus": 2}) == Demand(gpus=0.5, cpus=2) and demand_of(None).exclusive


@pytest.mark.parametrize("spelling", ["T4:0.5", "{T4: 0.5}"])
def test_a_tasks_share_of_a_gpu_is_kept_for_the_queue(tmp_path, spelling):
    from skyhive.runtime.commands.taskfile import loads

    task = loads(f"resources:\n  accelerators: {spelling}\nrun: echo\n", source="t.yaml", cwd=str(tmp_path))
    assert (task.resources.accelerator, task.resources.accelerator_count, task.resources.accelerator_share) == (
        "T4", 1, 0.5)


def test_a_job_that_leaves_a_program_in_the_background_ends_with_its_script(tmp_path, clean):
    """The script's output is copied by its task (so that jobs side by side keep their logs apart); a
    background program that still holds the output does not keep the job running."""
    name = "t-bg"
    launched = sky("launch", "-y", "-c", name, "--infra", "local", "echo up", cwd=tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    ran = sky("exec", name, "-n", "bg", "(sleep 600; echo late) & echo started", cwd=tmp_path)
    assert ran.returncode == 0 and "started" in ran.stdout, ran.stdout + ran.stderr
    assert states(name, tmp_path)["bg"] == "SUCCEEDED"
