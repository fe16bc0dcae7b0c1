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
import logging
import mmap
import os
import socket
import struct
import sys
from collections.abc import Sequence
from typing import Any

log = logging.getLogger("skyhive.transport.shm")

__all__ = ["SHARE_MIN", "MAX_SHARED", "ENV_VAR", "socket_pair", "share", "send_fds", "SharedFiles", "FdInbox",
           "map_file"]

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
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def share(buffer: Any) -> int:
    """A new memfd holding a copy of `buffer`; the caller owns (and must close) the descriptor."""
    view = memoryview(buffer).cast("B")
    fd = os.memfd_create("skyhive-shared", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, len(view))
        # pwrite, not a copy into a mapping: the kernel fills whole pages without a fault per page
        # (1 GiB: ~0.4 s against ~1 s, measured)
        done = 0
        while done < len(view):
            done += os.pwrite(fd, view[done : done + _WRITE_STEP], done)
    except BaseException:
        os.close(fd)
        raise
    return fd


def send_fds(sock: socket.socket, task_id: int, indices: Sequence[int], fds: Sequence[int], *,
             close: bool = True) -> None:
    """Pass `fds` (buffers `indices` of task `task_id`) over `sock`; with `close`, close them here
    (the kernel holds its own reference while they are in flight)."""
    try:
        head = _HEAD.pack(task_id, len(indices)) + struct.pack(f"<{len(indices)}I", *indices)
        sock.sendmsg([head], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    finally:
        if close:
            for fd in fds:
                os.close(fd)


class SharedFiles:
    """The memfds of one call's buffers, made once however many workers they are passed to, and
    closed with this object (the workers' mappings keep the pages as long as they need them)."""

    __slots__ = ("fds",)

    def __init__(self) -> None:
        self.fds: dict[int, int] = {}

    def fd(self, index: int, buffer: Any) -> int:
        fd = self.fds.get(index)
        if fd is None:
            fd = self.fds[index] = share(buffer)
        return fd

    def close(self) -> None:
        fds, self.fds = self.fds, {}
        for fd in fds.values():
            os.close(fd)

    def __del__(self) -> None:
        self.close()


class FdInbox:
    """The receiving end: the descriptors passed for each task, taken in any order."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._waiting: dict[int, dict[int, int]] = {}

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
        self.sock.close()


def map_file(fd: int, size: int) -> mmap.mmap | bytearray:
    """A private (copy-on-write) mapping of `size` bytes of the file; does not close `fd`.

    Before Python 3.13 an `mmap` keeps a duplicate of its descriptor until it is closed, so each live
    mapping (a large result the caller holds) holds one descriptor; 3.13's `trackfd=False` avoids it.
    """
    if size == 0:
        return bytearray()
    return mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE, **_NO_TRACK)


_NO_TRACK = {"trackfd": False} if sys.version_info >= (3, 13) else {}
