"""A pool's bucket mounts opened and closed (the client side of `Pool(mounts=...)`)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import anyio

from . import deps
from .buckets import Prepared, prepare, release
from .plugin import BucketMounts, checkpoint_path
from .spec import Mount

__all__ = ["open_mounts", "close_mounts"]

log = logging.getLogger("skyhive.storage")


async def open_mounts(mounts: tuple[Mount, ...], pool_name: str | None, *,
                      same_python: bool = False) -> tuple[Prepared, Any]:
    """Check (or create and fill) the buckets; the plugin that puts the mounts in place on the workers
    (carrying boto3 for the nodes, unless their Python is this one: `same_python`, Local)."""
    prepared = await anyio.to_thread.run_sync(lambda: prepare(mounts))
    session = uuid.uuid4().hex
    bundle = None if same_python else await anyio.to_thread.run_sync(deps.bundle)
    return prepared, BucketMounts(prepared.mounts, session, checkpoint_path(mounts, pool_name or "default"), bundle)


async def close_mounts(prepared: Prepared, *, failed: bool = False) -> None:
    """Delete the buckets this pool created that are not to be kept (all of them if it failed to start)."""
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(lambda: release(prepared, failed=failed))
        await anyio.to_thread.run_sync(lambda: _abort_orphans(prepared))


def _abort_orphans(prepared: Prepared) -> None:
    """The multipart uploads left by processes that died mid-copy on this machine (a Local pool's
    killed worker, a killed client's upload of a `source`), aborted (uploads.py)."""
    from .uploads import abort_orphans

    try:
        abort_orphans([acc for _, acc in prepared.mounts])
    except Exception as exc:  # noqa: BLE001 - named; the pool is closed all the same
        log.warning("unfinished uploads could not be aborted: %s", exc)
