"""The state directory as the dashboard sees it: every pool's log read incrementally.

A `PoolWatch` remembers its offset in one pool's JSONL log (`LineTail`): each `refresh` reads only
the bytes appended since, folds the new events into the pool's state (`state.fold` from
the state it had) and keeps what the pages show — the events other than output (for the event list
and the timeline), the last provider state of each node, and the pool's output as prefixed lines
(the last `OUTPUT_LINES`). Nothing re-reads a whole log after the first look.

`StateDir` holds one watch per log under `pools/` and finds new logs as they appear. It is refreshed
by one thread at a time; readers take `lock` (a refresh holds it only while it folds what it read,
not while it reads and parses).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..events.inventory import PoolEntry, client_of, pools_dir
from ..events.state import PoolState, fold
from ..events.types import (Event, NodeProgress, NodeStateChanged, OutputCapped, OutputChunk, PoolStarted, PoolStopped,
                            from_json)

__all__ = ["LineTail", "OutputLines", "PoolWatch", "StateDir", "output_text", "OUTPUT_LINES", "MAX_EVENTS",
           "READ_CHUNK"]

#: Output lines of a pool kept for its log page (older ones are not held: the page says so, and its
#: Download, like `skyhive logs`, reads them all from the log).
OUTPUT_LINES = 50_000
#: Events kept per pool for its event list and timeline (a pool past this many keeps the newest).
MAX_EVENTS = 2_000_000
#: Bytes of a log read per refresh at most (a huge log is taken in over several refreshes).
READ_CHUNK = 64 << 20


class LineTail:
    """A log's whole lines, read incrementally. `offset` is always at the end of a whole line: a line
    still being written (or torn by a killed client and then cut by `skyhive down`, which truncates
    it before appending) is read again next time, never kept half."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.bad_lines = 0
        self.bytes_read = 0  # all bytes read so far (a test checks nothing is read twice but torn tails)

    def events(self) -> list[Event] | None:
        """The events in the whole lines appended since the last call ([] if none); None when the
        file is now shorter than what was read (it was replaced: the caller starts over)."""
        try:
            with open(self.path, "rb") as fh:
                size = fh.seek(0, 2)
                if size < self.offset:
                    return None
                fh.seek(self.offset)
                data = fh.read(READ_CHUNK)
        except FileNotFoundError:
            return []
        self.bytes_read += len(data)
        end = data.rfind(b"\n") + 1
        self.offset += end
        out = []
        for raw in data[:end].split(b"\n"):
            if not raw.strip():
                continue
            try:
                out.append(from_json(raw.decode("utf-8")))
            except (ValueError, TypeError):
                self.bad_lines += 1
        return out


@dataclass(frozen=True, slots=True)
class OutputLine:
    index: int  # counts every line of the pool's output since the log began
    node: int
    stream: str
    text: str


class OutputLines:
    """A pool's output chunks as whole lines, per node, worker and stream (a line split over chunks is
    joined; what is left when the pool stops is flushed as a last line)."""

    def __init__(self) -> None:
        self._partial: dict[tuple[int, int, str], str] = {}

    def add(self, ev: OutputChunk) -> list[tuple[int, str, str]]:
        """The lines `ev` completes, as (node, stream, text)."""
        key = (ev.node, ev.local_rank, ev.stream)
        text = self._partial.pop(key, "") + ev.text
        *complete, rest = text.split("\n")
        if rest:
            self._partial[key] = rest
        return [(ev.node, ev.stream, line) for line in complete]

    def flush(self) -> list[tuple[int, str, str]]:
        out = [(node, stream, rest) for (node, _, stream), rest in sorted(self._partial.items())]
        self._partial.clear()
        return out


def output_text(path: Path) -> Iterator[str]:
    """Every line of a pool's output, `[node N] ` before each, read from its log on disk a part at a
    time: what the pool log page's Download sends (the page itself holds the last `OUTPUT_LINES`)."""
    tail, lines = LineTail(path), OutputLines()
    while True:
        events = tail.events()
        if not events:
            break
        out = []
        for ev in events:
            if isinstance(ev, OutputChunk):
                out.extend(lines.add(ev))
            elif isinstance(ev, PoolStopped):
                out.extend(lines.flush())
        if out:
            yield "".join(f"[node {node}] {text}\n" for node, _, text in out)


