"""`ResultStream`: results of several calls as they become ready (`sky.gather(..., stream=True)`).

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

import anyio
from anyio.abc import ObjectReceiveStream, TaskGroup

__all__ = ["ResultStream"]


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
