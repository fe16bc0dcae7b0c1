"""`EventStream`: what `pool.events()` returns — the pool's events as they happen, with bounded memory.

The same contract as `pool.output()` (`output/router.py: OutputStream`): the stream is registered when
it is created (not at its first iteration), so no event between the call and the first `async for`
is lost; it ends when the pool closes, after the events it holds; `aclose()`, leaving `async with`
or dropping the last reference to it releases it. Its queue is bounded: events are emitted by every
part of the pool and cannot wait for a reader, so a reader that falls more than `max_buffer` behind
(measured in characters: about 200 per event, plus the text of output events) is detached, and its
next read raises `EventsStalled` after the events it still holds — never a silent loss, never
unbounded growth.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable

from ...errors import EventsStalled
from .types import Event, OutputChunk

__all__ = ["EventStream", "EVENTS_MAX_BUFFER", "EVENT_SIZE"]

#: Characters of events one `pool.events()` reader may fall behind before it is detached.
EVENTS_MAX_BUFFER = 16 * 1024 * 1024
#: What one event counts for, besides an output event's text.
EVENT_SIZE = 200


class EventStream(AsyncIterator[Event]):
    """An async iterator of a pool's events, in order (see the module docstring)."""

    def __init__(self, max_buffer: int, release: Callable[[EventStream], None]) -> None:
        if max_buffer < 1:
            raise ValueError(f"events(max_buffer={max_buffer!r}): must be positive")
        self.max_buffer = max_buffer
        self._events: deque[Event] = deque()
        self._queued = 0
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self._error: BaseException | None = None
        self._release: Callable[[EventStream], None] | None = release
        self._thread = threading.get_ident()
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self.taken = 0

    def __repr__(self) -> str:
        state = "detached" if self._error else ("ended" if self._ended else "open")
        return f"<EventStream {state} pending={len(self._events)} queued={self._queued} taken={self.taken}>"

    @property
    def pending(self) -> int:
        """Events received and not taken yet."""
        return len(self._events)

    # ---- the log's side ----------------------------------------------------------------------------

    def put(self, event: Event) -> bool:
        """Queue `event`; False if the stream is over its bound and was detached (the log drops it)."""
        if self._ended:
            return False
        size = EVENT_SIZE + (len(event.text) if isinstance(event, OutputChunk) else 0)
        if self._queued + size > self.max_buffer and self._events:
            oldest = self._events[0].seq
            self.end(EventsStalled(
                f"pool.events() iterator fell {self._queued} characters of events behind "
                f"({len(self._events)} events waiting since seq {oldest}; max_buffer={self.max_buffer}): it was "
                f"detached so the pool's memory stays bounded, and events from seq {event.seq} on did not reach "
                "it. Read faster, pass a larger max_buffer, or read the pool's log file (pool.log_path)"))
            return False
        self._events.append(event)
        self._queued += size
        self._wake()
        return True

    def end(self, error: BaseException | None = None) -> None:
        if error is not None:
            self._error = error
        self._ended = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ---- the reader's side -------------------------------------------------------------------------

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        await asyncio.sleep(0)  # a checkpoint, even when events are waiting
        while not self._events:
            if self._error is not None:
                raise self._error
            if self._ended:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        event = self._events.popleft()
        self._queued -= EVENT_SIZE + (len(event.text) if isinstance(event, OutputChunk) else 0)
        self.taken += 1
        return event

    def take_nowait(self) -> list[Event]:
        """The events received and not taken yet, taken now, without waiting (a reader that is told
        to stop takes what had already arrived before it `aclose`s)."""
        events = list(self._events)
        self._events.clear()
        self._queued = 0
        self.taken += len(events)
        return events

    async def aclose(self) -> None:
        """Stop receiving events (what is queued is dropped)."""
        self._close()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._close()

    def _close(self) -> None:
        release, self._release = self._release, None
        self._ended = True
        self._events.clear()
        self._queued = 0
        self._wake()
        if release is not None:
            release(self)

    def __del__(self) -> None:
        if self._release is None:
            return
        try:
            if threading.get_ident() == self._thread:
                self._close()
            elif self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._close)
        except Exception:  # interpreter shutdown, a closed loop: nothing left to release
            pass
