"""A managed job's lifecycle: its states, every legal transition between them in one table, and the
pure reducer that folds the job's typed events (`events.py`) into its state — as
`runtime/events/lifecycle.py` does for a pool's nodes.

    PENDING --attempt--> STARTING --running--> RUNNING --lost/replaced/error--> RECOVERING --attempt--> ...
    any live state --ending--> CLEANING --succeeded/failed/cancelled--> SUCCEEDED/FAILED/CANCELLED
    CLEANING --leaked--> LEAKED --ending--> CLEANING (`jobs cancel` sweeps again)

`TRANSITIONS[(state, event kind)]` is the state an event moves the job to (`SAME`: it stays, the event
only counts or notes something; `WAITS`: PENDING before any recovery, RECOVERING after one). An event
whose (state, kind) is not in the table is refused: `reduce` raises `RefusedTransition` naming both,
and `fold` skips it with a warning naming the job and the event (a record from another version, or
written by hand, never keeps a listing from the others).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

from ....errors import IllegalTransition
from .events import (AttemptStarted, CancelAsked, ControllerStarted, Ended, Ending, ErrorExit, JobEvent, Leaked, Lost,
                     Notice, Replaced, Running, Stopped, Submitted, Unknown, Unneeded, Waiting, from_record)

__all__ = ["JobState", "PENDING", "STARTING", "RUNNING", "RECOVERING", "CLEANING", "LEAKED", "SUCCEEDED", "FAILED",
           "CANCELLED", "FINISHED", "LIVE", "SAME", "WAITS", "TRANSITIONS", "RefusedTransition", "reduce", "fold",
           "DEFAULT_MAX_RECOVERIES"]

log = logging.getLogger("skyhive.managed")

PENDING, STARTING, RUNNING, RECOVERING = "PENDING", "STARTING", "RUNNING", "RECOVERING"
#: the outcome is decided, the job's pools are being swept; the sweep could not finish (what is left shown)
CLEANING, LEAKED = "CLEANING", "LEAKED"
SUCCEEDED, FAILED, CANCELLED = "SUCCEEDED", "FAILED", "CANCELLED"
FINISHED = (SUCCEEDED, FAILED, CANCELLED)
#: the states of a job whose outcome is not decided yet
LIVE = (PENDING, STARTING, RUNNING, RECOVERING)
_FINAL = {"succeeded": SUCCEEDED, "failed": FAILED, "cancelled": CANCELLED}

#: How many recoveries one job gets when its `submitted` event does not say (a record older than the
#: limit); `store.default_max_recoveries()` is what a new job gets. docs/jobs.md.
DEFAULT_MAX_RECOVERIES = 25


class RefusedTransition(IllegalTransition):
    """An event that the job's state does not take (not in `TRANSITIONS`)."""


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


SAME = "(same)"  # the event leaves the state as it is
WAITS = "(waits)"  # PENDING before any recovery, RECOVERING after one

_ANY_LIVE_OR_CLEANING = (*LIVE, CLEANING, LEAKED)
TRANSITIONS: dict[tuple[str, str], str] = {
    # facts that any undecided job may learn, whatever it is doing
    **{(s, k): SAME for s in _ANY_LIVE_OR_CLEANING
       for k in ("submitted", "controller", "notice", "stopped", "cancel", "unneeded")},
    # an attempt starts: first, after a recovery, after a restart on errors, after waiting for capacity
    **{(s, "attempt"): STARTING for s in LIVE},
    **{(s, "running"): RUNNING for s in (STARTING, RUNNING, RECOVERING)},
    # a node lost (an attempt's, or the controller's own death), a node replaced in place, the program failed
    **{(s, "lost"): RECOVERING for s in LIVE},
    **{(s, "replaced"): RECOVERING for s in (STARTING, RUNNING, RECOVERING)},
    **{(s, "error"): RECOVERING for s in (STARTING, RUNNING, RECOVERING)},
    **{(s, "waiting"): WAITS for s in LIVE},
    # the outcome decided (again after a leaked sweep: `jobs cancel` sweeps again)
    **{(s, "ending"): CLEANING for s in (*LIVE, CLEANING, LEAKED)},
    # the final event: after the sweep (older versions wrote it straight away, from any live state)
    **{(s, k): _FINAL[k] for s in (*LIVE, CLEANING, LEAKED) for k in _FINAL},
    **{(s, "leaked"): LEAKED for s in (*LIVE, CLEANING, LEAKED)},
    # a finished job learns only what its last sweep left (older versions wrote `leaked` after the end)
    **{(s, "leaked"): SAME for s in FINISHED},
    # an event of a newer version: nothing here
    **{(s, "unknown"): SAME for s in (*LIVE, CLEANING, LEAKED, *FINISHED)},
}


