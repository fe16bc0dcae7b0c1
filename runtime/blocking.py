"""`BlockingPool`: the pool's methods for plain scripts, run on an event loop in a background thread."""

from __future__ import annotations

import concurrent.futures
import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from ..providers.held_warnings import warn_held
from .call_options import UNSET, BlockingPoolWithOptions, call_options
from .common import active
from .interrupt import deferred_sigint
from .common.remote_errors import full_tracebacks

if TYPE_CHECKING:
    from .calls import RetryOn
    from .compute import PendingCall
    from .common.selection import OutputSpec
    from .output.router import OutputRecord
    from .events.state import PoolState

__all__ = ["BlockingPool", "AsyncPool"]

T = TypeVar("T")
P = ParamSpec("P")


class AsyncPool(Protocol):
    """What `BlockingPool` drives: the async `Pool` (declared here so that this module does not import
    `pool`, which imports this one)."""

    start_warnings: list[tuple[str, type[Warning]]]  # shown at the caller's line once the pool has started

    async def __aenter__(self) -> Any: ...
    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None: ...
    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...
    async def broadcast(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]: ...
    async def map(self, fn: Callable[[Any], Any], iterable: Iterable[Any], **kwargs: Any) -> list[Any]: ...
    async def gather(self, calls: Sequence[PendingCall], **kwargs: Any) -> list[Any]: ...
    def output(self, **kwargs: Any) -> Any: ...
    def statistics(self) -> dict[str, Any]: ...
    def current_nodes(self) -> int: ...
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any: ...
    def _submit_call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                     **options: Any) -> Any: ...
    def gather_stream(self, calls: Sequence[PendingCall], **kwargs: Any) -> Any: ...
    def _stream_call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                     **options: Any) -> Any: ...
    async def _run_call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                        **options: Any) -> Any: ...
    async def _broadcast_call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                              **options: Any) -> list[Any]: ...
    async def _gather_calls(self, calls: Sequence[PendingCall], **options: Any) -> tuple[Any, ...]: ...
    @property
    def workers(self) -> int: ...
    @property
    def id(self) -> str: ...
    @property
    def state(self) -> PoolState: ...
    @property
    def dropped(self) -> dict[int, str]: ...


