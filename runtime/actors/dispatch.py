"""Sending calls to workers and gathering their results: the `CallDispatch` half of the pool actor
(`PoolRuntime` in pool_actor.py, which owns the nodes, the log and the scheduling and inherits this).

A call runs in the caller's own task: `send` registers it on a worker's channel, `run_one` and
`run_prepared` wait for the results (a broadcast's first failure is raised at once and cancels the
others; workers lost together are named together, see gather.py), `_unpack` turns a `Result` into the
value or the task's exception. Timeout or cancellation cancels the tasks on their workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import pickle
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ...errors import TaskTimeout, WorkerLost
from ...protocol.messages import Result
from ..common.remote_errors import rebuild_exception
from ..common.serialize import load_value
from .call import Call
from .channel import WorkerChannel
from .gather import gather_or_first_failure, lost_together
from .prepared import Prepared

if TYPE_CHECKING:
    import itertools

    from ...plugins.image import Image
    from ..events.log import EventLog
    from ..output.router import OutputRouter
    from ..common.settings import Settings

__all__ = ["CallDispatch", "collect_task_ids"]

_loads = pickle.loads  # (load_value, for the usual result: pickled in band)

#: where `run_prepared` notes the task ids it sends, inside `collect_task_ids` (None: nowhere)
_TASK_IDS: contextvars.ContextVar[set[int] | None] = contextvars.ContextVar("skyhive_task_ids", default=None)


@contextlib.contextmanager
def collect_task_ids(ids: set[int]) -> Iterator[set[int]]:
    """Note in `ids` the task id of every call sent by `call_on`/`run_prepared` from this context (and
    the tasks it starts), so that their output (`OutputRecord.task`) can be told apart from other
    calls' — a named pool's jobs side by side, each with its own log."""
    token = _TASK_IDS.set(ids)
    try:
        yield ids
    finally:
        _TASK_IDS.reset(token)


class CallDispatch:
    """What `PoolRuntime` does with a call once it has its worker(s). Uses the runtime's `pool_id`,
    `log`, `router`, `settings`, `image`, `loop` and task ids (`_ids`)."""

    if TYPE_CHECKING:
        pool_id: str
        log: EventLog
        router: OutputRouter
        settings: Settings
        image: Image | None
        loop: asyncio.AbstractEventLoop
        _ids: itertools.count[int]


    def send(self, channel: WorkerChannel, prep: Prepared, options: dict[str, Any] | None,
             future: asyncio.Future[Result], *, stream: bool = False) -> Call:
        """Send one task to `channel` (its buffers, if any, still have to follow)."""
        return channel.send(next(self._ids), prep, options, future, stream=stream)

    async def open_stream(self, channel: WorkerChannel, prep: Prepared,
                          on_item: Callable[[int, bytes], None]) -> tuple[Call, asyncio.Future[Result]]:
        """Send a task whose generator's items come back as they are yielded (to `on_item`, on the
        event loop); the future gets its `Result` after the last item."""
        fut: asyncio.Future[Result] = self.loop.create_future()
        call = self.send(channel, prep, None, fut, stream=True)
        call.on_item = on_item
        try:
            if prep.buffers:
                await self._send_buffers([(channel, call.task_id)], prep.buffers)
        except BaseException:
            self._cancel([(channel, call, fut)])
            raise
        return call, fut

    def finish_stream(self, channel: WorkerChannel, call: Call, fut: asyncio.Future[Result]) -> Any:
        """After a streamed task's `Result`: the item count, or its error raised."""
        self.router.flush(channel.node, channel.local_rank)
        return self._unpack(channel, call, fut.result())

    def cancel_stream(self, channel: WorkerChannel, call: Call, fut: asyncio.Future[Result]) -> None:
        self._cancel([(channel, call, fut)])

    async def call_on(self, channel: WorkerChannel, fn: Callable[..., Any], args: tuple[Any, ...],
                      kwargs: dict[str, Any], *, kind: str = "call", fn_name: str | None = None,
                      timeout: float | None = None, options: dict[str, Any] | None = None) -> Any:
        prep = Prepared(fn, args, kwargs, kind=kind, fn_name=fn_name)
        return await self.run_prepared([channel], prep, timeout=timeout, options=options, single=True)

    async def run_one(self, channel: WorkerChannel, prep: Prepared, *, timeout: float | None,
                      options: dict[str, Any] | None) -> Any:
        """One task on one worker: `run_prepared` without its generality when there is no timeout
        and no out-of-band buffer to send (the common warm call; a `map` batch of a large function
        the worker holds)."""
        if timeout is not None or (prep.buffers and channel.carries_buffers(prep)):
            return await self.run_prepared([channel], prep, timeout=timeout, options=options, single=True)
        fut: asyncio.Future[Result] = self.loop.create_future()
        call = channel.send(next(self._ids), prep, options, fut)  # (`send`, one frame fewer)
        try:
            result = await fut
        except BaseException:
            self._cancel([(channel, call, fut)])
            raise
        self.router.flush(channel.node, channel.local_rank)
        return self._unpack(channel, call, result)

    async def run_prepared(self, channels: Sequence[WorkerChannel], prep: Prepared, *, timeout: float | None,
                           options: dict[str, Any] | None, single: bool = False) -> Any:
        """Send `prep` to every channel, wait for all results (in order), and unpack them.

        The first failure cancels the other tasks and is raised, naming the nodes that failed with it
        (its notes, `.nodes`, `.node_errors`). Timeout or cancellation cancels them all on their workers.
        """
        loop = asyncio.get_running_loop()
        sent: list[tuple[WorkerChannel, Call, asyncio.Future[Result]]] = []
        try:
            ids = self._ids
            noted = _TASK_IDS.get()
            for channel in channels:
                fut: asyncio.Future[Result] = loop.create_future()
                sent.append((channel, channel.send(next(ids), prep, options, fut), fut))  # (`send`, inline)
                if noted is not None:
                    noted.add(sent[-1][1].task_id)
            with anyio.fail_after(timeout) if timeout is not None else contextlib.nullcontext():
                if prep.buffers:
                    await self._send_buffers([(c, call.task_id) for c, call, _ in sent], prep.buffers)
                if len(sent) > 1:
                    failed = await gather_or_first_failure([fut for _, _, fut in sent])
                    if failed:
                        self._raise_first_failure(sent, failed, prep.fn_name)
                values = []
                for channel, call, fut in sent:
                    result = await fut
                    self.router.flush(channel.node, channel.local_rank)
                    values.append(self._unpack(channel, call, result))
        except TimeoutError:
            self._cancel(sent)
            raise TaskTimeout(
                f"{prep.fn_name} did not finish within timeout={timeout} s "
                f"on {', '.join(f'node {c.node}' for c, _, _ in sent)}; it was cancelled"
            ) from None
        except BaseException:
            self._cancel(sent)
            raise
        finally:
            if prep.has_shared:
                # the memfds passed to the workers: reusable once every worker answered (each took its
                # lock on them before that); a call cut short closes them (see shm.MemfdPool)
                answered = len(sent) == len(channels) and all(
                    f.done() and not f.cancelled() and f.exception() is None for _, _, f in sent)
                prep.release_shared(reusable=answered)
        return values[0] if single else values

    def _raise_first_failure(self, sent: list[tuple[WorkerChannel, Call, asyncio.Future[Result]]],
                             failed: list[int], fn_name: str) -> None:
        """Raise the failure of `sent[failed[0]]` — whichever node it was on, so that a failure on
        node 3 is raised at once even while node 0 still runs (a collective on node 0 waiting for
        the failed rank would otherwise hold the caller until it times out). Workers lost with it
        are named together in one `WorkerLost` (`actors/gather.py`)."""
        channel, call, fut = sent[failed[0]]
        error = None if fut.cancelled() else fut.exception()
        if isinstance(error, WorkerLost):
            lost = [e for e in (sent[i][2].exception() for i in failed if not sent[i][2].cancelled())
                    if isinstance(e, WorkerLost)]
            raise lost_together(self.pool_id, fn_name, lost)
        result = fut.result()  # a cancelled future raises CancelledError here, as awaiting it would
        first = self._error_of(channel, call, result)
        others = sorted(((sent[i][0].node, e) for i in failed[1:] if not sent[i][2].cancelled()
                         for e in [self._failure(sent[i])] if e is not None), key=lambda ne: ne[0])
        if others:  # the others that failed with it: named on the first error, whose type is kept
            also = "; ".join(f"node {node}: {type(e).__name__}: {e}" for node, e in others)
            first.add_note(f"(also failed on node{'s' if len(others) > 1 else ''} "
                           f"{', '.join(str(n) for n, _ in others)}: {also})")
            if "nodes" not in vars(first):
                first.nodes = tuple(sorted({channel.node, *(n for n, _ in others)}))  # type: ignore[attr-defined]
            if "node_errors" not in vars(first):
                first.node_errors = dict(others)  # type: ignore[attr-defined]
        raise first

    def _failure(self, entry: tuple[WorkerChannel, Call, asyncio.Future[Result]]) -> BaseException | None:
        """The error of a task that failed alongside a broadcast's first failure."""
        channel, call, fut = entry
        error = fut.exception()
        return error if error is not None else self._error_of(channel, call, fut.result())

    def _error_of(self, channel: WorkerChannel, call: Call, result: Result) -> BaseException:
        """The exception a failed `Result` raises (its output flushed first)."""
        self.router.flush(channel.node, channel.local_rank)
        try:
            self._unpack(channel, call, result)
        except BaseException as exc:  # the task's own error, whatever its type
            return exc
        raise AssertionError(f"task {call.task_id} on node {channel.node} was counted failed but succeeded")

    async def _send_buffers(self, targets: list[tuple[WorkerChannel, int]], buffers: list[Any]) -> None:
        if len(targets) == 1:
            channel, task_id = targets[0]
            await channel.send_buffers(task_id, buffers)
            return
        async with anyio.create_task_group() as tg:  # every worker's pipe busy at once
            for channel, task_id in targets:
                tg.start_soon(channel.send_buffers, task_id, buffers)

    def _cancel(self, sent: list[tuple[WorkerChannel, Call, asyncio.Future[Result]]]) -> None:
        for channel, call, fut in sent:
            channel.cancel(call.task_id, grace=self.settings.cancel_grace)
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # retrieved: no "exception was never retrieved" noise

    def _unpack(self, channel: WorkerChannel, call: Call, result: Result) -> Any:
        if result.ok:
            value = _loads(result.value) if result.value and not result.buffers else load_value(result.value, result.buffers)
            if call.outputs is not None:
                from ..output.captured import Captured

                return Captured.from_outputs(value, call.outputs, node=channel.node, local_rank=channel.local_rank)
            return value
        data, message, tb = result.value, result.error_message, result.traceback
        if self.image is not None and self.image.secret_values():
            # a secret value in the exception (message, traceback, any pickled attribute): keep only
            # the redacted text (a RemoteError), so no exception the caller sees can hold it
            redact = self.log.redact
            pickled = data.decode("utf-8", "surrogateescape")
            if redact(message) != message or redact(tb) != tb or redact(pickled) != pickled:
                data, message, tb = b"", redact(message), redact(tb)
                exc = rebuild_exception(data, result.error_type, message, tb, channel.node)
                exc.add_note("(it held a secret value of the pool's image: redacted, and kept as text only)")
                raise exc
        raise rebuild_exception(data, result.error_type, message, tb, channel.node)
