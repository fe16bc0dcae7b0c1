"""`ManagedJob`: the handle of a managed job from Python, and — for a `@sky.compute` call run as one —
its result (`sky.jobs.launch(train(epochs=3)).result()`, or `await` it).

The handle holds only the job's id: the job runs in its controller, its outcome is kept in the job's
state folder, so a handle made again after the client exited (`sky.jobs.ManagedJob(job_id)`) gives the
same result.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator
from typing import Any, Generic, TypeVar

from ....errors import ManagedJobError
from . import store

__all__ = ["ManagedJob"]

T = TypeVar("T")
log = logging.getLogger("skyhive.managed")

_POLL = 0.2  # seconds between looks at the job's events while waiting


class ManagedJob(Generic[T]):
    """A managed job: `id`, `state`, `info()`, `done()`, `result()` (or `await job`), `log()`, `cancel()`.

    `ManagedJob(job_id)` attaches to a job that exists (`LookupError` otherwise), from any process."""

    def __init__(self, job_id: int) -> None:
        store.load(job_id)  # LookupError naming the job
        self.id = int(job_id)

    def __repr__(self) -> str:
        return f"<ManagedJob {self.id} {self.state}>"

    def __int__(self) -> int:
        return self.id

    @property
    def state(self) -> str:
        """PENDING, STARTING, RUNNING, RECOVERING, CLEANING, LEAKED, SUCCEEDED, FAILED or CANCELLED."""
        return store.load(self.id).state

    def info(self) -> dict[str, Any]:
        """The job as `skyhive jobs queue --json` shows it (state, attempts, recoveries, ...)."""
        return store.load(self.id).as_dict()

    def done(self) -> bool:
        """True once the job's end is recorded (or its cleanup failed: LEAKED, its outcome known)."""
        return store.load(self.id).state in (*store.FINISHED, store.LEAKED)

    def _wait(self, deadline: float | None) -> store.JobState | None:
        """One look: the job's state once done, else None (its controller started again if it died)."""
        from .controller import controller_pid, ensure_controller

        st = store.load(self.id)
        if st.state in (*store.FINISHED, store.LEAKED):
            return st
        if controller_pid(self.id) is None:  # died (a reboot, SIGKILL): it goes on from its events
            ensure_controller(self.id)
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"managed job {self.id} has not ended ({st.state}; `skyhive jobs logs {self.id}`)")
        return None

    def result(self, timeout: float | None = None) -> T:
        """Wait for the job to end and give its function's return value. Raises the exception the
        function raised (its last attempt's), `ManagedJobError` when the job was cancelled or failed
        otherwise (a provisioning error, not a function job), `TimeoutError` after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (st := self._wait(deadline)) is None:
            time.sleep(_POLL)
        return self._outcome(st)

    async def result_async(self, timeout: float | None = None) -> T:
        """`result()` without blocking the event loop (what `await job` does)."""
        import anyio

        deadline = None if timeout is None else time.monotonic() + timeout
        while (st := self._wait(deadline)) is None:
            await anyio.sleep(_POLL)
        return self._outcome(st)

    def __await__(self) -> Generator[Any, None, T]:
        return self.result_async().__await__()

    def _outcome(self, st: store.JobState) -> T:
        from .function import load_outcome

        if st.state == store.LEAKED:
            log.warning("managed job %d: its cleanup is incomplete (%s): `skyhive jobs cancel %d` sweeps again",
                        self.id, "; ".join(st.leaked), self.id)
        saved = load_outcome(self.id) if st.outcome in ("succeeded", "failed") else None
        if st.outcome == "succeeded" and saved is not None and saved.get("ok"):
            return saved["value"]  # type: ignore[no-any-return]
        if st.outcome == "failed" and saved is not None and not saved.get("ok"):
            err = saved.get("error")
            if isinstance(err, BaseException):
                err.add_note(f"(raised by managed job {self.id}'s function: `skyhive jobs logs {self.id}`)")
                raise err
            raise ManagedJobError(f"managed job {self.id}: its function raised {saved.get('type')}: "
                                  f"{saved.get('message')}", job_id=self.id, state=st.state, detail=st.detail)
        if st.outcome == "succeeded":
            raise ManagedJobError(f"managed job {self.id} succeeded but has no result: it runs a task file, not a "
                                  f"function (`skyhive jobs logs {self.id}`)", job_id=self.id, state=st.state,
                                  detail=st.detail)
        raise ManagedJobError(f"managed job {self.id} {st.outcome or st.state.lower()}: {st.detail}",
                              job_id=self.id, state=st.state, detail=st.detail)

    def log(self) -> str:
        """The job's log so far (every attempt, each recovery marked)."""
        path = store.log_path(self.id)
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def cancel(self, *, wait: float = 120.0) -> str:
        """Cancel the job and wait (up to `wait` seconds) for its pool to be torn down; its state then."""
        import io

        from .commands import cancel_managed

        cancel_managed([self.id], wait=wait, err=io.StringIO())
        return self.state
