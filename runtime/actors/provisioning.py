"""Driving a provider's phases with its own error policy: transient errors retried with backoff,
connecting retried within a bound while a fresh node's sshd starts.

Pure policy around awaitables; the node and pool actors decide which phase runs when.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from ...providers.base import NodeUnreachable, Provider

log = logging.getLogger("skyhive.provision")

__all__ = ["with_retries", "connect_with_retry"]

T = TypeVar("T")

#: First wait between connection attempts to a node that is still starting (doubles, at most 2 s).
CONNECT_RETRY_DELAY = 0.25


async def with_retries(provider: Provider, what: str, op: Callable[[], Awaitable[T]], *,
                       on_retry: Callable[[str], None] | None = None) -> T:
    """`await op()`, retrying the errors `provider.is_transient` accepts with `provider.retry`'s backoff.

    Any other error, or a transient one after the last attempt, is raised as it is. `on_retry(why)` is
    called before each wait (the node actor records it as the node's progress).
    """
    delays = provider.retry.delays()
    for attempt in range(len(delays) + 1):
        try:
            return await op()
        except Exception as exc:
            if attempt >= len(delays) or not provider.is_transient(exc):
                raise
            why = (f"{what}: {type(exc).__name__}: {exc} (transient; attempt {attempt + 1} of "
                   f"{len(delays) + 1}, retrying in {delays[attempt]:g} s)")
            log.warning("%s provider: %s", provider.name, why)
            if on_retry is not None:
                on_retry(why)
            await anyio.sleep(delays[attempt])
    raise AssertionError("unreachable")  # pragma: no cover


async def connect_with_retry(connect: Callable[[], Awaitable[object]], *, bound: float, where: str,
                             on_retry: Callable[[str], None] | None = None) -> None:
    """`await connect()`, retrying `NodeUnreachable` (connection refused, sshd not up yet) for at most
    `bound` seconds. Other errors (a changed host key, refused authentication) are raised at once; so
    is the last `NodeUnreachable` once the bound is spent."""
    deadline = time.monotonic() + bound
    delay = CONNECT_RETRY_DELAY
    while True:
        try:
            await connect()
            return
        except NodeUnreachable as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            if on_retry is not None:
                on_retry(f"connecting to {where}: {exc} (retrying for {left:.0f} s more)")
            await anyio.sleep(min(delay, left))
            delay = min(delay * 2, 2.0)
