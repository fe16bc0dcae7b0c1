"""A managed job's state, event-sourced in `SKYHIVE_HOME/managed/<id>/` (0700).

    events.jsonl     one JSON object a line, appended (O_APPEND); the job's state is their fold
    task.pkl         the parsed task (`commands.taskfile.Task`) and how to run it (0600)
    job.log          one continuous log over every attempt, each recovery marked "[skyhive] ..."
    controller.lock  held (flock) by the job's controller, its pid inside
    controller.log   the controller's own diagnostics
    avoided.pkl      the handles of the nodes lost so far, whose places later attempts take last (0600)
    checkpoints/     `SKYHIVE_CHECKPOINT_DIR` of every attempt on Local (the same folder across recoveries;
                     elsewhere the task's checkpoint bucket mount: controller.py)

Events: one typed dataclass per kind (`events.py`: submitted, controller, attempt, running, notice, lost,
replaced, stopped, unneeded, waiting, error, cancel, ending, then the final succeeded / failed / cancelled,
or leaked), written with `record` as one JSON object a line (`{"kind": ..., "time": ..., fields}`, the
format of every earlier version), folded by the pure reducer of `lifecycle.py` through its transition
table (the job's states: PENDING, STARTING, RUNNING, RECOVERING, then CLEANING while its pools are swept
once the outcome is decided, and SUCCEEDED / FAILED / CANCELLED once the sweep is confirmed, or LEAKED:
`skyhive jobs cancel` sweeps again, `skyhive down POOL` finishes a pool by hand). A
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
from pathlib import Path
from typing import Any, TextIO

from ....paths import private_dir
from ....protocol.codec import escape_values
from . import lifecycle
from .events import JobEvent, Submitted, to_record
from .lifecycle import (CANCELLED, CLEANING, DEFAULT_MAX_RECOVERIES, FAILED, FINISHED, LEAKED, PENDING, RECOVERING,
                        RUNNING, STARTING, SUCCEEDED, JobState)

__all__ = ["JobState", "PENDING", "STARTING", "RUNNING", "RECOVERING", "CLEANING", "LEAKED", "SUCCEEDED", "FAILED", "CANCELLED",
           "FINISHED", "job_dir", "new_job", "DEFAULT_MAX_RECOVERIES", "default_max_recoveries", "append",
           "save_avoided", "load_avoided", "events", "fold", "load", "list_ids", "checkpoint_dir", "log_path",
           "open_log", "lock_path", "load_listed", "record"]

log = logging.getLogger("skyhive.managed")


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
        record(job_id, Submitted(name=name, max_restarts_on_errors=max_restarts_on_errors,
                                 max_recoveries=max_recoveries))
    return job_id


#: How many recoveries (lost nodes: attempts started again, nodes replaced in place) one job gets when
#: neither its task (`resources.job_recovery.max_recoveries`) nor SKYHIVE_JOBS_MAX_RECOVERIES says: a
#: job whose node is lost every time (a worker that dies at the same point of every attempt) fails
#: after that many, naming why, instead of starting machines for ever (`lifecycle.DEFAULT_MAX_RECOVERIES`).
#: docs/jobs.md.


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


def record(job_id: int, event: JobEvent) -> None:
    """Append a typed event (`events.py`), written as every version writes it (`append`)."""
    data = to_record(event)
    append(job_id, data.pop("kind"), **data)


def fold(job_id: int, evs: list[dict[str, Any]]) -> JobState:
    """The job's state from its events, in order (`lifecycle.fold`: the typed events through the
    reducer's transition table). An event that cannot be read (a field missing or of another type: a
    record written by hand, or by another version) or that the job's state refuses is skipped with a
    warning naming the job and the event: one odd record never keeps `skyhive jobs queue` from the others."""
    return lifecycle.fold(job_id, evs, str(job_dir(job_id) / "events.jsonl"))


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
