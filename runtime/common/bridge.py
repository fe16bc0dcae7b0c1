"""The sync→async bridge: `run_sync(fn, *args)` runs the async function `fn(*args)` to its end from
synchronous code and returns what it returns (or raises what it raises), on an event loop of its own in
a thread of its own — so it works whether or not the calling thread already runs a loop."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

__all__ = ["run_sync"]

T = TypeVar("T")


def run_sync(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """`fn(*args)` run to its end on a fresh event loop in a worker thread; its result."""
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="skyhive-bridge") as ex:
        return ex.submit(anyio.run, fn, *args).result()
