"""What the dashboard's pages show, as plain JSON-ready values, from `watch.StateDir` and the named
pools' records and queues. Read-only: nothing here changes the state directory (the actions are in
`actions.py`). Never a secret: a job's `secrets` and `env` are not shown, a job's log is redacted with
its secret values by the event log's own `redact`, and the event logs were redacted when written.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import Counter
from dataclasses import fields
from typing import Any

from ...errors import PoolNotFound
from ..events.lifecycle import NodeState
from ..clusters import jobs as jobq
from ..clusters import record as records
from ..clusters.kept_pool import KeptPool
from ..clusters.named import live_workers
from ..clusters.procs import alive
from ..events.inventory import DOWN_REASON
from ..events.log import EventLog
from ..events.timeline import STATE_COLORS, TASK_COLORS, Lane, Span, build
from ..events.timeline_groups import group
from ..events.types import Event, TaskFinished, TaskSubmitted
from . import logrange
from .watch import PoolWatch, StateDir

__all__ = ["pool_rows", "pool_detail", "node_rows", "event_rows", "timeline_json", "output_lines", "named_rows",
           "job_json", "job_log", "problems", "MAX_SPANS"]

#: Spans drawn per lane at most; a lane with more has neighbouring spans merged ("37 tasks").
MAX_SPANS = 2000
#: Events listed per request at most.
MAX_EVENT_ROWS = 1000
_SECRET_WORDS = ("secret", "token", "password", "passwd", "credential", "private_key", "api_key", "apikey")


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _named(pool_id: str) -> records.ClusterRecord | None:
    with contextlib.suppress(PoolNotFound, ValueError, OSError):
        return records.load(pool_id)
    return None


def problems(watch: PoolWatch, status: str) -> list[dict[str, str]]:
    """What went wrong in a pool, each with its cause and the command that deals with it."""
    out: list[dict[str, str]] = []
    state = watch.state
    pool = watch.pool_id
    running = state.status != "stopped"
    if status == "client gone":
        out.append({"cause": f"the client process {state.pid} that ran this pool is gone; its nodes may still run "
                             "(and cost)", "fix": f"skyhive down {pool}"})
    failed = [n for n in state.nodes if n.state == NodeState.FAILED.value]
    for n in failed[:20]:
        out.append({"cause": f"node {n.node} failed: {n.detail or 'no detail recorded'}",
                    "fix": f"skyhive down {pool}" if running else f"skyhive logs {pool}"})
    if len(failed) > 20:
        out.append({"cause": f"and {len(failed) - 20} more failed nodes", "fix": f"skyhive events {pool}"})
    dropped = [n for n in state.nodes if n.dropped]
    for n in dropped[:20]:
        out.append({"cause": f"node {n.node} was left out at start (min_nodes): {n.dropped}",
                    "fix": f"skyhive events {pool}"})
    if len(dropped) > 20:
        out.append({"cause": f"and {len(dropped) - 20} more nodes left out at start", "fix": f"skyhive events {pool}"})
    if state.error and not _cleaned_up(state.error):
        out.append({"cause": f"the pool stopped with an error: {state.error}" if not running else state.error,
                    "fix": f"skyhive logs {pool}" if not running else f"skyhive down {pool}"})
    if watch.tail.bad_lines:
        out.append({"cause": f"{watch.tail.bad_lines} lines of the log are not events", "fix": f"skyhive events {pool}"})
    return out


def _cleaned_up(why: str) -> bool:
    """The reason `skyhive down` recorded: how the pool ended, not a problem left."""
    return why.startswith((DOWN_REASON, "skyhive down "))


def _summary(watch: PoolWatch, now: float) -> dict[str, Any]:
    entry = watch.entry()
    state = watch.state
    rec = _named(watch.pool_id)
    counts = Counter(n.state for n in state.nodes)
    cost = entry.cost(now)
    status = entry.status
    autostop = "-"
    if rec is not None:
        autostop = "-" if rec.autostop_minutes is None else f"{rec.autostop_minutes:g} min" + (
            " (down)" if rec.autostop_down else "")
    return {
        "pool": watch.pool_id, "status": status, "provider": state.provider or "-", "named": rec is not None,
        "nodes": len(state.nodes), "states": dict(counts.most_common()),
        "ready": counts.get(NodeState.READY.value, 0), "failed": counts.get(NodeState.FAILED.value, 0),
        "machine": entry.machine or "-",
        "per_hour": cost[0] if cost else None, "spent": cost[1] if cost else None,
        "started": state.started or None, "stopped": state.stopped or None,
        "age": _age(now - state.started) if state.started else "-", "autostop": autostop,
        "client_pid": state.pid, "host": state.host, "error": state.error,
        "ended": state.error if state.status == "stopped" else "",
        "tasks": {"submitted": state.tasks_submitted, "ok": state.tasks_ok, "failed": state.tasks_failed,
                  "cancelled": state.tasks_cancelled, "lost": state.tasks_lost, "in_flight": state.tasks_in_flight},
        "last_seq": state.last_seq, "problems": problems(watch, status),
        "can_down": state.status != "stopped" or rec is not None,
    }


def pool_rows(store: StateDir, now: float | None = None) -> list[dict[str, Any]]:
    """Every pool, newest first."""
    now = now or time.time()
    with store.lock:
        watches = list(store.pools.values())
        rows = [_summary(w, now) for w in watches if w.state.last_seq >= 0]
    return sorted(rows, key=lambda r: (r["started"] or 0.0, r["pool"]), reverse=True)


def pool_detail(store: StateDir, pool_id: str) -> dict[str, Any]:
    """One pool: its summary, its tasks (the latest) and, for a named pool, its jobs."""
    with store.lock:
        watch = store.get(pool_id)
        out = _summary(watch, time.time())
        out["plan"] = _public(watch.started.plan) if watch.started else {}
        out["provider_config"] = _public(watch.started.provider_config) if watch.started else {}
        out["recent_tasks"] = _recent_tasks(watch)
        out["event_types"] = dict(Counter(ev.kind for ev in watch.events).most_common())
        out["output_lines"] = watch.output_count
    if out["named"]:
        out["jobs"] = [job_json(j) for j in _jobs(pool_id)]
    return out


def _public(value: Any) -> Any:
    """A provider's description or plan without anything that may be a secret (by its key's name)."""
    if isinstance(value, dict):
        return {k: ("***" if any(w in str(k).lower() for w in _SECRET_WORDS) else _public(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_public(v) for v in value]
    return value


def _recent_tasks(watch: PoolWatch, limit: int = 50) -> list[dict[str, Any]]:
    finished: dict[int, TaskFinished] = {}
    out: list[dict[str, Any]] = []
    for ev in reversed(watch.events):
        if isinstance(ev, TaskFinished):
            finished[ev.task] = ev
        elif isinstance(ev, TaskSubmitted):
            end = finished.get(ev.task)
            out.append({"task": ev.task, "fn": ev.fn, "node": ev.node, "rank": ev.local_rank, "items": ev.items,
                        "submitted": ev.ts, "outcome": end.outcome if end else "running",
                        "error": end.error if end else "", "seconds": (end.ts - ev.ts) if end else None})
            if len(out) >= limit:
                break
    return out


def node_rows(store: StateDir, pool_id: str, *, state: str = "", offset: int = 0, limit: int = 200) -> dict[str, Any]:
    """A page of the pool's nodes (only those in lifecycle `state`, if given)."""
    with store.lock:
        watch = store.get(pool_id)
        offset = max(0, offset)
        nodes = [n for n in watch.state.nodes if not state or n.state == state]
        page = nodes[offset:offset + limit]
        rows = [{"node": n.node, "state": n.state, "provider_state": watch.provider_state.get(n.node, ""),
                 "addr": n.addr, "provider_id": n.provider_id, "detail": n.detail, "dropped": n.dropped,
                 "replacements": n.replacements,
                 "workers": [{"rank": w.local_rank, "state": w.state, "pid": w.pid, "restarts": w.restarts}
                             for w in n.workers]} for n in page]
    return {"total": len(nodes), "offset": offset, "nodes": rows}


