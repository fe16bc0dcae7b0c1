"""`skyhive jobs ...`: managed jobs — submit, list, follow, cancel (docs/jobs.md)."""

from __future__ import annotations

import inspect
import json
import logging
import os
import pickle
import signal
import sys
import time
from typing import Any, TextIO

import yaml

from ....errors import TaskFileError
from ...clusters.procs import alive
from ...commands.taskfile import Task
from ...commands.values import NAME_RULE, TASK_NAME
from ....providers.base import Provider
from . import store
from .events import CancelAsked
from .controller import controller_pid, ensure_controller

__all__ = ["restart_of", "submit_job", "submit_call", "job_cost", "print_jobs", "job_log", "cancel_managed", "max_restarts_of",
           "max_recoveries_of"]

log = logging.getLogger("skyhive.managed")


def max_restarts_of(task: Task) -> int:
    """`resources.job_recovery.max_restarts_on_errors` of the task file (SkyPilot's spelling), 0 if absent;
    `TaskFileError` naming the file for a value that is not a whole number >= 0."""
    value = _recovery_count(task, "max_restarts_on_errors")
    return 0 if value is None else value


def max_recoveries_of(task: Task) -> int | None:
    """`resources.job_recovery.max_recoveries` of the task file (a skyhive key: how many lost nodes the
    job recovers before it fails), None if absent; `TaskFileError` naming the file for a value that is
    not a whole number >= 0."""
    return _recovery_count(task, "max_recoveries")


