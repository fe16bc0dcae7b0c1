"""A new named pool that failed before anything was made leaves nothing in its name: not even its log lines.

A named pool's log (`pools/<name>.jsonl`) holds every pool that had the name, one after another. A
`launch -c NAME` that failed before its provider made anything (no credentials, a quota refused at
`prepare`) would otherwise stay there, and `skyhive ls` and `down` would read the next pool of that
name through it (its provider, machine and price). `NamedPool.open` notes where the log ended before
the attempt (`mark`) and, when the attempt fails, cuts off what it appended if that shows no node got
as far as being launched and nothing leaked (`forget_if_nothing_made`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os

from ..events.lifecycle import NodeState
from ..events.log import pool_log_path
from ..events.types import Event, NodeStateChanged, PoolStopped, from_json

__all__ = ["mark", "forget_if_nothing_made"]

log = logging.getLogger("skyhive.clusters")

#: Node states a node is in before its provider was asked for a machine (or after it gave up).
_NOT_MADE = frozenset({NodeState.REQUESTED.value, NodeState.TERMINATING.value, NodeState.TERMINATED.value,
                       NodeState.FAILED.value})


def mark(name: str) -> int:
    """Where pool `name`'s log ends now (0: no log yet)."""
    try:
        return os.stat(pool_log_path(name)).st_size
    except FileNotFoundError:
        return 0


def _made_something(events: list[Event]) -> bool:
    for ev in events:
        if isinstance(ev, NodeStateChanged) and (ev.provider_id or ev.state not in _NOT_MADE):
            return True
        if isinstance(ev, PoolStopped) and ev.leaked:
            return True
    return False


def forget_if_nothing_made(name: str, offset: int) -> bool:
    """Cut pool `name`'s log back to `offset` (remove it when that is 0) when what was appended since says
    the pool made nothing; True when it did. A line that is no event keeps everything (it cannot be told)."""
    path = pool_log_path(name)
    try:
        fh = open(path, "r+b")
    except FileNotFoundError:
        return False
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # as `skyhive down` takes it: no one appends while this looks
        fh.seek(offset)
        appended = fh.read()
        try:
            events = [from_json(line.decode("utf-8")) for line in appended.splitlines() if line.strip()]
        except (ValueError, TypeError):
            return False
        if not events or _made_something(events):
            return False
        if offset:
            fh.truncate(offset)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    log.info("pool %s: its launch made nothing: its log lines are forgotten", name)
    return True