def _event_json(ev: Event) -> dict[str, Any]:
    out: dict[str, Any] = {"type": ev.kind}
    for f in fields(ev):
        if f.name != "pool_id":
            out[f.name] = _public(getattr(ev, f.name))
    return out


def event_rows(store: StateDir, pool_id: str, *, kind: str = "", node: int | None = None,
               before: int | None = None, limit: int = 200) -> dict[str, Any]:
    """The newest events of a pool (of one type, about one node, older than seq `before`), newest first."""
    limit = max(1, min(limit, MAX_EVENT_ROWS))
    out = []
    with store.lock:
        watch = store.get(pool_id)
        for ev in reversed(watch.events):
            if before is not None and ev.seq >= before:
                continue
            if kind and ev.kind != kind:
                continue
            if node is not None and getattr(ev, "node", None) != node:
                continue
            out.append(_event_json(ev))
            if len(out) >= limit:
                break
    return {"events": out, "more": len(out) >= limit}


def timeline_json(store: StateDir, pool_id: str) -> dict[str, Any]:
    """The pool's timeline (`events/timeline.py`'s lanes and spans, a big pool's nodes grouped as
    `skyhive timeline` draws them) for the page to draw and zoom."""
    with store.lock:
        watch = store.get(pool_id)
        events = list(watch.events)
    tl = group(build(events))
    # (times rounded alike: a span that ends the pool must not start past its rounded end)
    return {"pool": tl.pool_id, "provider": tl.provider, "started": tl.started, "duration": round(tl.duration, 4),
            "stopped": tl.stopped, "error": tl.error, "group_size": tl.group_size,
            "nodes": tl.nodes or len({lane.node for lane in tl.lanes}),
            "colors": {**STATE_COLORS, **TASK_COLORS}, "lanes": [_lane(lane) for lane in tl.lanes]}


