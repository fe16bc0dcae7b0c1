"""Task threads: one worker process running up to N tasks at once (`sky.Worker(concurrency=N)` with
the thread executor, Skyward's default).

`ThreadSlots` is mixed into a worker (`WorkerDaemon` on pipes, `SocketWorker` on its Unix socket) when the
process is started with `SKYHIVE_TASK_THREADS=N` (N > 1). The main thread keeps reading frames; each
`Submit` is handed to one of N task threads, so heartbeats, `Cancel` and new tasks are served while
tasks run (the client sends a worker more tasks than one: it picks the least busy worker). Per task:

- output: what a task thread prints goes to that task (`sys.stdout`/`sys.stderr` route writes by
  thread to the task's own pair of `TaskStream`s, flushed by the flusher's tick and at the task's
  end); what native code or a subprocess writes to fd 1/2 cannot be told apart by task and is sent
  unattributed (task 0), as between tasks;
- cancel: `TaskCancelled` is raised in the task's thread at its next Python instruction (a thread
  cannot be signalled). A task blocked in C code (`time.sleep`, a socket read) sees it when that call
  returns; one blocked past the pool's `cancel_grace` gets its worker killed by the client — every
  task on it then fails with `WorkerLost` and the worker restarts, as a crashed process would;
- shared state: the tasks share the process — module globals, the loaded-function cache (guarded by
  a lock), `instance_info()`, the plugins' `around_app` set-up (once per process).

The plugins' setup task runs on the main thread before any task; `Shutdown` waits for the running
tasks to end (their `Result`s go out first).
"""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
from types import GeneratorType
from typing import Any

from ...protocol import Output, Result, Submit
from ...protocol.messages import STDERR, STDOUT
from ..onnode.setup import TASK_THREADS_ENV
from ..common.serialize import load_value
from .capture import TaskStream, flush_streams
from .tasks import TaskCancelled

__all__ = ["ThreadSlots", "ENV_VAR", "task_threads", "threaded_class"]

#: The environment variable that asks a worker process for N task threads.
ENV_VAR = TASK_THREADS_ENV


def task_threads(environ: Any = None) -> int:
    """The task threads this worker process was started with (1: the one-task-at-a-time daemon)."""
    raw = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return int(raw) if raw.isdigit() and int(raw) > 1 else 1


class _Router(io.TextIOBase):
    """`sys.stdout`/`sys.stderr` of a worker with task threads: a write goes to the stream of the task
    running on the writing thread, else to the worker's own stream (between tasks, other threads)."""

    def __init__(self, default: TaskStream, by_thread: dict[int, TaskStream]) -> None:
        super().__init__()
        self._default = default
        self._by_thread = by_thread

    def _target(self) -> TaskStream:
        return self._by_thread.get(threading.get_ident(), self._default)

    def write(self, s: str) -> int:
        return self._target().write(s)

    def flush(self) -> None:
        self._target().flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._default.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return "replace"

    @property
    def buffer(self) -> Any:  # type: ignore[override]
        return self._target().buffer

    @property
    def name(self) -> str:  # type: ignore[override]
        return self._default.name


