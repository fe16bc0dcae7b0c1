"""Content keys of large out-of-band buffers, for the workers' content cache (`protocol.cache`).

A key is a 128-bit hash of the buffer's bytes. xxHash's XXH3-128 when the `xxhash` package is
installed (~10 GB/s: 100 MiB in ~10 ms), else BLAKE2b (~0.5-1 GB/s); either way an accidental
collision is out of reach (2^-64 for 2^32 buffers). A function's pickle is keyed once, when it is
made (its key is its id, see `serialize`); an argument's buffers are hashed with each call (a numpy
array may have changed since the last one).
"""

from __future__ import annotations

import hashlib
from typing import Any

try:  # optional: a much faster hash than any in hashlib
    import xxhash

    def _digest(view: memoryview) -> bytes:
        return xxhash.xxh3_128_digest(view)
except ImportError:  # pragma: no cover - depends on the environment
    def _digest(view: memoryview) -> bytes:
        return hashlib.blake2b(view, digest_size=16).digest()

__all__ = ["content_key"]

def content_key(buf: Any) -> bytes:
    """The 16-byte content key of `buf` (any buffer)."""
    with memoryview(buf) as view:
        return _digest(view.cast("B") if view.format != "B" or view.ndim != 1 else view)
