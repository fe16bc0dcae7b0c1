"""`skyhive cost-report`: what every pool and managed job of this state directory ran for and cost.

Read from the pools' event logs (`events.inventory`: each pool's provider, its plan's hourly price,
when its first node ran and when it stopped) and the managed jobs' records (`managed.store`: the pools of
each attempt). Nothing is asked of a cloud. A pool is counted from its first node that ran to its stop
(or now, while it runs), at the price its provider planned (on-demand, or spot for a spot pool); a
pool on machines that exist already (Local, SSH, Slurm: without `Feature.CREATES_MACHINES`) costs nothing here;
any other pool whose price is not known says so ("unknown") instead of counting it as free. A managed
job is the sum of its attempts' pools (unknown when one of them is).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any, Protocol

from ..events import inventory

__all__ = ["CostRow", "JobLike", "cost_rows", "total"]


@dataclass(frozen=True, slots=True)
class CostRow:
    """One pool or managed job: `hours` it ran, `per_hour` and `cost` in USD (None: unknown, `why` says why)."""

    kind: str  # "pool" | "job"
    name: str
    provider: str
    status: str
    hours: float
    per_hour: float | None
    cost: float | None
    why: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "provider": self.provider, "status": self.status,
                "hours": round(self.hours, 6), "per_hour": self.per_hour,
                "cost": None if self.cost is None else round(self.cost, 6), "cost_known": self.cost is not None,
                "why": self.why}


def _own_machines(provider: str) -> bool:
    from ...providers.features import Feature
    from ...providers.registry import provider_class

    try:
        return Feature.CREATES_MACHINES not in provider_class(provider).features
    except Exception:  # noqa: BLE001 - a provider not installed here: its price is not known
        return False


def _pool_row(entry: inventory.PoolEntry, now: float) -> CostRow:
    provider = entry.started.provider if entry.started is not None else "?"
    end = entry.state.stopped or now
    start = entry.billed_from or entry.state.started
    hours = max(0.0, end - start) / 3600 if start else 0.0
    priced = entry.cost(now)
    if priced is not None:
        per_hour, cost = priced
        hours = max(0.0, end - (entry.billed_from or end)) / 3600
        return CostRow("pool", entry.pool_id, provider, entry.status, hours, per_hour, cost)
    if entry.billed_from is None and entry.state.started and not _own_machines(provider):
        return CostRow("pool", entry.pool_id, provider, entry.status, 0.0, None, 0.0,
                       "no node ever ran (nothing was billed)")
    if _own_machines(provider):
        return CostRow("pool", entry.pool_id, provider, entry.status, hours, 0.0, 0.0,
                       "machines that exist already: no cloud cost")
    return CostRow("pool", entry.pool_id, provider, entry.status, hours, None, None,
                   f"unknown: provider {provider!r} planned no price for {entry.machine or 'its machines'}")


class JobLike(Protocol):
    """What a managed job's record says (`managed.store.JobState`; commands do not import managed)."""

    id: int
    name: str
    state: str
    submitted: float
    started: float | None
    ended: float | None
    pools: list[str]


def _job_rows(jobs: Sequence[JobLike], pools: dict[str, CostRow], now: float) -> list[CostRow]:
    rows = []
    for state in jobs:
        mine = [pools[p] for p in state.pools if p in pools]
        unknown = [r for r in mine if r.cost is None]
        cost = None if unknown else sum(r.cost or 0.0 for r in mine)
        start = state.started or state.submitted
        hours = max(0.0, (state.ended or now) - start) / 3600 if start else 0.0
        providers = ",".join(sorted({r.provider for r in mine})) or "-"
        why = f"unknown: {'; '.join(r.why for r in unknown)}" if unknown else (
            "no pool ran" if not mine else f"{len(mine)} pool{'s' if len(mine) != 1 else ''}")
        rows.append(CostRow("job", f"{state.id} {state.name}".strip(), providers, state.state, hours,
                            None, cost, why))
    return rows


def cost_rows(jobs: Sequence[JobLike] = (), now: float | None = None) -> list[CostRow]:
    """Every pool of this state directory (oldest first), then each of the managed `jobs` (its records, as
    `managed.store` folds them), priced by its pools."""
    now = time.time() if now is None else now
    pools = [_pool_row(entry, now) for entry in inventory.scan(include_stopped=True)]
    return pools + _job_rows(jobs, {r.name: r for r in pools}, now)


def total(rows: list[CostRow]) -> tuple[float, int]:
    """The pools' known total (jobs are made of pools: not counted twice) and how many pools are unknown."""
    pools = [r for r in rows if r.kind == "pool"]
    return sum(r.cost or 0.0 for r in pools), sum(1 for r in pools if r.cost is None)
