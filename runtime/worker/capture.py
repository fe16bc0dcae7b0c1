"""Output capture on the worker: what a task writes reaches the client while the task runs.

Two paths feed one `TaskStream` per stream (stdout, stderr):

- Python-level writes (`print`, `sys.stdout.write`, logging handlers on them) are appended to a
  deque — no lock, no syscall per line — and sent as `Output` frames when `FLUSH_SIZE` characters
  are buffered or when the `Flusher` ticks (every `FLUSH_DELAY` seconds).
- Writes to file descriptors 1 and 2 (native code, subprocesses the task starts) land in a pipe.
  The `FdPump` thread wakes when it has data; every flush of the stream also reads what the pipe
  holds, so output a subprocess wrote before the task returned is sent before the task's `Result`.

Order: each path keeps its own order exactly. Between the two: Python text buffered when fd text is
read goes first (`print("start"); subprocess.run(...)`); fd text waiting when Python text is written
into an empty buffer goes first (`subprocess.run(...); print("done")`); and a flush
(`print(..., flush=True)`, `sys.stdout.flush()`, the end of a task) is a barrier: everything written
before it, on either path, is sent before anything written after it. Only text written through both
paths within one flush interval, without a flush between, may interleave differently — by whole
lines where it can: an unfinished native line waits (until its newline or the next flush) so that a
`print` sent meanwhile does not land inside it.

Backpressure: all sending of a stream happens under the stream's lock, and the sink blocks when the
client stops reading (the pipe to the client fills). A writer that fills the buffer then blocks on
that lock, and a subprocess blocks on its full fd pipe: producers are slowed, nothing is dropped.
A carriage-return progress bar costs little: its rewrites within one delay travel in one frame.
"""

from __future__ import annotations

import codecs
import fcntl
import io
import os
import select
import termios
import threading
from collections import deque
from collections.abc import Callable

__all__ = ["TaskStream", "FdPump", "Flusher", "flush_streams", "FLUSH_DELAY", "FLUSH_SIZE", "MAX_PIECE"]

#: How long a partial line (or any unsent text) may wait before it is sent.
FLUSH_DELAY = 0.02
#: Buffered characters that are sent at once, without waiting for the delay.
FLUSH_SIZE = 64 * 1024
#: The most characters one `Output` frame carries (at most 4 MiB of UTF-8, far below the frame
#: limit): one huge `print` travels as several frames, and heartbeats pass between them.
MAX_PIECE = 1024 * 1024
#: Bytes read from an fd pipe at once (a pipe holds 64 KiB by default).
_READ_SIZE = 65536

Sink = Callable[[int, str], None]  # (stream, text) -> sends an Output frame; may block


class TaskStream(io.TextIOBase):
    """A text stream that batches writes and hands them to `sink(stream, text)`.

    `write` is safe from any thread and never takes a lock unless the buffer is full: appending to
    a deque is atomic, and `flush` pops only what it counted, so a concurrent write is never lost.
    `enabled` False drops writes (the output filters use it: filtered text never crosses the wire),
    including what native code writes to the stream's file descriptor.
    """

    def __init__(self, stream: int, sink: Sink, name: str) -> None:
        super().__init__()
        self._stream = stream
        self._sink = sink
        self._name = name
        self._parts: deque[str] = deque()
        self._size = 0  # approximate (updated without a lock); reset by every flush
        self._lock = threading.Lock()  # held while sending: keeps this stream's frames in order
        self._fd = -1  # read end of the pipe standing in for fd 1/2, once an FdPump is attached
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._fd_tail = ""  # fd text after its last newline, held back until the line goes on (see _send)
        self._binary: _BinaryWriter | None = None
        self.enabled = True

    def __repr__(self) -> str:
        return f"<TaskStream {self._name} enabled={self.enabled} buffered={self._size}>"

    @property
    def name(self) -> str:  # type: ignore[override]
        return self._name

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return "replace"

    @property
    def buffer(self) -> _BinaryWriter:  # type: ignore[override]
        """A binary view (`sys.stdout.buffer.write(b"...")`): bytes are decoded as UTF-8."""
        if self._binary is None:
            self._binary = _BinaryWriter(self)
        return self._binary

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        # Code that asks for a file descriptor (faulthandler, subprocess with stdout=sys.stdout)
        # gets the captured fd 1/2, which the FdPump forwards.
        return self._stream

    def write(self, s: str) -> int:
        if s.__class__ is not str and not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        n = len(s)
        if n and self.enabled:
            parts = self._parts
            if not parts and self._fd >= 0 and _pending_bytes(self._fd):
                with self._lock:  # native output written before this text goes first
                    self._send(self._take(), self._read_fd(until_empty=True), hold=True)
            parts.append(s)
            size = self._size + n
            self._size = size
            if size >= FLUSH_SIZE:
                self.flush()
        return n

    def flush(self) -> None:
        """Send what is buffered, then what the fd pipe holds; blocks while the client is not reading."""
        with self._lock:
            self._send(self._take(), self._read_fd(until_empty=True))

    # ---- under the lock ----------------------------------------------------------------------------

    def _take(self) -> str:
        parts = self._parts
        count = len(parts)
        self._size = 0
        if not count:
            return ""
        if count == 1:
            return parts.popleft()
        pop = parts.popleft
        return "".join([pop() for _ in range(count)])

    def _read_fd(self, *, until_empty: bool) -> str:
        """Text waiting in the fd pipe: all of it that was there when called, or one read's worth.

        Bounded by what the pipe held at the start, so a process that keeps writing cannot hold a
        flush (and the task's `Result`) forever.
        """
        fd = self._fd
        if fd < 0:
            return ""
        if until_empty:
            want = _pending_bytes(fd)
            if not want:
                return ""
        else:
            want = _READ_SIZE
        chunks = []
        while want > 0:
            try:
                data = os.read(fd, min(want, 1 << 20))
            except BlockingIOError:
                break
            except OSError:
                self._fd = -1
                break
            if not data:  # every write end is closed
                self._fd = -1
                break
            chunks.append(self._decoder.decode(data))
            want -= len(data)
        return "".join(chunks)

    def _send(self, text: str, fd_text: str = "", hold: bool = False) -> None:
        """Send Python `text`, then `fd_text`. With `hold` (the pump, and the native output read before
        a Python write), fd text after its last newline is kept back and goes before the next fd text:
        native code writes a line in pieces ("[Gloo] Rank ", "0 is connected..."), and a `print` from
        another thread sent between the pieces would land in the middle of that line on the client. A
        flush (the Flusher's tick, `flush()`, the end of a task) sends it."""
        if self._fd_tail:
            fd_text, self._fd_tail = self._fd_tail + fd_text, ""
        if hold and fd_text and fd_text[-1] != "\n":
            cut = fd_text.rfind("\n") + 1
            fd_text, self._fd_tail = fd_text[:cut], fd_text[cut:]
        if fd_text:
            text = text + fd_text if text else fd_text
        if not text or not self.enabled:
            return
        for start in range(0, len(text), MAX_PIECE):
            piece = text[start : start + MAX_PIECE] if len(text) > MAX_PIECE else text
            try:
                self._sink(self._stream, piece)
            except UnicodeEncodeError:  # lone surrogates (e.g. from surrogateescape) cannot travel
                self._sink(self._stream, piece.encode("utf-8", "replace").decode("utf-8"))

    # ---- for the FdPump ----------------------------------------------------------------------------

    def _attach_fd(self, fd: int) -> None:
        os.set_blocking(fd, False)  # reads happen under the lock, and must never wait there
        self._fd = fd

    def _pump(self) -> bool:
        """Forward what the pipe holds (Python text buffered before it goes first). False at EOF."""
        with self._lock:
            fd_text = self._read_fd(until_empty=False)
            if fd_text:
                self._send(self._take(), fd_text, hold=True)
            return self._fd >= 0