class BlockingPool:
    """What `with sky.Pool(...) as pool:` gives: `run`, `broadcast`, `map`, `gather`, `output`, blocking.

    Entering starts an event loop thread and the pool on it; exiting (also on Ctrl-C) closes the pool
    and the loop. Methods take the same arguments as `Pool`'s and may be called from any thread.
    """

    def __init__(self, pool: AsyncPool) -> None:
        self.pool = pool
        self._portal: BlockingPortal | None = None
        self._portal_cm: Any = None
        self._pool_cm: Any = None

    def __repr__(self) -> str:
        return f"<BlockingPool {self.pool!r}>"

    def __enter__(self) -> BlockingPool:
        self._portal_cm = start_blocking_portal(backend="asyncio")
        self._portal = self._portal_cm.__enter__()
        try:
            self._pool_cm = self._portal.wrap_async_context_manager(self.pool)
            self._pool_cm.__enter__()
        except BaseException as exc:
            self._portal_cm.__exit__(type(exc), exc, exc.__traceback__)
            raise
        finally:  # the pool's start warnings, at the user's `with sky.Pool(...)` line (this thread)
            warn_held(self.pool.start_warnings)
        self._active = active.enter(self)  # `f(x) >> sky` in this block (runtime/common/active.py)
        return self

    def __exit__(self, *exc: Any) -> None:
        active.leave(getattr(self, "_active", None))
        try:
            if self._pool_cm is not None:
                self._pool_cm.__exit__(*exc)
        finally:
            self._portal_cm.__exit__(None, None, None)

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._portal is None:
            raise RuntimeError("the pool is not open: use `with sky.Pool(...) as pool:`")
        try:
            return _wait_for(self._portal, functools.partial(fn, *args, **kwargs))
        except Exception as exc:
            if getattr(exc, "remote_traceback", None) is None or full_tracebacks():
                raise
            # a task's own error: the frames that carried it here (the event loop thread, the pool's
            # dispatch) say nothing; the remote traceback in its notes says where it happened
            raise exc.with_traceback(None) from exc.__cause__

    # typed as `Pool.run` is: one signature, fn's own parameters (call options: `options`, or keywords at run time)
    def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """See `Pool.run`."""
        return self._call(self.pool.run, fn, *args, **kwargs)  # type: ignore[no-any-return]

    def broadcast(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> list[T]:
        """See `Pool.broadcast`."""
        return self._call(self.pool.broadcast, fn, *args, **kwargs)  # type: ignore[no-any-return]

    def options(self, *, timeout: float | None = None, output: OutputSpec = UNSET, capture: bool = False,
                retries: int = 0, retry_on: RetryOn = ()) -> BlockingPoolWithOptions:
        """See `Pool.options`: `pool.options(timeout=5).run(fn, x)` gives the result."""
        return BlockingPoolWithOptions(self, call_options(timeout, output, capture, retries, retry_on))

    def map(self, fn: Callable[[Any], T], iterable: Iterable[Any], **kwargs: Any) -> list[T]:
        """See `Pool.map`."""
        return self._call(self.pool.map, fn, iterable, **kwargs)

    def gather(self, calls: Sequence[PendingCall], **kwargs: Any) -> list[Any]:
        """See `Pool.gather`."""
        return self._call(self.pool.gather, calls, **kwargs)

    def gather_stream(self, calls: Sequence[PendingCall], **kwargs: Any) -> Iterator[Any]:
        """See `Pool.gather_stream`: the same results, as a blocking iterator."""
        stream = self._call(_open_gather_stream, self.pool, calls, kwargs)
        portal = self._portal
        assert portal is not None
        return _records(portal, stream)

    _gather_stream = gather_stream

    def stream(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Iterator[Any]:
        """See `Pool.stream`: the items as a blocking iterator (`for item in pool.stream(fn, x)`)."""
        return self._stream_call(fn, args, kwargs)

    def _stream_call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                     **options: Any) -> Iterator[Any]:
        stream = self._call(_open_stream, self.pool, fn, args, kwargs, options)
        portal = self._portal
        assert portal is not None
        return _records(portal, stream)

    # `fn(x) >> pool`, `fn(x) @ pool`, `gather(...) >> pool`: the user's arguments as they are
    def _run_call(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any], **options: Any) -> T:
        return self._call(self.pool._run_call, fn, args, kwargs, **options)

    def _broadcast_call(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any],
                        **options: Any) -> list[T]:
        return self._call(self.pool._broadcast_call, fn, args, kwargs, **options)

    def _gather_calls(self, calls: Sequence[PendingCall], **options: Any) -> tuple[Any, ...]:
        return self._call(self.pool._gather_calls, calls, **options)

    def output(self, **kwargs: Any) -> Iterator[OutputRecord]:
        """See `Pool.output`: the same records, as a blocking iterator (for another thread than the
        one making calls). Registered when called, so nothing written after this call is missed;
        leaving the loop (`break`) or closing the iterator releases it."""
        stream = self._call(_open_output, self.pool, kwargs)
        portal = self._portal
        assert portal is not None
        return _records(portal, stream)

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> concurrent.futures.Future[T]:
        """See `Pool.submit`: a `concurrent.futures.Future`, from any thread."""
        return self.pool.submit(fn, *args, **kwargs)

    def _submit_call(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any],
                     **options: Any) -> Any:
        return self.pool._submit_call(fn, args, kwargs, **options)

    @property
    def workers(self) -> int:
        return self.pool.workers

    @property
    def id(self) -> str:
        return self.pool.id

    @property
    def state(self) -> PoolState:
        return self.pool.state

    @property
    def dropped(self) -> dict[int, str]:
        """See `Pool.dropped`: the nodes left out at start (`min_nodes`), and why."""
        return self.pool.dropped

    def statistics(self) -> dict[str, Any]:
        return self._call(_stats, self.pool)

    def current_nodes(self) -> int:
        """See `Pool.current_nodes`: how many nodes the pool has now (an elastic pool's change)."""
        return self.pool.current_nodes()


async def _stats(pool: AsyncPool) -> dict[str, Any]:
    return pool.statistics()


async def _open_stream(pool: AsyncPool, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                       options: dict[str, Any]) -> Any:
    return pool._stream_call(fn, args, kwargs, **options)


async def _open_gather_stream(pool: AsyncPool, calls: Sequence[PendingCall], kwargs: dict[str, Any]) -> Any:
    return pool.gather_stream(calls, **kwargs)


async def _open_output(pool: AsyncPool, kwargs: dict[str, Any]) -> Any:
    return pool.output(**kwargs)


#: How long a call interrupted by Ctrl-C is waited for, once cancelled, before `KeyboardInterrupt` is
#: raised (its cancellation sends `Cancel` to the nodes and returns: this is a bound, not a pause).
_CANCEL_WAIT = 30.0


async def _until_done(call: Callable[[], Any], ended: threading.Event) -> Any:
    try:
        return await call()
    finally:
        ended.set()


def _wait_for(portal: BlockingPortal, call: Callable[[], Any]) -> Any:
    """`await call()` on the portal's loop, from this thread. Ctrl-C (in the main thread) is held back
    while the call is handed over and raised only while waiting for it (`interrupt.deferred_sigint`):
    the call is then cancelled — on the nodes too — and has ended before `KeyboardInterrupt` reaches
    the script, which may catch it and go on using the pool (a second Ctrl-C stops that wait)."""
    ended = threading.Event()
    with deferred_sigint() as guard:
        future = portal.start_task_soon(_until_done, call, ended)
        try:
            return guard.wait(future.result) if guard is not None else future.result()
        except KeyboardInterrupt:
            future.cancel()
            if guard is not None:
                guard.wait(lambda: ended.wait(_CANCEL_WAIT))
            else:
                ended.wait(_CANCEL_WAIT)
            raise


def _records(portal: BlockingPortal, stream: Any) -> Iterator[Any]:
    try:
        while True:
            try:
                yield _wait_for(portal, stream.__anext__)
            except StopAsyncIteration:
                return
    finally:
        try:
            portal.call(stream.aclose)
        except RuntimeError:  # the pool (and its event loop) already closed
            pass
