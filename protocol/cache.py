"""The content cache of large out-of-band buffers: what each side keeps, with no I/O.

A client that sends the same large buffer to the same worker again (a dataset each epoch, one big
argument shared by every item of a `map`) sends a reference instead: `Submit.buffer_keys` names each
buffer by a 16-byte content key (all zero: not cacheable), and `Submit.cached` lists the buffers the
client believes the worker holds and does not send. The worker's `Connection` looks them up in its
`BufferStore`; any it no longer holds (evicted, worker restarted) it asks for with `Missing`, and the
client sends those as ordinary chunks — a miss costs a round trip, never an error.

The client's belief is a `ContentIndex`: the same LRU over the same byte budget (`Hello.cache_bytes`)
the worker's store keeps, fed the same sequence of keys, so the two agree unless the worker had to
drop something early. Keys are computed by the client (the worker trusts them: both ends belong to the
same user). What a store does with memory is the runtime's business; this module only says what it
must do.
"""

from __future__ import annotations

import abc
from collections import OrderedDict
from typing import Any

__all__ = ["KEY_SIZE", "NO_KEY", "BufferStore", "ContentIndex"]

#: Bytes of one content key in `Submit.buffer_keys`.
KEY_SIZE = 16
#: The key of a buffer that is not to be cached.
NO_KEY = bytes(KEY_SIZE)


class BufferStore(abc.ABC):
    """The worker's cache of received buffers, by content key (an LRU bounded by bytes).

    `Connection` calls `lookup` for each buffer a `Submit` sends by reference, `allocate` for each
    keyed buffer about to arrive, and `keep` once it has arrived whole; what `lookup` and `keep`
    return is what the task's unpickler sees.
    """

    @abc.abstractmethod
    def lookup(self, key: bytes, size: int) -> Any | None:
        """The buffer held under `key` (of `size` bytes), marked most recently used; None if not held."""

    @abc.abstractmethod
    def allocate(self, size: int) -> Any:
        """A writable buffer of `size` bytes for a keyed buffer about to arrive."""

    @abc.abstractmethod
    def keep(self, key: bytes, buffer: Any) -> Any:
        """`buffer` (from `allocate`, now complete) is the content of `key`: hold it (evicting the
        least recently used as needed) and return the buffer the task gets."""


class ContentIndex:
    """The client's record of the keys one worker holds: an LRU over `capacity` bytes that mirrors the
    worker's `BufferStore` (same budget, same sequence of keys). Pure bookkeeping, no buffers."""

    __slots__ = ("capacity", "used", "_sizes")

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"cache capacity must be >= 0 bytes, got {capacity}")
        self.capacity = capacity
        self.used = 0
        self._sizes: OrderedDict[bytes, int] = OrderedDict()

    def __repr__(self) -> str:
        return f"<ContentIndex {len(self._sizes)} keys, {self.used}/{self.capacity} bytes>"

    def __contains__(self, key: bytes) -> bool:
        return key in self._sizes

    def touch(self, key: bytes) -> bool:
        """True (and `key` becomes most recently used) if the worker is believed to hold `key`."""
        if key in self._sizes:
            self._sizes.move_to_end(key)
            return True
        return False

    def add(self, key: bytes, size: int) -> None:
        """`key` (`size` bytes) is being sent whole: the worker will hold it, evicting as needed.
        A buffer larger than the whole budget is not held."""
        if key in self._sizes:
            self._sizes.move_to_end(key)
            return
        if size > self.capacity:
            return
        self._sizes[key] = size
        self.used += size
        while self.used > self.capacity:
            _, dropped = self._sizes.popitem(last=False)
            self.used -= dropped

    def discard(self, key: bytes) -> None:
        """The worker said it does not hold `key` (a `Missing`): forget it."""
        size = self._sizes.pop(key, None)
        if size is not None:
            self.used -= size
