"""Where task output goes: the event log, `pool.output()` subscribers, and the caller's terminal.

Selection (`output=` on the pool or a call) takes the same forms as the worker-side decorators:
"all", "head", a node index, a tuple of node indexes, a predicate on `InstanceInfo`, or None.
"""

from __future__ import annotations

import math
import sys

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from ..protocol.info import InstanceInfo
from ..protocol.messages import STDERR
from .eventlog import EventLog
from .selection import OutputSpec, selector
from .events import OutputChunk

if TYPE_CHECKING:
    from .channel import Call, WorkerChannel

__all__ = ["OutputRecord", "OutputSpec", "OutputRouter", "selector"]


_COLORS = ("36", "33", "35", "32", "34", "31", "96", "93", "95", "92", "94", "91")


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """Text a task wrote: which node and worker, which stream, when it arrived, which task."""

    node: int
    local_rank: int
    stream: str  # "stdout" | "stderr"
    text: str
    ts: float
    task: int


class OutputRouter:
    """Delivers every `Output` frame to the log, the subscribers and (if selected) the terminal."""

    def __init__(self, log: EventLog, default: OutputSpec, infos: dict[tuple[int, int], InstanceInfo],
                 *, multi_process: bool) -> None:
        self._log = log
        self._default = selector(default)
        self._infos = infos
        self._multi = multi_process
        self._subscribers: list[MemoryObjectSendStream[OutputRecord]] = []
        self._partial: dict[tuple[int, int, int], str] = {}
        self.records = 0

    def deliver(self, channel: WorkerChannel, call: Call | None, stream: int, text: str) -> None:
        node, rank = channel.node, channel.local_rank
        name = "stderr" if stream == STDERR else "stdout"
        task = call.task_id if call is not None else 0
        event = self._log.emit(OutputChunk, task=task, node=node, local_rank=rank, stream=name, text=text)
        text = event.text  # redacted
        self.records += 1
        if self._subscribers:
            record = OutputRecord(node, rank, name, text, event.ts, task)
            for sub in self._subscribers:
                try:
                    sub.send_nowait(record)
                except anyio.BrokenResourceError:
                    pass
        if call is not None and call.outputs is not None:
            call.outputs.append((stream, text))
        show = call.options.get("show") if call is not None and call.options else None
        info = self._infos.get((node, rank))
        if info is not None and (show(info) if show is not None else self._default(info)):
            self._print(node, rank, stream, text)

    def _print(self, node: int, rank: int, stream: int, text: str) -> None:
        key = (node, rank, stream)
        text = self._partial.pop(key, "") + text
        complete, sep, rest = text.rpartition("\n")
        if rest:
            self._partial[key] = rest
        if sep:
            self._write(node, rank, stream, complete + "\n")

    def flush(self, node: int, rank: int) -> None:
        """Print what is left of a partial line (at the end of a task)."""
        for stream in (1, 2):
            rest = self._partial.pop((node, rank, stream), "")
            if rest:
                self._write(node, rank, stream, rest + "\n")

    def _write(self, node: int, rank: int, stream: int, text: str) -> None:
        out: TextIO = sys.stderr if stream == STDERR else sys.stdout
        label = f"node {node}.{rank}" if self._multi else f"node {node}"
        if getattr(out, "isatty", lambda: False)():
            prefix = f"\x1b[{_COLORS[node % len(_COLORS)]}m[{label}]\x1b[0m "
        else:
            prefix = f"[{label}] "
        lines = text.splitlines(keepends=True)
        out.write("".join(prefix + line for line in lines))
        out.flush()

    async def subscribe(self) -> AsyncIterator[OutputRecord]:
        send, receive = anyio.create_memory_object_stream[OutputRecord](math.inf)
        self._subscribers.append(send)
        try:
            async with receive:
                async for record in receive:
                    yield record
        finally:
            if send in self._subscribers:
                self._subscribers.remove(send)
            send.close()

    def close(self) -> None:
        for sub in self._subscribers:
            sub.close()
        self._subscribers.clear()