def _lane(lane: Lane) -> dict[str, Any]:
    spans = lane.spans if len(lane.spans) <= MAX_SPANS else _merge(lane.spans)
    return {"node": lane.node, "title": lane.title, "tasks": lane.tasks,
            "spans": [[round(s.start, 4), round(s.end, 4), s.kind, s.label] for s in spans],
            "marks": [[round(t, 4), what] for t, what in lane.marks]}


_WORST = ("error", "lost", "cancelled", "unfinished", "ok")


def _merge(spans: tuple[Span, ...]) -> tuple[Span, ...]:
    """At most `MAX_SPANS` spans: runs of neighbours as one, with the worst outcome among them."""
    size = math.ceil(len(spans) / MAX_SPANS)
    out = []
    for i in range(0, len(spans), size):
        run = spans[i:i + size]
        worst = min((s.kind for s in run), key=lambda k: _WORST.index(k) if k in _WORST else len(_WORST))
        out.append(Span(run[0].start, max(s.end for s in run), worst, f"{len(run)} tasks"))
    return tuple(out)


def output_lines(store: StateDir, pool_id: str, *, after: int = -1, before: int | None = None,
                 limit: int = 5000) -> dict[str, Any]:
    """The pool's output lines numbered after `after` (`[node N] ` before each) or, with `before`, the
    last `limit` numbered below it (-1: the newest). `start` is the first one's number, `next` the last
    one's (read on from it with `after`); `first` is the oldest the dashboard still holds (it keeps the
    last `watch.OUTPUT_LINES`: the whole output is the download's), `total` how many there were."""
    with store.lock:
        watch = store.get(pool_id)
        if before is None:
            lines = [ln for ln in _tail(watch, after) if ln.index > after][:limit]
        else:
            end = watch.output_count if before < 0 else before
            lines = [ln for ln in _tail(watch, end - limit - 1) if ln.index < end]
        total, capped = watch.output_count, watch.output_capped
        first = watch.output[0].index if watch.output else total
    text = "".join(f"[node {ln.node}] {ln.text}\n" for ln in lines)
    if before is None:
        start, nxt = (lines[0].index if lines else after + 1), (lines[-1].index if lines else after)
    else:
        start = lines[0].index if lines else min(end, total)
        nxt = lines[-1].index if lines else start - 1
    return {"text": text, "start": start, "next": nxt, "total": total, "capped": capped, "first": first,
            "lines": len(lines)}


