"""The one way synchronous code of the runtime runs a coroutine: `run(fn, *args)`.

A command's entry point (`skyhive launch`, `skyhive down`, the queue agent's job loop, a managed job's
controller) is synchronous; what it drives is async. `run` runs `fn(*args)` on an event loop of its own
(anyio's asyncio backend) and returns what it returns or raises what it raises. Where an event loop
already runs in the calling thread (synchronous code called from async code: a loop cannot be
started inside another), or where the caller asks for it with `thread=True` (the work must not share
the calling thread's signals: Ctrl-C in the caller does not cancel it halfway), it runs in a fresh
thread of its own, the caller waiting for it.

Nothing else under `runtime/` calls `asyncio.run` or `anyio.run` (tests/common/test_daemon_bridge.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

__all__ = ["run", "in_loop"]

T = TypeVar("T")


def in_loop() -> bool:
    """Whether an event loop runs in the calling thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run(fn: Callable[..., Awaitable[T]], *args: Any, thread: bool = False, name: str = "skyhive-bridge") -> T:
    """`fn(*args)` run to its end from synchronous code: its result (or its exception). In this thread,
    unless a loop already runs here or `thread` is set: then in a fresh thread named `name`."""
    if not (thread or in_loop()):
        return anyio.run(fn, *args)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=name) as ex:
        return ex.submit(anyio.run, fn, *args).result()
