"""A call's options with a spelling of their own: `pool.options(timeout=5, retries=2).run(fn, x)`.

`pool.run(fn, *args, **kwargs)` and `pool.broadcast(...)` have one signature each, typed by `fn`'s own
parameters (ParamSpec) and its result: a wrong argument is one line in mypy and pyright ("Argument 2
to "run" has incompatible type ...") instead of "No overload variant ... matches" and an overload per
option (issue 39 point 7). A type checker allows no keyword-only option next to `ParamSpec.args`, so the
options typed code states are given here, to a view of the pool whose `run`/`broadcast` pass every
argument, keywords included, to `fn` — as `fn(x).with_timeout(s) >> pool` does.

The keywords `timeout=`, `output=`, `capture=`, `retries=`, `retry_on=` given to `run`/`broadcast` keep
working at run time (`split_options` takes them out, as before); a type checker sees them as keywords
for `fn` (docs/seeds.md, "Call options").
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from .common.retry import NO_RETRIES, Retries, retries_of
from .common.selection import OutputSpec, selector

__all__ = ["CallOptions", "call_options", "split_options", "OPTION_NAMES", "PoolWithOptions",
           "BlockingPoolWithOptions", "UNSET"]

T = TypeVar("T")
P = ParamSpec("P")
#: "not given" for a call's `output=` (None is a value: print nothing)
UNSET: Any = object()
#: the keywords `run`/`broadcast` take as call options (at run time) rather than pass to `fn`
OPTION_NAMES = frozenset({"timeout", "output", "capture", "retries", "retry_on"})


@dataclass(frozen=True, slots=True)
class CallOptions:
    """What a pool's `_run_call`/`_broadcast_call` take besides the user's arguments."""

    timeout: float | None = None
    options: dict[str, Any] | None = None  # the worker's output handling: "show", "capture"
    retries: Retries = NO_RETRIES

    def keywords(self) -> dict[str, Any]:
        return {"timeout": self.timeout, "options": self.options, "retries": self.retries}


def call_options(timeout: float | None = None, output: OutputSpec = UNSET, capture: bool = False,
                 retries: int = 0, retry_on: type[Exception] | tuple[type[Exception], ...] = (), *,
                 where: str = "options", check: bool = True) -> CallOptions:
    """The options, checked when `check`: `ValueError` naming `where` and the option for a wrong one (the
    keyword spelling is not checked beyond what it always was: `output`'s selection)."""
    if check and timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not timeout > 0):
        raise ValueError(f"{where}(timeout={timeout!r}): need a positive number of seconds, or None")
    if check and isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"{where}(retries={retries!r}): need a whole number, 0 or more")
    shown: dict[str, Any] = {}
    if output is not UNSET:
        shown["show"] = selector(output, where="output")
    if capture:
        shown["capture"] = True
    if check and timeout is not None:
        timeout = float(timeout)
    return CallOptions(timeout, shown or None, retries_of(retries, retry_on))


def split_options(kwargs: dict[str, Any], where: str) -> tuple[CallOptions, dict[str, Any]]:
    """The call options among `run`'s keywords (the keyword spelling) and the keywords left for `fn`."""
    given = {k: kwargs[k] for k in OPTION_NAMES if k in kwargs}
    rest = {k: v for k, v in kwargs.items() if k not in OPTION_NAMES}
    return call_options(**given, where=where, check=False), rest


class _View:
    """A pool (`Pool` or `BlockingPool`: its `_run_call`/`_broadcast_call`) with call options."""

    __slots__ = ("_pool", "_options")

    def __init__(self, pool: Any, options: CallOptions) -> None:
        self._pool = pool
        self._options = options

    def __repr__(self) -> str:
        o = self._options
        return f"<{type(self).__name__} timeout={o.timeout} options={o.options} retries={o.retries.count}>"


class PoolWithOptions(_View):
    """`pool.options(...)` of an async pool: `await view.run(fn, x)`, `await view.broadcast(fn, x)`."""

    __slots__ = ()

    def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, T]:
        """`pool.run` with these options; every argument goes to `fn`."""
        return self._pool._run_call(fn, args, kwargs, **self._options.keywords())  # type: ignore[no-any-return]

    def broadcast(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, list[T]]:
        """`pool.broadcast` with these options; every argument goes to `fn`."""
        return self._pool._broadcast_call(fn, args, kwargs, **self._options.keywords())  # type: ignore[no-any-return]


class BlockingPoolWithOptions(_View):
    """`pool.options(...)` of `with sky.Pool(...) as pool`: `view.run(fn, x)` gives the result."""

    __slots__ = ()

    def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`pool.run` with these options; every argument goes to `fn`."""
        return self._pool._run_call(fn, args, kwargs, **self._options.keywords())  # type: ignore[no-any-return]

    def broadcast(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> list[T]:
        """`pool.broadcast` with these options; every argument goes to `fn`."""
        return self._pool._broadcast_call(fn, args, kwargs, **self._options.keywords())  # type: ignore[no-any-return]
