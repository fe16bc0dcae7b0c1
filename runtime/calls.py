"""The call API of a `Pool` — `run`, `stream`, `broadcast`, `submit`, `map`, `gather` — as the
`PoolCalls` base class, kept apart from the pool's construction and lifetime (`pool.py`).

Each call prepares its function and arguments once (`actors/prepared.py`), hands them to the pool
runtime (`actors/pool_actor.py`: which workers; `actors/dispatch.py`: sending, gathering the results) and applies the call's
options: `timeout`, `output`, `capture`, `retries`/`retry_on` (`retry.py`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from ..errors import TaskTimeout
from .call_options import OPTION_NAMES, UNSET, CallOptions, PoolWithOptions, call_options, split_options
from .common.selection import OutputSpec, selector
from .common.retry import NO_RETRIES, Retries, retries_of, with_retries

# asyncio, anyio, the call's pickling (cloudpickle) and the protocol (msgpack) are imported by the methods that
# use them, not with `sky.Pool`: a plain Local pool spawns its workers before it imports them, so a script's
# client imports them while its workers start (docs/startup.md)
if TYPE_CHECKING:
    import concurrent.futures

    from .actors.prepared import Prepared
    from .common.streams import ItemStream, ResultStream
    from .actors.channel import WorkerChannel
    from .actors.pool_actor import PoolRuntime
    from .compute import PendingCall

__all__ = ["PoolCalls"]

T = TypeVar("T")
P = ParamSpec("P")
#: what `retry_on=` takes
RetryOn = type[Exception] | tuple[type[Exception], ...]
#: "not given" for a call's `output=` (None is a value: print nothing)
_UNSET: Any = UNSET

NO_OPTIONS = CallOptions()


def _unwrap(fn: Any) -> Callable[..., Any]:
    inner = getattr(fn, "__skyhive_fn__", None)
    fn = inner if inner is not None else fn
    if not callable(fn):
        raise TypeError(f"expected a function, got {type(fn).__name__}")
    return fn


class PoolCalls:
    """The calls of a `Pool` (see `pool.Pool`): needs the open pool's runtime (`_runtime`, raising
    `PoolClosed` when the pool is not open) and a retry counter (`_retries`)."""

    _retries: int

    if TYPE_CHECKING:
        @property
        def _runtime(self) -> PoolRuntime: ...


    @staticmethod
    def _options(output: Any, capture: bool) -> dict[str, Any] | None:
        if output is _UNSET and not capture:
            return None
        options: dict[str, Any] = {}
        if output is not _UNSET:
            options["show"] = selector(output, where="output")
        if capture:
            options["capture"] = True
        return options

    def options(self, *, timeout: float | None = None, output: OutputSpec = _UNSET, capture: bool = False,
                retries: int = 0, retry_on: RetryOn = ()) -> PoolWithOptions:
        """This pool with call options, for typed code: `await pool.options(timeout=5).run(fn, x)` (and
        `.broadcast`), where every argument of `run` goes to `fn`. The options are `run`'s: `timeout`
        seconds (`TaskTimeout`), `output` (this call's output selection), `capture` (a `Captured`),
        `retries`/`retry_on`. `ValueError` here for a wrong one (`runtime/call_options.py`)."""
        return PoolWithOptions(self, call_options(timeout, output, capture, retries, retry_on))

    # One signature, typed by `fn`'s own parameters and result: a wrong argument is one line in a type
    # checker. Call options have their own spelling for typed code (`pool.options(...)`); as keywords
    # they are taken out at run time, as always (`runtime/call_options.py`).
    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn(*args, **kwargs)` on the least busy worker and return its result.

        Raises what `fn` raised (same type, remote traceback in its notes; `RemoteError` if the type
        cannot be rebuilt here), `SerializationError` before sending if an argument cannot be pickled,
        `TaskTimeout` after `timeout` seconds (the task is cancelled on the node), `WorkerLost` if the
        worker died. Call options: `pool.options(...).run(fn, ...)`, or as keywords here: `timeout`,
        `output` (overrides the pool's output selection for this call), `capture` (the result is a
        `Captured` holding the value and the task's output), `retries=N` (re-runs the call, on a
        worker picked anew, up to N times after `WorkerLost`, or after the exception types in
        `retry_on`; the error that ends a retried call has `attempts`, see `runtime/common/retry.py`).
        """
        if not kwargs or OPTION_NAMES.isdisjoint(kwargs):  # (the common call)
            return await self._start(fn, args, kwargs, None, None)  # type: ignore[no-any-return]
        given, rest = split_options(kwargs, "run")
        return await self._run_call(fn, args, rest, **given.keywords())

    def stream(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> ItemStream:
        """Run the generator function `fn(*args, **kwargs)` on the least busy worker and give its
        items as they are yielded there: `async for item in pool.stream(fn, x): ...`.

        Every argument goes to `fn`. The task's error is raised after the items before it; leaving
        the loop early cancels the task. Each item is one frame, so it must fit the frame limit
        (large arrays: return them, or yield smaller pieces). A time bound has its own spelling:
        `gen(x).with_timeout(s) >> pool` (`TaskTimeout` after the items that came in time).
        """
        return self._stream_call(fn, args, kwargs)

    def _stream_call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *,
                     timeout: float | None = None) -> ItemStream:
        from .actors.prepared import Prepared
        from .common.serialize import load_value
        from .common.streams import ItemStream

        rt = self._runtime
        prep = Prepared.for_call(_unwrap(fn), args, kwargs)

        async def open_(on_item: Callable[[int, bytes], None]) -> tuple[Any, Any, Any]:
            channel = rt.pick_nowait() if rt.open else None
            if channel is None:
                channel = await rt.pick()
            call, fut = await rt.open_stream(channel, prep, on_item)
            return channel, call, fut

        return ItemStream(open_, rt, load_value, timeout=timeout, name=prep.fn_name)

    async def _run_call(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any], *,
                        timeout: float | None = None, options: dict[str, Any] | None = None,
                        retries: Retries = NO_RETRIES) -> T:
        """`run` with the user's arguments as they are (`fn(x) >> pool`: none of them is an option)."""
        if retries.count == 0:  # the attempt inline: no closure, three coroutines fewer per call
            return await self._start(fn, args, kwargs, timeout, options)  # type: ignore[no-any-return]
        rt = self._runtime
        prep = _for_call(_unwrap(fn), args, kwargs)

        async def attempt() -> T:
            channel = rt.pick_nowait() if rt.open else None
            if channel is None:
                channel = await rt.pick()
            return await rt.run_one(channel, prep, timeout=timeout, options=options)  # type: ignore[no-any-return]

        return await with_retries(attempt, retries, what=prep.fn_name, on_retry=self._count_retry)

    def _start(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float | None,
               options: dict[str, Any] | None) -> Awaitable[Any]:
        """One attempt of a call, prepared now for a worker picked now (or, when none is free, once
        one is): the awaitable that sends it and gives its value. Not a coroutine itself: `run`
        awaits `run_one`'s coroutine directly (one frame fewer on every call)."""
        rt = self._runtime
        prep = _for_call(_unwrap(fn), args, kwargs)
        channel = rt.pick_nowait() if rt.open else None
        if channel is None:
            return self._pick_and_run(rt, prep, timeout, options)
        return rt.run_one(channel, prep, timeout=timeout, options=options)

    @staticmethod
    async def _pick_and_run(rt: PoolRuntime, prep: Prepared, timeout: float | None,
                            options: dict[str, Any] | None) -> Any:
        return await rt.run_one(await rt.pick(), prep, timeout=timeout, options=options)

    def _count_retry(self) -> None:
        self._retries += 1

    async def broadcast(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> list[T]:
        """Run `fn(*args, **kwargs)` on every worker; one result each, in rank (node) order.

        The call is pickled once. If any worker raises, the others are cancelled and the first error
        is raised (its type kept); the nodes that failed with it are named in its notes, in `.nodes`
        (every failed node) and `.node_errors` (node -> error, the first one's node left out). Raises
        as `run` does and takes the same call options (`pool.options(...).broadcast(fn, ...)`, or
        keywords); `retries` re-runs the whole broadcast (every worker).
        """
        given, rest = split_options(kwargs, "broadcast") if kwargs else (NO_OPTIONS, kwargs)
        return await self._broadcast_call(fn, args, rest, **given.keywords())

    async def _broadcast_call(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any], *,
                              timeout: float | None = None, options: dict[str, Any] | None = None,
                              retries: Retries = NO_RETRIES) -> list[T]:
        """`broadcast` with the user's arguments as they are (`fn(x) @ pool`)."""
        rt = self._runtime
        prep = _for_call(_unwrap(fn), args, kwargs)

        if retries.count == 0:  # (three coroutines fewer per call)
            return await rt.run_prepared(await rt.all_channels(), prep,  # type: ignore[no-any-return]
                                         timeout=timeout, options=options)

        async def attempt() -> list[T]:
            channels = await rt.all_channels()
            return await rt.run_prepared(channels, prep, timeout=timeout, options=options)  # type: ignore[no-any-return]

        return await with_retries(attempt, retries, what=prep.fn_name, on_retry=self._count_retry)

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> concurrent.futures.Future[T]:
        """Start `fn(*args, **kwargs)` on the least busy worker, from any thread (joblib's backend, a
        thread pool of your own); a `concurrent.futures.Future`. Every argument goes to `fn`.

        Cancelling the future cancels the task. Waiting on the future (`.result()`) on the pool's
        own event loop would block that loop: there, `await pool.run(...)` instead (see
        `in_event_loop`).
        """
        return self._submit_call(fn, args, kwargs)

    def _submit_call(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any], *,
                     timeout: float | None = None) -> concurrent.futures.Future[T]:
        """`submit` with the user's arguments as they are (`fn(x) > pool`)."""
        import asyncio

        return asyncio.run_coroutine_threadsafe(self._run_call(fn, args, kwargs, timeout=timeout), self._runtime.loop)

    def in_event_loop(self) -> bool:
        """True when called on the thread that runs the pool's event loop (blocking there hangs)."""
        import asyncio

        try:
            return asyncio.get_running_loop() is self._runtime.loop
        except RuntimeError:
            return False

    @property
    def workers(self) -> int:
        """How many tasks can run at once now (over all nodes): worker processes times their task threads."""
        rt = self._runtime
        return sum(len(n.usable_channels()) for n in rt.nodes) * rt.context.task_threads

    async def map(self, fn: Callable[[Any], T], iterable: Iterable[Any], *, timeout: float | None = None,
                  chunksize: int | None = None, output: OutputSpec = _UNSET, retries: int = 0,
                  retry_on: type[Exception] | tuple[type[Exception], ...] = ()) -> list[T]:
        """`[fn(x) for x in iterable]`, spread over every worker; results in input order.

        Items travel in batches (`chunksize`, by default about a quarter of each worker's share, at
        most 1,000, and at most about `prepared.BATCH_BYTES` pickled) with two batches in flight per worker,
        so cheap functions run at pipe speed and a slow worker takes fewer batches. The first error cancels the rest and is raised (its notes
        say which item). `timeout` bounds the whole map; `retries` re-runs a batch whose worker was lost.
        """
        import anyio

        from .actors.prepared import Prepared, map_batches

        rt = self._runtime
        fn = _unwrap(fn)
        items = list(iterable)
        if not items:
            return []
        if chunksize is not None and (not isinstance(chunksize, int) or chunksize < 1):
            raise ValueError(f"map(chunksize={chunksize!r}): need a positive integer")
        options = self._options(output, False)
        # a worker with task threads (`sky.Worker`) is that many lanes' worth of slots
        channels = [c for n in rt.members() for c in n.usable_channels() for _ in range(rt.context.task_threads)]
        workers = max(1, len(channels))
        elastic = rt.autoscaler is not None
        if elastic:  # sized for the most slots the pool may have; each batch takes a free slot, or waits for one
            workers = max(workers, rt.autoscaler.high * rt.autoscaler.slots_per_node)  # type: ignore[union-attr]
        size = chunksize or max(1, min(1000, math.ceil(len(items) / (workers * 4))))
        results: list[Any] = [None] * len(items)
        template = Prepared.for_map(fn)
        pending = map_batches(template, items, size)
        policy = retries_of(retries, retry_on)

        async def lane(home: WorkerChannel | None) -> None:
            # a lane keeps to its worker (two lanes per worker pull from the same batches, so a slow
            # worker takes fewer): picking the least busy per batch read every worker each time,
            # quadratic at 10,000 workers. A lane whose worker is lost picks a new one.
            for start, prep in pending:
                async def attempt(prep: Prepared = prep) -> Any:
                    nonlocal home
                    if home is None or not home.usable or elastic:
                        home = await rt.pick()
                    return await rt.run_one(home, prep, timeout=None, options=options)

                values = await with_retries(attempt, policy, what=template.fn_name, on_retry=self._count_retry)
                results[start:start + len(values)] = values

        try:
            with anyio.fail_after(timeout) if timeout is not None else contextlib.nullcontext():
                async with anyio.create_task_group() as tg:
                    lanes = min(math.ceil(len(items) / size), workers * 2)
                    for i in range(lanes):
                        tg.start_soon(lane, channels[i % len(channels)] if channels and not elastic else None)
        except TimeoutError:
            raise TaskTimeout(f"map of {template.fn_name} over {len(items)} items did not finish "
                              f"within timeout={timeout} s; it was cancelled") from None
        except BaseExceptionGroup as group:  # one lane's error cancels the others: raise that error
            raise _first(group) from None
        return results

    async def gather(self, calls: Sequence[PendingCall], *, timeout: float | None = None) -> list[Any]:
        """Run several pending calls (`f(x)` of `@sky.compute` functions), spread over the workers;
        their results in call order. `timeout` bounds each call that has none of its own."""
        return list(await self._gather_calls(calls, timeout=timeout))

    def gather_stream(self, calls: Sequence[PendingCall], *, ordered: bool = True,
                      timeout: float | None = None) -> ResultStream:
        """The results of `calls` as they are ready: an async iterator (`async for r in ...`), in
        call order or, with `ordered=False`, in completion order. The first error is raised at its
        turn and cancels the rest; leaving the loop early (`aclose()`) cancels what still runs."""
        from .common.streams import ResultStream

        rt = self._runtime

        def bound(call: PendingCall) -> Callable[[], Any]:
            return lambda: self._run_call(call.fn, call.args, call.kwargs, timeout=call.timeout or timeout,
                                          retries=call.retries)

        return ResultStream([bound(c) for c in calls], ordered=ordered, tg=rt.tg)

    _gather_stream = gather_stream

    async def _gather_calls(self, calls: Sequence[PendingCall], *, timeout: float | None = None) -> tuple[Any, ...]:
        import anyio

        results: list[Any] = [None] * len(calls)

        async def one(i: int, call: PendingCall) -> None:
            results[i] = await self._run_call(call.fn, call.args, call.kwargs, timeout=call.timeout or timeout,
                                              retries=call.retries)

        try:
            async with anyio.create_task_group() as tg:
                for i, call in enumerate(calls):
                    tg.start_soon(one, i, call)
        except BaseExceptionGroup as group:
            raise _first(group) from None
        return tuple(results)


def _import_for_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Prepared:
    """`Prepared.for_call`, imported by the first call (with it cloudpickle and the protocol): from then on
    `_for_call` is `Prepared.for_call` itself, so a call pays no import statement."""
    global _for_call
    from .actors.prepared import Prepared

    _for_call = Prepared.for_call
    return _for_call(fn, args, kwargs)


#: how a call is prepared (pickled once, for any worker): `Prepared.for_call` after the first call
_for_call: Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Prepared] = _import_for_call


def _first(group: BaseExceptionGroup) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
