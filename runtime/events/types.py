"""Events: every change of state in a pool, as small frozen records.

Each event carries the pool id, its sequence number in the pool's log and a wall-clock timestamp;
`to_json`/`from_json` give the JSONL form the log file holds. Secrets never get here: the log redacts
them before an event is built (see `log.EventLog.emit`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from ...protocol.record import Record

__all__ = [
    "Event",
    "OutputCapped",
    "PoolStarted",
    "PoolStopped",
    "PoolDetached",
    "NodeStateChanged",
    "NodeProgress",
    "WorkerStateChanged",
    "NodeDropped",
    "NodeReplaced",
    "NodeScaled",
    "TaskSubmitted",
    "TaskStarted",
    "TaskFinished",
    "OutputChunk",
    "EVENT_TYPES",
    "to_json",
    "from_json",
]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Event(Record):
    kind: ClassVar[str] = "event"
    pool_id: str
    seq: int
    ts: float


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class PoolStarted(Event):
    """A pool was opened with this provider and shape.

    `provider_config` is the provider's `describe()`: plain values from which `providers.registry`
    rebuilds the provider, so `skyhive down` can destroy a crashed client's nodes.
    """

    kind: ClassVar[str] = "pool_started"
    provider: str
    nodes: int
    processes_per_node: int
    pid: int
    host: str
    provider_config: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)  # the provider's `plan(spec)`: machine type, price
    nodes_max: int = 0  # an elastic pool's max (`nodes` is its min: `Pool(nodes=(min, max))`); 0: a fixed size


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class PoolStopped(Event):
    """The pool finished tearing down; `error` is set when it closed because of one. `leaked` names
    what the provider did not confirm gone (node provider ids; "shared resources" when its cleanup
    failed): the pool is then `leaking` until `skyhive down` finishes it (a `PoolStopped` without)."""

    kind: ClassVar[str] = "pool_stopped"
    error: str = ""
    leaked: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if type(self.leaked) is not tuple:  # a JSON list, read back from the log
            object.__setattr__(self, "leaked", tuple(self.leaked))


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class PoolDetached(Event):
    """The client left a kept (named) pool: its nodes and workers go on running, and another client
    may attach (which logs a new `PoolStarted` with its own pid)."""

    kind: ClassVar[str] = "pool_detached"
    pid: int = 0


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class NodeStateChanged(Event):
    """Node `node` moved to lifecycle state `state` (see `lifecycle.NodeState`)."""

    kind: ClassVar[str] = "node_state"
    node: int
    state: str
    addr: str = ""
    provider_id: str = ""
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class NodeDropped(Event):
    """Node `node` failed while the pool started and was left out (`Pool(min_nodes=...)`, see
    `runtime/actors/membership.py`): the pool goes on without it; `reason` says why it failed."""

    kind: ClassVar[str] = "node_dropped"
    node: int
    reason: str = ""
    min_nodes: int = 0


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class NodeProgress(Event):
    """Node `node` made progress inside its current lifecycle state: the provider reported its own state
    (`provider_state`, e.g. "pending" while provisioning), or a step is retried (`detail` says why)."""

    kind: ClassVar[str] = "node_progress"
    node: int
    detail: str = ""
    provider_state: str = ""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class WorkerStateChanged(Event):
    """Worker process `local_rank` of `node`: "starting", "ready", "lost" (with why), "stopped"."""

    kind: ClassVar[str] = "worker_state"
    node: int
    local_rank: int
    state: str
    pid: int = 0
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class NodeReplaced(Event):
    """Node `node` was lost for good and its node (`old_provider_id`, already terminated) is being
    replaced by a fresh one for the same index (`Pool(replace_failed=True)`, see
    `runtime/actors/replace.py`): the node's record starts over at "requested"; `replacement` counts
    the replacements of this index so far (1 for the first)."""

    kind: ClassVar[str] = "node_replaced"
    node: int
    replacement: int
    old_provider_id: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class NodeScaled(Event):
    """An elastic pool (`Pool(nodes=(min, max))`, see `runtime/actors/autoscale.py`) changed its size:
    `change` is "grow" (node `node` is being added: its record starts over at "requested"), "shrink"
    (node `node` is being given back) or "held" (growing into node `node` failed: the provider refused
    or the node did not start; growth waits a while). `reason` says why ("grow: 3 tasks waiting, ...",
    "shrink: idle 30s", ...)."""

    kind: ClassVar[str] = "node_scaled"
    node: int
    change: str
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class TaskSubmitted(Event):
    """Task `task` (`items` calls: 1, or a map batch) was sent to a worker."""

    kind: ClassVar[str] = "task_submitted"
    task: int
    node: int
    local_rank: int
    fn: str
    items: int = 1


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class TaskStarted(Event):
    """The worker began running task `task`."""

    kind: ClassVar[str] = "task_started"
    task: int
    node: int
    local_rank: int


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class TaskFinished(Event):
    """Task `task` ended: "ok", "error" (with `error`), "cancelled" or "lost"."""

    kind: ClassVar[str] = "task_finished"
    task: int
    node: int
    local_rank: int
    outcome: str
    error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class OutputChunk(Event):
    """Text task `task` wrote on `node` to `stream` ("stdout" / "stderr")."""

    kind: ClassVar[str] = "output"
    task: int
    node: int
    local_rank: int
    stream: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class OutputCapped(Event):
    """The log holds no more task output: `limit` characters of it were logged (the pool's
    `log_output_limit`); what came after (from task `task` on `node` onwards) went to the terminal,
    `pool.output()` and `capture=True` only."""

    kind: ClassVar[str] = "output_capped"
    limit: int
    task: int
    node: int
    local_rank: int
    stream: str


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        PoolStarted, PoolStopped, PoolDetached, NodeStateChanged, NodeProgress, WorkerStateChanged, NodeReplaced,
        NodeDropped, NodeScaled,
        TaskSubmitted, TaskStarted, TaskFinished, OutputChunk, OutputCapped,
    )
}


_str = json.encoder.encode_basestring  # the C implementation when available


class _Writer:
    """A precompiled JSON writer for one event class: a `%` template over its fields, strings escaped
    by the C encoder (this runs for every task and output event, so it avoids building a dict). The
    call itself is generated per class, one expression over the fields (no loops, no list)."""

    def __init__(self, cls: type[Event]) -> None:
        parts, args = [], []
        for f in fields(cls):
            kind = str(f.type)
            if not f.name.isidentifier():
                raise TypeError(f"{cls.__name__}.{f.name}: not a field name a writer can be generated for")
            if kind == "int":
                parts.append(f'"{f.name}":%d')
                args.append(f"e.{f.name}")
            elif kind == "float":
                parts.append(f'"{f.name}":%r')
                args.append(f"e.{f.name}")
            elif kind == "str":
                parts.append(f'"{f.name}":%s')
                args.append(f"_str(e.{f.name})")
            else:  # rare, structured fields (e.g. a provider's description): plain json
                parts.append(f'"{f.name}":%s')
                args.append(f"_dumps(e.{f.name})")
        parts.append(f'"type":{_str(cls.kind)}')
        self.template = "{" + ",".join(parts).replace("%%", "%%%%") + "}"
        env: dict[str, Any] = {"_str": _str, "_dumps": _dumps, "_template": self.template}
        exec(f"def write(e):\n    return _template % ({', '.join(args)},)\n", env)  # noqa: S102 - from field names
        self.write: Callable[[Event], str] = env["write"]

    def __call__(self, event: Event) -> str:
        return self.write(event)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)




#: each event type's field names (`dataclasses.fields` per parsed line was a third of a replay)
_FIELDS: dict[type[Event], frozenset[str]] = {cls: frozenset(f.name for f in fields(cls)) for cls in EVENT_TYPES.values()}


class _Writers(dict):  # type: ignore[type-arg]
    """Each event class's writer, generated when its first event is written (a pool that never logs a
    `NodeReplaced` does not compile its writer at import)."""

    def __missing__(self, cls: type[Event]) -> Callable[[Event], str]:
        if cls not in _FIELDS:
            raise KeyError(cls)
        write = self[cls] = _Writer(cls).write
        return write


_WRITE: dict[type[Event], Callable[[Event], str]] = _Writers()

#: each event type's plain fields and the JSON types they must have (a line of the right shape with a
#: field of another type — `"node": "x"` — would break the fold of every command that reads the log)
_TYPES: dict[type[Event], tuple[tuple[str, tuple[type, ...]], ...]] = {
    cls: tuple((f.name, {"int": (int,), "str": (str,), "float": (float, int)}[str(f.type)]) for f in fields(cls)
               if str(f.type) in ("int", "str", "float"))
    for cls in EVENT_TYPES.values()
}
#: A node index past this is no pool's (pools are bounded far below it: `providers/limits.py`); one
#: such line would otherwise make the fold build that many node records.
MAX_NODE_INDEX = 1 << 24
_ABSENT = object()
#: the events the fold files under their node's record (`state._apply_node`): their index is bounded
_INDEXED = frozenset({NodeStateChanged, NodeProgress, WorkerStateChanged, NodeReplaced, NodeDropped, NodeScaled})


def to_json(event: Event) -> str:
    """One line of the JSONL log."""
    return _WRITE[type(event)](event)


def from_json(line: str) -> Event:
    """Parse a log line; raises `ValueError` naming the problem."""
    try:
        data: dict[str, Any] = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a skyhive event: {exc}: {line[:120]!r}") from None
    if type(data) is not dict:  # valid JSON, but `null`, `[]`, `3`, a string: no event object
        raise ValueError(f"not a skyhive event: a JSON {type(data).__name__}, not an object: {line[:120]!r}")
    try:
        cls = EVENT_TYPES[data.pop("type")]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a skyhive event: unknown type {exc}: {line[:120]!r}") from None
    known = _FIELDS[cls]
    for name, types in _TYPES[cls]:
        value = data.get(name, _ABSENT)
        if value is not _ABSENT and type(value) not in types:
            raise ValueError(f"not a skyhive event: {cls.kind}.{name} is a JSON {type(value).__name__}: {line[:120]!r}")
    node = data.get("node") if cls in _INDEXED else None
    if node is not None and not 0 <= node <= MAX_NODE_INDEX:
        raise ValueError(f"not a skyhive event: {cls.kind}.node {node} is out of range: {line[:120]!r}")
    try:
        return cls(**{k: v for k, v in data.items() if k in known})
    except TypeError as exc:  # a field missing
        raise ValueError(f"not a skyhive event: {exc}: {line[:120]!r}") from None
