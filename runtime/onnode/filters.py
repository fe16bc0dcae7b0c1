"""Worker-side output filters: `@sky.stdout(only=...)`, `@sky.stderr(only=...)`, `@sky.silent`.

Placed below `@sky.compute`::

    @sky.compute
    @sky.stdout(only="head")
    def train(): ...

On a node that is not selected the stream is switched off for the duration of the call, so its text
— `print`, logging to it, and what native code and subprocesses write to its file descriptor — is
dropped on the worker and never crosses the wire. Called outside a skyhive node (a plain local call),
a decorated function prints normally.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from ..common.selection import OutputSpec, selector
from .instance import NotOnNodeError, instance_info
from .marked import refuse_above_compute

__all__ = ["stdout", "stderr", "silent"]

F = TypeVar("F", bound=Callable[..., Any])


def _filter(streams: tuple[str, ...], only: OutputSpec, where: str) -> Callable[[F], F]:
    select = selector(only, where=where)

    def decorate(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"@sky.{where.split('(')[0]} decorates a function, got {type(fn).__name__}")
        refuse_above_compute(fn, f"@sky.{where.split('(')[0]}" + ("" if where == "silent" else "(...)"))

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                keep = select(instance_info())
            except NotOnNodeError:
                keep = True  # a local call: nothing to filter
            switched = []
            if not keep:
                for name in streams:
                    stream = getattr(sys, name)
                    stream.flush()  # what was written before the call still goes out
                    if hasattr(stream, "enabled"):
                        switched.append((stream, stream.enabled))
                        stream.enabled = False
                    else:  # not a skyhive stream: swap it out
                        switched.append((name, stream))
                        setattr(sys, name, _Null())
            try:
                return fn(*args, **kwargs)
            finally:
                for target, old in reversed(switched):
                    if isinstance(target, str):
                        setattr(sys, target, old)
                    else:
                        target.flush()  # drops what native code wrote while it was off
                        target.enabled = old

        return wrapper  # type: ignore[return-value]

    return decorate


def stdout(only: OutputSpec = "head") -> Callable[[F], F]:
    """Keep this function's stdout only on the selected nodes.

    `only`: "head" (node 0), a node index, a tuple of indexes, a predicate on `InstanceInfo`, "all",
    or None (no node). Raises `ValueError` for anything else, when decorating.
    """
    return _filter(("stdout",), only, "stdout(only)")


def stderr(only: OutputSpec = "head") -> Callable[[F], F]:
    """Keep this function's stderr only on the selected nodes (`only` as for `stdout`)."""
    return _filter(("stderr",), only, "stderr(only)")


def silent(fn: F | None = None) -> Any:
    """Drop this function's stdout and stderr on every node (`@sky.silent` or `@sky.silent()`)."""
    decorate: Callable[[F], F] = _filter(("stdout", "stderr"), None, "silent")
    return decorate if fn is None else decorate(fn)


class _Null:
    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False
