"""`@sky.compute` (alias `@sky.function`) and the operators users of similar tools know.

    @sky.compute                  # or @sky.compute(timeout=600), @sky.function
    def train(x): ...

    train(1) @ pool               # broadcast: every worker, results in rank order
    train(1) >> pool              # one worker (the least busy)
    train(1).with_timeout(60) >> pool
    future = train(1) > pool      # started now; future.result() later (a concurrent.futures.Future)
    sky.gather(train(1), train(2)) >> pool   # spread over the workers: a tuple, in order
    (train(1) & train(2)) >> pool            # the same gather (`>>` binds tighter than `&`)
    sky.gather(..., stream=True, ordered=False) >> pool   # results as they complete

With an async pool these give awaitables (a streamed gather gives an async iterator); with
`with sky.Pool(...)` they give results (a streamed gather gives an iterator).

The user's arguments reach the function untouched, whatever their names: a call option has its own
spelling (`@sky.compute(timeout=...)`, `.with_timeout()`), never a keyword of the call, so
`fetch(url, timeout=30) >> pool` passes `timeout=30` to `fetch`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Generic, Literal, ParamSpec, Protocol, TypeVar, overload

from .common.active import resolve
from .common.retry import NO_RETRIES, Retries, retries_of
from .onnode.marked import PoolFunction

__all__ = ["compute", "function", "ComputeFunction", "PendingCall", "PendingCompute", "PendingFunction", "Gathered",
           "gather"]

T = TypeVar("T")
R = TypeVar("R")
Y = TypeVar("Y")
P = ParamSpec("P")
G = TypeVar("G", covariant=True)  # what `gather(...) >> pool` gives: the tuple of the calls' results
T1 = TypeVar("T1")
T2 = TypeVar("T2")
T3 = TypeVar("T3")
T4 = TypeVar("T4")
T5 = TypeVar("T5")
T6 = TypeVar("T6")


class _PlainPool(Protocol):
    """What `call >> pool` types as blocking: the pool of `with sky.Pool(...) as pool` (`BlockingPool`).
    Declared here, structurally, so that this module imports no pool."""

    def _run_call(self, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any], **options: Any) -> R: ...


class _AsyncPool(Protocol):
    """What `call >> pool` types as awaitable: the pool of `async with sky.Pool(...) as pool`."""

    async def __aenter__(self) -> Any: ...


def _check_timeout(timeout: float | None, where: str) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"{where}(timeout={timeout!r}): need a positive number of seconds")
    return float(timeout)


class PendingCall(Generic[T]):
    """A call of a `@compute` function, not yet sent anywhere: `@ pool`, `>> pool`, `& other`."""

    __slots__ = ("fn", "args", "kwargs", "timeout", "retries")

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any],
                 timeout: float | None = None, retries: Retries = NO_RETRIES) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.timeout = timeout
        self.retries = retries

    def __repr__(self) -> str:
        name = getattr(self.fn, "__qualname__", self.fn)
        return f"<PendingCall {name!r} args={len(self.args)} kwargs={sorted(self.kwargs)} timeout={self.timeout}>"

    def with_timeout(self, timeout: float) -> PendingCall[T]:
        """The same call, cancelled on the node (and `TaskTimeout` raised) after `timeout` seconds."""
        return PendingCall(self.fn, self.args, self.kwargs, _check_timeout(timeout, "with_timeout"), self.retries)

    def with_retries(self, retries: int, *, on: type[Exception] | tuple[type[Exception], ...] = ()) -> PendingCall[T]:
        """The same call, re-run up to `retries` times after `WorkerLost` (or an exception in `on`)."""
        return PendingCall(self.fn, self.args, self.kwargs, self.timeout, retries_of(retries, on))

    @overload
    def __matmul__(self, pool: _PlainPool) -> list[T]: ...
    @overload
    def __matmul__(self, pool: _AsyncPool) -> Coroutine[Any, Any, list[T]]: ...

    def __matmul__(self, pool: Any) -> Any:
        """`call @ pool`: broadcast to every worker (`@ sky`: the active pool, `runtime/common/active.py`)."""
        pool = resolve(pool)
        return pool._broadcast_call(self.fn, self.args, self.kwargs, timeout=self.timeout, retries=self.retries)

    # a generator function's items: an iterator (blocking) or an async iterator (async pool)
    @overload
    def __rshift__(self: PendingCall[Iterator[Y]], pool: _PlainPool) -> Iterator[Y]: ...
    @overload
    def __rshift__(self: PendingCall[Iterator[Y]], pool: _AsyncPool) -> AsyncIterator[Y]: ...  # type: ignore[overload-overlap]
    @overload
    def __rshift__(self, pool: _PlainPool) -> T: ...
    @overload
    def __rshift__(self, pool: _AsyncPool) -> Coroutine[Any, Any, T]: ...

    def __rshift__(self, pool: Any) -> Any:
        """`call >> pool`: run on one worker. A generator function gives its items as they are
        yielded there: an iterator (an async iterator on an async pool)."""
        pool = resolve(pool)
        if inspect.isgeneratorfunction(self.fn):
            return pool._stream_call(self.fn, self.args, self.kwargs, timeout=self.timeout)
        return pool._run_call(self.fn, self.args, self.kwargs, timeout=self.timeout, retries=self.retries)

    def __gt__(self, pool: Any) -> Any:
        """`call > pool`: start it on one worker now; a `concurrent.futures.Future` of its result
        (`.result()` waits; on an async pool's own event loop, `await asyncio.wrap_future(...)`)."""
        pool = resolve(pool)
        return pool._submit_call(self.fn, self.args, self.kwargs, timeout=self.timeout)

    def __and__(self, other: PendingCall[Any] | Gathered[Any]) -> Gathered[tuple[Any, ...]]:
        """`a & b`: a gather of both (`(a & b) >> pool` gives a tuple)."""
        return Gathered((self,)) & other

    def local(self) -> T:
        """Run the call here, in this process."""
        return self.fn(*self.args, **self.kwargs)


class ComputeFunction(PoolFunction, Generic[P, T]):
    """A function marked to run on a pool: calling it (with the function's own parameters, checked by a
    type checker) makes a `PendingCall`."""

    def __init__(self, fn: Callable[P, T], *, timeout: float | None = None, retries: int = 0) -> None:
        if not callable(fn):
            raise TypeError(f"@compute needs a function, got {type(fn).__name__}")
        self.__skyhive_fn__ = fn
        self.timeout = _check_timeout(timeout, "compute")
        self.retries = retries_of(retries, ())
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<compute {getattr(self.__skyhive_fn__, '__qualname__', self.__skyhive_fn__)!r}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> PendingCall[T]:
        return PendingCall(self.__skyhive_fn__, args, kwargs, self.timeout, self.retries)

    def local(self, *args: P.args, **kwargs: P.kwargs) -> T:
        """Call the function here, in this process."""
        return self.__skyhive_fn__(*args, **kwargs)


@overload
def compute(fn: Callable[P, T], /) -> ComputeFunction[P, T]: ...
@overload
def compute(*, timeout: float | None = None, retries: int = 0) -> Callable[[Callable[P, T]], ComputeFunction[P, T]]: ...


def compute(fn: Callable[P, T] | None = None, /, *, timeout: float | None = None, retries: int = 0) -> Any:
    """Mark `fn` to run on a pool: `fn(x) @ pool`, `fn(x) >> pool`, `gather(...) >> pool`.

    Bare (`@sky.compute`) or with a default timeout for its calls (`@sky.compute(timeout=600)`;
    `.with_timeout()` overrides it per call), and retries after a lost worker (`@sky.compute(retries=2)`,
    `.with_retries()` per call). Raises `ValueError` for a bad timeout or retry count, `TypeError` if
    what it decorates is not callable.
    """
    if fn is None:
        _check_timeout(timeout, "compute")
        retries_of(retries, ())
        return lambda f: ComputeFunction(f, timeout=timeout, retries=retries)
    return ComputeFunction(fn, timeout=timeout, retries=retries)


#: The newer seeds' spelling of `compute` (`@sky.function`, `@sky.function(timeout=...)`).
function = compute
#: Skyward's names for a call not yet sent (`f(x)` of a `@sky.function`): the same class.
PendingCompute = PendingFunction = PendingCall


class Gathered(Generic[G]):
    """Several pending calls to spread over a pool's workers (`gather(...) >> pool`, `a & b`); `G` is what
    `>> pool` gives (the tuple of the calls' result types, for a type checker)."""

    def __init__(self, calls: tuple[PendingCall[Any], ...], *, stream: bool = False, ordered: bool = True,
                 timeout: float | None = None) -> None:
        for c in calls:
            if not isinstance(c, PendingCall):
                raise TypeError(f"gather() takes calls of @compute functions, got {type(c).__name__}")
        self.calls = calls
        self.stream = bool(stream)
        self.ordered = bool(ordered)
        self.timeout = _check_timeout(timeout, "gather")

    def __repr__(self) -> str:
        return f"<Gathered {len(self.calls)} calls stream={self.stream} ordered={self.ordered}>"

    def __len__(self) -> int:
        return len(self.calls)

    def __and__(self, other: PendingCall[Any] | Gathered[Any]) -> Gathered[tuple[Any, ...]]:
        more = other.calls if isinstance(other, Gathered) else (other,)
        return Gathered(self.calls + tuple(more), stream=self.stream, ordered=self.ordered, timeout=self.timeout)

    def with_timeout(self, timeout: float) -> Gathered[G]:
        """The same gather, each call bounded by `timeout` seconds."""
        return Gathered(self.calls, stream=self.stream, ordered=self.ordered, timeout=timeout)

    @overload
    def __rshift__(self, pool: _PlainPool) -> G: ...
    @overload
    def __rshift__(self, pool: _AsyncPool) -> Coroutine[Any, Any, G]: ...

    def __rshift__(self, pool: Any) -> Any:
        """A tuple of results in call order; with `stream=True` an iterator (async iterator on an
        async pool) of results, in call order or, with `ordered=False`, as they complete."""
        pool = resolve(pool)
        if self.stream:
            return pool._gather_stream(list(self.calls), ordered=self.ordered, timeout=self.timeout)
        return pool._gather_calls(list(self.calls), timeout=self.timeout)


# typed per number of calls (a tuple of their result types); with stream=True, or more than six calls, Any
@overload
def gather(c1: PendingCall[T1], /, *, stream: Literal[False] = False, ordered: bool = True,
           timeout: float | None = None) -> Gathered[tuple[T1]]: ...
@overload
def gather(c1: PendingCall[T1], c2: PendingCall[T2], /, *, stream: Literal[False] = False, ordered: bool = True,
           timeout: float | None = None) -> Gathered[tuple[T1, T2]]: ...
@overload
def gather(c1: PendingCall[T1], c2: PendingCall[T2], c3: PendingCall[T3], /, *, stream: Literal[False] = False,
           ordered: bool = True, timeout: float | None = None) -> Gathered[tuple[T1, T2, T3]]: ...
@overload
def gather(c1: PendingCall[T1], c2: PendingCall[T2], c3: PendingCall[T3], c4: PendingCall[T4], /, *,
           stream: Literal[False] = False, ordered: bool = True,
           timeout: float | None = None) -> Gathered[tuple[T1, T2, T3, T4]]: ...
@overload
def gather(c1: PendingCall[T1], c2: PendingCall[T2], c3: PendingCall[T3], c4: PendingCall[T4], c5: PendingCall[T5],
           /, *, stream: Literal[False] = False, ordered: bool = True,
           timeout: float | None = None) -> Gathered[tuple[T1, T2, T3, T4, T5]]: ...
@overload
def gather(c1: PendingCall[T1], c2: PendingCall[T2], c3: PendingCall[T3], c4: PendingCall[T4], c5: PendingCall[T5],
           c6: PendingCall[T6], /, *, stream: Literal[False] = False, ordered: bool = True,
           timeout: float | None = None) -> Gathered[tuple[T1, T2, T3, T4, T5, T6]]: ...
@overload
def gather(*calls: PendingCall[Any], stream: bool = False, ordered: bool = True,
           timeout: float | None = None) -> Gathered[Any]: ...


def gather(*calls: PendingCall[Any], stream: bool = False, ordered: bool = True,
           timeout: float | None = None) -> Gathered[Any]:
    """Group calls: `sky.gather(f(1), g(2)) >> pool` runs them spread over the workers and gives a
    tuple in call order. With `stream=True` the results come as they are ready (`ordered=False`:
    in completion order). `timeout` bounds each call that has none of its own."""
    return Gathered(calls, stream=stream, ordered=ordered, timeout=timeout)


def main(fn: Callable[P, T] | None = None) -> Any:
    """Skyward's `@sky.main` (or `@sky.main()`): marks a script's entry point. The function runs here,
    in this process, unchanged; inside it `f(x) >> sky` / `@ sky` use the pool a `with sky.Pool(...)`
    around (or inside) it made active, as anywhere else. Its `__sky_main__` is True, as in Skyward."""
    if fn is None:
        return main
    if not callable(fn):
        raise TypeError(f"@sky.main: decorates a function, got {type(fn).__name__} {fn!r}")

    @functools.wraps(fn)
    def entry(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    entry.__sky_main__ = True  # type: ignore[attr-defined]
    return entry
