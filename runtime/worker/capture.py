"""Output capture on the worker: what a task writes reaches the client while the task runs.

Two paths. Python-level writes (`print`, `sys.stdout.write`, logging handlers on them) go to a
`TaskStream` that batches text and sends `Output` frames — no pipe, no syscall per line. Writes to
file descriptors 1 and 2 (native code, subprocesses) go through pipes that a reader thread drains into
the same frames. A flusher thread sends partial lines after a short delay, so a progress bar shows up
without flooding the wire: carriage-return rewrites within one delay travel as one frame.
"""

from __future__ import annotations

import codecs
import io
import os
import threading
from collections.abc import Callable

__all__ = ["TaskStream", "FdPump", "Flusher", "FLUSH_DELAY", "FLUSH_SIZE"]

#: How long a partial line may wait before it is sent.
FLUSH_DELAY = 0.02
#: Buffered text that is sent at once, without waiting for the delay.
FLUSH_SIZE = 64 * 1024

Sink = Callable[[int, str], None]  # (stream, text) -> sends an Output frame


class TaskStream(io.TextIOBase):
    """A text stream that batches writes and hands them to `sink(stream, text)`.

    `enabled` False drops writes (the output filters use it: filtered text never crosses the wire).
    """

    def __init__(self, stream: int, sink: Sink, name: str) -> None:
        super().__init__()
        self._stream = stream
        self._sink = sink
        self._name = name
        self._parts: list[str] = []
        self._size = 0
        self._lock = threading.Lock()
        self.enabled = True

    @property
    def name(self) -> str:  # type: ignore[override]
        return self._name

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return "replace"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        # Code that asks for a file descriptor (faulthandler, subprocess with stdout=sys.stdout)
        # gets the captured fd 1/2, which the FdPump forwards.
        return self._stream

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        if not self.enabled or not s:
            return len(s)
        with self._lock:
            self._parts.append(s)
            self._size += len(s)
            big = self._size >= FLUSH_SIZE
        if big:
            self.flush()
        return len(s)

    def flush(self) -> None:
        with self._lock:
            if not self._parts:
                return
            text = "".join(self._parts)
            self._parts.clear()
            self._size = 0
            # send under the lock: keeps this stream's frames in write order
            self._sink(self._stream, text)


class FdPump(threading.Thread):
    """Drains a pipe that stands in for fd 1 or 2 and forwards its text, in order."""

    def __init__(self, fd: int, stream: int, pystream: TaskStream, sink: Sink) -> None:
        super().__init__(name=f"skyhive-fd{stream}", daemon=True)
        self._fd = fd
        self._stream = stream
        self._pystream = pystream
        self._sink = sink

    def run(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        while True:
            try:
                data = os.read(self._fd, 65536)
            except OSError:
                return
            if not data:
                return
            text = decoder.decode(data)
            if text and self._pystream.enabled:  # a filtered stream drops native output too
                self._pystream.flush()  # what Python wrote earlier on this stream goes first
                self._sink(self._stream, text)


class Flusher(threading.Thread):
    """Flushes the task streams every `FLUSH_DELAY` seconds."""

    def __init__(self, streams: tuple[TaskStream, ...], also: Callable[[], None]) -> None:
        super().__init__(name="skyhive-flusher", daemon=True)
        self._streams = streams
        self._also = also
        self._stop = threading.Event()

    def run(self) -> None:
        while not self._stop.wait(FLUSH_DELAY):
            try:
                for stream in self._streams:
                    stream.flush()
                self._also()
            except OSError:
                return

    def stop(self) -> None:
        self._stop.set()
