"""A pool's state as a pure fold over its events: `state = fold(events)`.

The actors never keep a second copy of what is in here: the event log applies each event as it is
emitted, so the state a live pool reports and the state rebuilt from its JSONL file by `fold` are the
same by construction (and a test checks it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from functools import reduce

from .nodes import EMPTY, NodeTable, NodeTableBuilder
from .types import (
    Event,
    NodeDropped,
    NodeProgress,
    NodeReplaced,
    NodeScaled,
    NodeStateChanged,
    OutputCapped,
    OutputChunk,
    PoolStarted,
    PoolStopped,
    PoolDetached,
    TaskFinished,
    TaskStarted,
    TaskSubmitted,
    WorkerStateChanged,
)

__all__ = ["WorkerRecord", "NodeRecord", "PoolState", "apply", "fold", "reduce_apply", "count_output", "count_tasks"]


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    local_rank: int
    state: str = "starting"
    pid: int = 0
    restarts: int = 0


@dataclass(frozen=True, slots=True)
class NodeRecord:
    node: int
    state: str = "requested"
    addr: str = ""
    provider_id: str = ""
    detail: str = ""
    workers: tuple[WorkerRecord, ...] = ()
    #: how often this index was replaced (`Pool(replace_failed=True)`), and the provider ids of the
    #: nodes it replaced, oldest first (each terminated before its replacement was asked for)
    replacements: int = 0
    replaced_ids: tuple[str, ...] = ()
    #: why the node was left out when the pool started (`Pool(min_nodes=...)`); "" if it was not
    dropped: str = ""


@dataclass(frozen=True, slots=True)
class PoolState:
    pool_id: str = ""
    provider: str = ""
    status: str = "new"  # new -> running -> stopped or leaking (a kept pool: running <-> detached)
    started: float = 0.0  # the latest start (a kept pool starts again at each attach and `skyhive start`)
    created: float = 0.0  # the first start: the pool's age (`skyhive ls`)
    stopped: float = 0.0
    error: str = ""
    pid: int = 0
    host: str = ""
    #: the node records, in node order (reads as a tuple; shares structure between states)
    nodes: NodeTable = EMPTY
    tasks_submitted: int = 0
    tasks_ok: int = 0
    tasks_failed: int = 0
    tasks_cancelled: int = 0
    tasks_lost: int = 0
    output_chunks: int = 0
    output_capped: bool = False  # the log's output reached log_output_limit (an OutputCapped event)
    last_seq: int = -1
    #: an elastic pool's max nodes (`Pool(nodes=(min, max))`: its min is `PoolStarted.nodes`); 0: a fixed size
    nodes_max: int = 0
    nodes_min: int = 0  # and its min (0: a fixed size)
    #: what the provider did not confirm gone when the pool closed (status "leaking"); () once it did
    leaked: tuple[str, ...] = ()

    @property
    def tasks_in_flight(self) -> int:
        return self.tasks_submitted - self.tasks_ok - self.tasks_failed - self.tasks_cancelled - self.tasks_lost

    def node(self, index: int) -> NodeRecord:
        return self.nodes[index]

    @property
    def replacements(self) -> int:
        """Nodes replaced over the pool's life (each index counted as often as it was replaced)."""
        return sum(n.replacements for n in self.nodes)


def _set_worker(node: NodeRecord, ev: WorkerStateChanged) -> tuple[WorkerRecord, ...]:
    workers = {w.local_rank: w for w in node.workers}
    old = workers.get(ev.local_rank, WorkerRecord(ev.local_rank))
    restarts = old.restarts + (1 if ev.state == "starting" and old.state == "lost" else 0)
    workers[ev.local_rank] = replace(old, state=ev.state, pid=ev.pid or old.pid, restarts=restarts)
    return tuple(workers[k] for k in sorted(workers))


_POOL_FIELDS = tuple(f.name for f in fields(PoolState))
_new = object.__new__
_set = object.__setattr__


def _evolve(state: PoolState, **changes: object) -> PoolState:
    """`dataclasses.replace` without its validation overhead (this runs for every task event)."""
    new = _new(PoolState)
    for name in _POOL_FIELDS:
        _set(new, name, changes[name] if name in changes else getattr(state, name))
    return new


_NODE_FIELDS = tuple(f.name for f in fields(NodeRecord))


def _evolve_node(record: NodeRecord, **changes: object) -> NodeRecord:
    """`_evolve` for a node record (every node event makes one: ~9 per node over a pool's life)."""
    new = _new(NodeRecord)
    for name in _NODE_FIELDS:
        _set(new, name, changes[name] if name in changes else getattr(record, name))
    return new


def apply(state: PoolState, ev: Event) -> PoolState:
    """The state after `ev`. Pure: never mutates `state`."""
    if isinstance(ev, TaskSubmitted):
        return _evolve(state, last_seq=ev.seq, tasks_submitted=state.tasks_submitted + 1)
    if isinstance(ev, TaskStarted):
        return _evolve(state, last_seq=ev.seq)
    state = _evolve(state, last_seq=ev.seq)
    if isinstance(ev, TaskFinished):
        counter = _OUTCOME_COUNTER.get(ev.outcome, "tasks_lost")
        return _evolve(state, **{counter: getattr(state, counter) + 1})
    if isinstance(ev, OutputChunk):
        return _evolve(state, output_chunks=state.output_chunks + 1)
    if isinstance(ev, OutputCapped):
        return _evolve(state, output_capped=True)
    if isinstance(ev, _NODE_EVENTS):
        nodes = state.nodes.builder()
        _apply_node(nodes, ev)
        return _evolve(state, nodes=nodes.finish())
    if isinstance(ev, PoolStarted):
        return replace(
            state, pool_id=ev.pool_id, provider=ev.provider, status="running", started=ev.ts,
            created=state.created or ev.ts,
            pid=ev.pid, host=ev.host, nodes_max=ev.nodes_max, nodes_min=ev.nodes if ev.nodes_max else 0,
            nodes=NodeTable(NodeRecord(node=i) for i in range(ev.nodes)),
        )
    if isinstance(ev, PoolStopped):
        leaked = tuple(ev.leaked)
        return replace(state, status="leaking" if leaked else "stopped", stopped=ev.ts, error=ev.error, leaked=leaked)
    if isinstance(ev, PoolDetached):  # a kept pool: running, without a client
        return replace(state, status="detached")
    raise TypeError(f"no reducer for event type {type(ev).__name__}")


_NODE_EVENTS = (NodeStateChanged, NodeProgress, WorkerStateChanged, NodeReplaced, NodeDropped, NodeScaled)


def _apply_node(nodes: NodeTableBuilder, ev: Event) -> None:
    """Apply a node or worker event to the table being built (the one place these events are reduced)."""
    index = ev.node  # type: ignore[attr-defined]
    while len(nodes) <= index:
        nodes.append(NodeRecord(node=len(nodes)))
    record = nodes[index]
    if isinstance(ev, NodeStateChanged):
        changes: dict[str, object] = {"state": ev.state, "detail": ev.detail}
        if ev.addr:
            changes["addr"] = ev.addr
        if ev.provider_id:
            changes["provider_id"] = ev.provider_id
        nodes[index] = _evolve_node(record, **changes)
    elif isinstance(ev, NodeProgress):
        nodes[index] = _evolve_node(record, detail=ev.detail or ev.provider_state)
    elif isinstance(ev, WorkerStateChanged):
        nodes[index] = _evolve_node(record, workers=_set_worker(record, ev))
    elif isinstance(ev, NodeDropped):
        nodes[index] = _evolve_node(record, dropped=ev.reason or "dropped")
    elif isinstance(ev, NodeReplaced):  # the index starts over with a fresh node
        nodes[index] = NodeRecord(node=index, replacements=ev.replacement,
                                  replaced_ids=(*record.replaced_ids, ev.old_provider_id or record.provider_id),
                                  detail=f"replacing: {ev.reason}" if ev.reason else "replacing")
    elif isinstance(ev, NodeScaled):  # an elastic pool: a node added starts over; a node going or held says why
        if ev.change == "grow":
            nodes[index] = NodeRecord(node=index, replacements=record.replacements,
                                      replaced_ids=record.replaced_ids, detail=ev.reason)
        else:
            nodes[index] = _evolve_node(record, detail=ev.reason)


_OUTCOME_COUNTER = {"ok": "tasks_ok", "error": "tasks_failed", "cancelled": "tasks_cancelled"}
_COUNTED = (TaskSubmitted, TaskStarted, TaskFinished, OutputChunk)


def fold(events: Iterable[Event], initial: PoolState | None = None) -> PoolState:
    """Replay `events` from `initial` (an empty state by default).

    The same as `functools.reduce(apply, events, initial)` (a property test holds it to that), but
    a run of task and output events — which only bump counters — is applied as one step.
    """
    state = initial or PoolState()
    counts: dict[str, int] = {}
    pending: NodeTableBuilder | None = None
    last = None
    for ev in events:
        last = ev
        if isinstance(ev, _COUNTED):
            if isinstance(ev, TaskSubmitted):
                key = "tasks_submitted"
            elif isinstance(ev, TaskFinished):
                key = _OUTCOME_COUNTER.get(ev.outcome, "tasks_lost")
            elif isinstance(ev, OutputChunk):
                key = "output_chunks"
            else:
                continue
            counts[key] = counts.get(key, 0) + 1
            continue
        if isinstance(ev, _NODE_EVENTS):
            # a run of node events edits one builder: copying the node tuple per event was
            # quadratic (a 10,000-node log replayed in 8.8 s)
            if pending is None:
                pending = state.nodes.builder()
            _apply_node(pending, ev)
            continue
        if pending is not None:
            state = _evolve(state, nodes=pending.finish())
            pending = None
        if counts:
            state = _bump(state, counts)
            counts = {}
        state = apply(state, ev)
    if pending is not None:
        state = _evolve(state, nodes=pending.finish())
    if counts:
        state = _bump(state, counts)
    if last is not None and state.last_seq != last.seq:
        state = _evolve(state, last_seq=last.seq)
    return state


def count_output(state: PoolState, chunks: int, last_seq: int) -> PoolState:
    """`state` after `chunks` OutputChunk events, the last numbered `last_seq` (what folding them
    gives: output events only count, so the log need not keep them to fold them later)."""
    return _evolve(state, output_chunks=state.output_chunks + chunks, last_seq=max(state.last_seq, last_seq))


def count_tasks(state: PoolState, counts: dict[str, int], last_seq: int) -> PoolState:
    """`state` after task events that bump the counters in `counts` (`tasks_submitted`, `tasks_ok`,
    ...), the last numbered `last_seq`: what folding them gives (task events only count, so the log
    need not build them to fold them)."""
    return _evolve(state, **{k: getattr(state, k) + n for k, n in counts.items()},
                   last_seq=max(state.last_seq, last_seq))


def _bump(state: PoolState, counts: dict[str, int]) -> PoolState:
    return _evolve(state, **{k: getattr(state, k) + n for k, n in counts.items()})


def reduce_apply(events: Iterable[Event], initial: PoolState | None = None) -> PoolState:
    """The plain left fold, one `apply` per event (what `fold` must equal)."""
    return reduce(apply, events, initial or PoolState())
