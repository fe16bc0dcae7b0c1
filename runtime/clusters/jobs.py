"""A named pool's job queue, kept as files in the pool's directory (see `record`).

    jobs/<id>.json     `Job`: what to run and how it went (0600; the job's secret values are dropped
                       from it once the job ends)
    jobs/<id>.steps    what runs on the nodes (`commands.steps.TaskSteps`, pickled: the scripts and
                       the packed workdir and file mounts; written and read by this user only)
    jobs/<id>.log      what the job's nodes wrote ("[node N] " before each line when N > 1)
    jobs/<id>.cancel   present once `skyhive cancel` asked for the job to stop

Jobs run in the order they were queued, side by side when the resources they ask fit
(`commands/jobsched.py`), by the pool's agent (`control/agent.py`); a job is only ever rewritten
by the agent (and by `cancel` while it is still PENDING, under the queue lock), so readers need no
lock. Ids count from 1 per pool, as SkyPilot's do: a task with only `setup` (no `run`) is a job SkyPilot
gives no id, so here it takes a negative one (-1, -2, ...), left out of the queue's listing, and the
next task with a `run` still becomes job 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ...paths import private_dir
from . import record as records
from .procs import alive, lock_holder

__all__ = ["agent_lock_path", "agent_pid", "Job", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "FAILED_SETUP", "CANCELLED", "FINISHED", "jobs_dir", "submit",
           "load_job", "save_job", "list_jobs", "next_pending", "pending", "request_cancel", "cancel_requested", "log_path",
           "steps_path", "queue_lock", "reap_orphans"]

PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED = "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"
#: SkyPilot's state of a job whose setup failed on a node (its run never started)
FAILED_SETUP = "FAILED_SETUP"
FINISHED = (SUCCEEDED, FAILED, FAILED_SETUP, CANCELLED)


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """One job of a named pool (`with_setup`: `launch -c` runs the task's setup first; `exec` does
    not). Times are `time.time()`; `exit_code` is the first failing node's. `env` and `secrets` reach
    the workers as the pool's Image for this job (secret values redacted from its log)."""

    id: int
    name: str
    state: str = PENDING
    submitted: float = 0.0
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    detail: str = ""
    with_setup: bool = False
    env: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    agent_pid: int = 0
    #: what the job asks of each node: {"gpus": 0.5, "cpus": 2, "memory_gb": 8} (`commands/jobsched.py`);
    #: empty: nothing stated, the job has the pool to itself
    demand: dict[str, float] = field(default_factory=dict)

    def __repr__(self) -> str:  # never the secret values
        return f"<Job {self.id} {self.name!r} {self.state}>"

    @property
    def duration(self) -> float | None:
        """Seconds it ran (so far, while it runs)."""
        if self.started is None:
            return None
        return (self.ended or time.time()) - self.started


def jobs_dir(name: str) -> Path:
    records.cluster_dir(name, create=True)
    return private_dir("clusters", name, "jobs")


def _path(name: str, job_id: int, suffix: str) -> Path:
    return jobs_dir(name) / f"{job_id}{suffix}"


def log_path(name: str, job_id: int) -> Path:
    return _path(name, job_id, ".log")


