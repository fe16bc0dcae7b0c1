"""A `@sky.compute` function run as a managed job on Local (docs/jobs.md): `sky.jobs.launch(fn(...))`
gives a `ManagedJob` whose `result()` (or `await`) is the function's return value — after a killed
worker was recovered (the call ran again from its checkpoint), and from another process that attaches
to the job by its id once the launching client is gone; the function's own exception is raised,
restarted first while `max_restarts_on_errors` allows; a cancelled job raises `ManagedJobError`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import anyio
import pytest

import skyhive as sky
from tests.managed.test_managed_jobs import ckpt, gone, live_workers, step_of, wait_for


@sky.compute
def managed_train(epochs: int) -> dict:
    d = sky.checkpoint_dir()
    step = int((d / "step").read_text()) if (d / "step").exists() else 0
    first = not list(d.glob("started.*"))
    (d / f"started.{step}").write_text(str(os.getpid()))  # the worker's: the function runs in it
    while step < epochs:
        if first and step == 2:  # held here on the first attempt until the test has killed its worker
            time.sleep(0.05)
            continue
        step += 1
        (d / "step.tmp").write_text(str(step))
        (d / "step.tmp").rename(d / "step")
    return {"epochs": step, "job": os.environ["SKYHIVE_JOB_ID"], "task": os.environ["SKYPILOT_TASK_ID"],
            "pid": os.getpid()}


@sky.compute
def managed_fail() -> None:
    d = sky.checkpoint_dir()
    n = len(list(d.glob("try.*"))) + 1
    (d / f"try.{n}").touch()
    raise ValueError(f"bad input on try {n}")


@sky.compute
def managed_sleep() -> None:
    (sky.checkpoint_dir() / "started").write_text(str(os.getpid()))
    time.sleep(600)


def test_a_compute_function_as_a_managed_job_returns_its_result_across_a_recovery(skyhive_home):
    job = sky.jobs.launch(managed_train(5), name="fn")
    assert isinstance(job, sky.jobs.ManagedJob) and job.info()["name"] == "fn"
    wait_for(lambda: step_of(skyhive_home, job.id) >= 2, what="two steps")
    (first,) = ckpt(skyhive_home, job.id).glob("started.*")
    worker = int(first.read_text())
    os.kill(worker, signal.SIGKILL)
    result = job.result(timeout=120)
    assert result["epochs"] == 5 and result["job"] == str(job.id) and result["pid"] != worker, result
    assert result["task"].endswith(f"-managed-{job.id}")
    info = job.info()
    assert info["state"] == "SUCCEEDED" and info["attempts"] == 2 and info["recoveries"] == 1, info
    assert info["restarts_on_errors"] == 0
    # the second attempt resumed from the checkpoint, not from 0
    assert sorted(p.name for p in ckpt(skyhive_home, job.id).glob("started.*")) == ["started.0", "started.2"]
    assert "[skyhive] node lost" in job.log() and "WorkerLost" in job.log()
    assert (os.stat(ckpt(skyhive_home, job.id).parent / "result.pkl").st_mode & 0o777) == 0o600
    # the result is the job's, not the launching process's: another process attaches and gets it
    code = f"import skyhive as sky; print(sky.jobs.ManagedJob({job.id}).result(timeout=60)['epochs'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "5", out.stderr

    async def awaited() -> dict:
        return await sky.jobs.ManagedJob(job.id)

    assert anyio.run(awaited)["epochs"] == 5
    assert gone(info["controller_pid"]) and not live_workers(info["pools"])


def test_a_managed_function_that_raises_is_restarted_then_raises_and_a_cancelled_one_has_no_result(skyhive_home):
    job = sky.jobs.launch(managed_fail(), max_restarts_on_errors=1)
    with pytest.raises(ValueError, match="bad input on try 2"):
        job.result(timeout=120)
    info = job.info()
    assert info["state"] == "FAILED" and info["attempts"] == 2 and info["restarts_on_errors"] == 1, info
    assert "ValueError: bad input on try 2" in info["detail"]
    # cancelled mid-call: no result, and nothing left running
    job = sky.jobs.launch(managed_sleep())
    wait_for(lambda: (ckpt(skyhive_home, job.id) / "started").exists(), what="the call to start")
    worker = int((ckpt(skyhive_home, job.id) / "started").read_text())
    assert job.cancel() == "CANCELLED"
    with pytest.raises(sky.ManagedJobError, match=f"managed job {job.id} cancelled") as err:
        job.result(timeout=60)
    assert err.value.job_id == job.id and err.value.state == "CANCELLED"
    assert gone(worker) and not live_workers(job.info()["pools"])
    # what cannot be a managed job is refused before anything is recorded
    with pytest.raises(TypeError, match=r"managed_fail\(\.\.\.\)"):
        sky.jobs.launch(managed_fail)
    with pytest.raises(ValueError, match="max_restarts_on_errors=-1"):
        sky.jobs.launch(managed_fail(), max_restarts_on_errors=-1)
    with pytest.raises(LookupError, match="no managed job 99"):
        sky.jobs.ManagedJob(99)
    assert len(sky.jobs.queue()) == 2
