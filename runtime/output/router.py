"""Where task output goes: the event log, `pool.output()` subscribers, and the caller's terminal.

Every `Output` frame becomes one `OutputChunk` event (until the pool's `log_output_limit`: see
`EventLog.log_output`), one `OutputRecord` for each
`pool.output()` subscriber, and — if the node is selected by the call's or the pool's `output=` —
lines printed with a `[node N]` prefix. Selection (`output=`) takes the same forms as the
worker-side decorators: "all", "head", a node index, a tuple of node indexes, a predicate on
`InstanceInfo`, or None.

Backpressure. Each subscriber has a queue measured in characters. When one holds more than its high
water mark, the router pauses reading from every worker link that delivers output (the worker then
blocks on its pipe writes, and so does the task that prints); when every subscriber is back under
its low water mark, reading resumes. Nothing is dropped. While reading is paused, the silence is
ours, so the paused workers' heartbeat clocks are kept fresh. A subscriber that takes nothing for
`stall_timeout` seconds while over its mark is detached, and its next read raises `OutputStalled`
(so a forgotten iterator cannot stall the pool forever, and the loss is never silent). Pools with
no subscriber never pause.

Secrets. In a pool whose image has secrets, a secret split across `Output` frames (a partial write
and a flush, one character per write, a write longer than one frame's piece) is redacted too: the
end of each piece that could begin a secret is held back until the stream's next piece or the end of
the task (`output/redact.py`), so the log, the subscribers, `capture=True` and the terminal only
ever see text in which every secret is whole, and redacted.

A subscriber's side — its records, its queue and the `OutputStream` it iterates — is `stream.py`.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any, Protocol

from ...errors import OutputStalled
from ...protocol.info import InstanceInfo
from ...protocol.messages import STDERR
from ..events.log import EventLog
from .printer import PARTIAL_DELAY, TerminalPrinter
from .redact import NOTHING_HELD, StreamRedactor
from .stream import OutputRecord, OutputStream, _Queue
from ..common.selection import OutputSpec, selector



class Pausable(Protocol):
    """A worker's link, as the router sees it: reading from it can be paused and resumed."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class OutputSource(Protocol):
    """The worker an `Output` frame came from, as the router sees it (the client's worker channel,
    `actors/channel.py`, which sits above this layer): where it runs, its link, and its heartbeat clock,
    which the router keeps fresh while the silence is its own."""

    last_seen: float

    @property
    def node(self) -> int: ...

    @property
    def local_rank(self) -> int: ...

    @property
    def link(self) -> Pausable | None: ...


class OutputCall(Protocol):
    """The call an `Output` frame belongs to, as the router sees it (`actors/call.py`): its task id, its
    options (`show`), and where `capture=True` collects its text (None: not captured)."""

    @property
    def task_id(self) -> int: ...

    @property
    def options(self) -> Any: ...

    @property
    def outputs(self) -> list[tuple[int, str]] | None: ...

__all__ = [
    "OutputRecord",
    "OutputSpec",
    "OutputRouter",
    "OutputStream",
    "OutputStalled",
    "TerminalPrinter",
    "selector",
    "HIGH_WATER",
    "LOW_WATER",
    "STALL_TIMEOUT",
    "PARTIAL_DELAY",
]

log = logging.getLogger("skyhive.output")

#: Characters queued for one subscriber above which the workers are paused.
HIGH_WATER = 4 * 1024 * 1024
#: ... and below which (for every subscriber) they resume.
LOW_WATER = 1024 * 1024
#: A subscriber over its high water mark that takes nothing for this long is detached.
STALL_TIMEOUT = 60.0
_TICK = 0.25

_NAMES = {STDERR: "stderr"}


