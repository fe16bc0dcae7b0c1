"""`ResumableLink`: the client's end of a resumable link to a detached worker (see `protocol.resume`).

To the `WorkerChannel` it is an ordinary `Link`, and it hands the channel's `Receiver` whole protocol
frames; underneath, the byte stream is an SSH stream-local channel that may drop. Every frame the
channel writes is numbered and kept (`Outbox`) until the worker acknowledges it; every frame that
arrives is counted (`Inbox`). When the SSH channel drops, the link reconnects with backoff (a fresh
SSH connection when needed, pinned to the same host key), sends `Hello(resume_from=N)`, and on the
worker's `Resume(from_seq=N, received=M)` sends its own frames after M again. Meanwhile the channel
may go on writing: the frames are recorded and go out after the resume, in order. The channel sees
the stream end only when the worker exited (`Goodbye`), the link was closed, or reconnecting failed
for good (the worker is gone, or `reconnect_timeout` passed).

The reconnect runs as an asyncio task owned by the link (created on a drop, cancelled by `close()`);
it catches and records its own errors, so nothing is dropped unseen.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio

from ...protocol.codec import DEFAULT_MAX_FRAME
from ...protocol.errors import ProtocolError
from ...protocol.messages import PROTOCOL_VERSION, Ack, Goodbye, Hello, Resume, Welcome
from ...protocol.resume import Inbox, Outbox, encode_control
from .transport import Receiver, WorkerProcess

log = logging.getLogger("skyhive.transport.ssh")

__all__ = ["ResumableLink", "WorkerGone", "StreamOpener", "connect_detached"]

#: Opens a new byte stream to the detached worker: given a session factory, returns (channel, session).
StreamOpener = Callable[[Callable[[], Any]], Awaitable[tuple[Any, Any]]]
ACK_DELAY = 0.2
HANDSHAKE_TIMEOUT = 10.0


class WorkerGone(Exception):
    """The detached worker no longer exists (its socket is gone); `exit_status` if it left one. `busy`:
    it exists but refused this connection for now (it is cancelling the previous client's task)."""

    def __init__(self, message: str, exit_status: int | None = None, *, busy: bool = False) -> None:
        super().__init__(message)
        self.exit_status = exit_status
        self.busy = busy


class _Session:
    """asyncssh session callbacks for one stream; stale streams are ignored by the link."""

    def __init__(self, link: ResumableLink) -> None:
        self.link = link

    def connection_made(self, chan: Any) -> None:
        pass

    def session_started(self) -> None:
        pass

    def data_received(self, data: bytes, datatype: Any) -> None:
        self.link._on_data(self, data)

    def eof_received(self) -> bool:
        self.link._on_closed(self, None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.link._on_closed(self, exc)

    def pause_writing(self) -> None:
        self.link._on_pause(self, True)

    def resume_writing(self) -> None:
        self.link._on_pause(self, False)


#: asyncssh copies what it is given into one bytearray and cuts packets off its front (each cut shifts
#: the rest: a 1 MiB chunk written at once costs ~16 MiB of memmove at 32 KiB packets). Written in
#: pieces of one packet (OpenSSH's maximum for a session channel) it copies each byte once.
SEND_PIECE = 32 * 1024


def _send(chan: Any, pieces: Sequence[bytes | memoryview]) -> None:
    """Write `pieces` to `chan`, a large one as packet-sized views of itself."""
    for piece in pieces:
        if len(piece) <= SEND_PIECE:
            chan.write(piece)
            continue
        view = memoryview(piece).cast("B")
        for offset in range(0, len(view), SEND_PIECE):
            chan.write(view[offset : offset + SEND_PIECE])


class ResumableLink:
    """A `Link` that survives dropped streams. See the module docstring."""

    fd_socket = None  # a remote worker: no shared memory

    def __init__(self, receiver: Receiver, opener: StreamOpener, *, label: str, reconnect_timeout: float,
                 skyhive_version: str = "", python_version: str = "", takeover: bool = False) -> None:
        self.receiver = receiver
        self._takeover = takeover  # the first stream takes a detached worker over (see `Hello.takeover`)
        self.label = label
        self.reconnect_timeout = reconnect_timeout
        self.inbox = Inbox(DEFAULT_MAX_FRAME)
        self.outbox = Outbox()
        self.exit_status: int | None = None
        self.gone_reason: str | None = None
        self.reconnects = 0
        self.reconnecting = False
        self.finished = asyncio.Event()  # the stream is over for good
        self._open = opener
        self._versions = (skyhive_version, python_version)
        self._chan: Any = None
        self._session: _Session | None = None
        self._live = False
        self._paused_writing = False
        self._paused_reading = False
        self._writable = asyncio.Event()
        self._closing = False  # closed by us
        self._attaching = False
        self._goodbye = False
        self._resumed: asyncio.Future[Resume] | None = None
        self._task: asyncio.Task[None] | None = None
        self._ack_timer: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        state = "finished" if self.finished.is_set() else ("live" if self._live else "reconnecting")
        return f"<ResumableLink {self.label} {state} sent={self.outbox.sent} received={self.inbox.received}>"

    def statistics(self) -> dict[str, int]:
        return {"sent": self.outbox.sent, "received": self.inbox.received, "held_bytes": self.outbox.bytes,
                "reconnects": self.reconnects}

    # ---- connecting --------------------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the first stream and shake hands (raises what the opener raises, or `ConnectionError`)."""
        await self._attach()

    async def _attach(self) -> None:
        loop = asyncio.get_running_loop()
        chan, session = await self._open(lambda: _Session(self))
        self._chan, self._session = chan, session
        # A new channel starts with an empty send buffer. A drop while the old one was paused never
        # resumes it (asyncssh calls no resume_writing on close): left set, every `drain` would wait forever.
        self._paused_writing = False
        self.inbox.reset()
        self._resumed = loop.create_future()
        if self._paused_reading:
            chan.pause_reading()
        self._attaching = True  # until the handshake is over, a closed stream is the attach's to report
        asked = self.inbox.received  # replayed frames may follow the Resume in the same packet
        hello = Hello(protocol_version=PROTOCOL_VERSION, python_version=self._versions[1],
                      skyhive_version=self._versions[0], max_frame=DEFAULT_MAX_FRAME, resume_from=asked,
                      takeover=self._takeover)
        try:
            chan.write(encode_control(hello))
            resume = await asyncio.wait_for(asyncio.shield(self._resumed), HANDSHAKE_TIMEOUT)
            if resume.from_seq != asked:
                raise ProtocolError(f"worker resumes from frame {resume.from_seq}, we asked for frames after {asked}")
            pieces = self.outbox.replay(resume.received)
        except BaseException:
            if self._session is session:
                self._chan, self._session = None, None
            chan.close()
            raise
        finally:
            self._attaching = False
        if pieces:
            _send(chan, pieces)
        self._takeover = False  # later streams resume this session
        self._live = True
        self._update_writable()

    def _on_closed(self, session: _Session, exc: Exception | None) -> None:
        if session is not self._session:
            return
        self._chan, self._session = None, None
        self._live = False
        self._update_writable()
        if self._attaching:  # the attach in progress reports it (a refusal may have come first)
            if self._resumed is not None and not self._resumed.done():
                self._resumed.set_exception(ConnectionError(f"stream closed during the handshake: {exc}"))
                self._resumed.exception()
            return
        if self._goodbye or self._closing:
            self._finish()
        elif self._task is None and not self.finished.is_set():
            log.warning("%s: connection dropped (%s); reconnecting", self.label, exc or "end of stream")
            self._task = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        self.reconnecting = True
        started = time.monotonic()
        delay = 0.05
        last: BaseException | None = None
        try:
            while not self._closing:
                try:
                    await self._attach()
                    self.reconnects += 1
                    log.warning("%s: reconnected after %.2f s; resumed after worker frame %d",
                                self.label, time.monotonic() - started, self.inbox.received)
                    return
                except WorkerGone as exc:
                    self.gone_reason = str(exc)
                    self.exit_status = exc.exit_status
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - every failed attempt is retried until the deadline
                    last = exc
                    log.info("%s: reconnect attempt failed: %s", self.label, exc)
                if time.monotonic() - started > self.reconnect_timeout:
                    self.gone_reason = f"could not reconnect within {self.reconnect_timeout:g} s (last error: {last})"
                    break
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        except asyncio.CancelledError:
            self.gone_reason = self.gone_reason or "the link was closed while reconnecting"
        finally:
            self.reconnecting = False
            self._task = None
        if not self._live:
            log.warning("%s: giving up: %s", self.label, self.gone_reason)
            self._finish()

    def _finish(self) -> None:
        if self.finished.is_set():
            return
        self.finished.set()
        self._update_writable()
        if self.gone_reason and self.receiver.lost_reason is None:
            self.receiver.lost_reason = self.gone_reason  # WorkerLost says why
        if self._ack_timer is not None:
            self._ack_timer.cancel()
        self.receiver.eof_received()

    # ---- receiving ---------------------------------------------------------------------------------

    def _on_data(self, session: _Session, data: bytes) -> None:
        if session is not self._session:
            return
        try:
            items = self.inbox.feed(data)
        except ProtocolError as exc:
            self._broken(f"bad frame from the worker: {exc}")
            return
        for item in items:
            if isinstance(item, memoryview):
                self.receiver.data_received(item)  # type: ignore[arg-type]
            elif isinstance(item, Ack):
                try:
                    self.outbox.ack(item.seq)
                except ProtocolError as exc:
                    self._broken(str(exc))
                    return
            elif isinstance(item, Resume):
                if self._resumed is not None and not self._resumed.done():
                    self._resumed.set_result(item)
            elif isinstance(item, Goodbye):
                self._goodbye = True
                self.exit_status = item.exit_status
            elif isinstance(item, Welcome) and item.error:
                self.gone_reason = f"the worker refused the connection: {item.error}"
                if self._resumed is not None and not self._resumed.done():
                    self._resumed.set_exception(WorkerGone(self.gone_reason, busy=item.error.startswith("busy")))
                    self._resumed.exception()
                else:
                    self._broken(self.gone_reason)
                return
        chan = self._chan
        if chan is None:
            return
        if self._goodbye:
            chan.write(self.inbox.ack())  # the worker exits once everything is acknowledged
            chan.write_eof()
            return
        if self.inbox.ack_due():
            chan.write(self.inbox.ack())
        elif self.inbox.unacked and self._ack_timer is None:
            self._ack_timer = asyncio.get_running_loop().call_later(ACK_DELAY, self._ack_tick)

    def _ack_tick(self) -> None:
        self._ack_timer = None
        if self._chan is not None and self._live and self.inbox.unacked:
            self._chan.write(self.inbox.ack())

    def _broken(self, reason: str) -> None:
        log.error("%s: %s", self.label, reason)
        self.gone_reason = self.gone_reason or reason
        self._closing = True
        chan = self._chan
        self._chan, self._session = None, None
        if chan is not None:
            chan.close()
        self._finish()

    # ---- Link --------------------------------------------------------------------------------------

    def write(self, data: bytes | memoryview) -> None:
        if self.finished.is_set():
            return
        self.outbox.record((data,))
        if self._live:
            self._chan.write(data)

    def writelines(self, pieces: Sequence[bytes | memoryview]) -> None:
        if self.finished.is_set():
            return
        self.outbox.record(pieces)
        if self._live:
            _send(self._chan, pieces)

    async def write_direct(self, pieces: Sequence[bytes | memoryview]) -> None:
        """`writelines` (in packet-sized pieces, see `_send`) then `drain`. The outbox keeps views of
        the pieces for replay, no copy."""
        self.writelines(pieces)
        await self.drain()

    async def drain(self) -> None:
        """Wait while the SSH channel's buffer is full, or while reconnecting (until resumed or over)."""
        if not self._writable.is_set():
            await self._writable.wait()

    def _update_writable(self) -> None:
        if self.finished.is_set() or (self._live and not self._paused_writing):
            self._writable.set()
        else:
            self._writable.clear()

    def _on_pause(self, session: _Session, paused: bool) -> None:
        if session is self._session:
            self._paused_writing = paused
            self._update_writable()

    def pause_reading(self) -> None:
        self._paused_reading = True
        if self._chan is not None:
            self._chan.pause_reading()

    def resume_reading(self) -> None:
        self._paused_reading = False
        if self._chan is not None:
            self._chan.resume_reading()

    def close(self) -> None:
        """Close for good (no reconnect). The channel's receiver sees the end of the stream."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()
        chan = self._chan
        self._chan, self._session = None, None
        self._live = False
        if chan is not None:
            chan.close()
        self._finish()


W = TypeVar("W", bound=WorkerProcess)

#: Seconds between attempts while a taken-over worker is still cancelling the previous client's task.
BUSY_RETRY = 0.2


async def connect_detached(new_link: Callable[[], ResumableLink], make_worker: Callable[[ResumableLink], W], *,
                           takeover: bool, timeout: float) -> W:
    """Connect to a detached worker over a fresh `new_link()` and return `make_worker(link)`.

    A worker still busy with the previous client's task refuses ("busy"; it cancels that task): tried
    again every `BUSY_RETRY` s until `timeout` (then `TimeoutError`). Any other failure is raised; a
    worker this client started (`takeover` false) is then killed and reaped, never left running
    unreached; one taken over is left alone (it is the named pool's, and its pid may no longer be it).
    """
    with anyio.fail_after(timeout):
        while True:
            link = new_link()
            worker = make_worker(link)
            try:
                await link.connect()
                return worker
            except WorkerGone as exc:
                if not exc.busy:
                    if not takeover:
                        await _discard(worker)
                    raise
            except BaseException:
                if not takeover:
                    await _discard(worker)
                raise
            await anyio.sleep(BUSY_RETRY)


async def _discard(worker: WorkerProcess) -> None:
    worker.kill()
    with anyio.move_on_after(5, shield=True):
        await worker.wait()
