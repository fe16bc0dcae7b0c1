"""Gathering the results of one task sent to many workers (a broadcast): wait for all of them, or
stop at the first failure — and when workers are lost, name every one lost with it.

The wait is O(workers): one done-callback per future and one wake-up per failure (re-arming
`asyncio.wait` on every wake-up made a 10,000-worker broadcast quadratic).

Workers lost together (a rack losing power, the OOM killer, a partition) are detected one by one,
microseconds to milliseconds apart. When the first failure is a `WorkerLost`, the gather waits until
no further loss has come for `SETTLE_QUIET` seconds (at most `SETTLE_MAX` in all) and raises one
`WorkerLost` naming all of them (`.nodes`), so the caller learns the extent of the damage at once
instead of one node per retry. A task that raised on its node settles the same way: the first error
is raised with the nodes that failed with it named in its notes and `.nodes` (dispatch.py), so a
broadcast where every node fails says so instead of naming one node.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from ...errors import WorkerLost

__all__ = ["gather_or_first_failure", "lost_together", "SETTLE_QUIET", "SETTLE_MAX"]

#: A further worker loss within this many seconds of the previous one is reported with it.
SETTLE_QUIET = 0.1
#: The longest a broadcast's failure waits to collect further losses.
SETTLE_MAX = 1.0


def _failed(fut: asyncio.Future[Any]) -> bool:
    return fut.cancelled() or fut.exception() is not None or not fut.result().ok


async def gather_or_first_failure(futures: Sequence[asyncio.Future[Any]]) -> list[int]:
    """Wait until every future is done, or one failed (a `Result` not ok, an exception, cancelled).

    Returns the indices of the futures that failed, in the order they failed ([] if none). After a
    first failure, waits for the failures that come with it (see the module docstring): at most
    `SETTLE_MAX`, and not at all once every future is done.
    """
    failed: list[int] = [i for i, fut in enumerate(futures) if fut.done() and _failed(fut)]
    remaining = sum(not fut.done() for fut in futures)
    if not remaining:
        return failed
    # the wake-up: a plain future (an asyncio.Event made one per wait anyway), replaced for each
    # further wait while losses settle
    waiter = [futures[0].get_loop().create_future()]

    def wake() -> None:
        if not waiter[0].done():
            waiter[0].set_result(None)

    def on_done(i: int, fut: asyncio.Future[Any]) -> None:
        nonlocal remaining
        remaining -= 1
        if _failed(fut):
            failed.append(i)
            wake()
        elif not remaining:
            wake()

    callbacks = []
    for i, fut in enumerate(futures):
        if not fut.done():
            callback = functools.partial(on_done, i)
            fut.add_done_callback(callback)
            callbacks.append((fut, callback))
    try:
        if not failed:
            await waiter[0]
        if failed:
            await _settle(failed, waiter, lambda: remaining)
    finally:
        for fut, callback in callbacks:
            fut.remove_done_callback(callback)
    return failed


async def _settle(failed: list[int], waiter: list[asyncio.Future[None]], remaining: Callable[[], int]) -> None:
    """Wait while further failures keep coming, each within `SETTLE_QUIET` of the previous one."""
    deadline = time.monotonic() + SETTLE_MAX
    count = -1
    while len(failed) > count and remaining():
        count = len(failed)
        waiter[0] = waiter[0].get_loop().create_future()
        quiet = min(SETTLE_QUIET, deadline - time.monotonic())
        if quiet <= 0:
            return
        with anyio.move_on_after(quiet):
            await waiter[0]


def lost_together(pool_id: str, fn_name: str, errors: Sequence[WorkerLost]) -> WorkerLost:
    """One `WorkerLost` for several workers lost in one call: it names every node (`.nodes`, in node
    order), grouped by reason; `.node` and `.local_rank` are those of the first in node order."""
    errors = sorted(errors, key=lambda e: (e.node, e.local_rank))
    if len(errors) == 1:
        return errors[0]
    by_reason: dict[str, list[WorkerLost]] = {}
    for err in errors:
        by_reason.setdefault(_reason(err), []).append(err)
    parts = [f"{_where(group)}: {reason}" for reason, group in by_reason.items()]
    nodes = tuple(dict.fromkeys(e.node for e in errors))
    first = errors[0]
    lost = WorkerLost(f"{len(errors)} workers of pool {pool_id} on {len(nodes)} nodes were lost while running "
                      f"{fn_name}: " + "; ".join(parts), node=first.node, local_rank=first.local_rank, nodes=nodes)
    return lost


def _where(group: list[WorkerLost]) -> str:
    if all(e.local_rank == 0 for e in group):
        return ("node " if len(group) == 1 else "nodes ") + ", ".join(str(e.node) for e in group)
    return ", ".join(f"node {e.node} worker {e.local_rank}" for e in group)


def _reason(err: WorkerLost) -> str:
    """The cause part of a channel's "…was lost while running f (task 7): <reason>" message."""
    text = str(err)
    head, sep, reason = text.partition("): ")
    return reason if sep else text
