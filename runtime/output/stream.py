"""A `pool.output()` subscriber's side of the output router (`router.py`): the records (`OutputRecord`), the
queue the router fills for each subscriber (`_Queue`, measured in characters against its high and low water
marks) and the async iterator the subscriber holds (`OutputStream`), whose takes let the router resume the
workers it paused and whose closing (or dropping) releases the queue."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

__all__ = ["OutputRecord", "OutputStream"]


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """Text a task wrote: which node and worker, which stream, when it arrived, which task.

    `text` is a piece of the stream, not a line: it may hold many lines, or end mid-line (the next
    record of the same node, worker and stream continues it). `ts` is the arrival time (`time.time()`).
    """

    node: int
    local_rank: int
    stream: str  # "stdout" | "stderr"
    text: str
    ts: float
    task: int


class _Owner(Protocol):
    """The router as a stream sees it: whether it paused the workers, resuming them, forgetting a queue."""

    _paused: bool

    def _maybe_resume(self) -> None: ...

    def _remove(self, sub: _Queue) -> None: ...


class _Queue:
    """One subscriber's queue, held by the router (the consumer holds the `OutputStream` around it,
    so dropping the stream can release the queue)."""

    __slots__ = ("records", "queued", "max_queued", "taken", "high", "low", "stall_timeout", "last_take",
                 "waiter", "ended", "error")

    def __init__(self, high: int, low: int, stall_timeout: float) -> None:
        self.records: deque[OutputRecord] = deque()
        self.queued = 0  # characters
        self.max_queued = 0
        self.taken = 0
        self.high = high
        self.low = low
        self.stall_timeout = stall_timeout
        self.last_take = time.monotonic()
        self.waiter: asyncio.Future[None] | None = None
        self.ended = False
        self.error: BaseException | None = None

    def put(self, record: OutputRecord) -> bool:
        """Queue `record`; True if this queue is over its high water mark."""
        if self.ended:
            return False
        if not self.records:
            self.last_take = time.monotonic()  # idle time counts from when there is something to take
        self.records.append(record)
        self.queued += len(record.text)
        if self.queued > self.max_queued:
            self.max_queued = self.queued
        self.wake()
        return self.queued > self.high

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def end(self, error: BaseException | None = None) -> None:
        if error is not None:
            self.error = error
        self.ended = True
        self.wake()


class OutputStream(AsyncIterator[OutputRecord]):
    """What `pool.output()` returns: an async iterator of `OutputRecord`s, in arrival order.

    It receives every record from the moment it was made until the pool closes (then it ends, after
    the records it still holds), or until it is closed: `aclose()`, leaving `async with`, or
    dropping the last reference to it (e.g. `break` out of `async for rec in pool.output()`). A
    consumer slower than the workers slows them down (see this module's docstring). `__anext__`
    raises `OutputStalled`, after the records it still holds, if the stream was detached for taking
    nothing during `stall_timeout` seconds.
    """

    def __init__(self, router: _Owner, queue: _Queue) -> None:
        self._router: _Owner | None = router
        self._q = queue
        self._loop_thread = threading.get_ident()
        self._loop = _running_loop()

    def __repr__(self) -> str:
        q = self._q
        state = "detached" if q.error else ("ended" if q.ended else "open")
        return f"<OutputStream {state} pending={len(q.records)} queued={q.queued} taken={q.taken}>"

    @property
    def pending(self) -> int:
        """Records received and not taken yet."""
        return len(self._q.records)

    @property
    def queued(self) -> int:
        """Characters received and not taken yet."""
        return self._q.queued

    @property
    def max_queued(self) -> int:
        """The most characters this stream ever held (bounded by its high water mark, plus what was
        already read from the pipes when the workers were paused)."""
        return self._q.max_queued

    def __aiter__(self) -> OutputStream:
        return self

    async def __anext__(self) -> OutputRecord:
        await asyncio.sleep(0)  # a checkpoint, even when records are waiting
        q = self._q
        while not q.records:
            if q.error is not None:
                raise q.error
            if q.ended:
                raise StopAsyncIteration
            q.waiter = asyncio.get_running_loop().create_future()
            try:
                await q.waiter
            finally:
                q.waiter = None
        record = q.records.popleft()
        q.queued -= len(record.text)
        q.taken += 1
        q.last_take = time.monotonic()
        router = self._router
        if router is not None and router._paused and q.queued <= q.low:
            router._maybe_resume()
        return record

    async def aclose(self) -> None:
        """Stop receiving records (what is queued is dropped: this consumer wants no more)."""
        self._close()

    async def __aenter__(self) -> OutputStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._close()

    def _close(self) -> None:
        router, self._router = self._router, None
        q = self._q
        q.end()
        q.records.clear()
        q.queued = 0
        if router is not None:
            router._remove(q)

    def __del__(self) -> None:
        if self._router is None:
            return
        try:
            if threading.get_ident() == self._loop_thread:
                self._close()
            elif self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._close)
        except Exception:  # interpreter shutdown, a closed loop: nothing left to release
            pass


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
