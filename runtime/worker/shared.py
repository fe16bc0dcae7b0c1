"""The worker's side of shared memory with a client on the same machine (the Local transport).

Large result buffers leave as memfds passed over the shared-memory socket (`share_result`); buffers the
client passed that way are mapped, or kept in the content cache when keyed (`attach_shared`). The
descriptors travel beside the protocol's frames (see `skyhive.runtime.common.shm`).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from ...protocol import Result, Submit
from ...protocol.cache import KEY_SIZE, NO_KEY
from ..common import shm
from .bufcache import MemfdStore

__all__ = ["attach_shared", "share_result"]


def share_result(fds: shm.FdInbox, msg: Result, buffers: list[Any]) -> Result:
    """`msg` naming the large buffers now passed to the client in shared memory (`msg` itself if none
    is large enough)."""
    indices = [i for i, b in enumerate(buffers) if memoryview(b).nbytes >= shm.SHARE_MIN][: shm.MAX_SHARED]
    if not indices:
        return msg
    passed = [shm.share(buffers[i]) for i in indices]
    shm.send_fds(fds.sock, msg.task_id, indices, passed)
    return replace(msg, shared=tuple(indices))


def attach_shared(fds: shm.FdInbox | None, store: MemfdStore | None, sub: Submit) -> Submit:
    """`sub` with the buffers the client passed in shared memory mapped (kept in `store`, the content
    cache, when keyed); raises ConnectionError if they were not passed or are no longer held."""
    if fds is None and sub.shared:
        raise ConnectionError(f"task {sub.task_id} announced shared buffers, and this worker has no "
                              "shared-memory socket")
    buffers = list(sub.buffers)
    for i in sub.cached:
        if buffers[i] is None:  # an earlier Submit brought it in shared memory (see Connection)
            key = sub.buffer_keys[i * KEY_SIZE : (i + 1) * KEY_SIZE]
            buffers[i] = store.lookup(key, sub.buffer_sizes[i]) if store is not None else None
            if buffers[i] is None:
                raise ConnectionError(f"task {sub.task_id}: buffer {i}, passed in shared memory for an "
                                      "earlier task, is no longer held")
    passed = fds.take(sub.task_id, sub.shared) if sub.shared and fds is not None else {}
    for i, fd in list(passed.items()):
        del passed[i]
        try:
            # our own descriptor, under a shared lock while we use the file: the client reuses
            # its memfds, and refills one only once no worker holds it (see shm.MemfdPool)
            fd = shm.hold(fd)
        except BaseException:
            for other in passed.values():
                os.close(other)
            raise
        size = sub.buffer_sizes[i]
        key = sub.buffer_keys[i * KEY_SIZE : (i + 1) * KEY_SIZE] if sub.buffer_keys else NO_KEY
        if store is not None and key != NO_KEY:
            buffers[i] = store.keep_file(key, fd, size)
        else:
            try:
                buffers[i] = shm.map_file(fd, size)
            finally:
                os.close(fd)
    return replace(sub, buffers=tuple(buffers))
