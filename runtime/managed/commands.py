"""`skyhive jobs ...`: managed jobs — submit, list, follow, cancel (docs/jobs.md)."""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import time
from typing import Any, TextIO

import yaml

from ...errors import TaskFileError
from ..clusters.procs import alive
from ..commands.taskfile import Task
from ...providers.base import Provider
from . import store
from .controller import controller_pid, ensure_controller

__all__ = ["submit_job", "job_cost", "print_jobs", "job_log", "cancel_managed", "max_restarts_of"]


def max_restarts_of(task: Task) -> int:
    """`resources.job_recovery.max_restarts_on_errors` of the task file (SkyPilot's spelling), 0 if absent;
    `TaskFileError` naming the file for a value that is not a whole number >= 0."""
    try:
        with open(task.source, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError):
        return 0
    rec = ((doc or {}).get("resources") or {}).get("job_recovery") if isinstance(doc, dict) else None
    if not isinstance(rec, dict) or "max_restarts_on_errors" not in rec:
        return 0
    value = rec["max_restarts_on_errors"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TaskFileError(f"{task.line_of('resources')}: resources.job_recovery.max_restarts_on_errors must be "
                            f"a whole number >= 0, not {value!r}")
    return value


def submit_job(task: Task, *, name: str | None = None, max_restarts_on_errors: int | None = None,
               provider: Provider | None = None) -> int:
    """Record the job and start its controller; the job id (the job runs without this process).
    `provider`: the pools' provider (pickled with the job), instead of the task's own."""
    from ..commands.plan import plan_launch
    from ..commands.resources import cluster_spec

    if provider is None:
        plan_launch(task)  # resources the provider cannot honour: an error here, before anything is recorded
    else:
        cluster_spec(task, provider)
    task.env(), task.secret_env()  # a variable left without a value: an error here too
    restarts = max_restarts_of(task) if max_restarts_on_errors is None else max_restarts_on_errors
    if restarts < 0:
        raise TaskFileError(f"--max-restarts-on-errors must be >= 0, not {restarts}")
    job_name = name or task.name or "job"
    saved = _saved(provider)
    blob = pickle.dumps({"task": task, "task_id": "", "provider": saved})
    job_id = store.new_job(job_name, blob, restarts)
    # one SKYPILOT_TASK_ID for every attempt of the job
    task_id = f"skyhive-{time.strftime('%Y-%m-%d-%H-%M-%S')}-managed-{job_id}"
    (store.job_dir(job_id) / "task.pkl").write_bytes(pickle.dumps({"task": task, "task_id": task_id,
                                                                                 "provider": saved}))
    ensure_controller(job_id)
    return job_id


def _saved(provider: Provider | None) -> Any:
    """The provider as the job keeps it: pickled whole, or — one holding live things (a cloud's driver,
    locks) — its class and `describe()`, which its `from_description` rebuilds (controller.py)."""
    if provider is None:
        return None
    try:
        pickle.dumps(provider)
        return provider
    except (pickle.PicklingError, TypeError, AttributeError):
        cls = type(provider)
        return {"class": f"{cls.__module__}:{cls.__qualname__}", "description": provider.describe()}


def _jobs() -> list[store.JobState]:
    out = []
    for job_id in store.list_ids():
        st = store.load(job_id)
        if st.state not in store.FINISHED and controller_pid(job_id) is None:
            st.detail = f"its controller is not running (`skyhive jobs queue` restarts it) {st.detail}".strip()
        out.append(st)
    return out


def job_cost(st: store.JobState, now: float | None = None) -> float | None:
    """What the job's pools cost so far in USD, from each pool's log (its provider's plan and the time
    from its first node that ran to its stop, or now: `inventory.PoolEntry.cost`); None when no pool of
    the job is priced (Local, SSH hosts, a provider without prices)."""
    from ..events.inventory import pools_dir, read

    now = time.time() if now is None else now
    total: float | None = None
    for pool in st.pools:
        path = pools_dir() / f"{pool}.jsonl"
        if not pool or not path.exists():
            continue
        cost = read(path).cost(now)
        if cost is not None:
            total = (total or 0.0) + cost[1]
    return total


def print_jobs(*, as_json: bool = False, restart: bool = True, out: TextIO | None = None) -> int:
    """Every managed job: id, name, state, attempts, recoveries. A job not finished whose controller is
    gone gets a new one (`restart`): it goes on from its events."""
    out = out or sys.stdout
    if restart:
        for job_id in store.list_ids():
            if store.load(job_id).state not in store.FINISHED and controller_pid(job_id) is None:
                ensure_controller(job_id)
    jobs = _jobs()
    if as_json:
        for st in jobs:
            out.write(json.dumps({**st.as_dict(), "cost_usd": job_cost(st)}) + "\n")
        return 0
    if not jobs:
        out.write("no managed jobs\n")
        return 0
    rows = [("ID", "NAME", "STATE", "ATTEMPTS", "RECOVERIES", "RESTARTS_ON_ERRORS", "COST", "DETAIL")]
    for st in jobs:
        cost = job_cost(st)
        rows.append((str(st.id), st.name, st.state, str(st.attempts), str(st.recoveries),
                     f"{st.restarts_on_errors}/{st.max_restarts_on_errors}",
                     "-" if cost is None else f"${cost:.4f}", st.detail[:80]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
    return 0


def job_log(job_id: int, *, follow: bool = False, out: TextIO | None = None) -> int:
    """Print the job's one log (every attempt, recoveries marked); `follow` until the job ends."""
    out = out or sys.stdout
    store.load(job_id)
    path = store.log_path(job_id)
    pos = 0
    while True:
        if path.exists():
            with open(path, encoding="utf-8", errors="replace") as fh:
                fh.seek(pos)
                chunk = fh.read()
                pos = fh.tell()
            out.write(chunk)
            out.flush()
        if not follow or store.load(job_id).state in store.FINISHED and not _grew(path, pos):
            break
        time.sleep(0.3)
    st = store.load(job_id)
    return 0 if st.state in (store.SUCCEEDED,) or not follow else 1


def _grew(path: Any, pos: int) -> bool:
    return path.exists() and os.path.getsize(path) > pos


def cancel_managed(job_ids: list[int], *, all_jobs: bool = False, wait: float = 120.0,
                   err: TextIO | None = None) -> int:
    """Cancel jobs (or every job not finished) and wait for their controllers to finish tearing down."""
    err = err or sys.stderr
    ids = [st.id for st in _jobs() if st.state not in store.FINISHED] if all_jobs else list(job_ids)
    if not ids:
        err.write("skyhive: no managed job to cancel\n")
        return 0 if all_jobs else 2
    code = 0
    for job_id in ids:
        try:
            st = store.load(job_id)
        except LookupError as exc:
            err.write(f"skyhive: error: {exc}\n")
            code = 1
            continue
        if st.state in store.FINISHED:
            err.write(f"skyhive: job {job_id} has already ended ({st.state})\n")
            continue
        store.append(job_id, "cancel")
        if controller_pid(job_id) is None:  # nobody runs it: record the end here
            store.append(job_id, "cancelled", detail="cancelled (its controller was not running)")
    deadline = time.monotonic() + wait
    for job_id in ids:
        while time.monotonic() < deadline:
            pid = controller_pid(job_id)
            if pid is None and store.load(job_id).state in store.FINISHED:
                break
            time.sleep(0.2)
        else:
            pid = controller_pid(job_id)
            if pid and pid > 0 and alive(pid):
                os.kill(pid, signal.SIGTERM)
            err.write(f"skyhive: job {job_id}: its controller did not finish in {wait:.0f}s (sent SIGTERM)\n")
            code = 1
            continue
        err.write(f"skyhive: job {job_id} {store.load(job_id).state.lower()}\n")
    return code
