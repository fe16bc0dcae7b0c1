"""`WorkerChannel`: the client's side of one worker process.

It owns the protocol `Connection`, the tasks in flight on that worker, the functions that worker has
already seen (so a function's bytes travel once), and the heartbeat clock. Bytes arrive by callback
from the transport and complete the callers' futures directly; output frames go to the pool's output
router. A cancelled task that does not stop within its grace gets the worker killed. When the worker
is lost, every task in flight fails with `WorkerLost`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ...errors import WorkerLost
from ...protocol import (
    Connection,
    Message,
    Item,
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
from ...protocol.cache import KEY_SIZE, NO_KEY, ContentIndex
from ...protocol.messages import Cancel, Function, Missing, WantFunction
from ..events.log import EventLog
from ..events.types import TaskFinished, TaskStarted
from ..onnode.setup import FN_CACHE_BYTES, FN_CACHE_LIMIT
from ..common import shm
from ..nodes.transport import Link
from .call import Call
from .prepared import Prepared

log = logging.getLogger("skyhive.channel")
_NO_OPTIONS: dict[str, Any] = {}

__all__ = ["WorkerChannel"]

OutputSink = Callable[["WorkerChannel", "Call | None", int, str], None]


class WorkerChannel:
    """Client side of one worker process (node `node`, process `local_rank`)."""

    def __init__(self, *, node: int, local_rank: int, log_: EventLog, on_output: OutputSink,
                 cache_bytes: int = 0, cache_min: int = 1 << 20, memfds: shm.MemfdPool | None = None) -> None:
        self.node = node
        self.local_rank = local_rank
        self.conn = Connection(Role.CLIENT)
        self.link: Link | None = None
        self.calls: dict[int, Call] = {}
        self.known_fns: set[bytes] = set()
        # the distinct functions whose bytes went to this worker, and the sum of their sizes, until
        # FN_CACHE_LIMIT of them or FN_CACHE_BYTES did: past that the worker may have dropped some
        # where we cannot tell (see `carries_buffers`)
        self._fns_sent: set[bytes] | None = set()
        self._fns_sent_bytes = 0
        # what this worker process holds in its content cache (a new process starts a new channel)
        self.cache = ContentIndex(cache_bytes) if cache_bytes > 0 else None
        self.cache_min = max(1, cache_min)
        self.welcome: Welcome | None = None
        self.pid = 0
        self.last_seen = time.monotonic()
        self.lost_reason: str | None = None
        self.closed = False  # the stream ended or broke
        # called once when it closes (the node actor's supervisor; a callback, not an Event and a
        # waiting task per worker: a 10,000-node pool feels each object per node)
        self.on_closed: Callable[[WorkerChannel], None] | None = None
        self.shutting_down = False
        self._welcomed: asyncio.Future[Welcome] = asyncio.get_running_loop().create_future()
        self._log = log_
        self._on_output = on_output
        self._nonces = itertools.count(1)
        self.kill: Callable[[], None] | None = None  # set by the node actor: kills the worker process
        self._fds: shm.FdInbox | None = None  # shared memory with a worker on this machine
        self._memfds = memfds  # the pool's reusable memfds (None: a fresh one per call)

    def __repr__(self) -> str:
        state = "lost" if self.lost_reason else ("ready" if self.welcome else "starting")
        return f"<WorkerChannel node={self.node} rank={self.local_rank} {state} in_flight={len(self.calls)}>"

    @property
    def load(self) -> int:
        return len(self.calls)

    @property
    def usable(self) -> bool:
        return self.welcome is not None and self.lost_reason is None and not self.shutting_down

    # ---- Receiver ----------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self.last_seen = time.monotonic()
        try:
            messages = self.conn.receive_data(data)
        except ProtocolError as exc:
            self._broken(f"protocol error: {exc}")
            return
        for msg in messages:
            self._dispatch(msg)

    def eof_received(self) -> None:
        try:
            self.conn.receive_data(b"")
        except ProtocolError as exc:
            log.debug("node %d worker %d: %s", self.node, self.local_rank, exc)
        if not self._welcomed.done():
            self._welcomed.set_exception(ConnectionError("the worker closed its pipe before the handshake"))
        self._set_closed()

    def _set_closed(self) -> None:
        if not self.closed:
            self.closed = True
            callback, self.on_closed = self.on_closed, None
            if callback is not None:
                callback(self)

    def _broken(self, reason: str) -> None:
        """The connection reached its ERROR state (either direction): the worker is lost. It is
        killed now; its supervisor fails its calls with `WorkerLost` and starts a new one."""
        log.error("node %d worker %d: %s; restarting it", self.node, self.local_rank, reason)
        if not self._welcomed.done():
            self._welcomed.set_exception(ProtocolError(reason))
            self._welcomed.exception()  # retrieved: the handshake's waiter may be gone
        self.lost_reason = self.lost_reason or reason
        self._set_closed()
        if self.kill is not None:
            self.kill()

    def _send(self, msg: Message) -> bool:
        """Write `msg`; False (and the worker is lost) when the connection refuses it."""
        if self.lost_reason is not None:
            return False
        try:
            data = self.conn.send(msg)
        except ProtocolError as exc:
            self._broken(f"protocol error while sending {type(msg).__name__}: {exc}")
            return False
        self._write(data)
        return True

    def _send_submit(self, task_id: int, tail: bytes) -> bool:
        """`_send` for a Submit without buffers, packed but for its task id."""
        if self.lost_reason is not None:
            return False
        try:
            data = self.conn.send_submit(task_id, tail)
        except ProtocolError as exc:
            self._broken(f"protocol error while sending Submit: {exc}")
            return False
        if self.link is not None:  # (`_write`, inline)
            self.link.write(data)
        return True

    def _dispatch(self, msg: Message) -> None:
        if msg.__class__ is Result:
            if msg.shared:
                msg = self._attach_shared(msg)
                if msg is None:
                    return
            call = self.calls.pop(msg.task_id, None)
            if call is None:
                return
            if msg.ok:
                if call.new_fn:
                    # a task that brought its function ran: the worker holds it loaded from now on
                    # (not before: a task cancelled before it started, or whose function failed to
                    # load, did not load it; tasks sent meanwhile carry it too)
                    known = self.known_fns
                    if len(known) >= FN_CACHE_LIMIT:
                        known.clear()  # the worker clears its cache at the same count
                    known.add(call.fn_id)
                outcome, error = "ok", ""
            else:
                # whatever failed, the next task carries its function again (a worker that holds it
                # ignores the bytes): a worker that lost it — its cache cleared where we could not
                # tell — fails one call, not every call after
                self.known_fns.discard(call.fn_id)
                outcome, error = ("cancelled" if msg.cancelled else "error"), msg.error_type
            # (a task that ended before the worker's next tick sent no Started: its span in the
            # log runs from TaskSubmitted to TaskFinished — one event fewer per short call)
            self._log.task_finished(msg.task_id, self.node, self.local_rank, outcome, error)
            future = call.future
            if future is not None and not future.done():
                future.set_result(msg)
        elif isinstance(msg, Missing):
            self._resend(msg)
        elif isinstance(msg, WantFunction):
            # the worker no longer holds this task's function (its cache of them was cleared where we
            # could not tell): send it, and the task runs (empty if it cannot go in a message: it fails)
            asked = self.calls.get(msg.task_id)
            if asked is not None and asked.fn_bytes:
                asked.new_fn = True  # it ran with its function brought: the worker holds it after
            self._send(Function(task_id=msg.task_id, fn=asked.fn_bytes if asked is not None else b""))
        elif isinstance(msg, Output):
            self._on_output(self, self.calls.get(msg.task_id), msg.stream, msg.data)
        elif isinstance(msg, Item):
            streamed = self.calls.get(msg.task_id)
            if streamed is not None and streamed.on_item is not None:
                streamed.on_item(msg.index, msg.value)
        elif isinstance(msg, Started):
            started = self.calls.get(msg.task_id)
            if started is not None and not started.started:
                started.started = True
                self._log.emit(TaskStarted, task=msg.task_id, node=self.node, local_rank=self.local_rank)
        elif isinstance(msg, Ping):
            self._send(Pong(nonce=msg.nonce))
        elif isinstance(msg, Welcome):
            self.welcome = msg
            self.pid = msg.pid
            if not self._welcomed.done():
                self._welcomed.set_result(msg)

    # ---- sending -----------------------------------------------------------------------------------

    def attach(self, link: Link) -> None:
        self.link = link
        self._fds = shm.FdInbox(link.fd_socket) if link.fd_socket is not None else None

    def _attach_shared(self, msg: Result) -> Result | None:
        """Map the result buffers the worker passed in shared memory; None (the worker is lost) if
        they did not come."""
        try:
            if self._fds is None:
                raise ConnectionError("the worker announced shared buffers and shares no memory with us")
            fds = self._fds.take(msg.task_id, msg.shared, block=False)
        except OSError as exc:
            self._broken(f"shared-memory buffers of task {msg.task_id}: {exc}")
            return None
        buffers = list(msg.buffers)
        for i, fd in fds.items():
            try:
                buffers[i] = shm.map_file(fd, msg.buffer_sizes[i])
            finally:
                os.close(fd)
        return replace(msg, buffers=tuple(buffers))

    def _write(self, data: bytes) -> None:
        if self.link is not None:
            self.link.write(data)

    async def handshake(self, *, skyhive_version: str, python_version: str) -> Welcome:
        self._write(self.conn.hello(skyhive_version, python_version,
                                    cache_bytes=self.cache.capacity if self.cache is not None else 0))
        return await self._welcomed

    def send(self, task_id: int, prep: Prepared, options: dict[str, Any] | None,
             future: asyncio.Future[Result] | None, *, stream: bool = False) -> Call:
        """Send `prep` as task `task_id` (its buffers follow via `send_buffers`); the function's bytes
        go only if this worker has not seen it (a large function goes as buffer 0, every time).
        Registers the call; `future` gets the Result.

        Raises `WorkerLost` (naming the node) when the worker is already lost or the connection
        refuses the task; the worker is then restarted and the call was not registered.

        With `stream`, a generator's items come back as `Item` frames (to `call.on_item`).
        """
        # the function's bytes go with the task (a large function's as buffer 0) until a task that
        # carried them ran on this worker: then the worker holds it loaded (see `_dispatch`)
        new_fn = prep.fn_id not in self.known_fns
        if not prep.buffers and prep.kind == "call" and not stream:
            # the common small call: packed once per call (see Prepared.submit_tail)
            msg, tail, cached = None, prep.submit_tail(new_fn, _NO_OPTIONS), ()
        else:
            msg, tail, cached = self._submit(task_id, prep, new_fn, stream)
        # (a large function travels as a buffer, never in a `Function`: no bytes kept for that)
        call = Call(task_id, future, options, prep.fn_name, prep.fn_id, new_fn,
                    b"" if prep.fn_in_buffer else prep.fn_bytes)
        if new_fn and self._fns_sent is not None:
            self._count_sent(prep)
        if msg is not None:
            call.shared = msg.shared
            call.announced = True
        if cached:
            call.cached, call.buffers = cached, prep.buffers
        if options and options.get("capture"):
            call.outputs = []
        if not (self._send(msg) if msg is not None else self._send_submit(task_id, tail)):
            raise WorkerLost(
                f"worker {self.local_rank} of node {self.node} was lost before it could run {prep.fn_name} "
                f"(task {task_id}): {self.lost_reason}; it is being restarted",
                node=self.node, local_rank=self.local_rank,
            )
        self.calls[task_id] = call
        self._log.task_submitted(task_id, self.node, self.local_rank, prep.fn_name, prep.items)
        return call

    def _count_sent(self, prep: Prepared) -> None:
        """`prep`'s function's bytes went to this worker: count it (once) and its pickle's size. The
        worker holds at most the functions it loaded, all of them sent here: while fewer than
        FN_CACHE_LIMIT went, of at most FN_CACHE_BYTES in all, it dropped none."""
        sent = self._fns_sent
        assert sent is not None
        if prep.fn_id in sent:
            return
        sent.add(prep.fn_id)
        self._fns_sent_bytes += memoryview(prep.fn_bytes).nbytes  # (as the worker counts it)
        if len(sent) >= FN_CACHE_LIMIT or self._fns_sent_bytes > FN_CACHE_BYTES:
            self._fns_sent = None

    def _submit(self, task_id: int, prep: Prepared, new_fn: bool,
                stream: bool) -> tuple[Submit | None, bytes, tuple[int, ...]]:
        """`send`'s frame for any other task: (the `Submit` that announces buffers, or None and the
        packed tail of one without; the buffers it sends by reference)."""
        with_buffers = self.carries_buffers(prep, new_fn)
        fn_in_buffer = prep.fn_in_buffer and with_buffers
        if prep.kind == "call" and not stream and not fn_in_buffer:
            options_: dict[str, Any] = _NO_OPTIONS  # (read-only: only encoded)
        else:
            options_ = {"kind": prep.kind} if prep.kind != "call" else {}
            if stream:
                options_["stream"] = True
            if fn_in_buffer:
                options_["fn_buffer"] = True
        fn_bytes = prep.fn_bytes if new_fn and not prep.fn_in_buffer else b""
        if not with_buffers:
            return None, prep.submit_tail(bool(fn_bytes), options_), ()
        sizes = prep.sizes
        keys, cached = b"", ()
        if self.cache is not None and max(sizes) >= self.cache_min:
            keys, cached = self._by_reference(prep.content_keys(self.cache_min), sizes)
        msg = Submit(task_id=task_id, fn_id=prep.fn_id, fn=fn_bytes, args=prep.args, buffer_sizes=sizes,
                     batch=prep.batch, options=options_, buffer_keys=keys, cached=cached)
        if self._fds is not None and max(sizes) >= shm.SHARE_MIN:
            msg = self._share(msg, prep, task_id, cached)
        return msg, b"", cached

    def carries_buffers(self, prep: Prepared, new_fn: bool | None = None) -> bool:
        """Whether a task of `prep` sent here announces out-of-band buffers (`send_buffers` follows).
        Not when its only buffer is its large function and this worker already holds that function
        loaded: such a task (each batch of a `map` over a `functools.partial` of a big array) goes
        like a small call, with no reference to the function's bytes to resolve on the worker. Only
        while fewer than FN_CACHE_LIMIT distinct functions, of at most FN_CACHE_BYTES in all, went to
        this worker: it never dropped a function then, so it holds every one it ran; past that a
        large function's buffer goes (by content reference) with each task again, and a worker that
        dropped it loads it from there."""
        if not prep.buffers:
            return False
        if new_fn is None:
            new_fn = prep.fn_id not in self.known_fns
        return new_fn or not prep.fn_in_buffer or len(prep.buffers) > 1 or self._fns_sent is None

    def _share(self, msg: Submit, prep: Prepared, task_id: int, cached: tuple[int, ...]) -> Submit:
        """Pass the large buffers not sent by reference in shared memory (made once per call)."""
        assert self._fds is not None
        indices = [i for i, size in enumerate(msg.buffer_sizes)
                   if size >= shm.SHARE_MIN and i not in cached][: shm.MAX_SHARED]
        if not indices:
            return msg
        try:
            fds = [prep.shared.fd(i, prep.buffers[i], self._memfds) for i in indices]
            shm.send_fds(self._fds.sock, task_id, indices, fds, close=False)
        except OSError as exc:  # (no memfd, socket full or gone): the pipe carries them instead
            log.debug("node %d worker %d: no shared memory for task %d (%s)", self.node, self.local_rank,
                      task_id, exc)
            return msg
        return replace(msg, shared=tuple(indices))

    def _by_reference(self, keys: bytes, sizes: tuple[int, ...]) -> tuple[bytes, tuple[int, ...]]:
        """The Submit's `buffer_keys` and `cached`: keyed buffers this worker holds go by reference;
        the others will be held once sent (the index mirrors the worker's LRU, see `protocol.cache`)."""
        index = self.cache
        assert index is not None
        cached = []
        for i, size in enumerate(sizes):
            key = keys[i * KEY_SIZE : (i + 1) * KEY_SIZE]
            if key == NO_KEY:
                continue
            if index.touch(key):
                cached.append(i)
        for i, size in enumerate(sizes):
            key = keys[i * KEY_SIZE : (i + 1) * KEY_SIZE]
            if key != NO_KEY and i not in cached:
                index.add(key, size)
        return keys, tuple(cached)

    def _resend(self, msg: Missing) -> None:
        """The worker does not hold buffers we sent by reference: send them now (a miss costs a round
        trip, never an error). Written through the link's buffer: this path is rare."""
        call = self.calls.get(msg.task_id)
        if call is None or self.lost_reason is not None or self.link is None:
            return
        if not set(msg.indices) <= set(call.cached):
            self._broken(f"worker asked again for buffers {msg.indices} of task {msg.task_id}, "
                         f"which were not sent by reference")
            return
        log.debug("node %d worker %d: content cache miss for task %d, buffers %s",
                  self.node, self.local_rank, msg.task_id, msg.indices)
        try:
            for header, piece in self.conn.send_buffers(msg.task_id, call.buffers, only=msg.indices):
                self.link.writelines([header, piece])
        except ProtocolError as exc:
            self._broken(f"protocol error while sending buffers: {exc}")
        except OSError as exc:  # the link closed under the write: the worker is lost (or being restarted)
            if self.lost_reason is None:
                self._broken(f"the link failed while sending buffers: {exc}")
        call.buffers = ()

    async def send_buffers(self, task_id: int, buffers: Sequence[Any]) -> None:
        """Send a task's out-of-band buffers, chunk by chunk (other frames may go between chunks);
        those the worker holds in its content cache are not sent."""
        assert self.link is not None
        if self.lost_reason:
            return
        call = self.calls.get(task_id)
        if call is None or not call.announced:  # none announced, or it already ended: every buffer was
            return  # cached or shared, and the worker answered
        skip = (*call.cached, *call.shared)
        try:
            for header, piece in self.conn.send_buffers(task_id, buffers, skip=skip):
                if self.lost_reason:
                    return
                await self.link.write_direct([header, piece])
        except ProtocolError as exc:
            self._broken(f"protocol error while sending buffers: {exc}")
        except OSError as exc:  # the link closed under the write: the worker is lost (or being restarted)
            if self.lost_reason is None:
                self._broken(f"the link failed while sending buffers: {exc}")

    def cancel(self, task_id: int, *, grace: float) -> None:
        """Ask the worker to stop a task; the caller stops waiting now (its future is cancelled), the
        slot frees on its Result. If the task is still there `grace` seconds later, the worker is
        killed (its supervisor starts a new one)."""
        call = self.calls.get(task_id)
        if call is None or call.abandoned:  # (cancelled already: its waiter, woken, cancels it again)
            return
        call.abandoned = True
        future, call.future = call.future, None
        if future is not None and not future.done():
            # a waiter that is not itself being cancelled (a `pool.submit` task, when the pool is left
            # by Ctrl-C: `interrupt.cancel_in_flight`) ends now; a future merely dropped would leave it
            # pending on nothing, for the garbage collector to destroy ("Task was destroyed but it is
            # pending!") or the event loop's close to cancel, whichever came first
            future.cancel()
        if self.usable:
            self._send(Cancel(task_id=task_id))
        asyncio.get_running_loop().call_later(grace, self._enforce_cancel, task_id, grace)

    def _enforce_cancel(self, task_id: int, grace: float) -> None:
        if task_id in self.calls and self.kill is not None and self.lost_reason is None:
            log.warning("node %d worker %d: task %d ignored Cancel for %.1f s; killing the worker",
                        self.node, self.local_rank, task_id, grace)
            self.lost_reason = f"task {task_id} did not stop within cancel_grace"
            self.kill()

    def ping(self) -> None:
        if self.usable:
            self._send(Ping(nonce=next(self._nonces)))

    def shutdown(self) -> None:
        """Send `Shutdown`; the worker finishes its plugin teardown and exits."""
        if self.welcome is not None and not self.shutting_down and self.lost_reason is None:
            self.shutting_down = True
            self._send(Shutdown(reason="pool closing"))

    def fail_all(self, reason: str) -> None:
        """The worker is gone: fail every task in flight with `WorkerLost`."""
        self.lost_reason = self.lost_reason or reason
        calls, self.calls = self.calls, {}
        for call in calls.values():
            self._log.emit(TaskFinished, task=call.task_id, node=self.node, local_rank=self.local_rank,
                           outcome="lost", error=reason)
            if call.future is not None and not call.future.done():
                call.future.set_exception(
                    WorkerLost(
                        f"worker {self.local_rank} of node {self.node} was lost while running "
                        f"{call.fn_name} (task {call.task_id}): {reason}",
                        node=self.node, local_rank=self.local_rank,
                    )
                )
        self._set_closed()