class _BinaryWriter(io.RawIOBase):
    """`sys.stdout.buffer` of a `TaskStream`."""

    def __init__(self, text: TaskStream) -> None:
        super().__init__()
        self._text = text
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def writable(self) -> bool:
        return True

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        data = bytes(b)
        self._text.write(self._decoder.decode(data))
        return len(data)

    def flush(self) -> None:
        self._text.flush()

    def fileno(self) -> int:
        return self._text.fileno()


def flush_streams(streams: tuple[TaskStream, ...]) -> None:
    """`flush()` each stream — the barrier at the end of a task — skipping the work when none holds
    anything: no Python text buffered, nothing waiting in any fd pipe (one `poll` for all of them),
    and no send in progress (an FdPump or the Flusher may have taken text and still be sending it:
    its lock is held then, and `flush` waits for it). The pipes are checked before the locks, since
    text leaves a pipe only under its stream's lock. (Plain loops, two of them: this runs after every
    task, and a generator per check cost more than the checks.)"""
    fds: tuple[int, ...] = ()
    for s in streams:
        if s._parts or s._fd_tail:
            break
        if s._fd >= 0:
            fds += (s._fd,)
    else:
        if not fds or not (_POLLERS.get(fds) or _poller(fds)).poll(0):
            for s in streams:
                if s._lock.locked() or s._parts:
                    break
            else:
                return
    for stream in streams:
        stream.flush()


def _poller(fds: tuple[int, ...]) -> select.poll:
    """A poll object watching `fds` for input, made once per set of pipes."""
    poller = _POLLERS.get(fds)
    if poller is None:
        if len(_POLLERS) > 8:
            _POLLERS.clear()
        poller = _POLLERS[fds] = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
    return poller


_POLLERS: dict[tuple[int, ...], select.poll] = {}


def _pending_bytes(fd: int) -> int:
    buf = bytearray(4)
    try:
        fcntl.ioctl(fd, termios.FIONREAD, buf, True)
    except OSError:
        return _READ_SIZE
    return int.from_bytes(buf, "little")


class FdPump(threading.Thread):
    """Forwards what native code and subprocesses write to fd 1 or 2 (read end `fd` of a pipe)."""

    def __init__(self, fd: int, stream: int, pystream: TaskStream, sink: Sink | None = None) -> None:
        super().__init__(name=f"skyhive-fd{stream}", daemon=True)
        self._fd = fd
        self._pystream = pystream
        pystream._attach_fd(fd)

    def run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        while True:
            try:
                poller.poll()
            except InterruptedError:
                continue
            except OSError:
                return
            if not self._pystream._pump():
                return


class Flusher(threading.Thread):
    """Flushes the task streams every `FLUSH_DELAY` seconds."""

    def __init__(self, streams: tuple[TaskStream, ...], also: Callable[[], None]) -> None:
        super().__init__(name="skyhive-flusher", daemon=True)
        self._streams = streams
        self._also = also
        # not `_stop`: threading.Thread has a `_stop()` method that CPython calls in every child
        # after fork() (an attribute of that name made each DataLoader worker print a TypeError)
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(FLUSH_DELAY):
            try:
                for stream in self._streams:
                    stream.flush()
                self._also()
            except OSError:
                return

    def stop(self) -> None:
        self._halt.set()
