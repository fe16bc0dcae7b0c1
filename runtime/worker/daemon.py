"""The worker daemon: one process, one task at a time, talking the protocol over two file descriptors.

Threads: the main thread reads frames whenever it is idle and runs each task itself (no hand-off
between threads on the way in, and a `Cancel` can interrupt it with a signal, which also wakes a
blocking sleep or read); while a task runs, the flusher thread polls the input every tick, so
heartbeats are answered and `Cancel` arrives while a task computes; output threads (see `capture`)
stream what the task writes. Frames are written under one lock; a large result's chunks release it
between chunks so heartbeats and output interleave.

The daemon keeps no state the client does not know: if the client goes away (its end of the stream
closes) it stops, killing whatever its tasks started.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import os
import pickle
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import cloudpickle

from ...protocol import (
    Cancel,
    Connection,
    Hello,
    Message,
    Output,
    Ping,
    Pong,
    ProtocolError,
    Result,
    Role,
    Shutdown,
    Started,
    Submit,
    Welcome,
)
from ...protocol.codec import DEFAULT_MAX_FRAME
from ...protocol.messages import PROTOCOL_VERSION, STDERR, STDOUT, Ack, Goodbye, Resume
from ...protocol.resume import Inbox, Outbox, encode_control
from ..context import set_instance_info
from ..serialize import dump_exception, dump_value
from .capture import FLUSH_DELAY, FdPump, Flusher, TaskStream

log = logging.getLogger("skyhive.worker")

__all__ = ["Worker", "SocketWorker", "TaskCancelled", "WorkerSetup", "python_version", "skyhive_version"]

_CANCEL_SIGNAL = signal.SIGUSR1
_FN_CACHE_LIMIT = 4096
#: Socket mode: an `Ack` of the client's frames goes out at least this often while some are unacknowledged.
ACK_DELAY = 0.2
_IOV_MAX = 512  # pieces per writev (the kernel takes at most 1024)


class TaskCancelled(BaseException):
    """Raised inside a task's thread when the client cancels it (a BaseException, like KeyboardInterrupt)."""


class WorkerSetup:
    """Sent once, before any task: plugin hooks to enter for the worker's lifetime."""

    def __init__(self, plugins: list[Any], env: dict[str, str]) -> None:
        self.plugins = plugins
        self.env = env


def python_version() -> str:
    return "%d.%d.%d" % sys.version_info[:3]


def skyhive_version() -> str:
    try:
        from importlib.metadata import version

        return version("skyhive")
    except Exception:
        return "0+unknown"


class Worker:
    """The daemon's state. `run()` returns the process exit code."""

    def __init__(self, fd_in: int, fd_out: int) -> None:
        self.fd_in = fd_in
        self.fd_out = fd_out
        self.conn = Connection(Role.WORKER)
        self.pending: collections.deque[Submit | None] = collections.deque()
        self.read_lock = threading.Lock()
        self.task_started = 0.0
        self.started_sent: int | None = None
        self._writing = 0
        self._inbuf = bytearray(1 << 20)
        self._inview = memoryview(self._inbuf)
        self._cancel_deferred = False
        self.write_lock = threading.Lock()
        self.fns: dict[bytes, Callable[..., Any]] = {}
        self.current: int | None = None
        self.in_user_code = False
        self.cancel_requested: int | None = None
        self.cancelled_queued: set[int] = set()
        self.main_ident = threading.get_ident()
        self.stdout = TaskStream(STDOUT, self._output, "<skyhive stdout>")
        self.stderr = TaskStream(STDERR, self._output, "<skyhive stderr>")
        self.app_stack = contextlib.ExitStack()
        self.task_hooks: list[Any] = []
        self.setup_info: Any = None

    # ---- writing -----------------------------------------------------------------------------------

    def _write(self, data: bytes | list[Any]) -> None:
        views = [memoryview(d) for d in (data if isinstance(data, list) else [data])]
        self._writing += 1  # a Cancel arriving now waits until the frame is whole (see _on_cancel_signal)
        try:
            while views:
                n = os.writev(self.fd_out, views)
                while views and n >= len(views[0]):
                    n -= len(views[0])
                    views.pop(0)
                if views and n:
                    views[0] = views[0][n:]
        finally:
            self._writing -= 1
        if self._cancel_deferred and not self._writing:
            self._cancel_deferred = False
            self._on_cancel_signal(0, None)

    def send(self, msg: Message) -> None:
        """Write one frame (whole, under the write lock)."""
        with self.write_lock:
            self._write(self.conn.send(msg))

    def _tick(self) -> None:
        self.poll_during_task()

    def _output(self, stream: int, text: str) -> None:
        task = self.current or 0
        try:
            self.send(Output(task_id=task, stream=stream, data=text))
        except (OSError, ProtocolError):
            pass  # the client is gone; the reader thread ends the process

    def send_result(self, msg: Result, buffers: list[Any]) -> None:
        self.send(msg)
        for header, piece in self.conn.send_buffers(msg.task_id, buffers):
            with self.write_lock:
                self._write([header, piece])

    # ---- reading -----------------------------------------------------------------------------------

    def poll(self, block: bool) -> bool:
        """Read what the client sent and act on it; False once the input has ended.

        The main thread reads (blocking) whenever it is idle, so a task arrives with no thread
        hand-off. While a task runs, the flusher thread polls (non-blocking) every tick: heartbeats
        and `Cancel` are answered, new `Submit`s wait in `pending`. The lock keeps the two apart.
        """
        if not self.read_lock.acquire(blocking=block):
            return True
        try:
            if not block and not select.select([self.fd_in], [], [], 0)[0]:
                return True
            # into one reused buffer: os.read(fd, 1 MiB) would mmap, mremap and munmap a fresh
            # 1 MiB object for every frame (glibc serves allocations that large with mmap)
            n = os.readv(self.fd_in, [self._inbuf])
            if not n:
                self.conn.receive_data(b"")
                return False
            with self._inview[:n] as data:
                for msg in self.conn.receive_data(data):
                    self.dispatch(msg)
            return True
        except ProtocolError as exc:
            log.error("protocol error from the client: %s", exc)
        except OSError as exc:
            log.error("reading from the client failed: %s", exc)
        finally:
            self.read_lock.release()
        return False

    def poll_during_task(self) -> None:
        """Called by the flusher thread each tick: serve the client while a long task runs.

        A task still running at a tick is reported `Started` then; a shorter one is not (its
        `Result` says it started), which saves a frame and a client wake-up per short task.
        """
        current = self.current
        if current is not None and current != self.started_sent:
            self.started_sent = current
            self.send(Started(task_id=current))
        if current is not None and time.monotonic() - self.task_started >= FLUSH_DELAY:
            if not self.poll(block=False):
                self.abandon()  # the client is gone: nothing can reach us any more

    def dispatch(self, msg: Message) -> None:
        if isinstance(msg, Submit):
            self.pending.append(msg)
        elif isinstance(msg, Ping):
            self.send(Pong(nonce=msg.nonce))
        elif isinstance(msg, Cancel):
            self.cancel(msg.task_id)
        elif isinstance(msg, Hello):
            self.handshake(msg)
        elif isinstance(msg, Shutdown):
            self.pending.append(None)

    def handshake(self, hello: Hello) -> None:
        mine = python_version()
        if hello.python_version.split(".")[:2] != mine.split(".")[:2]:
            error = (
                f"client runs Python {hello.python_version} and this worker runs Python {mine}: "
                "functions travel as bytecode, so both must have the same major.minor version"
            )
            with self.write_lock:
                self._write(self.conn.refusal(self._welcome(error)))
            log.error("%s", error)
            self.abandon(1)
        self.send(self._welcome(""))

    def _welcome(self, error: str) -> Welcome:
        return Welcome(
            protocol_version=PROTOCOL_VERSION,
            python_version=python_version(),
            skyhive_version=skyhive_version(),
            max_frame=self.conn.max_frame,
            pid=os.getpid(),
            error=error,
        )

    def cancel(self, task_id: int) -> None:
        if self.current == task_id:
            self.cancel_requested = task_id
            signal.pthread_kill(self.main_ident, _CANCEL_SIGNAL)
        else:
            self.cancelled_queued.add(task_id)

    def _on_cancel_signal(self, signum: int, frame: Any) -> None:
        if self.in_user_code and self.cancel_requested is not None and self.cancel_requested == self.current:
            if self._writing:
                # the task was interrupted in the middle of writing a frame (its print being
                # flushed): raising here would tear the frame; raise once it is written
                self._cancel_deferred = True
                return
            self.cancel_requested = None
            raise TaskCancelled()

    def abandon(self, code: int = 0) -> None:
        """The client is gone: end this process and everything its tasks started.

        Also called by the flusher thread (the client went away while a task runs). Only the main
        thread may change a signal's handler; from another thread our own SIGTERM may end this
        process before `_exit` does, which is just as good.
        """
        try:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.killpg(os.getpgid(0), signal.SIGTERM)
        except OSError:
            pass
        os._exit(code)

    # ---- running tasks -----------------------------------------------------------------------------

    def run(self) -> int:
        signal.signal(_CANCEL_SIGNAL, self._on_cancel_signal)
        flusher = Flusher((self.stdout, self.stderr), self._tick)
        flusher.start()
        try:
            while True:
                if not self.pending:
                    if not self.poll(block=True):
                        self.abandon()  # the client is gone
                    continue
                sub = self.pending.popleft()
                if sub is None:
                    break
                self.execute(sub)
        finally:
            try:
                self.app_stack.close()  # plugin teardown (around_app's finally)
            except Exception:
                log.exception("plugin teardown failed")
            flusher.stop()
            self.stdout.flush()
            self.stderr.flush()
        return 0

    def execute(self, sub: Submit) -> None:
        task_id = sub.task_id
        if task_id in self.cancelled_queued:
            self.cancelled_queued.discard(task_id)
            self.send_result(Result(task_id=task_id, ok=False, value=b"", cancelled=True,
                                    error_type="TaskCancelled", error_message="cancelled before it started"), [])
            return
        self.task_started = time.monotonic()
        self.current = task_id
        ok, cancelled = True, False
        value: Any = None
        try:
            fn = self._function(sub)
            args = pickle.loads(sub.args, buffers=sub.buffers)
            if sub.options.get("kind") == "setup":
                self._setup(fn)
            else:
                value = self._call(fn, args, sub.batch)
        except TaskCancelled:
            ok, cancelled = False, True
        except BaseException as exc:  # noqa: BLE001 - everything a task raises goes back to the caller
            ok, value = False, exc
        finally:
            self.in_user_code = False
            self.cancel_requested = None
            self.stdout.flush()
            self.stderr.flush()
        self.current = None
        self._reply(task_id, ok, cancelled, value)

    def _call(self, fn: Callable[..., Any], args: Any, batch: bool) -> Any:
        if not self.task_hooks:
            self.in_user_code = True
            return self._invoke(fn, args, batch)
        with contextlib.ExitStack() as stack:
            for hook in self.task_hooks:
                stack.enter_context(hook(self.setup_info))
            self.in_user_code = True
            return self._invoke(fn, args, batch)

    @staticmethod
    def _invoke(fn: Callable[..., Any], args: Any, batch: bool) -> Any:
        if batch:
            out = []
            for i, item in enumerate(args):
                try:
                    out.append(fn(item))
                except Exception as exc:
                    exc.add_note(f"(map item {i} of this batch)")
                    raise
            return out
        a, kw = args
        return fn(*a, **kw)

    def _function(self, sub: Submit) -> Callable[..., Any]:
        fn = self.fns.get(sub.fn_id)
        if fn is None:
            if not sub.fn:
                raise RuntimeError("worker does not hold the function this task refers to (client bug)")
            fn = cloudpickle.loads(sub.fn)
            if len(self.fns) >= _FN_CACHE_LIMIT:
                self.fns.clear()
            self.fns[sub.fn_id] = fn
        return fn

    def _setup(self, setup: Any) -> None:
        from ..context import instance_info

        os.environ.update(setup.env)
        info = instance_info()
        self.setup_info = info
        for plugin in setup.plugins:
            hook = getattr(plugin, "around_app", None)
            if hook is not None:
                self.app_stack.enter_context(hook(info))
            task_hook = getattr(plugin, "around_task", None)
            if task_hook is not None:
                self.task_hooks.append(task_hook)

    def _reply(self, task_id: int, ok: bool, cancelled: bool, value: Any) -> None:
        if cancelled:
            msg = Result(task_id=task_id, ok=False, value=b"", cancelled=True,
                         error_type="TaskCancelled", error_message="cancelled while running")
            self.send_result(msg, [])
            return
        if ok:
            try:
                data, buffers = dump_value(value, "result")
                self.send_result(Result(task_id=task_id, ok=True, value=data,
                                        buffer_sizes=tuple(memoryview(b).nbytes for b in buffers)), buffers)
                return
            except Exception as exc:  # the result could not be pickled: report that instead
                value = exc
        data, type_name, message, tb = dump_exception(value)
        self.send_result(Result(task_id=task_id, ok=False, value=data, error_type=type_name,
                                error_message=message, traceback=tb), [])


class SocketWorker(Worker):
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
            self._cancel_deferred = False
            self._on_cancel_signal(0, None)

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

    # ---- serving the socket ------------------------------------------------------------------------

    def poll(self, block: bool) -> bool:
        """Serve the socket once (see `Worker.poll`): blocking, until something arrives or a timer
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
            log.error("protocol error from the client: %s", exc)
        except OSError as exc:
            log.error("serving %s failed: %s", self.path, exc)
        return False

    def _service(self, timeout: float | None) -> bool:
        """One round under `read_lock`: wait up to `timeout` (None: no limit) for a connection or data."""
        self._serving = threading.get_ident()
        try:
            now = time.monotonic()
            if self.sock is None:
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
        self.abandon(-signum)

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

    def abandon(self, code: int = 0) -> None:
        """End the process: leave the exit status next to the socket, remove the socket, and kill
        the process group (ourselves included) when we lead it, as a detached worker does."""
        try:
            with open(self.path + ".exit", "w") as fh:
                fh.write(f"{code}\n")
        except OSError:
            pass
        try:
            os.unlink(self.path)
        except OSError:
            pass
        log.info("exiting (%d)", code)
        try:
            if os.getpgid(0) == os.getpid():
                os.killpg(0, signal.SIGKILL)
        except OSError:
            pass
        os._exit(code)


def serve(fd_in: int = 0, fd_out: int = 1, *, make_worker: Callable[[], Worker] | None = None) -> int:
    """Set up the process (fds, streams, instance info) and run the daemon until `Shutdown`.

    The protocol travels on `fd_in`/`fd_out` (pipes: the Local transport), or, with `make_worker`,
    however the worker it makes talks (`SocketWorker`: the detached worker's Unix socket).
    """
    from ...protocol.info import ENV_VAR, InstanceInfo

    diag = os.dup(2)
    if make_worker is None:
        proto_in, proto_out = os.dup(fd_in), os.dup(fd_out)
    logging.basicConfig(
        stream=os.fdopen(diag, "w", buffering=1), level=os.environ.get("SKYHIVE_WORKER_LOG", "WARNING"),
        format="skyhive-worker[%(process)d] %(levelname)s %(message)s",
    )
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    worker = Worker(proto_in, proto_out) if make_worker is None else make_worker()
    pumps = []
    for fd, stream, pystream in ((1, STDOUT, worker.stdout), (2, STDERR, worker.stderr)):
        r, w = os.pipe()
        os.dup2(w, fd)
        os.close(w)
        pumps.append(FdPump(r, stream, pystream, worker._output))
    for pump in pumps:
        pump.start()
    sys.stdout = worker.stdout  # type: ignore[assignment]
    sys.stderr = worker.stderr  # type: ignore[assignment]
    if text := os.environ.get(ENV_VAR):
        set_instance_info(InstanceInfo.from_json(text))
    try:
        return worker.run()
    except BaseException:
        log.error("worker crashed:\n%s", traceback.format_exc())
        return 1
