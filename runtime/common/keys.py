"""Content keys of large out-of-band buffers, for the workers' content cache (`protocol.cache`).

A key is a 128-bit hash of the buffer's bytes. xxHash's XXH3-128 when the `xxhash` package is
installed (~25 GB/s here: 100 MiB in ~4 ms), else BLAKE2b (~0.5-1 GB/s); either way an accidental
collision is out of reach (2^-64 for 2^32 buffers). A function's pickle is keyed once, when it is
made (its key is its id, see `serialize`); an argument's buffers are hashed with each call (a numpy
array may have changed since the last one).

A buffer of `PARALLEL_MIN` bytes or more is hashed in `PART`-byte parts, the key being the hash of
their digests and the length: the parts are shared between this thread and helper threads (both hash
functions release the GIL), so sending the same 100 MiB array again costs ~2.7 ms of hashing instead
of ~4 with a second core free. Each thread takes the next part when it is free: a helper on a core
another process keeps busy takes few (a fixed half each made the caller wait for it: ~8 ms instead
of ~4 with a busy loop on the other core here). The parts depend only on the length, so a buffer has one key whatever
the number of threads. Keys only need to agree within one client: the worker takes them as given.
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (imported with the first large buffer: a worker's start does not need them)
    from concurrent.futures import Future, ThreadPoolExecutor

try:  # optional: a much faster hash than any in hashlib
    import xxhash

    def _digest(view: memoryview) -> bytes:
        return xxhash.xxh3_128_digest(view)
except ImportError:  # pragma: no cover - depends on the environment
    import hashlib

    def _digest(view: memoryview) -> bytes:
        return hashlib.blake2b(view, digest_size=16).digest()

__all__ = ["content_key", "PARALLEL_MIN", "PART"]

#: Buffers this large and up are hashed in parts, spread over threads.
PARALLEL_MIN = 16 << 20
#: Bytes per part (the last one may be shorter).
PART = 8 << 20
#: Helper threads besides the caller's (none on a single core).
_HELPERS = max(0, min(3, (os.cpu_count() or 1) - 1))
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def _helpers() -> ThreadPoolExecutor:
    """The helper threads, made on first use — again in a forked child, which has none of its
    parent's threads (an executor inherited from it would never run what it is given)."""
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():
        from concurrent.futures import ThreadPoolExecutor

        with _pool_lock:
            if _pool is None or _pool_pid != os.getpid():
                _pool = ThreadPoolExecutor(_HELPERS, thread_name_prefix="skyhive-hash")
                _pool_pid = os.getpid()
    return _pool


def _digests(view: memoryview, starts: range) -> bytes:
    return b"".join(_digest(view[s : s + PART]) for s in starts)


def content_key(buf: Any) -> bytes:
    """The 16-byte content key of `buf` (any buffer)."""
    with memoryview(buf) as view:
        flat = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        n = len(flat)
        if n < PARALLEL_MIN:
            return _digest(flat)
        starts = range(0, n, PART)
        if not _HELPERS:
            return _digest(memoryview(_digests(flat, starts) + n.to_bytes(8, "little")))
        # the parts are taken one at a time by whichever thread is free, so a helper that shares its
        # core with another process takes fewer of them (a fixed split made the caller wait for it)
        digests = [b""] * len(starts)
        take = itertools.count().__next__  # (one call: atomic under the GIL)

        def work() -> None:
            while (i := take()) < len(starts):
                digests[i] = _digest(flat[starts[i] : starts[i] + PART])

        futures: list[Future[None]] = [_helpers().submit(work) for _ in range(min(_HELPERS, len(starts) - 1))]
        try:
            work()
        finally:
            for future in futures:  # one that never started has nothing left to take: not waited for
                if not future.cancel():
                    future.result()  # (the view stays valid until the parts it took are hashed)
        return _digest(memoryview(b"".join(digests) + n.to_bytes(8, "little")))
