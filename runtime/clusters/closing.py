"""Closing a named pool's log: what `skyhive down` and autostop record once the pool is stopped."""

from __future__ import annotations

import contextlib

from ...errors import PoolNotFound

__all__ = ["close_log"]


def close_log(name: str, *, why: str, destroy: bool) -> None:
    """Record the named pool `name` stopped in its log (its workers stopped, its nodes terminated), if
    the log does not say so already; `destroy` also has its provider destroy what it holds by tag."""
    from ..events.inventory import down, find

    with contextlib.suppress(PoolNotFound):
        entry = find(name)
        if entry.pool_id == name and entry.needs_down:
            down(entry, force=True, why=why, leftovers=False, destroy=destroy)