def _recovery_count(task: Task, key: str) -> int | None:
    try:
        with open(task.source, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError):
        return None
    rec = ((doc or {}).get("resources") or {}).get("job_recovery") if isinstance(doc, dict) else None
    if not isinstance(rec, dict) or key not in rec:
        return None
    value = rec[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TaskFileError(f"{task.line_of('resources')}: resources.job_recovery.{key} must be "
                            f"a whole number >= 0, not {value!r}")
    return value


def restart_of(task: Task) -> str:
    """`resources.job_recovery.restart` of the task file (a skyhive key): "gang" (the default: a node
    replaced in a multi-node job restarts `run` on every node, as a torch/JAX process group needs) or
    "node" (only the replaced node's `run` starts again; the others go on: nodes that work alone).
    `TaskFileError` naming the file for anything else."""
    try:
        with open(task.source, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError):
        return "gang"
    rec = ((doc or {}).get("resources") or {}).get("job_recovery") if isinstance(doc, dict) else None
    if not isinstance(rec, dict) or "restart" not in rec:
        return "gang"
    value = rec["restart"]
    if value not in ("gang", "node"):
        raise TaskFileError(f"{task.line_of('resources')}: resources.job_recovery.restart must be gang (every "
                            f"node's run starts again when one node is replaced) or node (only that node's), "
                            f"not {value!r}")
    return str(value)


def submit_job(task: Task, *, name: str | None = None, max_restarts_on_errors: int | None = None,
               provider: Provider | None = None) -> int:
    """Record the job and start its controller; the job id (the job runs without this process).
    `provider`: the pools' provider (pickled with the job), instead of the task's own."""
    from ...commands.plan import plan_launch
    from ...commands.resources import cluster_spec

    if task.resources.autostop is not None:  # never ignored (issue 39): refused, saying what to do
        raise TaskFileError(f"{task.line_of('resources.autostop')}: resources.autostop: a managed job's pools are "
                            f"taken down when the job ends; remove the key, or keep a pool with `skyhive launch -c NAME`")
    if provider is None:
        plan_launch(task)  # resources the provider cannot honour: an error here, before anything is recorded
    else:
        cluster_spec(task, provider)
    task.env(), task.secret_env()  # a variable left without a value: an error here too
    restart = restart_of(task)
    restarts = max_restarts_of(task) if max_restarts_on_errors is None else max_restarts_on_errors
    if restarts < 0:
        raise TaskFileError(f"--max-restarts-on-errors must be >= 0, not {restarts}")
    job_name = _job_name(name, task.name or "job")
    saved = _saved(provider)
    blob = pickle.dumps({"task": task, "task_id": "", "provider": saved})
    job_id = store.new_job(job_name, blob, restarts, max_recoveries_of(task))
    # one SKYPILOT_TASK_ID for every attempt of the job
    task_id = f"skyhive-{time.strftime('%Y-%m-%d-%H-%M-%S')}-managed-{job_id}"
    (store.job_dir(job_id) / "task.pkl").write_bytes(pickle.dumps({"task": task, "task_id": task_id,
                                                                                 "provider": saved, "restart": restart}))
    ensure_controller(job_id)
    return job_id


def submit_call(call: Any, *, name: str | None = None, max_restarts_on_errors: int = 0, provider: Any = None,
                image: Any = None) -> int:
    """Record a `@sky.compute` call as a managed job and start its controller; the job id. `provider`
    defaults to `Local()`. Raises `TypeError` for what is not such a call (or a generator function's),
    `ValueError` for a bad `max_restarts_on_errors`, `SerializationError` for a call that cannot be saved."""
    from ....errors import SerializationError
    from ....plugins.image import Image
    from ....providers.local import Local
    from ...common.serialize import cloud_dumps
    from ...compute import PendingCall

    if not isinstance(call, PendingCall):
        raise TypeError(f"sky.jobs.launch() takes a task file or a call of a @sky.compute function "
                        f"(`train(epochs=3)`), not {type(call).__name__}")
    if inspect.isgeneratorfunction(call.fn) or inspect.iscoroutinefunction(call.fn):
        raise TypeError(f"sky.jobs.launch({getattr(call.fn, '__qualname__', call.fn)}(...)): a managed job runs a plain "
                        f"function returning its result, not a generator or coroutine function")
    if isinstance(max_restarts_on_errors, bool) or not isinstance(max_restarts_on_errors, int) \
            or max_restarts_on_errors < 0:
        raise ValueError(f"sky.jobs.launch(max_restarts_on_errors={max_restarts_on_errors!r}): need a whole number >= 0")
    provider = Local() if provider is None else provider
    if not isinstance(provider, Provider):
        raise TypeError(f"sky.jobs.launch(provider=...): need a provider (sky.Local(), sky.SSH(...), ...), "
                        f"not {type(provider).__name__}")
    if image is not None and not isinstance(image, Image):
        raise TypeError(f"sky.jobs.launch(image=...): need a sky.Image, not {type(image).__name__}")
    fn_name = getattr(call.fn, "__name__", "job")
    try:
        blob = cloud_dumps((call.fn, call.args, call.kwargs, call.timeout))
    except Exception as exc:  # noqa: BLE001 - named: which call could not be saved
        raise SerializationError(f"sky.jobs.launch({fn_name}(...)): the call cannot be saved with the job: "
                                 f"{type(exc).__name__}: {exc}") from None
    job_name = _job_name(name, fn_name if TASK_NAME.match(fn_name) else "job")
    spec = {"call": blob, "name": job_name, "task_id": "", "provider": _saved(provider), "image": image}
    job_id = store.new_job(job_name, pickle.dumps(spec), max_restarts_on_errors)
    spec["task_id"] = f"skyhive-{time.strftime('%Y-%m-%d-%H-%M-%S')}-managed-{job_id}"  # one for every attempt
    (store.job_dir(job_id) / "task.pkl").write_bytes(pickle.dumps(spec))
    ensure_controller(job_id)
    return job_id


def _job_name(name: str | None, default: str) -> str:
    """The job's name: `name` (given: `ValueError` saying the rule when it cannot be one, before anything is
    recorded — it names the job's pools and their files), else `default`."""
    if name is None:
        return default
    if not isinstance(name, str) or not TASK_NAME.match(name):
        raise ValueError(f"sky.jobs.launch(name={name!r}): a managed job's name is {NAME_RULE} (it names the "
                         "job's pools and their files)")
    return name


def _saved(provider: Provider | None) -> Any:
    """The provider as the job keeps it: pickled whole, or — one holding live things (a cloud's driver,
    locks) — its class and `describe()`, which its `from_description` rebuilds (controller.py); a
    `Fallback` as its candidates, each kept so."""
    if provider is None:
        return None
    candidates = provider.candidates()
    if candidates is not None:  # a Fallback: each candidate kept as itself (its own class, not the registry's)
        return {"fallback": [_saved(p) for p in candidates], "order": provider.describe().get("order", "given")}
    try:
        pickle.dumps(provider)
        return provider
    except (pickle.PicklingError, TypeError, AttributeError):
        cls = type(provider)
        return {"class": f"{cls.__module__}:{cls.__qualname__}", "description": provider.describe()}


def _jobs() -> list[store.JobState]:
    out = []
    for job_id in store.list_ids():
        st = store.load_listed(job_id)
        if st is None:
            continue
        if st.state == store.LEAKED:
            st.detail = f"{st.detail} (`skyhive jobs cancel {job_id}` sweeps again)"
        elif st.state not in store.FINISHED and controller_pid(job_id) is None:
            st.detail = f"its controller is not running (`skyhive jobs queue` restarts it) {st.detail}".strip()
        out.append(st)
    return out


def job_cost(st: store.JobState, now: float | None = None) -> float | None:
    """What the job's pools cost so far in USD, from each pool's log (its provider's plan and the time
    from its first node that ran to its stop, or now: `inventory.PoolEntry.cost`); None when no pool of
    the job is priced (Local, SSH hosts, a provider without prices)."""
    from ...events.inventory import pools_dir, read

    now = time.time() if now is None else now
    total: float | None = None
    for pool in st.pools:
        if not pool or "/" in pool or "\0" in pool:  # (an odd record's: never a path outside the pools' folder)
            continue
        path = pools_dir() / f"{pool}.jsonl"
        try:
            if not path.is_file():
                continue
            cost = read(path).cost(now)
        except OSError as exc:  # a name too long for a file, an unreadable log: the job is listed without it
            log.warning("managed job %d: pool %.80s: its log cannot be read (%s)", st.id, pool, exc)
            continue
        if cost is not None:
            total = (total or 0.0) + cost[1]
    return total


def print_jobs(*, as_json: bool = False, restart: bool = True, out: TextIO | None = None) -> int:
    """Every managed job: id, name, state, attempts, recoveries. A job not finished whose controller is
    gone gets a new one (`restart`): it goes on from its events."""
    out = out or sys.stdout
    if restart:
        for job_id in store.list_ids():
            st = store.load_listed(job_id)
            # (not a LEAKED job: its sweep failed; `jobs cancel` tries it again)
            if st is None or st.state in (*store.FINISHED, store.LEAKED) or controller_pid(job_id) is not None:
                continue
            try:
                ensure_controller(job_id)
            except (RuntimeError, OSError, ValueError) as exc:  # listed as it is: its controller is not running
                log.warning("managed job %d: %s", job_id, exc)
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
        rows.append((str(st.id), _shown(st.name, 63, mark=True), st.state, str(st.attempts), str(st.recoveries),
                     f"{st.restarts_on_errors}/{st.max_restarts_on_errors}",
                     "-" if cost is None else f"${cost:.4f}", _shown(st.detail, 80)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
    return 0


def _shown(text: str, width: int, *, mark: bool = False) -> str:
    """`text` for one cell of a table on a terminal: a control character (a newline, an escape sequence of
    an odd record) escaped, at most `width` characters (`mark`: a cut one ends in "...")."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(text) <= width:
        return text
    return text[: width - 3] + "..." if mark else text[:width]


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
        if not follow or store.load(job_id).state in (*store.FINISHED, store.LEAKED) and not _grew(path, pos):
            break
        time.sleep(0.3)
    st = store.load(job_id)
    return 0 if st.state in (store.SUCCEEDED,) or not follow else 1


def _grew(path: Any, pos: int) -> bool:
    return path.exists() and os.path.getsize(path) > pos


def cancel_managed(job_ids: list[int], *, all_jobs: bool = False, wait: float = 120.0,
                   err: TextIO | None = None) -> int:
    """Cancel jobs (or every job not finished) and wait for their controllers to finish tearing down. A
    job whose end is decided but not cleaned up (CLEANING, LEAKED) is swept again; a job without a
    controller gets one, which records the cancel only once its pools are swept."""
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
        store.record(job_id, CancelAsked())
        if controller_pid(job_id) is None:  # nobody runs it: a controller sweeps its pools and records the end
            try:
                ensure_controller(job_id)
            except RuntimeError as exc:
                err.write(f"skyhive: error: {exc}\n")
                code = 1
    deadline = time.monotonic() + wait
    for job_id in ids:
        while time.monotonic() < deadline:
            pid = controller_pid(job_id)
            if pid is None and store.load(job_id).state in (*store.FINISHED, store.LEAKED):
                break
            time.sleep(0.2)
        else:
            pid = controller_pid(job_id)
            if pid and pid > 0 and alive(pid):
                os.kill(pid, signal.SIGTERM)
            err.write(f"skyhive: job {job_id}: its controller did not finish in {wait:.0f}s (sent SIGTERM)\n")
            code = 1
            continue
        st = store.load(job_id)
        if st.state not in store.FINISHED:  # its controller left without recording the end: a sweep failed
            err.write(f"skyhive: job {job_id}: {st.detail}\n")
            code = 1
            continue
        err.write(f"skyhive: job {job_id} {st.state.lower()}\n")
    return code