def _kind(ev: JobEvent) -> str:
    return ev.outcome if isinstance(ev, Ended) else ev.kind


def reduce(st: JobState, ev: JobEvent) -> JobState:
    """The job's state after `ev` (a new `JobState`; `st` is left as it was). Raises `RefusedTransition`
    naming the state and the event when the table has no such transition."""
    kind = _kind(ev)
    target = TRANSITIONS.get((st.state, kind))
    if target is None:
        raise RefusedTransition(f"managed job {st.id}: a {kind!r} event is refused in state {st.state}")
    new = dataclasses.replace(st, pools=list(st.pools), leaked=list(st.leaked), ending=dict(st.ending))
    if target == WAITS:
        target = RECOVERING if st.recoveries else PENDING
    if target != SAME:
        new.state = target
    _count(new, ev)
    return new


def _count(st: JobState, ev: JobEvent) -> None:  # noqa: C901 - one line per kind of event
    """What `ev` says besides the state (in place, on the new state only)."""
    if isinstance(ev, Submitted):
        st.name, st.submitted, st.max_restarts_on_errors = ev.name, ev.time, ev.max_restarts_on_errors
        st.max_recoveries = DEFAULT_MAX_RECOVERIES if ev.max_recoveries is None else ev.max_recoveries
    elif isinstance(ev, ControllerStarted):
        st.controller_pid = ev.pid
    elif isinstance(ev, AttemptStarted):
        st.attempts += 1
        st.started = st.started or ev.time
        st.pools.append(ev.pool)
    elif isinstance(ev, Running):
        st.nodes = ev.nodes
    elif isinstance(ev, (Lost, Replaced)):
        st.recoveries += 1
        st.detail = ev.detail
    elif isinstance(ev, Unneeded):  # started on its predecessor's notice, which then ended the job itself
        st.attempts = max(0, st.attempts - 1)
        st.recoveries = max(0, st.recoveries - 1)
    elif isinstance(ev, Waiting):
        st.detail = f"waiting for capacity: {ev.detail}"
    elif isinstance(ev, ErrorExit):
        st.restarts_on_errors += 1
        st.detail = ev.detail
    elif isinstance(ev, CancelAsked):
        st.cancel_requested = True
    elif isinstance(ev, Ending):
        st.outcome = ev.outcome
        st.ending = dict(ev.data)
        st.detail = str(ev.data.get("detail", ""))
    elif isinstance(ev, Ended):
        st.ended, st.detail = ev.time, ev.detail
        st.outcome, st.leaked = ev.outcome, []  # the sweep confirmed: nothing left
    elif isinstance(ev, Leaked):
        st.leaked = list(ev.pools)
        if st.state == LEAKED:
            st.detail = f"{st.outcome or 'ended'}; not cleaned up: " + "; ".join(st.leaked)
    elif isinstance(ev, (Notice, Stopped, Unknown)):
        pass


_warned: set[tuple[int, int]] = set()  # (job, event number) of the odd events already warned about


def fold(job_id: int, records: list[dict[str, Any]], where: str = "") -> JobState:
    """The job's state from its on-disk events, in order. An event that cannot be read (a field missing
    or of another type) or that its state refuses is skipped with a warning naming the job, the event
    and why (`where`: the events file): one odd record never keeps `skyhive jobs queue` from the others.
    A finished job's late events (a cancel asked after its end, a stopped attempt) are skipped quietly."""
    st = JobState(id=job_id)
    for number, record in enumerate(records):
        try:
            ev = from_record(record)
            st = reduce(st, ev)
        except RefusedTransition as exc:
            if st.state in FINISHED:  # the end is the end: what comes after it changes nothing
                continue
            _warn(job_id, number, where, exc, record)
        except (KeyError, TypeError, ValueError) as exc:
            _warn(job_id, number, where, exc, record)
    return st


def _warn(job_id: int, number: int, where: str, exc: Exception, record: dict[str, Any]) -> None:
    if (job_id, number) in _warned:  # (a job is folded several times by one command: said once)
        return
    _warned.add((job_id, number))
    log.warning("managed job %d: an event of %s skipped (%s: %s): %.200r", job_id, where or "its events",
                type(exc).__name__, exc, record)