class ThreadSlots:
    """The mixin (see the module docstring): `class ThreadedWorker(ThreadSlots, WorkerDaemon)`."""

    slots: int = 1

    def start_threads(self, slots: int) -> None:
        """Run tasks on `slots` threads from now on (called once, before `run`)."""
        self.slots = slots
        from concurrent.futures import ThreadPoolExecutor  # (a worker of one task thread never loads it)

        self._pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="skyhive-task")
        self._running: dict[int, int] = {}  # task id -> the ident of the thread running it
        self._submitted: set[int] = set()  # handed to the pool, not finished
        self._idle = threading.Condition()
        self._fn_lock = threading.Lock()
        self._out: dict[int, TaskStream] = {}
        self._err: dict[int, TaskStream] = {}
        self._task_streams: dict[int, tuple[TaskStream, TaskStream]] = {}

    def run(self) -> int:  # type: ignore[override]
        sys.stdout = _Router(self.stdout, self._out)  # type: ignore[attr-defined,assignment]
        sys.stderr = _Router(self.stderr, self._err)  # type: ignore[attr-defined,assignment]
        try:
            return super().run()  # type: ignore[misc,no-any-return]
        finally:
            self._pool.shutdown(wait=True, cancel_futures=False)

    # ---- the main thread: hand tasks to the threads ----------------------------------------------

    def execute(self, sub: Submit) -> None:
        if sub.options and sub.options.get("kind") == "setup":
            super().execute(sub)  # type: ignore[misc]  # the plugins' setup: here, before any task
            return
        fns = self.fns  # type: ignore[attr-defined]
        if sub.fn_id not in fns and not sub.fn and sub.task_id not in self.cancelled_queued:  # type: ignore[attr-defined]
            if self._wants_function(sub):  # type: ignore[attr-defined]
                return  # parked until the client sends it
        with self._idle:
            self._submitted.add(sub.task_id)
        self._pool.submit(self._run_task, sub)

    def dispatch(self, msg: Any) -> None:
        from ...protocol import Shutdown

        if isinstance(msg, Shutdown):  # the running tasks end (and answer) before the worker does
            with self._idle:
                while self._submitted:
                    self._idle.wait()
        super().dispatch(msg)  # type: ignore[misc]

    def cancel(self, task_id: int) -> None:
        ident = self._running.get(task_id)
        if ident is None:
            self.cancelled_queued.add(task_id)  # type: ignore[attr-defined]  # answered when its thread takes it
            parked = self.parked.pop(task_id, None)  # type: ignore[attr-defined]
            if parked is not None:
                self.pending.append(parked)  # type: ignore[attr-defined]
            return
        import ctypes  # (on the first cancel: ctypes is slow to import and most workers never need it)

        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(TaskCancelled))

    def _take_over(self) -> bool:
        """A new client takes a socket worker over (`SocketWorker._take_over`): tasks its threads still run
        for the previous client (a named pool's jobs side by side whose agent died) are cancelled and this
        connection is refused ("busy"), as for the one task of a worker without threads; the client tries
        again."""
        with self._idle:
            busy = sorted(self._submitted)
        if busy:
            for task_id in busy:
                self.cancel(task_id)
            logging.getLogger(__name__).warning(
                "a new client takes over: cancelling the previous client's %d task(s) on threads", len(busy))
            self._refuse("busy: cancelling the previous client's tasks; try again")  # type: ignore[attr-defined]
            return False
        return super()._take_over()  # type: ignore[misc,no-any-return]

    def _tick(self) -> None:
        for pair in list(self._task_streams.values()):  # what running tasks printed, every tick
            for stream in pair:
                stream.flush()

    # ---- a task thread ---------------------------------------------------------------------------

    def _run_task(self, sub: Submit) -> None:
        task_id = sub.task_id
        ident = threading.get_ident()
        try:
            if task_id in self.cancelled_queued:  # type: ignore[attr-defined]
                self.cancelled_queued.discard(task_id)  # type: ignore[attr-defined]
                self.send_result(Result(task_id=task_id, ok=False, value=b"", cancelled=True,  # type: ignore[attr-defined]
                                        error_type="TaskCancelled", error_message="cancelled before it started"), [])
                return
            out = TaskStream(STDOUT, self._sink(task_id), "<skyhive stdout>")
            err = TaskStream(STDERR, self._sink(task_id), "<skyhive stderr>")
            self._out[ident], self._err[ident] = out, err
            self._task_streams[task_id] = (out, err)
            ok, cancelled, value = True, False, None
            self._running[task_id] = ident
            try:
                with self._fn_lock:
                    fn, buffers = self._function(sub)  # type: ignore[attr-defined]
                args = load_value(sub.args, buffers)
                options, batch = sub.options, sub.batch
                del sub, buffers
                value = self._call(fn, args, batch, task_id if options.get("stream") else None)  # type: ignore[attr-defined]
                if value.__class__ is GeneratorType:
                    value = list(value)
            except TaskCancelled:
                ok, cancelled = False, True
            except BaseException as exc:  # noqa: BLE001 - everything a task raises goes back to the caller
                ok, value = False, exc
            finally:
                self._running.pop(task_id, None)
            try:
                flush_streams((out, err))
            finally:
                self._out.pop(ident, None)
                self._err.pop(ident, None)
                self._task_streams.pop(task_id, None)
            args = fn = None  # noqa: F841 - dropped before the Result
            self._reply(task_id, ok, cancelled, value)  # type: ignore[attr-defined]
        except TaskCancelled:  # a cancel that landed after the task's own code: it is answered anyway
            self._reply(task_id, False, True, None)  # type: ignore[attr-defined]
        except BaseException:  # noqa: BLE001 - the client is gone: the reader ends the process
            pass
        finally:
            with self._idle:
                self._submitted.discard(task_id)
                self._idle.notify_all()

    def _sink(self, task_id: int) -> Any:
        def send(stream: int, text: str) -> None:
            try:
                self.send(Output(task_id=task_id, stream=stream, data=text))  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - the client is gone; the reader ends the process
                pass

        return send


def threaded_class(base: type) -> type:
    """`base` (a worker class) with task threads: `ThreadSlots` mixed in before it."""
    return type(f"Threaded{base.__name__}", (ThreadSlots, base), {"__doc__": f"`{base.__name__}` with task threads."})
