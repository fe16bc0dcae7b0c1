"""A worker started early (`providers/local_early.py`, when a plain Local pool is entered): it is spawned
with `early_env` — the mark that makes it wait, and its pool's id in a provisional `COMPUTE_POOL`, so that
what finds a pool's processes by their environment (`runtime/events/inventory.py`) finds it too — and
the rest of its environment comes in a first frame on stdin, read after the worker's modules are
imported and before the protocol's first byte: a 4-byte big-endian length, then `KEY=VALUE` entries
separated by NUL. Read with `os.read` exactly as long as the frame, so nothing of the protocol that
follows is taken.

Shared by the client (`runtime/pool.py`, before its runtime) and the worker (`runtime/worker/__main__.py`):
light on purpose; the protocol it names the pool's variable from is imported by both before it.
"""

from __future__ import annotations

import os

#: `protocol.info.ENV_VAR`, spelled here: importing `skyhive.protocol.info` imports the protocol package (msgpack
#: and the codec), which the client's early start runs before; tests/pool/test_early_workers.py ties the two
INFO_ENV = "COMPUTE_POOL"

__all__ = ["ENV_VAR", "early_env", "read_env"]

#: set by the client in the environment of a worker it starts early (`providers/local_early.py`)
ENV_VAR = "SKYHIVE_WORKER_EARLY"


def early_env(pool_id: str) -> dict[str, str]:
    """What a worker started early for pool `pool_id` is spawned with: the mark, and a provisional
    `COMPUTE_POOL` naming its pool (the first frame gives the whole of it)."""
    return {ENV_VAR: "1", INFO_ENV: '{"pool_id":"%s"}' % pool_id}


def _read_exactly(fd: int, n: int) -> bytes | None:
    parts, left = [], n
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_env(fd: int = 0) -> dict[str, str] | None:
    """The environment the client sent, or None when its pipe closed first (the worker was not
    taken: it has nothing to do)."""
    head = _read_exactly(fd, 4)
    if head is None:
        return None
    body = _read_exactly(fd, int.from_bytes(head, "big"))
    if body is None:
        return None
    env = {}
    for entry in body.split(b"\0") if body else ():
        key, _, value = entry.partition(b"=")
        env[os.fsdecode(key)] = os.fsdecode(value)
    return env
