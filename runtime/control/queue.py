"""`skyhive queue NAME`, `skyhive cancel NAME [JOB...]` and `skyhive logs NAME [JOB]`: a named pool's jobs.

The queue itself is `runtime/clusters/jobs.py`; its agent (`control/agent.py`) runs the jobs.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from ..clusters import jobs as jobq
from ..clusters import record as records
from .pools import follow_job

__all__ = ["print_queue", "cancel_jobs", "job_logs", "is_named", "job_status", "sync_down"]


def is_named(name: str) -> bool:
    """True when `name` is a named pool of this machine (it has a record)."""
    try:
        return (records.cluster_dir(name) / "record.json").is_file()
    except ValueError:
        return False


def _clock(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s" if seconds >= 3600 else (
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s")


def print_queue(name: str, out: TextIO | None = None, *, as_json: bool = False) -> int:
    """The jobs of pool `name`: id, name, state, start, duration — a table, or one JSON object per job
    (never its environment or secrets). Raises `PoolNotFound` naming it."""
    out = out or sys.stdout
    records.load(name)
    jobq.reap_orphans(name)
    if as_json:
        for j in jobq.list_jobs(name):
            out.write(json.dumps({"pool": name, "id": j.id, "name": j.name, "state": j.state, "submitted": j.submitted,
                                  "started": j.started, "ended": j.ended, "duration": j.duration,
                                  "exit_code": j.exit_code, "detail": j.detail, "with_setup": j.with_setup}) + "\n")
        return 0
    rows = [[str(j.id), j.name, j.state, _clock(j.started), _duration(j.duration)] for j in jobq.list_jobs(name)]
    if not rows:
        out.write(f"pool {name} has no jobs\n")
        return 0
    head = ["ID", "NAME", "STATE", "START", "DURATION"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    for row in [head, *rows]:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() + "\n")
    return 0


def cancel_jobs(name: str, job_ids: list[int], *, all_jobs: bool = False, err: TextIO | None = None) -> int:
    """Cancel jobs of pool `name`: the ones given, every unfinished one (`all_jobs`), or else the running
    one. A pending job is cancelled at once; the running one is stopped by the agent, which then starts
    the next. Raises `PoolNotFound`/`LookupError` naming the pool and job."""
    err = err or sys.stderr
    records.load(name)
    if all_jobs:
        job_ids = [j.id for j in jobq.list_jobs(name) if j.state not in jobq.FINISHED]
    elif not job_ids:
        job_ids = [j.id for j in jobq.list_jobs(name) if j.state == jobq.RUNNING]
        if not job_ids:
            err.write(f"skyhive: pool {name} runs no job (give job ids, or --all for the pending ones)\n")
            return 1
    for job_id in job_ids:
        job = jobq.request_cancel(name, job_id)
        what = {jobq.CANCELLED: "cancelled", jobq.RUNNING: "cancelling (its nodes' commands are being stopped)"}
        err.write(f"skyhive: pool {name} job {job_id}: {what.get(job.state, f'already {job.state.lower()}')}\n")
    err.flush()
    return 0


def job_logs(name: str, job_id: int | None, *, follow: bool, out: TextIO | None = None) -> int:
    """The log of job `job_id` (default: the latest) of pool `name`; with `follow`, until it ends."""
    out = out or sys.stdout
    if job_id is None:
        all_jobs = jobq.list_jobs(name)
        if not all_jobs:
            raise LookupError(f"pool {name!r} has no jobs yet")
        job_id = all_jobs[-1].id
    jobq.load_job(name, job_id)  # a clear error for an unknown id
    code = follow_job(name, job_id, out, follow=follow)
    return code if follow else 0


def job_status(name: str, job_id: int | None, out: TextIO | None = None) -> int:
    """`skyhive logs NAME [JOB] --status`: print `Job ID: STATE` (default: the latest job) and exit with
    SkyPilot's code for it (`exitcodes`: 102 when there is no such job). Raises `PoolNotFound`."""
    from ..commands.exitcodes import of_state

    out = out or sys.stdout
    records.load(name)
    jobq.reap_orphans(name)
    all_jobs = jobq.list_jobs(name)
    job = all_jobs[-1] if job_id is None and all_jobs else next((j for j in all_jobs if j.id == job_id), None)
    if job is None:
        what = f"job {job_id}" if job_id is not None else "any job"
        out.write(f"pool {name} has no {what}\n")
        out.flush()
        return of_state(None)
    out.write(f"Job {job.id}: {job.state}\n")
    out.flush()
    return of_state(job.state)


def _chosen_jobs(name: str, job_ids: Sequence[int | str] | None) -> list[jobq.Job]:
    """The jobs `job_ids` name (ids, or globs over ids as SkyPilot's: `*`, `1?`), by id; all for None.
    An id or a glob that names no job is a `LookupError` naming it."""
    import fnmatch

    if job_ids is None:
        return jobq.list_jobs(name)
    every = jobq.list_jobs(name)
    chosen: dict[int, jobq.Job] = {}
    for wanted in job_ids:
        text = str(wanted)
        if text.isdigit():
            job = jobq.load_job(name, int(text))  # a clear error for an unknown id
            chosen[job.id] = job
            continue
        matched = [j for j in every if fnmatch.fnmatchcase(str(j.id), text)]
        if not matched:
            raise LookupError(f"pool {name!r} has no job matching {text!r}")
        chosen.update((j.id, j) for j in matched)
    return [chosen[i] for i in sorted(chosen)]


def sync_down(name: str, job_ids: Sequence[int | str] | None, out: TextIO | None = None) -> int:
    """`skyhive logs NAME [JOB ...] --sync-down`: copy the log of each of pool `name`'s jobs (or of the
    jobs `job_ids` names: ids, or globs such as `*`) to `~/sky_logs/sky-<the job's submit time>/run.log`
    and print `Job N logs: DIR` for each, as SkyPilot downloads them. Raises `PoolNotFound`/`LookupError`."""
    import shutil
    from pathlib import Path

    out = out or sys.stdout
    records.load(name)
    jobs = _chosen_jobs(name, job_ids)
    for job in jobs:
        stamp = time.strftime("%Y-%m-%d-%H-%M-%S", time.localtime(job.submitted))
        target = Path("~/sky_logs").expanduser() / f"sky-{stamp}-{int(job.submitted % 1 * 1e6):06d}"
        target.mkdir(parents=True, exist_ok=True)
        source = jobq.log_path(name, job.id)
        if source.exists():
            shutil.copyfile(source, target / "run.log")
        out.write(f"Job {job.id} logs: {target}\n")
    out.flush()
    return 0
