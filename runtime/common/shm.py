"""Shared memory between the client and a worker on the same machine: memfds passed over a socket.

A large out-of-band buffer to (or from) a Local worker does not go through the pipe: the sender copies
it once into a fresh memfd, passes the descriptor with `SCM_RIGHTS` over a Unix socket pair made when
the worker was started (beside its pipes), and closes its own descriptor at once. The receiver maps
the file (privately, copy-on-write: reading costs no copy, a write stays in the receiver's pages) and
closes its descriptor; the pages go when the last mapping does. A memfd has no name anywhere, so
nothing is ever left in /dev/shm: not after a call, nor a pool, nor a SIGKILLed client or worker
(descriptors in flight in a socket that nobody holds any more are freed by the kernel).

The descriptors of one message travel as one datagram: the task id, the buffer indices, then the fds.
The frame that announces them (`Submit.shared` / `Result.shared`) is written to the pipe after the
datagram was sent, so the receiver finds it waiting; `FdInbox` keeps any that belong to other tasks
(a `Submit` completed by its chunks may be read later than one sent after it).
"""

from __future__ import annotations

import array
import fcntl
import logging
import mmap
import os
import struct
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (imported where a socket is made or used: a worker starts without `socket`)
    import socket

log = logging.getLogger("skyhive.transport.shm")

__all__ = ["SHARE_MIN", "MAX_SHARED", "ENV_VAR", "socket_pair", "share", "send_fds", "SharedFiles", "FdInbox",
           "map_file", "MemfdPool", "hold"]

#: Buffers this large and up travel through shared memory to a Local worker.
SHARE_MIN = 256 * 1024
#: At most this many buffers of one message are shared (the kernel passes at most 253 fds at once).
MAX_SHARED = 64
#: The worker finds its end of the socket pair in this environment variable (a descriptor number).
ENV_VAR = "SKYHIVE_SHM_FD"
_HEAD = struct.Struct("<QI")
_WRITE_STEP = 64 << 20  # task id, number of buffers; then one uint32 index per buffer


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """(client end, worker end), both close-on-exec (the worker's end is passed explicitly)."""
    import socket

    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def share(buffer: Any) -> int:
    """A new memfd holding a copy of `buffer`; the caller owns (and must close) the descriptor."""
    fd = os.memfd_create("skyhive-shared", os.MFD_CLOEXEC)
    try:
        _fill(fd, buffer)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _fill(fd: int, buffer: Any) -> None:
    """Make the file exactly `buffer`: its size, then its bytes (every one written)."""
    view = memoryview(buffer).cast("B")
    os.ftruncate(fd, len(view))
    # pwrite, not a copy into a mapping: the kernel fills whole pages without a fault per page
    # (1 GiB: ~0.4 s against ~1 s, measured)
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done : done + _WRITE_STEP], done)


def hold(fd: int) -> int:
    """The receiver's side of a memfd passed to it: a descriptor of its own for the file, under a
    shared `flock`, in place of `fd` (closed here). The lock belongs to the new open file, so it lasts
    as long as any descriptor or mapping made from the returned descriptor — which is how the
    sender's `MemfdPool` tells when nobody uses the file any more (see there)."""
    try:
        mine = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise ConnectionError(f"cannot open a shared-memory file passed by the client through /proc/self/fd "
                              f"({exc}; is /proc mounted?)") from exc
    finally:
        os.close(fd)
    try:
        fcntl.flock(mine, fcntl.LOCK_SH)
    except BaseException:
        os.close(mine)
        raise
    return mine