def _tail(watch: PoolWatch, after: int) -> list[Any]:
    # the deque holds consecutive indexes: skip to `after` without walking what came before
    out = watch.output
    if not out:
        return []
    start = max(0, after + 1 - out[0].index)
    return [out[i] for i in range(start, len(out))]


# ---- named pools -------------------------------------------------------------------------------------


def _jobs(name: str) -> list[jobq.Job]:
    with contextlib.suppress(OSError, ValueError):
        return jobq.list_jobs(name)
    return []


def job_json(job: jobq.Job) -> dict[str, Any]:
    """A job as the pages show it: never its env or secret values."""
    state = job.state
    if state == jobq.RUNNING and job.agent_pid and not alive(job.agent_pid):
        state = f"{jobq.RUNNING} (its agent, pid {job.agent_pid}, is gone)"
    return {"id": job.id, "name": job.name, "state": state, "submitted": job.submitted, "started": job.started,
            "ended": job.ended, "exit_code": job.exit_code, "detail": job.detail, "duration": job.duration,
            "with_setup": job.with_setup, "finished": job.state in jobq.FINISHED}


def named_rows() -> list[dict[str, Any]]:
    """Every named pool with its queue. Local pools' workers are checked (a look at their sockets'
    servers); an SSH or cloud pool's hosts are not logged into from here (`skyhive status` does)."""
    rows = []
    for name in records.names():
        rec = _named(name)
        if rec is None:
            continue
        elsewhere = not KeptPool(rec).here
        if elsewhere:
            state, live = "on hosts (`skyhive status` checks them)", None
        else:
            live = len(live_workers(rec))
            if not rec.workers:
                state = "INIT"
            elif live == len(rec.workers):
                state = "UP"
            elif rec.stopped:
                state = f"STOPPED ({rec.stopped})"
            else:
                state = "STOPPED (workers gone)" if not live else f"DEGRADED ({len(rec.workers) - live} workers gone)"
        jobs = _jobs(name)
        rows.append({"name": name, "provider": rec.provider, "nodes": rec.nodes, "state": state,
                     "workers": len(rec.workers), "live_workers": live, "created": rec.created,
                     "autostop": "-" if rec.autostop_minutes is None else f"{rec.autostop_minutes:g} min"
                     + (" (down)" if rec.autostop_down else ""),
                     "resources": str(rec.spec.get("resources") or "-"),
                     "jobs": [job_json(j) for j in jobs],
                     "running": sum(1 for j in jobs if j.state == jobq.RUNNING),
                     "pending": sum(1 for j in jobs if j.state == jobq.PENDING),
                     "fix": "" if state == "UP" or elsewhere else f"skyhive down {name}"})
    return rows


def job_log(name: str, job_id: int, *, offset: int = 0, before: int | None = None) -> dict[str, Any]:
    """Job `job_id`'s log from byte `offset` (or, with `before`, the part that ends there; -1: the end):
    whole lines (the rest once the job ended), at most `logrange.CHUNK` bytes, its secret values
    redacted; `start` is where the text begins, `next` the offset to read forward from, `size` the
    log's size."""
    job = jobq.load_job(name, job_id)  # before the log: once FINISHED, what the log holds is complete
    finished = job.state in jobq.FINISHED
    path = jobq.log_path(name, job_id)
    part = logrange.forward(path, offset, finished) if before is None else logrange.backward(path, before, finished)
    text = redact_job(job, part.data.decode("utf-8", errors="replace"))
    return {"text": text, "start": part.start, "next": part.next, "size": part.size, "job": job_json(job),
            "more": part.more}


def redact_job(job: jobq.Job, text: str) -> str:
    """`text` with the job's secret values replaced as the event log replaces them."""
    if not job.secrets:
        return text
    return EventLog(f"job-{job.id}", path=None, secrets=frozenset(job.secrets.values())).redact(text)
