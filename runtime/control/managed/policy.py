"""A managed job's restart policy, as data: what the controller (controller.py) does after each attempt.

`RestartPolicy` (frozen) says how a lost node is replaced (`restart`: "gang" — every node's program
starts again together, as a process group needs; "node" — only the lost node's, the others going on),
the limits (`max_restarts_on_errors`, `max_recoveries`), which outcomes count as a recovery (a lost
node: not counted against `max_restarts_on_errors`), and the back-off while no place has capacity
(`capacity_first` seconds, doubling, at most `capacity_max`). `decide(outcome, state, full)` is pure:
the attempt's `Outcome` and the job's `JobState` in, a `Decision` out — the controller carries it out.
"""

from __future__ import annotations

import enum
import logging
import os
from dataclasses import dataclass
from typing import Any

from .lifecycle import JobState
from .outcome import Outcome

__all__ = ["RestartPolicy", "Decision", "Action", "RESTARTS", "CAPACITY_RETRY_ENV"]

log = logging.getLogger("skyhive.managed")

#: how a lost node of a multi-node task is restarted (`resources.job_recovery.restart`)
RESTARTS = ("gang", "node")
CAPACITY_RETRY_ENV = "SKYHIVE_JOBS_CAPACITY_RETRY"


class Action(str, enum.Enum):
    SUCCEED = "succeed"  # the job succeeded
    CANCEL = "cancel"  # cancelled while running
    RECOVER = "recover"  # a new attempt on fresh nodes, the lost places tried last (a recovery)
    RESTART = "restart"  # a new attempt after the program failed (a restart on errors)
    WAIT = "wait"  # no capacity anywhere: a new attempt after `delay` seconds
    FAIL = "fail"  # the job failed (`why`, `code`)


@dataclass(frozen=True, slots=True)
class Decision:
    """What the controller does after an attempt: `action`, and why (`why`, for the log and the
    events), the exit `code` a failure records, the `delay` before the next attempt (WAIT)."""

    action: Action
    why: str = ""
    code: int = 1
    delay: float = 0.0
    #: the failure is the recovery limit (`max_recoveries`) reached: the controller names the limit
    out_of_recoveries: bool = False


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """A managed job's restart policy (see the module docstring)."""

    restart: str = "gang"
    max_restarts_on_errors: int = 0
    max_recoveries: int = 25
    #: the outcomes (`Outcome.kind`) that are a recovery: a new attempt not counted against
    #: max_restarts_on_errors, counted against max_recoveries
    recoveries: frozenset[str] = frozenset({"lost"})
    #: the outcomes that are the program's own failure: restarted while max_restarts_on_errors allows
    errors: frozenset[str] = frozenset({"error"})
    capacity_first: float = 30.0
    capacity_max: float = 600.0

    def __post_init__(self) -> None:
        if self.restart not in RESTARTS:
            raise ValueError(f"job_recovery.restart: {self.restart!r} is not one of {', '.join(RESTARTS)}")
        if self.max_restarts_on_errors < 0 or self.max_recoveries < 0:
            raise ValueError("max_restarts_on_errors and max_recoveries are whole numbers >= 0")
        if not 0 < self.capacity_first <= self.capacity_max:
            raise ValueError(f"capacity back-off: {self.capacity_first} then at most {self.capacity_max} seconds")

    @classmethod
    def of(cls, spec: dict[str, Any], st: JobState) -> RestartPolicy:
        """The policy of a job: its saved spec (`restart`), its limits (from its `submitted` event) and
        the capacity back-off from SKYHIVE_JOBS_CAPACITY_RETRY (seconds, default 30; a value that is
        not a number: 30)."""
        raw = os.environ.get(CAPACITY_RETRY_ENV, "30")
        try:
            first = max(0.05, float(raw))
        except ValueError:
            log.warning("%s=%r is not a number of seconds: 30 used", CAPACITY_RETRY_ENV, raw)
            first = 30.0
        return cls(restart=str(spec.get("restart") or "gang"), max_restarts_on_errors=st.max_restarts_on_errors,
                   max_recoveries=st.max_recoveries, capacity_first=first, capacity_max=max(first, 600.0))

    def capacity_delay(self, times: int) -> float:
        """Seconds before trying again after `times` attempts in a row found no capacity: `capacity_first`
        doubling, at most `capacity_max` (a spot job waits for room as long as it takes)."""
        return min(self.capacity_first * 2 ** (max(1, times) - 1), self.capacity_max)

    def decide(self, res: Outcome, st: JobState, full: int = 0) -> Decision:
        """What follows an attempt that ended with `res`, the job being `st` (its counts include this
        attempt's recoveries in place) after `full` attempts in a row found no capacity."""
        code = res.failed.code if res.failed else 1
        if res.kind == "ok":
            return Decision(Action.SUCCEED)
        if res.kind == "cancelled":
            return Decision(Action.CANCEL, why=res.why)
        if res.kind in self.recoveries:
            if st.recoveries >= self.max_recoveries:
                return Decision(Action.FAIL, why=res.why, code=1, out_of_recoveries=True)
            return Decision(Action.RECOVER, why=res.why)
        if res.kind == "broken" and res.capacity:  # no room anywhere now: tried again until cancelled
            return Decision(Action.WAIT, why=res.why, delay=self.capacity_delay(full + 1))
        if res.kind in self.errors and st.restarts_on_errors < self.max_restarts_on_errors:
            return Decision(Action.RESTART, why=res.why, code=code)
        return Decision(Action.FAIL, why=res.why, code=code)
