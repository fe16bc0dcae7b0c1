"""Which of a named pool's queued jobs run now: side by side when the resources they ask fit the nodes.

The queue agent (`agent.py`) asks `to_start` each time a job is queued or ends. A job's `Demand` is what
its task asks of each node (`resources.accelerators`, a share of one GPU included — `T4:0.5` —,
`resources.cpus`, `resources.memory`); a node's `Capacity` is what the agent found on the pool's first
node (its GPUs, CPUs and memory) and how many task slots its workers have. Jobs start in the order they
were queued (FIFO): the first pending job starts when its demand, added to the running jobs', fits the
capacity; the jobs queued after it wait while it waits (no job overtakes another).

Deliberate difference from SkyPilot: a job whose task asks for no resources has the pool to itself (the
queue as it was: one such job at a time), where SkyPilot counts it as half a CPU. A job alone on the pool
always starts, even if it asks more than the node has (the node's own check then says what is missing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Demand", "Capacity", "demand_of", "to_start"]

_EPSILON = 1e-9  # two 0.5 shares fill one GPU exactly


@dataclass(frozen=True, slots=True)
class Demand:
    """What one job asks of each node (None: not stated)."""

    gpus: float = 0.0
    cpus: float | None = None
    memory_gb: float | None = None

    @property
    def exclusive(self) -> bool:
        """True when the job states no resource: it runs alone."""
        return not self.gpus and self.cpus is None and self.memory_gb is None

    def as_dict(self) -> dict[str, float]:
        return {k: v for k, v in (("gpus", self.gpus), ("cpus", self.cpus), ("memory_gb", self.memory_gb))
                if v}


@dataclass(frozen=True, slots=True)
class Capacity:
    """What one node has for jobs: GPUs (at least 1: a node without one still runs a job that asks for
    a share, as Local does, warning), CPUs, memory in GB (None: unknown, not limited), and the task
    slots of its workers (jobs that run at once on a node)."""

    gpus: float = 1.0
    cpus: float | None = None
    memory_gb: float | None = None
    slots: int = 1


def demand_of(stored: dict[str, Any] | None) -> Demand:
    """A job's `Demand` from what its record keeps (`Job.demand`: {"gpus", "cpus", "memory_gb"})."""
    stored = stored or {}
    return Demand(gpus=float(stored.get("gpus") or 0.0), cpus=stored.get("cpus"), memory_gb=stored.get("memory_gb"))


def _fits(want: Demand, running: Sequence[Demand], cap: Capacity) -> bool:
    if not running:
        return True
    if want.exclusive or any(r.exclusive for r in running) or len(running) + 1 > cap.slots:
        return False
    for have, wanted, used in ((cap.gpus, want.gpus, [r.gpus for r in running]),
                               (cap.cpus, want.cpus, [r.cpus for r in running]),
                               (cap.memory_gb, want.memory_gb, [r.memory_gb for r in running])):
        if have is not None and (wanted or 0) + sum(u or 0 for u in used) > have + _EPSILON:
            return False
    return True


def to_start(pending: Sequence[Demand], running: Sequence[Demand], cap: Capacity) -> int:
    """How many of `pending` (in queue order) start now beside `running`: the first ones that fit,
    up to the first that does not."""
    started = list(running)
    count = 0
    for want in pending:
        if not _fits(want, started, cap):
            break
        started.append(want)
        count += 1
    return count
