"""The pool's event log: in memory, in a JSONL file, and to live subscribers.

`emit` is the one door every event goes through: it redacts secrets, numbers and timestamps the
event, folds it into the pool's state, appends it to the file and hands it to `events()` iterators.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import fields
from operator import itemgetter
from pathlib import Path
from typing import IO, Any, TypeVar

from ...paths import private_dir, state_dir
from .nodes import NodeTable
from .parts import Parts, PartsFormat, escape
from .state import _COUNTED, _OUTCOME_COUNTER, PoolState, count_output, count_tasks, fold
from .stream import EVENTS_MAX_BUFFER, EventStream
from .types import (
    Event,
    NodeProgress,
    NodeReplaced,
    NodeScaled,
    NodeStateChanged,
    OutputCapped,
    OutputChunk,
    PoolDetached,
    PoolStarted,
    PoolStopped,
    TaskFinished,
    TaskStarted,
    TaskSubmitted,
    WorkerStateChanged,
    from_json,
    to_json,
)

__all__ = ["EventLog", "state_dir", "pool_log_path", "read_log", "REDACTED"]

log = logging.getLogger("skyhive.events")
E = TypeVar("E", bound=Event)
REDACTED = "***"
#: Longest a task or output event waits before it is written to the file.
WRITE_DELAY = 0.1
#: Events kept in memory for late `events(replay=True)` subscribers; the file keeps everything.
MEMORY_EVENTS = 10_000
#: Task events deferred (see `record_task`) after which they are settled at once.
MAX_DEFERRED = 4096
#: Characters of output events waiting to be written after which the file is written at once.
WRITE_CHARS = 4 * 1024 * 1024
# Events said at INFO as they happen (`skyhive -v`, or the application's own logging set to INFO).
_SAID = frozenset({PoolStarted, NodeStateChanged, NodeProgress, NodeReplaced, WorkerStateChanged, PoolStopped,
                   PoolDetached, NodeScaled})


def _said(event: Event) -> str:
    """One line for an event of `_SAID`: "pool p-1: node_state node=0 state=ready"."""
    values = to_json(event)
    words = " ".join(f"{k}={v}" for k, v in json.loads(values).items()
                     if k not in ("type", "pool_id", "seq", "ts", "provider_config") and v not in (None, "", [], {}))
    return f"pool {event.pool_id}: {event.kind} {words}"


# Events after which the file is flushed at once (so a crashed client's pool can be found and cleaned).
_FLUSH_NOW = (PoolStarted, PoolStopped, PoolDetached)
# Events after which the file is flushed on the event loop's next turn (`call_soon`: before any timer
# or I/O it waits for; a crashed client's nodes are found by the provider ids these carry). Flushing
# after each one made 90,000 write calls while a 10,000-node pool started and stopped.
_FLUSH_SOON = (NodeStateChanged, WorkerStateChanged, NodeReplaced, NodeScaled)


def pool_log_path(pool_id: str) -> Path:
    """Where a pool's log lives (`state_dir()/pools/<pool>.jsonl`; the directory is not created)."""
    return state_dir() / "pools" / f"{pool_id}.jsonl"


