"""Worker-side output filters: `@sky.stdout(only=...)`, `@sky.stderr(only=...)`, `@sky.silent`.

Placed below `@sky.compute`. On a node that is not selected the stream is switched off for the
duration of the call, so its text is dropped on the worker and never crosses the wire.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from .context import instance_info
from .selection import OutputSpec, selector

__all__ = ["stdout", "stderr", "silent"]

F = TypeVar("F", bound=Callable[..., Any])


def _filter(streams: tuple[str, ...], only: OutputSpec, where: str) -> Callable[[F], F]:
    select = selector(only, where=where)

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            keep = select(instance_info())
            switched = []
            if not keep:
                for name in streams:
                    stream = getattr(sys, name)
                    stream.flush()
                    if hasattr(stream, "enabled"):
                        switched.append((stream, stream.enabled))
                        stream.enabled = False
                    else:  # not on a skyhive worker (e.g. called locally): swap the stream out
                        switched.append((name, stream))
                        setattr(sys, name, _Null())
            try:
                return fn(*args, **kwargs)
            finally:
                for target, old in reversed(switched):
                    if isinstance(target, str):
                        setattr(sys, target, old)
                    else:
                        target.flush()
                        target.enabled = old

        return wrapper  # type: ignore[return-value]

    return decorate


def stdout(only: OutputSpec = "head") -> Callable[[F], F]:
    """Keep this function's stdout only on the selected nodes ("head", an index, a tuple, a predicate)."""
    return _filter(("stdout",), only, "stdout(only)")


def stderr(only: OutputSpec = "head") -> Callable[[F], F]:
    """Keep this function's stderr only on the selected nodes."""
    return _filter(("stderr",), only, "stderr(only)")


def silent(fn: F) -> F:
    """Drop this function's stdout and stderr on every node."""
    return _filter(("stdout", "stderr"), None, "silent")(fn)


class _Null:
    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass
