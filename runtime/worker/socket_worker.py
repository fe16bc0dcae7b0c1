"""`SocketWorker`: the worker daemon in SSH mode, serving its Unix socket and the resume layer itself.

Split from `daemon.py`, which holds the worker every mode shares (the Local provider's pipe mode
uses `WorkerDaemon` alone).
"""

from __future__ import annotations

import logging
import math
import os
import select
import signal
import socket
import threading
import time
from typing import Any


from ...protocol import (
    Connection,
    Hello,
    Role,
    Message,
    ProtocolError,
    Result,
    Welcome,
)
from ...protocol.codec import DEFAULT_MAX_FRAME
from ...protocol.messages import PROTOCOL_VERSION, Ack, Goodbye, Resume
from ...protocol.resume import Inbox, Outbox, encode_control
from .bufcache import MemfdStore
from .daemon import ACK_DELAY, _IOV_MAX, WorkerDaemon
from .leave import leave

log = logging.getLogger("skyhive.worker")

__all__ = ["SocketWorker"]


class SocketWorker(WorkerDaemon):
    """The daemon in SSH mode: it serves its Unix socket itself and speaks the resume layer.

    One client connection at a time (a new one replaces the current one). The client's stream is
    cut by an `Inbox` (data frames go to the protocol `Connection`, control frames — `Hello`
    (resume_from), `Ack` — are the link's); every data frame this worker writes is numbered and
    kept in an `Outbox` until the client acknowledges it, so a client that connects again with
    `Hello(resume_from=N)` gets `Resume(from_seq=N, received=M)` and every frame after N. While no
    client is connected, tasks go on and their frames are only kept (up to `replay_limit` bytes;
    then the writers wait for a client). With no client for `idle_timeout` seconds the worker exits
    (killing what its tasks started). After `Shutdown` it sends `Goodbye(exit_status)` and leaves
    once everything it wrote is acknowledged.

    The threads are the pipe worker's: whoever would read the pipe (the main thread when idle, the
    flusher while a task runs, under `read_lock`) serves the socket instead — accepting, reading,
    acknowledging — and writers write whole frames to the current client under `write_lock`.
    `read_lock` is never taken while holding `write_lock`. Only the reader closes a client socket,
    and only after unhooking it from the writers under `write_lock`, so no write ever lands on a
    recycled descriptor.
    """

    def __init__(self, listener: socket.socket, path: str, *, idle_timeout: float = 600.0,
                 replay_limit: int = 64 << 20) -> None:
        super().__init__(-1, -1)
        listener.setblocking(False)
        self.listener = listener
        self._listen_fd = listener.fileno()
        self.path = path
        self.idle_timeout = idle_timeout
        self.replay_limit = replay_limit
        self.inbox = Inbox(DEFAULT_MAX_FRAME)  # the client's frames, cut whole and counted
        self.outbox = Outbox()  # ours, until the client acknowledges them (guarded by write_lock)
        self.sock: socket.socket | None = None  # the current client (the reader's, under read_lock)
        self.handshaken = False
        self.sessions = 0
        # self.fd_out: the handshaken client's descriptor, or -1 (frames are only kept); write_lock
        self.exit_status: int | None = None
        self.away_since = time.monotonic()
        self.last_ack = time.monotonic()
        self._poller = select.poll()
        self._poller.register(self._listen_fd, select.POLLIN)
        self._wait_poller = select.poll()
        self._wait_poller.register(self._listen_fd, select.POLLIN)
        self._serving = 0  # ident of the thread inside _service
        self._room_wait = False  # the main thread waits for replay room (a Cancel then waits too)

    # ---- writing -----------------------------------------------------------------------------------

    def _write(self, data: bytes | list[Any]) -> None:
        """Keep the frame(s) for replay and write them to the client, if one is connected (under
        `write_lock`). A broken client is dropped from the writers; its reader notices."""
        self._writing += 1  # as on the pipe path: a Cancel waits until the frame is recorded and written
        try:
            if self.exit_status is None:  # nothing follows Goodbye
                pieces = data if isinstance(data, list) else [data]
                self.outbox.record(pieces)
                fd = self.fd_out
                if fd >= 0 and not self._send_all(fd, pieces):
                    self.fd_out = -1
        finally:
            self._writing -= 1
        if self._cancel_deferred and not self._writing:
            self.resume_deferred_cancel()

    def _send_all(self, fd: int, pieces: list[Any]) -> bool:
        """Write `pieces` whole to the non-blocking socket `fd`; False if it broke, or if a new
        connection is waiting while this one does not take our bytes (it replaces this one)."""
        views = [p if p.__class__ is memoryview else memoryview(p) for p in pieces]
        while views:
            try:
                n = os.writev(fd, views if len(views) <= _IOV_MAX else views[:_IOV_MAX])
            except BlockingIOError:
                if not self._wait_writable(fd):
                    return False
                continue
            except OSError:
                return False
            while views and n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            if views and n:
                views[0] = views[0][n:]
        return True

    def _wait_writable(self, fd: int) -> bool:
        poller = self._wait_poller
        poller.register(fd, select.POLLOUT)
        try:
            while True:
                for ready, _ in poller.poll(1000):
                    if ready == self._listen_fd:
                        log.warning("a new client connects while the current one takes nothing: dropping it")
                        return False
                    if ready == fd:
                        return True
        finally:
            poller.unregister(fd)

    def _send_control(self, frame: bytes) -> None:
        with self.write_lock:
            if self.fd_out >= 0 and not self._send_all(self.fd_out, [frame]):
                self.fd_out = -1

    def send(self, msg: Message) -> None:
        if self.fd_out < 0 and self.outbox.bytes >= self.replay_limit:
            self._wait_room()
        with self.write_lock:
            self._write(self.conn.send(msg))

    def send_value(self, task_id: int, value: bytes) -> None:
        if self.fd_out < 0 and self.outbox.bytes >= self.replay_limit:
            self._wait_room()
        with self.write_lock:
            self._write(self.conn.send_value_result(task_id, value))

    def send_result(self, msg: Result, buffers: list[Any]) -> None:
        self.send(msg)
        for header, piece in self.conn.send_buffers(msg.task_id, buffers):
            if self.fd_out < 0 and self.outbox.bytes >= self.replay_limit:
                self._wait_room()
            with self.write_lock:
                self._write([header, piece])

    def _wait_room(self) -> None:
        """No client, and `replay_limit` bytes kept: wait (serving the socket when nobody else does)
        until a client connects or the idle timeout ends the process."""
        if self._serving == threading.get_ident():
            return  # a frame written while serving (a Pong): never wait on ourselves
        main = threading.get_ident() == self.main_ident
        if main:
            self._room_wait = True
        try:
            while self.fd_out < 0 and self.outbox.bytes >= self.replay_limit and self.exit_status is None:
                if self.read_lock.acquire(timeout=0.05):
                    try:
                        ok = self._serve_once(0.05)
                    finally:
                        self.read_lock.release()
                    if not ok:
                        self.abandon()
        finally:
            if main:
                self._room_wait = False
        if main and self._cancel_deferred and not self._writing:
            self._cancel_deferred = False
            self._on_cancel_signal(0, None)

    def _on_cancel_signal(self, signum: int, frame: Any) -> None:
        if self._room_wait:
            if self.in_user_code and self.cancel_requested is not None and self.cancel_requested == self.current:
                self._cancel_deferred = True  # raised once the wait is over, not inside the reader
            return
        super()._on_cancel_signal(signum, frame)

    def handshake(self, hello: Hello) -> None:
        if hello.cache_bytes > 0 and self.conn.store is None:
            # pieces pass through our read buffer: they go on into the memfd by pwrite (see bufcache)
            self.conn.store = MemfdStore(hello.cache_bytes, mapped=False)
        super().handshake(hello)

    # ---- serving the socket ------------------------------------------------------------------------

    def poll(self, block: bool) -> bool:
        """Serve the socket once (see `WorkerDaemon.poll`): blocking, until something arrives or a timer
        (ack, idle) is due; False when the worker should end (idle too long, protocol error)."""
        if not self.read_lock.acquire(blocking=block):
            return True
        try:
            return self._serve_once(None if block else 0.0)
        finally:
            self.read_lock.release()

    def _serve_once(self, timeout: float | None) -> bool:
        try:
            return self._service(timeout)
        except ProtocolError as exc:
            self.failure = f"protocol error from the client: {exc}"
            log.error("%s", self.failure)
        except OSError as exc:
            self.failure = f"serving {self.path} failed: {exc}"
            log.error("%s", self.failure)
        return False

    def _service(self, timeout: float | None) -> bool:
        """One round under `read_lock`: wait up to `timeout` (None: no limit) for a connection or data."""
        self._serving = threading.get_ident()
        try:
            now = time.monotonic()
            if self.sock is None and math.isfinite(self.idle_timeout):
                left = self.away_since + self.idle_timeout - now
                if left <= 0:
                    log.warning("no client for %g s: exiting", self.idle_timeout)
                    return False
                timeout = left if timeout is None else min(timeout, left)
            if self.handshaken and self.inbox.unacked:
                left = max(0.0, self.last_ack + ACK_DELAY - now)
                timeout = left if timeout is None else min(timeout, left)
            events = self._poller.poll(None if timeout is None else math.ceil(timeout * 1000))
            for fd, _ in events:
                if fd == self._listen_fd:
                    self._accept()
                elif self.sock is not None and fd == self.sock.fileno():
                    self._read_client()
            if self.handshaken and self.inbox.unacked and time.monotonic() - self.last_ack >= ACK_DELAY:
                self._send_ack()
            return True
        finally:
            self._serving = 0

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return
        except OSError as exc:
            log.warning("accept on %s failed: %s", self.path, exc)
            return
        if self.sock is not None:
            log.warning("a new client connection replaces the current one")
            self._drop_client()
        conn.setblocking(False)
        self.sock = conn
        self.handshaken = False
        self.inbox.reset()
        self._poller.register(conn.fileno(), select.POLLIN)

    def _drop_client(self) -> None:
        sock = self.sock
        if sock is None:
            return
        fd = sock.fileno()
        try:
            sock.shutdown(socket.SHUT_RDWR)  # a writer waiting on it wakes up and gives it up
        except OSError:
            pass
        with self.write_lock:  # no writer uses the descriptor once this is done
            if self.fd_out == fd:
                self.fd_out = -1
        self._poller.unregister(fd)
        sock.close()
        self.sock = None
        self.handshaken = False
        self.inbox.reset()
        self.away_since = time.monotonic()

    def _refuse(self, why: str) -> None:
        log.error("refusing the client: %s", why)
        welcome = Welcome(protocol_version=PROTOCOL_VERSION, python_version="", skyhive_version="",
                          max_frame=DEFAULT_MAX_FRAME, pid=os.getpid(), error=why)
        sock = self.sock
        if sock is not None:
            with self.write_lock:
                if self.fd_out == sock.fileno():
                    self.fd_out = -1
                self._send_all(sock.fileno(), [encode_control(welcome)])
        self._drop_client()

    def _read_client(self) -> None:
        sock = self.sock
        assert sock is not None
        try:
            n = sock.recv_into(self._inbuf)
        except BlockingIOError:
            return
        except OSError:
            n = 0
        if not n:
            self._drop_client()
            return
        with self._inview[:n] as data:
            try:
                items = self.inbox.feed(data)
            except ProtocolError as exc:
                self._refuse(f"bad frame: {exc}")
                return
            for item in items:
                if item.__class__ is memoryview:
                    if not self.handshaken:
                        self._refuse("the first frame on a connection must be a control Hello")
                        return
                    for msg in self.conn.receive_data(item):  # type: ignore[arg-type]
                        self.dispatch(msg)
                elif isinstance(item, Hello):
                    if not self._resume(item):
                        return
                elif isinstance(item, Ack):
                    with self.write_lock:
                        try:
                            self.outbox.ack(item.seq)
                        except ProtocolError as exc:
                            error: str | None = str(exc)
                        else:
                            error = None
                    if error:
                        self._refuse(error)
                        return
                else:
                    self._refuse(f"unexpected control message {type(item).__name__}")
                    return
            del items
        if self.handshaken and self.inbox.ack_due():
            self._send_ack()

    def _resume(self, hello: Hello) -> bool:
        if self.handshaken:
            self._refuse("a second Hello on one connection")
            return False
        if hello.protocol_version != PROTOCOL_VERSION:
            self._refuse(f"protocol version mismatch: the client speaks version {hello.protocol_version}, "
                         f"this worker speaks version {PROTOCOL_VERSION} (install the same skyhive on both sides)")
            return False
        sock = self.sock
        assert sock is not None
        if hello.takeover and not self._take_over():
            return False
        error = ""
        with self.write_lock:
            try:
                if hello.resume_from < 0:
                    raise ProtocolError("a resumable link starts with Hello(resume_from >= 0)")
                if self.sessions == 0 and hello.resume_from != 0:
                    raise ProtocolError(f"first connection asks to resume from frame {hello.resume_from}")
                pieces = self.outbox.replay(hello.resume_from)
            except ProtocolError as exc:
                error = f"cannot resume: {exc}"
            else:
                if self.sessions:
                    log.warning("client reconnected: replaying frames after %d (%d frames), holding %d of its own",
                                hello.resume_from, self.outbox.sent - hello.resume_from, self.inbox.received)
                out = [encode_control(Resume(from_seq=hello.resume_from, received=self.inbox.received)), *pieces]
                if self.exit_status is not None:
                    out.append(encode_control(Goodbye(exit_status=self.exit_status)))
                self.sessions += 1
                self.handshaken = True
                if self._send_all(sock.fileno(), out):
                    self.fd_out = sock.fileno()
        if error:
            self._refuse(error)
            return False
        return True

    def _take_over(self) -> bool:
        """A new client (another process attaching to a named pool) takes this worker over: what was
        kept for the previous client is dropped and a new session starts (a new handshake; the content
        cache and the loaded functions start empty, as the new client's mirror of them does). The
        plugins' `around_app` stays entered. A worker still busy with the previous client's tasks cancels
        them and refuses this connection ("busy"): the client tries again, and the next attempt finds the
        worker idle."""
        if None in self.pending:
            self._refuse("the worker is shutting down")
            return False
        if self.current is not None or self.pending or self.parked:
            dropped = len(self.pending) + len(self.parked)
            self.pending.clear()
            self.parked.clear()
            if self.current is not None:
                self.cancel(self.current)
            log.warning("a new client takes over: cancelling the previous client's task (%d queued dropped)", dropped)
            self._refuse("busy: cancelling the previous client's task; try again")
            return False
        with self.write_lock:
            self.conn = Connection(Role.WORKER)
            self.outbox = Outbox()
            self.inbox = Inbox(DEFAULT_MAX_FRAME)
            self.sessions = 0
            # the new client knows of no function sent here: start with none, so its count of the
            # functions (and their bytes) sent to this worker bounds what it holds, as for a new worker
            self.forget_functions()
        log.warning("a new client takes this worker over")
        return True

    def _send_ack(self) -> None:
        self.last_ack = time.monotonic()
        self._send_control(self.inbox.ack())

    # ---- the lifetime ------------------------------------------------------------------------------

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        code = super().run()
        self.finish(code)
        return code  # not reached: finish ends the process

    def _on_term(self, signum: int, frame: Any) -> None:
        log.warning("terminated by signal %d", signum)
        leave(self.path, -signum, log.info, stop_tasks=False)  # (skyhive's stop signals the whole group)

    def finish(self, code: int) -> None:
        """After `Shutdown`: say `Goodbye`, wait until everything is acknowledged (or no client came
        back within the idle timeout), and exit."""
        with self.write_lock:
            self.exit_status = code  # from now on no data frame is written
            if self.fd_out >= 0 and not self._send_all(self.fd_out, [encode_control(Goodbye(exit_status=code))]):
                self.fd_out = -1
        with self.read_lock:
            while self.outbox.acked < self.outbox.sent and self._serve_once(0.5):
                pass
        self.abandon(code)

    def abandon(self, code: int | None = None) -> None:
        """End the process as a detached worker does (see `leave`): status 1 after a protocol error."""
        if code is None:
            code = 1 if self.failure else 0
        leave(self.path, code, log.info)
