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
import dataclasses
import logging
import os
import select
import signal
import threading
import time
from typing import Any

from ...protocol import (
    Cancel,
    Function,
    Hello,
    Message,
    Missing,
    Output,
    Ping,
    Pong,
    ProtocolError,
    Result,
    Shutdown,
    Started,
    Submit,
    Welcome,
)
from ...protocol.messages import PROTOCOL_VERSION, STDERR, STDOUT
from ..onnode.setup import python_version, skyhive_version
from ..common import shm
from .bufcache import MemfdStore
from .capture import FLUSH_DELAY, Flusher, TaskStream
from .shared import attach_shared, share_result
from .tasks import TaskCancelled, TaskCore

log = logging.getLogger("skyhive.worker")

__all__ = ["WorkerDaemon", "TaskCancelled"]

_CANCEL_SIGNAL = signal.SIGUSR1
#: Socket mode: an `Ack` of the client's frames goes out at least this often while some are unacknowledged.
ACK_DELAY = 0.2
_IOV_MAX = 512  # pieces per writev (the kernel takes at most 1024)
#: Reads of up to this many bytes go to the connection as a copy, larger ones as a view of the buffer.
_SMALL_READ = 4096


class WorkerDaemon(TaskCore):
    """The daemon's state. `run()` returns the process exit code. (Not `sky.Worker`, in
    `runtime/concurrency.py`: that is the user's choice of processes and threads per rank.)

    The task-running core (`dispatch` here; `execute`, `_reply` in `TaskCore`) is shared with the
    in-process worker of simulated nodes (`skyhive.runtime.kinds.simulated.transport`), which overrides only
    how frames are written (`_write`), how the process ends (`abandon`) and what touches the process
    (`_apply_env`).
    """

    #: Bytes of the reusable read buffer (0: this worker never reads a file descriptor).
    READ_BUFFER = 1 << 20
    #: True once frames go straight to `fd_out` through this class's `_write` (`_open_process`); a
    #: subclass writing elsewhere (the simulated nodes' worker) keeps False
    _fd_writes = False

    def __init__(self, fd_in: int, fd_out: int) -> None:
        super().__init__()
        self.started_sent: int | None = None
        self.failure: str | None = None  # why reading from the client failed (a protocol error)
        self._open_process(fd_in, fd_out)

    def _open_process(self, fd_in: int, fd_out: int) -> None:
        """What a worker process holds around the task core above: its descriptors and read buffer,
        the locks and the queue between its threads, its output streams, the plugins' exit stack and
        shared memory with the client. The in-process worker of simulated nodes overrides this with
        lighter stand-ins (`transport/simulated.py`: one thread, ~10 objects fewer per node)."""
        self.fd_in = fd_in
        self.fd_out = fd_out
        self._fd_writes = type(self)._write is WorkerDaemon._write
        self.pending: collections.deque[Submit | None] = collections.deque()
        self.read_lock = threading.Lock()
        self._writing = 0
        self._inbuf = bytearray(self.READ_BUFFER)
        self._inview = memoryview(self._inbuf)
        self._inbufs = [self._inbuf]  # (os.readv's list, made once)
        self._cancel_deferred = False
        self.write_lock = threading.Lock()
        self.main_ident = threading.get_ident()
        self.stdout = TaskStream(STDOUT, self._output, "<skyhive stdout>")
        self.stderr = TaskStream(STDERR, self._output, "<skyhive stderr>")
        self._streams = (self.stdout, self.stderr)
        self.app_stack = contextlib.ExitStack()
        # shared memory with a client on this machine (the Local transport): memfds pass over this
        self.fds: shm.FdInbox | None = None
        if (shm_fd := os.environ.pop(shm.ENV_VAR, None)) is not None:
            os.set_inheritable(int(shm_fd), False)  # not for the processes tasks start
            self.fds = shm.FdInbox(int(shm_fd))  # (a socket on first use)

    # ---- writing -----------------------------------------------------------------------------------

    def _write(self, data: bytes | list[Any]) -> None:
        self._writing += 1  # a Cancel arriving now waits until the frame is whole (see _on_cancel_signal)
        try:
            if data.__class__ is not bytes:
                self._write_views([memoryview(d) for d in (data if isinstance(data, list) else [data])])
            elif (n := os.write(self.fd_out, data)) < len(data):  # (one frame: most often whole at once)
                self._write_views([memoryview(data)[n:]])
        finally:
            self._writing -= 1
        if self._cancel_deferred and not self._writing:
            self.resume_deferred_cancel()

    def _write_views(self, views: list[memoryview]) -> None:
        while views:
            n = os.writev(self.fd_out, views)
            while views and n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            if views and n:
                views[0] = views[0][n:]

    def resume_deferred_cancel(self) -> None:
        """Deliver a `Cancel` that waited for a frame to be whole — in the main thread, which runs
        the task. The frame may have been written by an output thread (what a subprocess wrote to
        fd 2): raising `TaskCancelled` there killed that thread ("Exception in thread skyhive-fd2")
        and left the task running, so another thread signals the main thread again instead."""
        self._cancel_deferred = False
        if threading.get_ident() == self.main_ident:
            self._on_cancel_signal(0, None)
        else:
            signal.pthread_kill(self.main_ident, _CANCEL_SIGNAL)

    def send(self, msg: Message) -> None:
        """Write one frame (whole, under the write lock)."""
        with self.write_lock:
            self._write(self.conn.send(msg))

    def send_value(self, task_id: int, value: bytes) -> None:
        """`send(Result(task_id=task_id, ok=True, value=value))`, packed from a template.

        A worker writing its own descriptor writes it straight away, without `_write`'s count of
        frames in progress: a task's `Result` goes out after the task left user code, where a
        `Cancel` no longer raises (see `_on_cancel_signal`), so nothing can tear this frame. (One
        a task: most of what a worker sends.)"""
        with self.write_lock:
            frame = self.conn.send_value_result(task_id, value)
            if not self._fd_writes:
                self._write(frame)
            elif (n := os.write(self.fd_out, frame)) < len(frame):
                self._write_views([memoryview(frame)[n:]])

    def _tick(self) -> None:
        self.poll_during_task()

    def write_output(self, stream: int, text: str) -> None:
        """Send what the task wrote on `stream` to the client (what a hosted worker's streams call)."""
        self._output(stream, text)

    def _output(self, stream: int, text: str) -> None:
        task = self.current or 0
        try:
            self.send(Output(task_id=task, stream=stream, data=text))
        except (OSError, ProtocolError):
            pass  # the client is gone; the reader thread ends the process

    def send_result(self, msg: Result, buffers: list[Any]) -> None:
        if not buffers:
            self.send(msg)
            return
        if self.fds is not None:
            msg = share_result(self.fds, msg, buffers)
        self.send(msg)
        for header, piece in self.conn.send_buffers(msg.task_id, buffers, skip=msg.shared):
            with self.write_lock:
                self._write([header, piece])

    # ---- reading -----------------------------------------------------------------------------------

    def poll(self, block: bool) -> bool:
        """Read what the client sent and act on it; False once the input has ended.

        The main thread reads (blocking) whenever it is idle, so a task arrives with no thread
        hand-off. While a task runs, the flusher thread polls (non-blocking) every tick: heartbeats
        and `Cancel` are answered, new `Submit`s wait in `pending`. The lock keeps the two apart.
        """
        if not self.read_lock.acquire(block):
            return True
        try:
            if not block and not select.select([self.fd_in], [], [], 0)[0]:
                return True
            # into one reused buffer: os.read(fd, 1 MiB) would mmap, mremap and munmap a fresh
            # 1 MiB object for every frame (glibc serves allocations that large with mmap); while a
            # large chunk arrives, its bytes are read straight into their destination buffer
            conn = self.conn
            target = conn.receive_target()
            if target is None:
                n = os.readv(self.fd_in, self._inbufs)
                if not n:
                    conn.receive_data(b"")
                    return False
                if n <= _SMALL_READ:  # (a copy of a few bytes costs less than a view and its release)
                    messages = conn.receive_data(self._inbuf[:n])
                else:
                    with self._inview[:n] as data:
                        messages = conn.receive_data(data)
            else:
                with target:
                    direct = len(target)
                    n = os.readv(self.fd_in, [target, self._inbuf])
                if not n:
                    conn.receive_data(b"")
                    return False
                messages = conn.received_into(min(n, direct))
                if n > direct:
                    with self._inview[: n - direct] as data:
                        messages += conn.receive_data(data)
            for msg in messages:
                self.dispatch(msg)
            return True
        except ProtocolError as exc:
            self.failure = f"protocol error from the client: {exc}"
            log.error("%s", self.failure)
        except OSError as exc:
            self.failure = f"reading from the client failed: {exc}"
            log.error("%s", self.failure)
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
        if msg.__class__ is Submit:  # (messages are final classes; this one comes with every task)
            if msg.shared or (msg.cached and None in msg.buffers):
                msg = attach_shared(self.fds, self.conn.store, msg)
            self.pending.append(msg)
        elif isinstance(msg, Ping):
            self.send(Pong(nonce=msg.nonce))
        elif isinstance(msg, Cancel):
            self.cancel(msg.task_id)
        elif isinstance(msg, Missing):  # the content cache lacks a buffer a Submit sent by reference
            self.send(msg)
        elif isinstance(msg, Function):  # what a parked task waited for
            parked = self.parked.pop(msg.task_id, None)
            if parked is not None:
                if not msg.fn:
                    self.no_function.add(msg.task_id)
                self.pending.append(dataclasses.replace(parked, fn=msg.fn) if msg.fn else parked)
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
        if hello.cache_bytes > 0 and self.conn.store is None:
            self.conn.store = MemfdStore(hello.cache_bytes)
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
            parked = self.parked.pop(task_id, None)
            if parked is not None:  # waiting for its function: to the queue, to be answered cancelled
                self.pending.append(parked)

    def _on_cancel_signal(self, signum: int, frame: Any) -> None:
        if self.in_user_code and self.cancel_requested is not None and self.cancel_requested == self.current:
            if self._writing:
                # the task was interrupted in the middle of writing a frame (its print being
                # flushed): raising here would tear the frame; raise once it is written
                self._cancel_deferred = True
                return
            self.cancel_requested = None
            raise TaskCancelled()

    def abandon(self, code: int | None = None) -> None:
        """The client is gone (or spoke garbage): end this process and everything its tasks started.

        The exit status is `code`, else 1 after a protocol or read error, else 0 (the client closed
        its pipe). Only a process group this worker leads is killed — the one its transport made
        for it (`start_new_session`, `setsid`); started inside someone else's group (a shell
        script's), it kills nothing but itself. Also called by the flusher thread (the client went
        away while a task runs). Only the main thread may change a signal's handler; from another
        thread our own SIGTERM may end this process before `_exit` does, which is just as good.
        """
        if code is None:
            code = 1 if self.failure else 0
        from ..common.leaving import run_before_leaving, stop_tasks_first

        stop_tasks_first()  # (the tasks' processes stop writing; then a cached mount's last upload)
        run_before_leaving(log.warning)
        try:
            if os.getpgid(0) == os.getpid():
                if threading.current_thread() is threading.main_thread():
                    signal.signal(signal.SIGTERM, signal.SIG_IGN)
                os.killpg(os.getpid(), signal.SIGTERM)
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
                    if not self.poll(True):
                        self.abandon()  # the client is gone
                    continue
                if self.pending[0] is None:
                    break
                self.execute(self.pending.popleft())  # (holding no reference to it here: see execute)
        finally:
            try:
                self.app_stack.close()  # plugin teardown (around_app's finally)
            except Exception:
                log.exception("plugin teardown failed")
            from ..common.leaving import run_before_leaving

            run_before_leaving(log.warning)  # (or wait for the thread running them: the client went away)
            flusher.stop()
            self.stdout.flush()
            self.stderr.flush()
        return 0
