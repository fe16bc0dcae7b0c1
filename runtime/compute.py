"""`@sky.compute` and the operators users of similar tools know.

    @sky.compute
    def train(x): ...

    train(1) @ pool             # broadcast: every worker, results in rank order
    train(1) >> pool            # one worker (the least busy)
    sky.gather(train(1), train(2)) >> pool   # spread over the workers, results in order

With an async pool these give awaitables; with `with sky.Pool(...)` they give results.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["compute", "Compute", "PendingCall", "Gathered", "gather"]

T = TypeVar("T")


class PendingCall(Generic[T]):
    """A call of a `@compute` function, not yet sent anywhere."""

    __slots__ = ("fn", "args", "kwargs")

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs

    def __repr__(self) -> str:
        return f"<PendingCall {getattr(self.fn, '__qualname__', self.fn)!r} args={len(self.args)} kwargs={sorted(self.kwargs)}>"

    def __matmul__(self, pool: Any) -> Any:
        """`call @ pool`: broadcast to every worker."""
        return pool.broadcast(self.fn, *self.args, **self.kwargs)

    def __rshift__(self, pool: Any) -> Any:
        """`call >> pool`: run on one worker."""
        return pool.run(self.fn, *self.args, **self.kwargs)

    def local(self) -> T:
        """Run the call here, in this process."""
        return self.fn(*self.args, **self.kwargs)


class Compute(Generic[T]):
    """A function marked to run on a pool: calling it makes a `PendingCall`."""

    def __init__(self, fn: Callable[..., T]) -> None:
        if not callable(fn):
            raise TypeError(f"@compute needs a function, got {type(fn).__name__}")
        self.__skyhive_fn__ = fn
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<compute {getattr(self.__skyhive_fn__, '__qualname__', self.__skyhive_fn__)!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> PendingCall[T]:
        return PendingCall(self.__skyhive_fn__, args, kwargs)

    def local(self, *args: Any, **kwargs: Any) -> T:
        """Call the function here, in this process."""
        return self.__skyhive_fn__(*args, **kwargs)


def compute(fn: Callable[..., T]) -> Compute[T]:
    """Mark `fn` to run on a pool: `fn(x) @ pool`, `fn(x) >> pool`, `gather(...) >> pool`."""
    return Compute(fn)


class Gathered:
    """Several pending calls to spread over a pool's workers (`gather(...) >> pool`)."""

    def __init__(self, calls: tuple[PendingCall[Any], ...]) -> None:
        for c in calls:
            if not isinstance(c, PendingCall):
                raise TypeError(f"gather() takes calls of @compute functions, got {type(c).__name__}")
        self.calls = calls

    def __repr__(self) -> str:
        return f"<Gathered {len(self.calls)} calls>"

    def __rshift__(self, pool: Any) -> Any:
        return pool.gather(list(self.calls))


def gather(*calls: PendingCall[Any]) -> Gathered:
    """Group calls: `sky.gather(f(1), g(2)) >> pool` runs them spread over the workers, in order."""
    return Gathered(calls)
