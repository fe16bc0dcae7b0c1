"""A managed job's state, event-sourced in `SKYHIVE_HOME/managed/<id>/` (0700).

    events.jsonl     one JSON object a line, appended (O_APPEND); the job's state is their fold
    task.pkl         the parsed task (`commands.taskfile.Task`) and how to run it (0600)
    job.log          one continuous log over every attempt, each recovery marked "[skyhive] ..."
    controller.lock  held (flock) by the job's controller, its pid inside
    controller.log   the controller's own diagnostics
    avoided.pkl      the handles of the nodes lost so far, whose places later attempts take last (0600)
    checkpoints/     `SKYHIVE_CHECKPOINT_DIR` of every attempt on Local (the same folder across recoveries;
                     elsewhere the task's checkpoint bucket mount: controller.py)

Events (`kind`): submitted, attempt (an attempt started: `attempt`, `pool`, `pid`), running (its pool
is up: `nodes`, their provider ids; again after a node replaced in place), notice (a node's
interruption notice: `node`, `notice`), lost (a node was lost: a new attempt follows, not counted
against `max_restarts_on_errors`; `places` it was on), replaced (a multi-node attempt's lost `node`
replaced in its pool, the others kept: a recovery too; `places`), unneeded (an attempt started at its
predecessor's interruption notice that ran nothing, the predecessor having ended the job: neither it
nor that recovery is counted), waiting (an attempt found no capacity anywhere — a `ProvisionError` of kind
"capacity" —: another is tried after `retry_in` seconds, until cancelled),
error (the user's program
failed: `code`, `detail`), cancel (asked for); then ending (the job's outcome decided: `outcome` is
succeeded / failed / cancelled, with its `detail`, `code`, `attempt`) while the controller sweeps every
pool of the job (state CLEANING), and only once that sweep is confirmed the final event: succeeded /
failed / cancelled. A sweep that could not finish is leaked instead (`pools`: what is left, with why;
state LEAKED, not finished: `skyhive jobs cancel` sweeps again and records the end, `skyhive down POOL`
finishes a pool by hand). A
controller started again folds the events and goes on from there: an attempt that has no end event is
one whose controller died — its pool went with it (Local workers exit with their client), so a new
attempt starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ....paths import private_dir
from ....protocol.codec import escape_values

__all__ = ["JobState", "PENDING", "STARTING", "RUNNING", "RECOVERING", "CLEANING", "LEAKED", "SUCCEEDED", "FAILED", "CANCELLED",
           "FINISHED", "job_dir", "new_job", "DEFAULT_MAX_RECOVERIES", "default_max_recoveries", "append",
           "save_avoided", "load_avoided", "events", "fold", "load", "list_ids", "checkpoint_dir", "log_path",
           "open_log", "lock_path", "load_listed"]

PENDING, STARTING, RUNNING, RECOVERING = "PENDING", "STARTING", "RUNNING", "RECOVERING"
#: the outcome is decided, the job's pools are being swept; the sweep could not finish (what is left shown)
CLEANING, LEAKED = "CLEANING", "LEAKED"
SUCCEEDED, FAILED, CANCELLED = "SUCCEEDED", "FAILED", "CANCELLED"
FINISHED = (SUCCEEDED, FAILED, CANCELLED)
log = logging.getLogger("skyhive.managed")
_warned: set[tuple[int, int]] = set()  # (job, event number) of the odd events already warned about
_FINAL = {"succeeded": SUCCEEDED, "failed": FAILED, "cancelled": CANCELLED}


@dataclass(slots=True)
class JobState:
    """A managed job as its events tell it. `recoveries`: attempts started after a lost node (and nodes
    replaced in place), at most `max_recoveries`; `restarts_on_errors`: attempts started after the
    user's program failed."""

    id: int
    name: str = ""
    state: str = PENDING
    submitted: float = 0.0
    started: float | None = None
    ended: float | None = None
    attempts: int = 0
    recoveries: int = 0
    restarts_on_errors: int = 0
    max_restarts_on_errors: int = 0
    max_recoveries: int = 0  # (set from the `submitted` event: DEFAULT_MAX_RECOVERIES for older jobs)
    cancel_requested: bool = False
    detail: str = ""
    pools: list[str] = field(default_factory=list)
    controller_pid: int = 0
    nodes: str = ""  # where the last attempt runs (its nodes' provider ids)
    leaked: list[str] = field(default_factory=list)  # pools the controller could not clean up, with why
    outcome: str = ""  # "succeeded" | "failed" | "cancelled" once decided (`ending`), before the sweep confirms it
    ending: dict[str, Any] = field(default_factory=dict)  # the `ending` event's data: what the final event says

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "state": self.state, "submitted": self.submitted,
                "started": self.started, "ended": self.ended, "attempts": self.attempts,
                "recoveries": self.recoveries, "restarts_on_errors": self.restarts_on_errors,
                "max_restarts_on_errors": self.max_restarts_on_errors, "max_recoveries": self.max_recoveries,
                "detail": self.detail,
                "pools": list(self.pools), "controller_pid": self.controller_pid, "nodes": self.nodes,
                "leaked": list(self.leaked), "outcome": self.outcome}