class PoolWatch:
    """One pool's log, read incrementally (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pool_id = path.stem
        self.tail = LineTail(path)
        self.state = PoolState()
        self.started: PoolStarted | None = None
        self.billed_from: float | None = None  # when its first node ran (inventory.PoolEntry.billed_from)
        self.events: deque[Event] = deque(maxlen=MAX_EVENTS)
        self.provider_state: dict[int, str] = {}
        self.output: deque[OutputLine] = deque(maxlen=OUTPUT_LINES)
        self.output_count = 0  # lines of output seen (the next line's index)
        self.output_capped = 0  # the log's output limit, once an OutputCapped event said it was reached
        self.version = 0  # bumped whenever new events arrived
        self._lines = OutputLines()

    def refresh(self) -> bool:
        """Read what was appended since the last call and apply it; True if anything was."""
        return self.apply(self.read())

    def read(self) -> list[Event] | None:
        """The events appended since the last read (None: the file was replaced). Touches only the
        tail, so it runs without the store's lock: parsing is the slow half."""
        return self.tail.events()

    def apply(self, new: list[Event] | None) -> bool:
        """Fold what `read` returned into what the pages show; True if anything changed."""
        if new is None:  # the file was replaced: read it again from its start
            version = self.version
            self.__init__(self.path)  # type: ignore[misc]
            self.version = version  # (goes on counting: caches keyed by it must not see an old number)
            new = self.tail.events() or []
        if not new:
            return False
        kept = []
        for ev in new:
            if isinstance(ev, OutputChunk):
                self._add_output(ev)
                continue
            kept.append(ev)
            if isinstance(ev, PoolStarted):
                self.started = ev  # a named pool logs one per client that attached: the latest
            elif isinstance(ev, NodeProgress) and ev.provider_state:
                self.provider_state[ev.node] = ev.provider_state
            elif isinstance(ev, OutputCapped):
                self.output_capped = ev.limit
            elif isinstance(ev, NodeStateChanged) and ev.state == "running" and self.billed_from is None:
                self.billed_from = ev.ts
            elif isinstance(ev, PoolStopped):
                self._flush_partial()
        self.state = fold(new, self.state)
        self.events.extend(kept)
        self.version += 1
        return True

    def _add_output(self, ev: OutputChunk) -> None:
        for node, stream, line in self._lines.add(ev):
            self.output.append(OutputLine(self.output_count, node, stream, line))
            self.output_count += 1

    def _flush_partial(self) -> None:
        for node, stream, line in self._lines.flush():
            self.output.append(OutputLine(self.output_count, node, stream, line))
            self.output_count += 1

    def entry(self) -> PoolEntry:
        """The pool as `skyhive ls` sees it (status, machine, cost), from what was read so far."""
        client = "" if self.state.status == "stopped" or self.started is None else client_of(self.started)
        return PoolEntry(pool_id=self.pool_id, path=self.path, state=self.state, started=self.started,
                         client=client, bad_lines=self.tail.bad_lines, billed_from=self.billed_from)


class StateDir:
    """Every pool log under `pools/`, each watched incrementally."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or pools_dir()
        self.pools: dict[str, PoolWatch] = {}
        self.lock = threading.Lock()
        self.version = 0  # bumped whenever any pool changed or appeared
        self._refreshing = threading.Lock()

    def refresh(self) -> bool:
        """Find new logs and read what every log gained; True if anything changed. A log whose size
        did not change since the last look is not opened."""
        with self._refreshing:
            paths = sorted(self.folder.glob("*.jsonl")) if self.folder.is_dir() else []
            changed = False
            for path in paths:
                watch = self.pools.get(path.stem)
                if watch is None:
                    watch = PoolWatch(path)
                    with self.lock:
                        self.pools[path.stem] = watch
                    changed = True
                try:
                    size = path.stat().st_size
                except FileNotFoundError:
                    continue
                if size == watch.tail.offset:
                    continue
                new = watch.read()  # parsed without the lock: readers wait only for the fold
                with self.lock:
                    changed = watch.apply(new) or changed
            if changed:
                with self.lock:
                    self.version += 1
            return changed

    def clients(self) -> tuple[tuple[str, str], ...]:
        """Each pool not stopped with whether its client runs ("alive", "gone", "remote"): a client
        that dies writes nothing to its log, so the refresher asks (a look at /proc per pool)."""
        with self.lock:
            running = [(w.pool_id, w.started) for w in self.pools.values()
                       if w.started is not None and w.state.status != "stopped"]
        return tuple((pool_id, client_of(started)) for pool_id, started in running)

    def get(self, pool_id: str) -> PoolWatch:
        """The pool `pool_id`; `LookupError` naming it and where it was looked for."""
        watch = self.pools.get(pool_id)
        if watch is None:
            raise LookupError(f"no pool {pool_id!r} in {self.folder} (`skyhive ls -a` lists them)")
        return watch