def open_log(name: str, job_id: int) -> TextIO:
    """The job's output file, opened to append (created 0600: what a job prints may be private)."""
    fd = os.open(log_path(name, job_id), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    return os.fdopen(fd, "a", encoding="utf-8")


def steps_path(name: str, job_id: int) -> Path:
    return _path(name, job_id, ".steps")


@contextlib.contextmanager
def queue_lock(name: str) -> Iterator[None]:
    """The queue's lock: held while ids are handed out and while a PENDING job is changed."""
    fd = os.open(jobs_dir(name) / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def save_job(name: str, job: Job) -> None:
    _write_private(_path(name, job.id, ".json"), json.dumps(dataclasses.asdict(job), sort_keys=True).encode())


def load_job(name: str, job_id: int) -> Job:
    """Job `job_id` of pool `name`; `LookupError` naming both if there is none. Creates nothing (the
    dashboard asks for any name a URL holds)."""
    path = records.cluster_dir(name) / "jobs" / f"{job_id}.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LookupError(f"pool {name!r} has no job {job_id} (`skyhive queue {name}` lists its jobs)") from None
    return Job(**data)


def _ids(name: str) -> list[int]:
    return [int(p.stem) for p in jobs_dir(name).glob("*.json") if p.stem.lstrip("-").isdigit()]


def list_jobs(name: str, *, setup_only: bool = False) -> list[Job]:
    """Every job of pool `name`, by id (with `setup_only`, also the setup-only ones: negative ids)."""
    ids = sorted(i for i in _ids(name) if i > 0 or setup_only)
    out = []
    for job_id in ids:
        with contextlib.suppress(LookupError, ValueError, TypeError):
            out.append(load_job(name, job_id))
    return out


def submit(name: str, *, job_name: str, steps: bytes, with_setup: bool, env: dict[str, str],
           secrets: dict[str, str], setup_only: bool = False, demand: dict[str, float] | None = None) -> Job:
    """Queue a job (`steps`: its pickled `TaskSteps`); it runs after the jobs before it. Returns it.
    `setup_only` (a task with no `run`): the job takes the next negative id, SkyPilot's numbering
    giving it none."""
    with queue_lock(name):
        ids = _ids(name)
        job_id = min((i for i in ids if i < 0), default=0) - 1 if setup_only else max(
            (i for i in ids if i > 0), default=0) + 1
        job = Job(id=job_id, name=job_name, submitted=time.time(), with_setup=with_setup,
                  env=dict(env), secrets=dict(secrets), demand=dict(demand or {}))
        _write_private(steps_path(name, job.id), steps)
        save_job(name, job)
    return job


def reap_orphans(name: str) -> list[Job]:
    """Jobs still RUNNING whose agent died (killed, machine rebooted) are FAILED, saying so; those."""
    reaped = []
    with queue_lock(name):
        for job in list_jobs(name, setup_only=True):
            if job.state == RUNNING and not (job.agent_pid > 0 and alive(job.agent_pid)):
                job = dataclasses.replace(job, state=FAILED, ended=time.time(), secrets={},
                                          detail=f"its agent (pid {job.agent_pid}) died while it ran")
                save_job(name, job)
                reaped.append(job)
    return reaped


def pending(name: str) -> list[Job]:
    """The PENDING jobs (setup-only ones too), in the order they were queued."""
    return sorted((j for j in list_jobs(name, setup_only=True) if j.state == PENDING),
                  key=lambda j: (j.submitted, abs(j.id)))


def next_pending(name: str) -> Job | None:
    """The PENDING job queued first, or None."""
    return next(iter(pending(name)), None)


def request_cancel(name: str, job_id: int) -> Job:
    """Ask for job `job_id` to stop: a PENDING job is CANCELLED at once; a RUNNING one is stopped by
    the agent (its nodes' commands get SIGTERM, then SIGKILL). Returns the job as it is now."""
    with queue_lock(name):
        job = load_job(name, job_id)
        if job.state == PENDING:
            job = dataclasses.replace(job, state=CANCELLED, ended=time.time(), detail="cancelled before it started",
                                      secrets={})
            save_job(name, job)
            return job
    if job.state == RUNNING:
        _write_private(_path(name, job_id, ".cancel"), b"")
    return job


def cancel_requested(name: str, job_id: int) -> bool:
    return _path(name, job_id, ".cancel").exists()


def agent_lock_path(name: str) -> str:
    """The lock the pool's job agent (`control/agent.py`) holds while it runs; here, beside the queue,
    so that `clusters/stop.py` finds the agent without importing it (the agent sits above the pool)."""
    return str(records.cluster_dir(name, create=True) / "agent.lock")


def agent_pid(name: str) -> int | None:
    """The pid of the pool's running agent, or None."""
    return lock_holder(agent_lock_path(name))
