"""Keeping a named pool's record true while a client is attached.

A worker can start after the pool did: restarted in place by its node's supervisor, or the worker of
a node replaced by `Pool(replace_failed=True)`. It listens on the same socket path as the one it
replaces (`<socket_dir>/n<node>-w<rank>.sock`), under a new pid; the record is rewritten with that pid
as soon as the worker is ready, so that `Pool.attach`, `skyhive status` and `skyhive down` name the
process that runs even when this client is killed before it leaves.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator

from ..events.types import Event, WorkerStateChanged
from . import record as records

log = logging.getLogger("skyhive.clusters")

__all__ = ["follow_workers", "rerecord"]


async def follow_workers(events: AsyncIterator[Event], name: str) -> None:
    """Rewrite pool `name`'s record for each worker that becomes ready in `events` (the attached
    client's subscription to its pool's log; it ends when the client leaves)."""
    async for event in events:
        if isinstance(event, WorkerStateChanged) and event.state == "ready" and event.pid:
            try:
                rerecord(name, event.node, event.local_rank, event.pid)
            except Exception:  # noqa: BLE001 - the pool goes on; `down` still finds the worker by its socket
                log.exception("pool %s: could not record node %d worker %d (pid %d)", name, event.node,
                              event.local_rank, event.pid)


def rerecord(name: str, node: int, rank: int, pid: int) -> bool:
    """Record `pid` as worker `rank` of node `node` of pool `name`; False when the record said so already."""
    rec = records.load(name)
    workers = tuple(dataclasses.replace(w, pid=pid) if (w.node, w.rank) == (node, rank) else w for w in rec.workers)
    if workers == rec.workers:
        return False
    records.save(dataclasses.replace(rec, workers=workers))
    log.info("pool %s: node %d worker %d is now pid %d", name, node, rank, pid)
    return True