class MemfdPool:
    """The client's memfds for large arguments to Local workers, kept for reuse.

    A fresh memfd costs its pages: the kernel allocates and zeroes each one as it is first written
    (~0.4 s per GiB here). A file whose every user is gone is filled again instead: resized to the new
    buffer (which frees any pages past its end) and overwritten whole, so nothing of an earlier
    buffer is left in it.

    Whether a file is still used is asked of the kernel: each worker holds a shared `flock` on the
    file (`hold`) for as long as it has a descriptor or mapping of it (the content cache, a task's
    argument, an array a task kept), and a worker that dies releases it. A file is only offered for
    reuse after the call it carried has ended (every worker it went to answered, so each has taken its
    lock before), and it is refilled only if an exclusive lock can be taken at that moment.

    Bounded: the files kept hold at most `max_bytes` and number at most `max_files`; past that the
    oldest free ones are closed (a worker still using one keeps its own descriptor). `close()` closes
    every file; the pool owns the descriptors it hands out.
    """

    def __init__(self, max_bytes: int, max_files: int = 16) -> None:
        self.max_bytes = max_bytes
        self.max_files = max_files
        self._free: list[tuple[int, int]] = []  # (fd, size), oldest first
        self._busy: dict[int, int] = {}  # fd -> size, filled for a call still running
        self.created = 0
        self.reused = 0
        self._closed = False

    def __repr__(self) -> str:
        return f"<MemfdPool free={len(self._free)} busy={len(self._busy)} bytes={self.bytes}/{self.max_bytes}>"

    @property
    def bytes(self) -> int:
        """Bytes of all the files the pool holds (free and busy)."""
        return sum(size for _, size in self._free) + sum(self._busy.values())

    def statistics(self) -> dict[str, int]:
        return {"free": len(self._free), "busy": len(self._busy), "bytes": self.bytes,
                "created": self.created, "reused": self.reused}

    def fill(self, buffer: Any) -> int:
        """A memfd holding exactly a copy of `buffer`: a free file nobody uses any more, refilled, or
        a new one. The pool owns the descriptor: hand it back with `release`."""
        if self._closed:
            raise RuntimeError("MemfdPool is closed")
        size = memoryview(buffer).nbytes
        fd = self._reusable(size)
        if fd is None:
            fd = os.memfd_create("skyhive-shared", os.MFD_CLOEXEC)
            self.created += 1
        else:
            self.reused += 1
        try:
            _fill(fd, buffer)
        except BaseException:
            os.close(fd)
            raise
        self._busy[fd] = size
        return fd

    def _reusable(self, size: int) -> int | None:
        """The best free file no one holds (the smallest at least `size` bytes, else the largest),
        taken out of the free list; None if there is none."""
        candidates = sorted(range(len(self._free)), key=lambda i: (self._free[i][1] < size, abs(self._free[i][1] - size)))
        for i in candidates:
            fd = self._free[i][0]
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a worker still has it (its cache, a task's argument)
            fcntl.flock(fd, fcntl.LOCK_UN)  # (a worker takes its shared lock only once we pass it on)
            del self._free[i]
            return fd
        return None

    def release(self, fd: int, *, reusable: bool) -> None:
        """`fd` (from `fill`) is no longer needed for its call. With `reusable` — the call ended and
        every worker it went to answered — it is kept for a later `fill`; otherwise (a call cut short:
        a worker may still be about to take the file) it is closed."""
        size = self._busy.pop(fd, None)
        if size is None:
            if self._closed:
                return  # closed with the pool already
            raise ValueError(f"descriptor {fd} is not one of this pool's busy files")
        if not reusable or self._closed or self.max_bytes == 0:
            os.close(fd)
            return
        self._free.append((fd, size))
        while self._free and (self.bytes > self.max_bytes or len(self._free) + len(self._busy) > self.max_files):
            os.close(self._free.pop(0)[0])

    def close(self) -> None:
        """Close every file (free, and busy ones too: a worker that has one keeps its own descriptor)."""
        self._closed = True
        free, self._free = self._free, []
        busy, self._busy = self._busy, {}
        for fd, _ in free:
            os.close(fd)
        for fd in busy:
            os.close(fd)

    def __del__(self) -> None:
        self.close()


def send_fds(sock: socket.socket, task_id: int, indices: Sequence[int], fds: Sequence[int], *,
             close: bool = True) -> None:
    """Pass `fds` (buffers `indices` of task `task_id`) over `sock`; with `close`, close them here
    (the kernel holds its own reference while they are in flight)."""
    import socket

    try:
        head = _HEAD.pack(task_id, len(indices)) + struct.pack(f"<{len(indices)}I", *indices)
        sock.sendmsg([head], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    finally:
        if close:
            for fd in fds:
                os.close(fd)


class SharedFiles:
    """The memfds of one call's buffers, made once however many workers they are passed to, and
    closed (or handed back to the `MemfdPool` they came from) with this object; the workers' own
    descriptors and mappings keep the pages as long as they need them."""

    __slots__ = ("fds", "pool")

    def __init__(self) -> None:
        self.fds: dict[int, int] = {}
        self.pool: MemfdPool | None = None  # where the files came from (all from it, or none)

    def fd(self, index: int, buffer: Any, pool: MemfdPool | None = None) -> int:
        fd = self.fds.get(index)
        if fd is None:
            if not self.fds:
                self.pool = pool
            fd = self.fds[index] = self.pool.fill(buffer) if self.pool is not None else share(buffer)
        return fd

    def close(self, *, reusable: bool = False) -> None:
        """Close the files — or, from a pool, hand them back: for reuse if `reusable` (the call ended
        with an answer from every worker they went to)."""
        fds, self.fds = self.fds, {}
        pool = self.pool
        for fd in fds.values():
            if pool is not None:
                pool.release(fd, reusable=reusable)
            else:
                os.close(fd)

    def __del__(self) -> None:
        self.close()


class FdInbox:
    """The receiving end: the descriptors passed for each task, taken in any order."""

    def __init__(self, sock: socket.socket | int) -> None:
        """`sock`: the socket, or its descriptor (a worker's, made a socket on first use: a worker that is never
        passed a buffer never imports `socket`)."""
        self._sock = sock
        self._waiting: dict[int, dict[int, int]] = {}

    @property
    def sock(self) -> socket.socket:
        sock = self._sock
        if isinstance(sock, int):
            import socket

            sock = self._sock = socket.socket(fileno=sock)
        return sock

    def take(self, task_id: int, indices: Sequence[int], *, block: bool = True) -> dict[int, int]:
        """index -> fd for task `task_id` (the caller owns them). Raises `ConnectionError` when they
        are not there (the peer broke the order) or the socket ended."""
        while task_id not in self._waiting:
            self._receive(block)
        got = self._waiting.pop(task_id)
        if sorted(got) != sorted(indices):
            for fd in got.values():
                os.close(fd)
            raise ConnectionError(f"task {task_id}: descriptors for buffers {sorted(got)}, "
                                  f"expected {sorted(indices)}")
        return got

    def _receive(self, block: bool) -> None:
        import socket

        space = socket.CMSG_SPACE(MAX_SHARED * array.array("i").itemsize)
        try:
            data, ancdata, flags, _ = self.sock.recvmsg(_HEAD.size + 4 * MAX_SHARED, space,
                                                        0 if block else socket.MSG_DONTWAIT)
        except BlockingIOError:
            raise ConnectionError("a message announced shared buffers that were not passed") from None
        fds = array.array("i")
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if not data:
            raise ConnectionError("the shared-memory socket was closed")
        if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC) or len(data) < _HEAD.size:
            for fd in fds:
                os.close(fd)
            raise ConnectionError("a shared-memory message was cut short")
        task_id, n = _HEAD.unpack_from(data)
        indices = struct.unpack_from(f"<{n}I", data, _HEAD.size)
        if len(fds) != n:
            for fd in fds:
                os.close(fd)
            raise ConnectionError(f"task {task_id}: {len(fds)} descriptors for {n} buffers")
        self._waiting[task_id] = dict(zip(indices, fds))

    def close(self) -> None:
        for got in self._waiting.values():
            for fd in got.values():
                os.close(fd)
        self._waiting.clear()
        if isinstance(self._sock, int):  # never made a socket: its descriptor is all there is
            os.close(self._sock)
        else:
            self._sock.close()


def map_file(fd: int, size: int) -> mmap.mmap | bytearray:
    """A private (copy-on-write) mapping of `size` bytes of the file; does not close `fd`.

    Before Python 3.13 an `mmap` keeps a duplicate of its descriptor until it is closed, so each live
    mapping (a large result the caller holds) holds one descriptor; 3.13's `trackfd=False` avoids it.
    """
    if size == 0:
        return bytearray()
    return mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE, **_NO_TRACK)


_NO_TRACK = {"trackfd": False} if sys.version_info >= (3, 13) else {}