def read_log(path: str | os.PathLike[str]) -> Iterator[Event]:
    """The events in a JSONL log file, in order.

    A torn last line (a client killed while appending: no newline, perhaps cut inside a multi-byte
    character) is skipped. Any other line that is not an event raises `ValueError` naming the file
    and the line.
    """
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            if not raw.endswith(b"\n"):
                return  # the torn last line
            try:
                event = from_json(raw.decode("utf-8"))
            except (ValueError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
                raise ValueError(f"{os.fspath(path)}:{number}: not an event ({type(exc).__name__}: {exc})") from exc
            yield event


def _next_seq(path: Path) -> int:
    """The sequence number after the last whole event in `path` (0 for a new or empty file)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - (1 << 20)))
            tail = fh.read()
    except FileNotFoundError:
        return 0
    for raw in reversed(tail.split(b"\n")[:-1]):  # the part after the last newline is torn or empty
        try:
            return int(json.loads(raw)["seq"]) + 1
        except (ValueError, KeyError, TypeError):
            continue
    return 0


class EventLog:
    """One pool's log. Not thread-safe: used from the pool's event loop only."""

    def __init__(self, pool_id: str, *, path: Path | None, secrets: frozenset[str] = frozenset(),
                 output_limit: int | None = None) -> None:
        self.pool_id = pool_id
        self.path = path
        self.output_limit = output_limit  # characters of task output logged at most (None: no limit)
        self.output_logged = 0
        self._state = PoolState()
        self._unfolded: list[Event] = []
        self._chunks_unfolded = 0  # output events are only counted when folded: not kept for it
        self._unwritten: list[Event | Parts] = []
        self._unwritten_chars = 0
        self._flush_scheduled = False
        self._flush_soon = False
        # (a task event `record_task` deferred stays in its parts here until `recent` is read)
        self._recent: deque[Event | Parts] = deque(maxlen=MEMORY_EVENTS)
        self._recent_parts = False  # some of `_recent` are parts
        # task events recorded by `record_task` (numbered and timed, not built): settled, in order,
        # before anything reads the log (state, recent, file) and before any other event is emitted —
        # counted into the state, written to the file from their parts, built only if `recent` is read
        self._deferred: list[Parts] = []
        self._task_counts: dict[str, int] = {}  # settled task events not yet counted into the state
        self._task_last_seq = -1
        self._lifecycle_unfolded = False  # an event that may change the nodes' records waits to be folded
        self._secrets = tuple(sorted((s for s in secrets if s), key=len, reverse=True))
        self._seq = 0
        self._closed = False
        self._subscribers: list[EventStream] = []
        self._file: IO[str] | None = None
        # the deferrable task events' parts forms for this pool (see `parts.py`): one for each class,
        # and those of the task events nearly every call makes (one item; ended "ok", no error)
        self._formats = {cls: PartsFormat(cls, pool_id) for cls in _DEFERRABLE}
        one = PartsFormat(TaskSubmitted, pool_id, {"items": 1})
        ok = PartsFormat(TaskFinished, pool_id, {"outcome": "ok", "error": ""})
        self._by_template = {f.template: f for f in (*self._formats.values(), one, ok)}
        self._submitted, self._submitted_one = self._formats[TaskSubmitted].template, one.template
        self._finished, self._finished_ok = self._formats[TaskFinished].template, ok.template
        #: what a settled task event counts in the state, by its template (a `TaskFinished` with its
        #: outcome in its parts: by that; `TaskStarted`: nothing)
        self._counts_as = {self._submitted: "tasks_submitted", one.template: "tasks_submitted", ok.template: "tasks_ok"}
        if path is not None:
            if path.parent == state_dir() / "pools":
                private_dir("pools")
            else:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._seq = _next_seq(path)  # a named pool's log goes on across the clients that attach to it
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self._file = os.fdopen(fd, "w", encoding="utf-8", buffering=1 << 16)
        # a deferred task event calls `_deferred_more` once `_deferred` holds this many: MAX_DEFERRED
        # (to settle a long run), or 0 while a file waits for its flush to be arranged
        self._settle_at = MAX_DEFERRED if self._file is None else 0
        # task events are emitted, not deferred, while a live subscriber waits for each or secrets are redacted
        self._direct = bool(self._secrets)

    def __repr__(self) -> str:
        return f"<EventLog {self.pool_id} events={self._seq} subscribers={len(self._subscribers)}>"

    @property
    def secrets(self) -> tuple[str, ...]:
        """The secret values this log redacts, longest first."""
        return self._secrets

    def redact(self, text: str) -> str:
        """`text` with every secret value replaced by `***`."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    @property
    def recent(self) -> deque[Event]:
        """The last `MEMORY_EVENTS` events, oldest first."""
        if self._deferred:
            self._settle()
        if self._recent_parts:  # build the task events kept in their parts (each once)
            formats = self._by_template
            self._recent = deque([e if e.__class__ is not tuple else formats[e[0]].build(e)
                                  for e in self._recent], maxlen=MEMORY_EVENTS)
            self._recent_parts = False
        return self._recent  # type: ignore[return-value]

    @property
    def nodes(self) -> NodeTable:
        """`state.nodes`, without folding what cannot change them: task and output events only
        count. (Every broadcast asks each node's state; folding a call's task events then would
        undo their deferral.)"""
        if self._lifecycle_unfolded:
            return self.state.nodes
        return self._state.nodes

    @property
    def state(self) -> PoolState:
        """The pool's state: the fold of every event emitted so far."""
        if self._deferred:
            self._settle()
        self._lifecycle_unfolded = False
        if self._unfolded:
            self._state = fold(self._unfolded, self._state)
            self._unfolded = []
        if self._chunks_unfolded:
            self._state = count_output(self._state, self._chunks_unfolded, self._seq - 1)
            self._chunks_unfolded = 0
        if self._task_counts:
            self._state = count_tasks(self._state, self._task_counts, self._task_last_seq)
            self._task_counts = {}
        return self._state

    def _redact_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, (dict, list, tuple)):  # structured fields (a provider's description)
            text = json.dumps(value, default=str)
            return json.loads(self.redact(text)) if any(s in text for s in self._secrets) else value
        return value

    def emit(self, cls: type[E], **fields_: Any) -> E:
        """Build, record and publish one event.

        Folding into the state and writing to the file are deferred and batched (the state is
        folded when read; the file is written on the next lifecycle event, at most `WRITE_DELAY`
        later, or at close), so a task's events cost a few microseconds on the caller's path.
        """
        if self._deferred:
            self._settle()  # keeps the log in sequence order
        if self._secrets:
            fields_ = {k: self._redact_value(v) for k, v in fields_.items()}
        # (every event's time is in whole microseconds, as the deferred task events' parts keep it)
        event = cls(pool_id=self.pool_id, seq=self._seq, ts=_ns() // 1000 / 1e6, **fields_)
        self._seq += 1
        self._record(event)
        if cls in _SAID and log.isEnabledFor(logging.INFO):  # `skyhive -v`: the pool's life, as it happens
            log.info("%s", _said(event))
        return event

    def record_task(self, cls: type[Event], *values: Any) -> None:
        """`emit(cls, **fields)` for the events every call makes (`TaskSubmitted`, `TaskFinished`),
        with `values` the event's own fields in declaration order, all of them.

        The event gets its sequence number and timestamp now, and is built only when something
        reads the log (`state`, `recent`, the file's next write, a subscriber), so a call pays for
        a tuple, not an event object, on its way. The log is the same as `emit` makes (a test holds
        it to that). With live subscribers or secrets to redact, it is `emit`.
        """
        count = _DEFERRABLE_FIELDS.get(cls)
        if count is None:
            raise TypeError(f"record_task takes task events ({', '.join(c.__name__ for c in _DEFERRABLE)}), "
                            f"not {cls.__name__}: emit it")
        if self._direct:
            self.emit(cls, **dict(zip(_field_names(cls), values)))
            return
        if len(values) != count:
            raise TypeError(f"{cls.__name__} has the fields {_field_names(cls)}, got {len(values)} values")
        self._defer(cls, values)

    def task_submitted(self, task: int, node: int, local_rank: int, fn: str, items: int) -> None:
        """`record_task(TaskSubmitted, ...)`, each field by name (every call makes one: no lookups)."""
        if self._direct:
            self.emit(TaskSubmitted, task=task, node=node, local_rank=local_rank, fn=fn, items=items)
            return
        us = _ns() // 1000
        deferred = self._deferred
        if items == 1:
            deferred.append((self._submitted_one, self._seq, us // 1000000, us % 1000000, task, node,
                                   local_rank, escape(fn)))
        else:
            deferred.append((self._submitted, self._seq, us // 1000000, us % 1000000, task, node, local_rank,
                                   escape(fn), items))
        self._seq += 1
        if len(deferred) >= self._settle_at:
            self._deferred_more()

    def task_finished(self, task: int, node: int, local_rank: int, outcome: str, error: str) -> None:
        """`record_task(TaskFinished, ...)`, each field by name (every call makes one: no lookups)."""
        if self._direct:
            self.emit(TaskFinished, task=task, node=node, local_rank=local_rank, outcome=outcome, error=error)
            return
        us = _ns() // 1000
        deferred = self._deferred
        if outcome == "ok" and not error:
            deferred.append((self._finished_ok, self._seq, us // 1000000, us % 1000000, task, node, local_rank))
        else:
            deferred.append((self._finished, self._seq, us // 1000000, us % 1000000, task, node, local_rank,
                                   escape(outcome), escape(error)))
        self._seq += 1
        if len(deferred) >= self._settle_at:
            self._deferred_more()

    def _defer(self, cls: type[Event], values: tuple[Any, ...]) -> None:
        self._deferred.append(self._formats[cls].parts(self._seq, _ns() // 1000, values))
        self._seq += 1
        self._deferred_more()

    def _deferred_more(self) -> None:
        """After a task event was deferred: settle a long run of them; see that the file is written."""
        if len(self._deferred) >= MAX_DEFERRED:
            self._settle()
        elif not self._flush_scheduled and self._file is not None:
            self._schedule_flush()

    def _settle(self) -> None:
        """Record the task events `record_task` deferred, in order, without building them: what
        `_record` does for a task event (folded, which only counts it; kept in memory; written; no
        live subscriber, or it would have been emitted), for the whole run at once."""
        deferred, self._deferred = self._deferred, []
        counts, counts_as = self._task_counts, self._counts_as
        for template, n in Counter(map(_template_of, deferred)).items():  # (in C: no Python code per event)
            key = counts_as.get(template)
            if key is not None:
                counts[key] = counts.get(key, 0) + n
            elif template is self._finished:  # the outcome is in the parts (escaped)
                for e in deferred:
                    if e[0] is template:
                        key = _OUTCOME_KEY.get(e[7], "tasks_lost")
                        counts[key] = counts.get(key, 0) + 1
        self._task_last_seq = deferred[-1][1]
        self._recent.extend(deferred)
        self._recent_parts = True
        if self._file is not None:
            self._unwritten += deferred
            if len(self._unwritten) >= 4096:
                self.flush()
            elif not self._flush_scheduled:
                self._schedule_flush()

    def _record(self, event: Event) -> None:
        output = isinstance(event, OutputChunk)
        if output:  # output text is for pool.output() and the file, not memory: only counted
            self._chunks_unfolded += 1
        else:
            self._unfolded.append(event)
            self._recent.append(event)
            if not isinstance(event, _COUNTED):
                self._lifecycle_unfolded = True
        if self._file is not None:
            self._unwritten.append(event)
            if output:
                self._unwritten_chars += len(event.text)  # type: ignore[attr-defined]
            if (isinstance(event, _FLUSH_NOW) or len(self._unwritten) >= 4096
                    or self._unwritten_chars >= WRITE_CHARS):
                self.flush()
            elif isinstance(event, _FLUSH_SOON):
                if not self._flush_soon:
                    self._schedule_flush(soon=True)
            elif not self._flush_scheduled:
                self._schedule_flush()
        if self._subscribers:
            for sub in list(self._subscribers):
                if not sub.put(event):
                    self._unsubscribe(sub)

    def log_output(self, *, task: int, node: int, local_rank: int, stream: str, text: str) -> None:
        """Record task output as an `OutputChunk`, up to the pool's `output_limit` characters in all.

        The chunk that crosses the limit is logged up to it, followed by one `OutputCapped` marker;
        later output is not logged (the caller still hands it to the terminal and `pool.output()`).
        """
        limit = self.output_limit
        if limit is None:
            self.emit(OutputChunk, task=task, node=node, local_rank=local_rank, stream=stream, text=text)
            return
        room = limit - self.output_logged
        if room <= 0:
            return
        if len(text) > room:
            self.output_logged = limit
            if room:
                self.emit(OutputChunk, task=task, node=node, local_rank=local_rank, stream=stream, text=text[:room])
            self.emit(OutputCapped, limit=limit, task=task, node=node, local_rank=local_rank, stream=stream)
            log.warning("pool %s: its log now holds %d characters of task output (log_output_limit); later "
                        "output goes to the terminal and pool.output() only", self.pool_id, limit)
            return
        self.output_logged += len(text)
        self.emit(OutputChunk, task=task, node=node, local_rank=local_rank, stream=stream, text=text)

    def _schedule_flush(self, *, soon: bool = False) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if soon:
            self._flush_soon = True
            loop.call_soon(self.flush)
        else:
            self._flush_scheduled = True
            self._settle_at = MAX_DEFERRED
            loop.call_later(WRITE_DELAY, self.flush)

    def subscribe(self, *, replay: bool = False, max_buffer: int = EVENTS_MAX_BUFFER) -> EventStream:
        """An `EventStream` of the events from now on (with `replay`, first those still in memory),
        registered at once, until the log closes (see `events/stream.py`)."""
        if self._deferred:
            self._settle()  # what came before it is not live: replayed or not, it is not sent
        stream = EventStream(max_buffer, self._unsubscribe)
        if replay:
            for event in self.recent:
                stream.put(event)
        if self._closed:
            stream.end()
        else:
            self._subscribers.append(stream)
            self._direct = True
        return stream

    def _unsubscribe(self, stream: EventStream) -> None:
        if stream in self._subscribers:
            self._subscribers.remove(stream)
            self._direct = bool(self._subscribers or self._secrets)

    def flush(self) -> None:
        """Write every pending event to the file, and flush it."""
        if self._deferred:
            self._settle()  # (before the flags below: it arranges no other flush, this one writes it)
        self._flush_scheduled = False  # (a timer still pending then finds nothing to write)
        self._settle_at = 0 if self._file is not None else MAX_DEFERRED
        self._flush_soon = False
        if self._file is None:
            return
        if self._unwritten:
            pending, self._unwritten = self._unwritten, []
            self._unwritten_chars = 0
            # (a task event's parts are its line's template and values: one `%`, see `parts.py`)
            self._file.write("".join([e[0] % e if e.__class__ is tuple else to_json(e) + "\n" for e in pending]))
        self._file.flush()

    def close(self) -> None:
        """Flush and close the file; end every subscriber's iteration (after what it holds)."""
        self._closed = True
        if self._deferred:
            self._settle()
        for sub in self._subscribers:
            sub.end()
        self._subscribers.clear()
        self._direct = bool(self._secrets)
        if self._file is not None:
            self.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None

    @staticmethod
    def replay(path: str | os.PathLike[str]) -> PoolState:
        """The state rebuilt from a log file."""
        return fold(read_log(path))


_FIELD_NAMES: dict[type[Event], tuple[str, ...]] = {}


def _field_names(cls: type[Event]) -> tuple[str, ...]:
    """The fields of `cls` after (pool_id, seq, ts), in declaration order."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))[3:]
    return names


_ns = time.time_ns
_template_of = itemgetter(0)
#: the events `record_task` may defer: counted when folded, never output, never flushed at once
_DEFERRABLE = (TaskSubmitted, TaskStarted, TaskFinished)
#: how many fields (after pool_id, seq, ts) each of those events has
_DEFERRABLE_FIELDS: dict[type[Event], int] = {cls: len(_field_names(cls)) for cls in _DEFERRABLE}
#: a `TaskFinished`'s escaped outcome (as its parts hold it) -> the state's counter of it
_OUTCOME_KEY = {escape(outcome): key for outcome, key in _OUTCOME_COUNTER.items()}
