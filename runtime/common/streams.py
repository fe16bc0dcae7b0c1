"""Streams of results: `ResultStream`, the results of several calls as they become ready
(`sky.gather(..., stream=True)`), and `ItemStream`, the items one generator task yields, as it yields
them (`pool.stream(fn, ...)`, `gen(x) >> pool`).

ResultStream:

The calls run in one producer task in the pool's task group (started by the first `__anext__`),
which hands `(index, outcome)` pairs to the iterator through a memory stream; so `__anext__` only
receives, and may be called from any task (the blocking pool calls it through its portal, one task
per call). In order (`ordered=True`) a result waits for the ones before it; otherwise it comes as
it completes. The first error is raised at its turn and cancels the calls still running; `aclose()`
(leaving an `async for` early) cancels them too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncio

import anyio
from anyio.abc import ObjectReceiveStream, TaskGroup

from ...errors import TaskTimeout

__all__ = ["ResultStream", "ItemStream"]


class ResultStream:
    """Async iterator over the results of `calls` (zero-argument coroutine functions)."""

    def __init__(self, calls: Sequence[Callable[[], Awaitable[Any]]], *, ordered: bool, tg: TaskGroup) -> None:
        self._calls = list(calls)
        self._ordered = ordered
        self._tg = tg
        self._scope: anyio.CancelScope | None = None
        self._receive: ObjectReceiveStream[tuple[int, bool, Any]] | None = None
        self._held: dict[int, tuple[bool, Any]] = {}
        self._next = 0  # ordered: the index whose result goes out next
        self._given = 0
        self._closed = False

    def __repr__(self) -> str:
        return f"<ResultStream {self._given}/{len(self._calls)} given ordered={self._ordered}>"

    def __aiter__(self) -> ResultStream:
        return self

    async def __anext__(self) -> Any:
        if self._closed or self._given >= len(self._calls):
            raise StopAsyncIteration
        if self._receive is None:
            self._start()
        assert self._receive is not None
        while True:
            if self._ordered and self._next in self._held:
                ok, value = self._held.pop(self._next)
                self._next += 1
                return self._give(ok, value)
            try:
                index, ok, value = await self._receive.receive()
            except anyio.EndOfStream:
                raise StopAsyncIteration from None
            if not self._ordered:
                return self._give(ok, value)
            self._held[index] = (ok, value)

    def _give(self, ok: bool, value: Any) -> Any:
        self._given += 1
        if not ok:
            self._cancel()
            raise value
        return value

    def _start(self) -> None:
        send, self._receive = anyio.create_memory_object_stream[tuple[int, bool, Any]](len(self._calls))
        scope = self._scope = anyio.CancelScope()

        async def produce() -> None:
            async with send:
                with scope:
                    async with anyio.create_task_group() as tg:
                        for i, call in enumerate(self._calls):
                            tg.start_soon(one, i, call)

        async def one(i: int, call: Callable[[], Awaitable[Any]]) -> None:
            try:
                value = await call()
            except Exception as exc:  # noqa: BLE001 - handed to the iterator, raised at its turn
                send.send_nowait((i, False, exc))
            else:
                send.send_nowait((i, True, value))

        self._tg.start_soon(produce)

    def _cancel(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def aclose(self) -> None:
        """Stop: the calls still running are cancelled."""
        self._closed = True
        self._cancel()
        if self._receive is not None:
            await self._receive.aclose()


class ItemStream:
    """Async iterator over the items a generator task yields on its node, in order, as they come.

    Opened on the first `__anext__` (so `pool.stream(...)` itself does not block). Items are
    buffered here as they arrive (no backpressure: a producer faster than the consumer fills
    memory). The task's error, if it raised, is raised after the items it yielded before it;
    `aclose()` (leaving an `async for` early) cancels the task on its node. With `timeout`, the
    whole stream must end within that many seconds of its start, or `TaskTimeout` is raised (after
    the items that came in time) and the task is cancelled.
    """

    def __init__(self, open_: Callable[[Callable[[int, bytes], None]], Awaitable[tuple[Any, Any, Any]]],
                 rt: Any, load: Callable[[bytes], Any], *, timeout: float | None = None, name: str = "") -> None:
        self._open = open_
        self._rt = rt
        self._load = load
        self._timeout = timeout
        self._deadline: float | None = None
        self._name = name
        self._queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self._task: tuple[Any, Any, Any] | None = None  # (channel, call, future)
        self._done = False
        self.count = 0

    def __repr__(self) -> str:
        return f"<ItemStream {self.count} items given done={self._done}>"

    def __aiter__(self) -> ItemStream:
        return self

    async def __anext__(self) -> Any:
        if self._done:
            raise StopAsyncIteration
        if self._task is None:
            if self._timeout is not None:
                self._deadline = anyio.current_time() + self._timeout
            self._task = await self._open(lambda index, value: self._queue.put_nowait((index, value)))
            self._task[2].add_done_callback(lambda _: self._queue.put_nowait(None))
        try:
            with anyio.fail_after(None if self._deadline is None else self._deadline - anyio.current_time()):
                got = await self._queue.get()
        except TimeoutError:
            await self.aclose()
            raise TaskTimeout(f"{self._name} did not finish within timeout={self._timeout} s after "
                              f"{self.count} item(s); it was cancelled") from None
        if got is None:
            self._done = True
            channel, call, fut = self._task
            self._rt.finish_stream(channel, call, fut)  # raises the task's error, if any
            raise StopAsyncIteration
        self.count += 1
        return self._load(got[1])

    async def aclose(self) -> None:
        """Stop early: the task is cancelled on its node."""
        if not self._done and self._task is not None:
            channel, call, fut = self._task
            if not fut.done():
                self._rt.cancel_stream(channel, call, fut)
        self._done = True