def _root() -> Path:
    return private_dir("managed")


def job_dir(job_id: int) -> Path:
    return private_dir("managed", str(job_id))


def log_path(job_id: int) -> Path:
    return job_dir(job_id) / "job.log"


def open_log(job_id: int) -> TextIO:
    """The job's log, opened to append (created 0600, like the rest of the job's state: what a job prints
    is for its user only)."""
    fd = os.open(log_path(job_id), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    return os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace")  # (text naming a non-UTF-8 file)


def lock_path(job_id: int) -> Path:
    return job_dir(job_id) / "controller.lock"


def save_avoided(job_id: int, handles: list[Any]) -> None:
    """The nodes lost so far (their handles: what later attempts take last, `Provider.avoiding`), kept
    for a controller started again (0600; written whole to a temporary name, then renamed)."""
    import pickle

    path = job_dir(job_id) / "avoided.pkl"
    tmp = path.with_name(f".avoided.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pickle.dumps(list(handles)))
    os.replace(tmp, path)


def load_avoided(job_id: int) -> list[Any]:
    """What `save_avoided` kept ([] when nothing was lost, or the file cannot be read: the places are
    then tried in their usual order, said in the log)."""
    import logging
    import pickle

    path = job_dir(job_id) / "avoided.pkl"
    try:
        handles = pickle.loads(path.read_bytes())  # noqa: S301 - our own 0600 file
    except FileNotFoundError:
        return []
    except Exception as exc:  # noqa: BLE001 - a torn or foreign file: the recovery goes on without it
        logging.getLogger("skyhive.managed").warning("managed job %d: %s unreadable (%s): the places lost "
                                                     "before are not avoided", job_id, path, exc)
        return []
    return list(handles) if isinstance(handles, list) else []


def checkpoint_dir(job_id: int) -> Path:
    """The job's checkpoint folder, the same across its recoveries (on Local: this machine's disk)."""
    return private_dir("managed", str(job_id), "checkpoints")


@contextlib.contextmanager
def _ids_lock() -> Iterator[None]:
    fd = os.open(_root() / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def list_ids() -> list[int]:
    return sorted(int(p.name) for p in _root().iterdir() if p.name.isdigit() and (p / "events.jsonl").exists())


def new_job(name: str, task_blob: bytes, max_restarts_on_errors: int, max_recoveries: int | None = None) -> int:
    """A new job's id, its task written and its `submitted` event appended. `max_recoveries`: how many
    times a lost node may be recovered before the job fails (None: `default_max_recoveries()`)."""
    if max_recoveries is None:
        max_recoveries = default_max_recoveries()
    with _ids_lock():
        ids = [int(p.name) for p in _root().iterdir() if p.name.isdigit()]
        job_id = max(ids, default=0) + 1
        d = job_dir(job_id)
        fd = os.open(d / "task.pkl", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(task_blob)
        append(job_id, "submitted", name=name, max_restarts_on_errors=max_restarts_on_errors,
               max_recoveries=max_recoveries)
    return job_id


#: How many recoveries (lost nodes: attempts started again, nodes replaced in place) one job gets when
#: neither its task (`resources.job_recovery.max_recoveries`) nor SKYHIVE_JOBS_MAX_RECOVERIES says: a
#: job whose node is lost every time (a worker that dies at the same point of every attempt) fails
#: after that many, naming why, instead of starting machines for ever. docs/jobs.md.
DEFAULT_MAX_RECOVERIES = 25


def default_max_recoveries() -> int:
    """SKYHIVE_JOBS_MAX_RECOVERIES (a whole number >= 0) or `DEFAULT_MAX_RECOVERIES` (also, with a
    warning, for a value that is not such a number)."""
    raw = os.environ.get("SKYHIVE_JOBS_MAX_RECOVERIES", "").strip()
    if not raw:
        return DEFAULT_MAX_RECOVERIES
    if not raw.isdigit():
        log.warning("SKYHIVE_JOBS_MAX_RECOVERIES=%r is not a whole number >= 0: %d used", raw, DEFAULT_MAX_RECOVERIES)
        return DEFAULT_MAX_RECOVERIES
    return int(raw)


def append(job_id: int, kind: str, **data: Any) -> None:
    """Append one event (a single write on an O_APPEND file: lines never interleave)."""
    # (text that is not valid Unicode, as a non-UTF-8 file name in an error, escaped: every reader of
    # the events prints them)
    line = json.dumps({"kind": kind, "time": time.time(), **escape_values(data)}, sort_keys=True) + "\n"
    fd = os.open(job_dir(job_id) / "events.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def events(job_id: int) -> list[dict[str, Any]]:
    """The job's events; a torn last line (a writer killed mid-write) is skipped."""
    path = job_dir(job_id) / "events.jsonl"
    if not path.exists():
        raise LookupError(f"there is no managed job {job_id} (`skyhive jobs queue` lists them)")
    out = []
    for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and isinstance(event.get("kind"), str):
                out.append(event)
    return out


def fold(job_id: int, evs: list[dict[str, Any]]) -> JobState:
    """The job's state from its events, in order. An event that cannot be read (a field missing or of
    another type: a record written by hand, or by another version) is skipped with a warning naming the
    job and the event: one odd record never keeps `skyhive jobs queue` from the others."""
    st = JobState(id=job_id)
    for number, ev in enumerate(evs):
        try:
            _apply(st, ev)
        except (KeyError, TypeError, ValueError) as exc:
            if (job_id, number) in _warned:  # (a job is folded several times by one command: said once)
                continue
            _warned.add((job_id, number))
            log.warning("managed job %d: an event of %s skipped (%s: %s): %.200r", job_id,
                        job_dir(job_id) / "events.jsonl", type(exc).__name__, exc, ev)
    return st


def _apply(st: JobState, ev: dict[str, Any]) -> None:
    """Fold one event into `st` (in place). Everything that can fail (`KeyError`, `TypeError`, `ValueError`:
    an odd event) is read before `st` changes: a skipped event leaves no part of itself."""
    kind, when = ev["kind"], float(ev["time"])
    if kind == "leaked":  # the sweep of the job's pools could not finish (after a final event: older jobs)
        st.leaked = [str(p) for p in ev.get("pools", ())]
        if st.state not in FINISHED:
            st.state = LEAKED
            st.detail = f"{st.outcome or 'ended'}; not cleaned up: " + "; ".join(st.leaked)
        return
    if st.state in FINISHED:
        return
    if kind == "submitted":
        restarts = int(ev.get("max_restarts_on_errors", 0))
        recoveries = int(ev.get("max_recoveries", DEFAULT_MAX_RECOVERIES))
        st.name, st.submitted, st.max_restarts_on_errors = str(ev.get("name", "")), when, restarts
        st.max_recoveries = recoveries
    elif kind == "controller":
        st.controller_pid = int(ev.get("pid", 0))
    elif kind == "attempt":
        st.attempts += 1
        st.state = STARTING
        st.started = st.started or when
        st.pools.append(str(ev.get("pool", "")))
    elif kind == "running":
        st.state = RUNNING
        st.nodes = str(ev.get("nodes", ""))
    elif kind in ("lost", "replaced"):  # replaced: one node of the attempt, in its pool
        st.recoveries += 1
        st.state, st.detail = RECOVERING, str(ev.get("detail", ""))
    elif kind == "unneeded":  # started on its predecessor's notice, which then ended the job itself
        st.attempts = max(0, st.attempts - 1)
        st.recoveries = max(0, st.recoveries - 1)
    elif kind == "waiting":  # an attempt found no capacity anywhere: another one later
        st.state = RECOVERING if st.recoveries else PENDING
        st.detail = f"waiting for capacity: {ev.get('detail', '')}"
    elif kind == "error":
        st.restarts_on_errors += 1
        st.state, st.detail = RECOVERING, str(ev.get("detail", ""))
    elif kind == "cancel":
        st.cancel_requested = True
    elif kind == "ending":
        st.outcome = str(ev.get("outcome", "failed"))
        st.ending = {k: v for k, v in ev.items() if k not in ("kind", "time", "outcome")}
        st.state, st.detail = CLEANING, str(ev.get("detail", ""))
    elif kind in _FINAL:
        st.state, st.ended, st.detail = _FINAL[kind], when, str(ev.get("detail", ""))
        st.outcome, st.leaked = kind, []  # the sweep confirmed: nothing left


def load(job_id: int) -> JobState:
    return fold(job_id, events(job_id))


def load_listed(job_id: int) -> JobState | None:
    """The job's state for a listing (`jobs queue`, `sky.jobs.queue()`); None, with a warning naming its
    folder, when its record cannot be read at all (a folder written by hand, a disk error): one job never
    keeps a listing from the others."""
    try:
        return load(job_id)
    except (OSError, LookupError) as exc:
        log.warning("managed job %d: its record %s cannot be read (%s): skipped", job_id, job_dir(job_id), exc)
        return None
