"""`MemfdStore`: the worker's content cache of large buffers, in anonymous memory files.

Each keyed buffer arrives into its own memfd (no name anywhere: it lives as long as a descriptor or a
mapping of it does, so nothing is left behind by a killed worker). It arrives either through a shared
mapping of the file (a reader that reads straight into its destination, the pipe worker) or, with
`mapped=False`, by `pwrite` of each piece (the socket worker, whose pieces pass through its own read
buffer anyway): the kernel then fills fresh pages without a page fault each — 100 MiB into a new
memfd costs ~45 ms by `pwrite` against ~80 ms through a mapping here, and no mapping is torn down
after. Once complete it is held by its descriptor, least recently used first out when the byte budget
is exceeded. A task never sees the
held pages directly: it gets a private (copy-on-write) mapping of the file, so reading costs no copy,
and a task that writes into its argument (`arr += 1`) changes its own pages only — the cached
content, and the next task's argument, stay what the client sent.

Memory files are refilled rather than made anew when they can be: new memory costs the kernel more
than the copy into it (~25 ms of page allocation per 100 MiB here). When a buffer is about to arrive
and the budget is full, the least recently used entries are evicted then (the client's `ContentIndex`
evicts at the same point of the stream: when it sends that buffer), and the arrival goes into one
of them that nothing maps any more — resized to the new size (pages past the end are freed) and
overwritten whole before anyone sees it. Whether a file is still mapped is asked of the kernel: each
private mapping a task gets is made from an open file of its own that holds a shared `flock` for as
long as the mapping lives (`shm.hold` does the same for a client's memfd), so a file is refilled only
if an exclusive lock can be taken. Files that came from the client (`keep_file`) are never refilled
here: the client reuses those itself.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
from collections import OrderedDict
from typing import Any

from ...protocol.cache import BufferStore
from ..common.shm import map_file

log = logging.getLogger("skyhive.worker.cache")

__all__ = ["MemfdStore", "FileTarget"]


class MemfdStore(BufferStore):
    """An LRU of memfd-backed buffers, at most `capacity` bytes held (see the module docstring)."""

    def __init__(self, capacity: int, *, mapped: bool = True) -> None:
        self.capacity = capacity
        self.mapped = mapped
        self.used = 0
        self.hits = 0
        self.misses = 0
        self.refilled = 0
        self._refill = os.path.isdir("/proc/self/fd")  # how a mapping gets an open file of its own
        # key -> (fd, size, ours): `ours` when this store made and filled the file (it may refill it)
        self._held: OrderedDict[bytes, tuple[int, int, bool]] = OrderedDict()
        self._arriving: dict[int, int] = {}  # id(target) -> fd of a buffer still being filled

    def __repr__(self) -> str:
        return f"<MemfdStore {len(self._held)} buffers, {self.used}/{self.capacity} bytes>"

    def statistics(self) -> dict[str, int]:
        return {"buffers": len(self._held), "bytes": self.used, "capacity": self.capacity,
                "hits": self.hits, "misses": self.misses, "refilled": self.refilled}

    def lookup(self, key: bytes, size: int) -> Any | None:
        entry = self._held.get(key)
        if entry is None or entry[1] != size:
            self.misses += 1
            return None
        self._held.move_to_end(key)
        self.hits += 1
        return _private(entry[0], size, entry[2])

    def allocate(self, size: int) -> Any:
        fd = self._make_room(size)
        if fd is None:
            fd = os.memfd_create("skyhive-buffer", os.MFD_CLOEXEC)
        else:
            self.refilled += 1
        try:
            os.ftruncate(fd, size)
            target: Any = mmap.mmap(fd, size) if self.mapped else FileTarget(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._arriving[id(target)] = fd
        return target

    def keep(self, key: bytes, buffer: Any) -> Any:
        fd = self._arriving.pop(id(buffer))
        size = len(buffer)
        if size > self.capacity or key in self._held:
            if key in self._held:
                self._held.move_to_end(key)
            if buffer.__class__ is FileTarget:
                try:
                    return _private(fd, size)
                finally:
                    os.close(fd)
            os.close(fd)  # the mapping keeps the file alive for this task alone
            return buffer
        ours = self._refill
        if buffer.__class__ is not FileTarget:
            try:
                buffer.close()  # the task gets a private mapping instead
            except BufferError:  # still exported somewhere: it goes with its last view, and a
                ours = False  # mapping we cannot see stays on the file: never refill it
        self._held[key] = (fd, size, ours)
        self.used += size
        self._evict()
        return _private(fd, size, ours)

    def keep_file(self, key: bytes, fd: int, size: int) -> Any:
        """`keep` for a buffer that arrived as a whole memory file (shared memory from a client on
        this machine): the store takes `fd` over, no copy."""
        if size > self.capacity or key in self._held or size == 0:
            if key in self._held:
                self._held.move_to_end(key)
            try:
                return _private(fd, size) if size else bytearray()
            finally:
                os.close(fd)
        self._held[key] = (fd, size, False)
        self.used += size
        self._evict()
        return _private(fd, size)

    def _make_room(self, size: int) -> int | None:
        """Before `size` bytes arrive: evict the least recently used entries it will displace; the
        descriptor of one of them that nothing maps any more, to refill, or None."""
        if size > self.capacity:
            return None  # it will not be held: it displaces nothing
        reuse = None
        while self._held and self.used + size > self.capacity:
            _, (old_fd, old_size, ours) = self._held.popitem(last=False)
            self.used -= old_size
            if reuse is None and ours and _unmapped(old_fd):
                reuse = old_fd
            else:
                os.close(old_fd)  # pages go once no task maps them any more
        return reuse

    def _evict(self) -> None:
        while self.used > self.capacity:
            _, (old_fd, old_size, _ours) = self._held.popitem(last=False)
            os.close(old_fd)  # pages go once no task maps them any more
            self.used -= old_size

    def close(self) -> None:
        """Drop everything held."""
        while self._held:
            _, (fd, _size, _ours) = self._held.popitem()
            os.close(fd)
        while self._arriving:
            os.close(self._arriving.popitem()[1])
        self.used = 0

    def __del__(self) -> None:
        self.close()


class FileTarget:
    """Where a keyed buffer arrives with `mapped=False`: its memfd, written by `pwrite` (no mapping).
    The `Connection` stores each piece with `target[offset:offset + n] = piece`."""

    __slots__ = ("fd", "size")

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size

    def __repr__(self) -> str:
        return f"<FileTarget fd={self.fd} {self.size} bytes>"

    def __len__(self) -> int:
        return self.size

    def __setitem__(self, index: slice, data: Any) -> None:
        view = memoryview(data).cast("B")
        pos = index.start or 0
        stop = self.size if index.stop is None else min(index.stop, self.size)
        if index.step not in (None, 1) or pos < 0 or pos + len(view) != stop:
            raise ValueError(f"{self!r}: cannot write {len(view)} bytes to [{index.start}:{index.stop}]")
        while view:
            n = os.pwrite(self.fd, view, pos)
            pos += n
            view = view[n:]


def _private(fd: int, size: int, locked: bool = False) -> Any:
    """A copy-on-write mapping of the file: reads share its pages, writes stay in this mapping. With
    `locked`, made from an open file of its own under a shared `flock`, which lasts as long as the
    mapping does (so the store does not refill the file under it; see the module docstring)."""
    if not locked or size == 0:
        return map_file(fd, size)
    own = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(own, fcntl.LOCK_SH)
        return map_file(own, size)
    finally:
        os.close(own)  # the mapping keeps the open file, hence the lock


def _unmapped(fd: int) -> bool:
    """True if no mapping made by `_private(..., locked=True)` of the file is alive."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True
