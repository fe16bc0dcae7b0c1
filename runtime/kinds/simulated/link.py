"""The in-memory pipe between a simulated worker and its channel (`transport/simulated.py`).

`SimLink` is the client's end, the `Link` its channel writes to and reads from; the worker side writes
with `deliver`. Both directions are queued and moved in one loop callback per event loop
(`Crossings`), as bytes cross a pipe: neither side ever runs inside the other's call.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from typing import Any, Protocol

from ...nodes.transport import Receiver

__all__ = ["SimLink", "Crossings", "LinkedWorker"]


class LinkedWorker(Protocol):
    """What the link needs of the worker at its other end (`SimulatedWorker`)."""

    @property
    def returncode(self) -> int | None: ...

    def feed(self, data: bytes) -> None:
        """Bytes from the client."""

    def finish(self, code: int) -> None:
        """End the worker with `code` (its end of the pipe closes: `SimLink.end`)."""

    def pipe_closed(self) -> None:
        """The channel has read everything and the end of the pipe."""


class Crossings:
    """One loop callback that moves the waiting bytes of every simulated link of an event loop.

    A callback per link and direction was a handle and a bound method per message: a broadcast to
    10,000 nodes made 40,000 of them, all alive at once, which the collector then promoted and walked.
    Links are served in the order they asked, each direction first come first served, as before.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.inbound: list[SimLink] = []  # links whose worker has bytes to read
        self.outbound: list[SimLink] = []  # links whose channel has bytes (or the end) to read
        self.scheduled = False

    def want_in(self, link: SimLink) -> None:
        self.inbound.append(link)
        self._schedule()

    def want_out(self, link: SimLink) -> None:
        self.outbound.append(link)
        self._schedule()

    def _schedule(self) -> None:
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self._run)

    def _run(self) -> None:
        self.scheduled = False
        inbound, self.inbound = self.inbound, []
        outbound, self.outbound = self.outbound, []
        for link in inbound:
            self._serve(link._pump)
        for link in outbound:
            self._serve(link._flush_out)

    def _serve(self, move: Any) -> None:
        try:
            move()
        except Exception as exc:  # as the loop does for a failing callback: report it, serve the others
            self.loop.call_exception_handler({"message": "simulated link failed", "exception": exc})


_crossings: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Crossings] = weakref.WeakKeyDictionary()


def crossings_of(loop: asyncio.AbstractEventLoop) -> Crossings:
    crossings = _crossings.get(loop)
    if crossings is None:
        crossings = _crossings[loop] = Crossings(loop)
    return crossings


class SimLink:
    """The client's end of the in-memory pipe to one simulated worker (`Link`).

    Both directions are queued and handed over in a loop callback (`Crossings`), as a pipe would: the client's
    channel never runs inside the worker's call (where a task's output is redirected, and the
    client printing what a task wrote would write into that task's own stream, re-entering it),
    and the worker never runs inside the channel's. What the worker wrote before it ended reaches
    the channel before the end of file, as from a pipe.
    """

    fd_socket = None  # no shared memory: buffers travel in the frames
    __slots__ = ("worker", "receiver", "inbox", "outbox", "paused", "scheduled", "out_scheduled", "closed",
                 "eof_sent", "crossings")

    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        self.worker: LinkedWorker | None = None
        # bytes waiting to cross, each way: None, one message's bytes, or a list of them (most often
        # one message waits: bytes are no object the collector tracks; a list per message, alive
        # until the next loop turn, was 20,000 objects promoted and walked in a 10k broadcast)
        self.inbox: bytes | list[bytes] | None = None
        self.outbox: bytes | list[bytes] | None = None
        self.paused = False
        self.scheduled = False  # a `_pump` is due
        self.out_scheduled = False  # a `_flush_out` is due
        self.closed = False  # the worker's end closed: nothing more goes either way
        self.eof_sent = False
        self.crossings = crossings_of(asyncio.get_running_loop())

    # client -> worker
    def write(self, data: bytes | memoryview) -> None:
        if self.closed:
            return
        box = self.inbox
        if box is None:
            self.inbox = bytes(data)
        elif box.__class__ is bytes:
            self.inbox = [box, bytes(data)]  # type: ignore[list-item]
        else:
            box.append(bytes(data))  # type: ignore[union-attr]
        if not self.scheduled:
            self.scheduled = True
            self.crossings.want_in(self)

    def writelines(self, pieces: Sequence[bytes | memoryview]) -> None:
        for piece in pieces:
            self.write(piece)

    async def drain(self) -> None:
        return None

    async def write_direct(self, pieces: Sequence[bytes | memoryview]) -> None:
        self.writelines(pieces)

    def _pump(self) -> None:
        self.scheduled = False
        box = self.inbox
        if self.worker is not None and box:
            self.inbox = None
            self.worker.feed(box if box.__class__ is bytes else b"".join(box))  # type: ignore[arg-type]

    # worker -> client
    def deliver(self, data: bytes) -> None:
        if self.closed:
            return
        box = self.outbox
        if box is None:
            self.outbox = data
        elif box.__class__ is bytes:
            self.outbox = [box, data]  # type: ignore[list-item]
        else:
            box.append(data)  # type: ignore[union-attr]
        self._schedule_out()

    def _schedule_out(self) -> None:
        if not self.out_scheduled and not self.paused:
            self.out_scheduled = True
            self.crossings.want_out(self)

    def _flush_out(self) -> None:
        self.out_scheduled = False
        out = self.outbox
        if out.__class__ is bytes:
            if not self.paused:
                self.outbox = None
                self.receiver.data_received(out)  # type: ignore[arg-type]
        elif out is not None:
            done = 0
            while done < len(out) and not self.paused:  # (the channel may pause us as it reads)
                data = out[done]
                done += 1
                self.receiver.data_received(data)
            del out[:done]
            if not out and self.outbox is out:
                self.outbox = None
        if self.closed and not self.outbox and not self.eof_sent:
            self.eof_sent = True
            self.receiver.eof_received()
            if self.worker is not None:
                self.worker.pipe_closed()

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False
        if self.outbox or self.closed:
            self._schedule_out()

    def close(self) -> None:
        """The client closes its end: the worker sees end of input and stops, like the daemon."""
        if self.worker is not None and self.worker.returncode is None:
            self.crossings.loop.call_soon(self.worker.finish, 0)

    def end(self) -> None:
        """The worker's end closed: the channel gets what is left, then end of file (in a callback)."""
        if not self.closed:
            self.closed = True
            self.inbox = None
            self._schedule_out()