class OutputRouter:
    """Delivers every `Output` frame to the log, the subscribers and (if selected) the terminal.

    Used from the pool's event loop only; `deliver` never raises (it runs inside a transport callback).
    """

    def __init__(self, log: EventLog, default: OutputSpec, infos: dict[tuple[int, int], InstanceInfo],
                 *, multi_process: bool, printer: TerminalPrinter | None = None) -> None:
        self._log = log
        self._default = selector(default)
        self._default_cache: dict[tuple[int, int], bool] = {}
        self._infos = infos
        self._printer = printer if printer is not None else TerminalPrinter(multi_process=multi_process)
        # with secrets, a secret split across Output frames must not pass: see output/redact.py
        self._redactor = StreamRedactor(log.secrets) if log.secrets else None
        self._subscribers: list[_Queue] = []
        self._paused: dict[OutputSource, None] = {}  # channels whose reading we paused, in order
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._draining = False  # the pool is closing: no more pausing
        self.records = 0
        self.pauses = 0
        self.detached = 0

    def __repr__(self) -> str:
        return (f"<OutputRouter records={self.records} subscribers={len(self._subscribers)} "
                f"paused={len(self._paused)}>")

    def statistics(self) -> dict[str, Any]:
        """Records delivered, subscribers and their queues, and how often backpressure engaged."""
        return {
            "records": self.records,
            "subscribers": len(self._subscribers),
            "queued": [s.queued for s in self._subscribers],
            "paused_links": len(self._paused),
            "pauses": self.pauses,
            "detached": self.detached,
        }

    # ---- delivering --------------------------------------------------------------------------------

    def deliver(self, channel: OutputSource, call: OutputCall | None, stream: int, text: str) -> None:
        redactor = self._redactor
        if redactor is not None:
            key = (channel.node, channel.local_rank, stream)
            owner = redactor.owner(key)
            if owner is not NOTHING_HELD and owner is not call:  # the previous task's held tail goes first
                self._release(key)
            text = redactor.feed(key, call, text)
            if not text:
                return
        self._deliver(channel, channel.node, channel.local_rank, call, stream, text)

    def _release(self, key: tuple[int, int, int]) -> None:
        assert self._redactor is not None
        held = self._redactor.release(key)
        if held is not None:
            call, text = held
            self._deliver(None, key[0], key[1], call, key[2], text)  # type: ignore[arg-type]

    def _deliver(self, channel: OutputSource | None, node: int, rank: int, call: OutputCall | None, stream: int,
                 text: str) -> None:
        name = _NAMES.get(stream, "stdout")
        task = call.task_id if call is not None else 0
        # (with secrets, `text` was redacted by the StreamRedactor; the log redacts what it logs again)
        self._log.log_output(task=task, node=node, local_rank=rank, stream=name, text=text)
        self.records += 1
        if self._subscribers:
            record = OutputRecord(node, rank, name, text, time.time(), task)
            over = False
            for sub in self._subscribers:
                over = sub.put(record) or over
            if (over or self._paused) and not self._draining and channel is not None:
                self._pause(channel)
        if call is not None and call.outputs is not None:
            call.outputs.append((stream, text))
        if self._shown(call, node, rank):
            try:
                self._printer.feed(node, rank, stream, text, time.monotonic())
            except Exception as exc:  # e.g. the caller's stdout was closed: report once, go on
                self._printer_failed(exc)
            if self._printer.pending:
                self._schedule()

    def _shown(self, call: OutputCall | None, node: int, rank: int) -> bool:
        show = call.options.get("show") if call is not None and call.options else None
        if show is None:
            key = (node, rank)
            shown = self._default_cache.get(key)
            if shown is None:
                info = self._infos.get(key)
                shown = self._default_cache[key] = info is not None and _select(self._default, info)
            return shown
        info = self._infos.get((node, rank))
        return info is not None and _select(show, info)

    def _printer_failed(self, exc: Exception) -> None:
        log.error("printing task output failed (%s: %s); output is no longer printed here, "
                  "pool.output() and the event log still receive it", type(exc).__name__, exc)
        self._printer = TerminalPrinter(multi_process=False, enabled=False)

    def flush(self, node: int, rank: int) -> None:
        """The end of a task: pass on what was held back for secrets, print what is left of a partial line."""
        if self._redactor is not None:
            for key in self._redactor.keys():
                if key[0] == node and key[1] == rank:
                    self._release(key)
        try:
            self._printer.end(node, rank)
        except Exception as exc:
            self._printer_failed(exc)

    # ---- subscribers and backpressure --------------------------------------------------------------

    def subscribe(self, *, max_buffer: int = HIGH_WATER, stall_timeout: float = STALL_TIMEOUT) -> OutputStream:
        """A new `OutputStream` receiving every record from now on (see `Pool.output`)."""
        if max_buffer < 1 or stall_timeout <= 0:
            raise ValueError(f"output(max_buffer={max_buffer!r}, stall_timeout={stall_timeout!r}): "
                             "both must be positive")
        queue = _Queue(high=max_buffer, low=max(1, max_buffer // 4), stall_timeout=stall_timeout)
        if self._closed:
            queue.end()
        else:
            self._subscribers.append(queue)
        return OutputStream(self, queue)

    def _pause(self, channel: OutputSource) -> None:
        if channel in self._paused or channel.link is None:
            return
        if not self._paused:
            self.pauses += 1
        self._paused[channel] = None
        try:
            channel.link.pause_reading()
        except Exception as exc:  # a closing link: nothing more will come from it anyway
            log.debug("pausing node %d worker %d: %s", channel.node, channel.local_rank, exc)
        self._schedule()

    def _maybe_resume(self) -> None:
        if not self._paused or any(s.queued > s.low for s in self._subscribers):
            return
        paused, self._paused = self._paused, {}
        now = time.monotonic()
        for channel in paused:
            channel.last_seen = now  # the silence was ours, not the worker's
            if channel.link is not None:
                try:
                    channel.link.resume_reading()
                except Exception as exc:
                    log.debug("resuming node %d worker %d: %s", channel.node, channel.local_rank, exc)

    def _remove(self, sub: _Queue) -> None:
        if sub in self._subscribers:
            self._subscribers.remove(sub)
        self._maybe_resume()

    def _schedule(self) -> None:
        if self._timer is not None or self._closed:
            return
        if self._loop is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:  # driven by hand (tests): they call _tick themselves
                return
        self._timer = self._loop.call_later(_TICK, self._tick)

    def _tick(self) -> None:
        """Show partial lines that waited long enough; while paused, keep heartbeats fresh and
        detach subscribers that stopped taking records."""
        self._timer = None
        now = time.monotonic()
        if self._paused:
            if any(channel.shutting_down for channel in self._paused):
                self._closing()
            for channel in self._paused:
                channel.last_seen = now
            for sub in list(self._subscribers):
                if sub.queued > sub.high and now - sub.last_take > sub.stall_timeout:
                    self._detach(sub, now)
            self._maybe_resume()
        try:
            self._printer.tick(now)
        except Exception as exc:
            self._printer_failed(exc)
        if self._paused or self._printer.pending:
            self._schedule()

    def _closing(self) -> None:
        """The pool is closing: stop holding the workers back, so their tasks can finish and the
        workers can exit; subscribers still get everything (their queues may grow past the mark)."""
        self._draining = True
        for sub in self._subscribers:
            sub.low = sys.maxsize
        self._maybe_resume()

    def _detach(self, sub: _Queue, now: float) -> None:
        self.detached += 1
        idle = now - sub.last_take
        message = (f"pool.output() iterator took no record for {idle:.0f} s while {sub.queued} characters "
                   f"of output waited (stall_timeout={sub.stall_timeout:g} s); it was detached so the "
                   "workers could go on, and output after this point did not reach it")
        log.warning("%s", message)
        sub.end(OutputStalled(message))
        self._remove(sub)

    def close(self) -> None:
        """The pool closed: print what is left, end every subscriber (after what it holds), resume links."""
        if self._redactor is not None:
            for key in self._redactor.keys():
                self._release(key)
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for sub in self._subscribers:
            sub.end()
        self._subscribers.clear()
        self._maybe_resume()
        try:
            self._printer.end_all()
        except Exception as exc:
            self._printer_failed(exc)


_reported: set[int] = set()


def _select(predicate: Any, info: InstanceInfo) -> bool:
    try:
        return bool(predicate(info))
    except Exception as exc:  # a user predicate must not break the connection: print, and say why
        if id(predicate) not in _reported:
            _reported.add(id(predicate))
            log.error("output= predicate %r raised %s: %s (on node %d); the output it should select "
                      "is printed", predicate, type(exc).__name__, exc, info.node)
        return True
