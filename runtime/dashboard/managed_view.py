"""The dashboard's managed-jobs page (docs/jobs.md): each job under `SKYHIVE_HOME/managed/<ID>/` as its
events fold it, and its one log. Read-only and cheap: a job's `events.jsonl` is read from where the
last look stopped (whole lines only) and folded again only when it grew; a request reads memory and a
`stat` per job. The controller is looked for by the pid in its lock file and `/proc`, never by taking
the lock (a controller starting at that moment would find it held and refuse to run).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...paths import state_dir
from ..clusters.procs import alive
from ..control.managed import store
from . import logrange

__all__ = ["ManagedJobs", "managed_log", "managed_log_path"]


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(max(0.0, seconds))}s"


@dataclass
class _Job:
    offset: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    state: store.JobState | None = None


def _root() -> Path:
    return state_dir() / "managed"


def controller_running(job_id: int) -> int | None:
    """The pid of job `job_id`'s controller if one runs (the pid its lock file holds, alive), else None."""
    with contextlib.suppress(OSError, ValueError):
        text = (_root() / str(job_id) / "controller.lock").read_text().strip()
        if text.isdigit() and alive(int(text)):
            return int(text)
    return None


class ManagedJobs:
    """The managed jobs of the state directory, each job's events read incrementally."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: dict[int, _Job] = {}

    def _read(self, job_id: int, path: Path) -> _Job:
        job = self.jobs.setdefault(job_id, _Job())
        with contextlib.suppress(FileNotFoundError), open(path, "rb") as fh:
            fh.seek(job.offset)
            data = fh.read()
        if not data or b"\n" not in data:
            return job
        data = data[: data.rfind(b"\n") + 1]  # a line being written waits for its end
        job.offset += len(data)
        for line in data.decode("utf-8", errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict) and isinstance(event.get("kind"), str) and "time" in event:
                    job.events.append(event)
        job.state = store.fold(job_id, job.events)
        return job

    def refresh(self) -> None:
        """Read what every job's events gained since the last look."""
        root = _root()
        if not root.is_dir():
            return
        with self.lock:
            for entry in root.iterdir():
                if entry.name.isdigit():
                    path = entry / "events.jsonl"
                    job = self.jobs.get(int(entry.name))
                    with contextlib.suppress(OSError):
                        if job is None or path.stat().st_size != job.offset:
                            self._read(int(entry.name), path)

    def fingerprint(self) -> tuple[Any, ...]:
        """Each job's events and log, by size (a change in either changes it)."""
        root = _root()
        out: list[Any] = []
        if root.is_dir():
            for entry in sorted(root.iterdir()):
                if entry.name.isdigit():
                    for name in ("events.jsonl", "job.log"):
                        with contextlib.suppress(OSError):
                            out.append((entry.name, name, (entry / name).stat().st_size))
        return tuple(out)

    def get(self, job_id: int) -> store.JobState:
        """Job `job_id` as its events say now; `LookupError` naming it when there is none."""
        self.refresh()
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None or job.state is None:
                raise LookupError(f"there is no managed job {job_id} (`skyhive jobs queue` lists them)")
            return job.state

    def rows(self, now: float | None = None) -> list[dict[str, Any]]:
        """Every managed job, newest first: id, name, state, attempts, recoveries, restarts on errors
        (of the most allowed), age, its pools, detail, and whether its controller runs."""
        now = time.time() if now is None else now
        self.refresh()
        with self.lock:
            states = [j.state for j in self.jobs.values() if j.state is not None]
        out = []
        for st in sorted(states, key=lambda s: s.id, reverse=True):
            finished = st.state in store.FINISHED
            pid = None if finished else controller_running(st.id)
            detail = st.detail
            if not finished and pid is None and st.state != store.LEAKED:  # (LEAKED: `jobs cancel` sweeps again)
                detail = f"its controller is not running (`skyhive jobs queue` restarts it) {detail}".strip()
            out.append({**st.as_dict(), "detail": detail, "finished": finished, "controller": pid,
                        "age": _age(now - st.submitted) if st.submitted else "-",
                        "duration": None if st.started is None else (st.ended or now) - st.started,
                        "restarts": f"{st.restarts_on_errors}/{st.max_restarts_on_errors}"})
        return out


def managed_log_path(job_id: int) -> Path:
    """Where job `job_id`'s one log is (whether it exists or not)."""
    return _root() / str(job_id) / "job.log"


def managed_log(jobs: ManagedJobs, job_id: int, *, offset: int = 0, before: int | None = None) -> dict[str, Any]:
    """Job `job_id`'s one log (every attempt, each recovery a `[skyhive] ...` line) from byte `offset`
    (or, with `before`, the part that ends there; -1: the end): whole lines while the job runs, at most
    `logrange.CHUNK` bytes; `start` is where the text begins, `next` where to read forward from.
    (The controller's pool redacts the task's secrets before a line reaches this log.)"""
    st = jobs.get(job_id)  # before the log: once finished, what the log holds is complete
    finished = st.state in store.FINISHED
    path = managed_log_path(job_id)
    part = logrange.forward(path, offset, finished) if before is None else logrange.backward(path, before, finished)
    return {"text": part.data.decode("utf-8", errors="replace"), "start": part.start, "next": part.next,
            "size": part.size, "more": part.more, "job": {**st.as_dict(), "finished": finished}}
