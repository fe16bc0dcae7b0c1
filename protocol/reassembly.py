"""Buffer reassembly: the part of a `Connection` that collects a message's out-of-band buffers.

A `Submit` or `Result` announces its buffers' sizes (and, for the content cache, their keys or that
they come in shared memory); `Chunk` frames then fill them, whole or streamed piece by piece straight
into their destination. When the last byte of the last buffer arrives, the message is handed back
with its buffers. Sans-IO like the rest of the protocol; `Connection` mixes this in.
"""

from __future__ import annotations

import mmap
from dataclasses import replace
from typing import Any

from .cache import KEY_SIZE, NO_KEY, BufferStore, cache_fields_problem
from .codec import CHUNK_HEADER, MAX_BUFFERS, decode_body
from .errors import LocalProtocolError, RemoteProtocolError
from .messages import Chunk, Message, Missing, Result, Submit
from .states import State

__all__ = ["Reassembly", "MAX_PENDING_BUFFERS"]

#: Upper bound on the bytes of out-of-band buffers announced and not yet complete. Large buffers are
#: backed by anonymous mmap (pages are only touched as chunks arrive), but a peer must not be able to
#: make us reserve unbounded address space.
MAX_PENDING_BUFFERS = 64 * 1024**3
_MMAP_FROM = 256 * 1024
_WAIT = object()  # placeholder of a buffer sent by reference that is still arriving for another task


class _Pending:
    __slots__ = ("message", "buffers", "missing", "keep", "waiting")

    def __init__(self, message: Submit | Result, buffers: list[Any], missing: int,
                 keep: list[int] | None = None) -> None:
        self.message = message
        self.buffers = buffers
        self.missing = missing
        self.keep = keep  # indices of keyed buffers arriving now, for the content cache
        self.waiting = 0  # buffers sent by reference that are still arriving for an earlier Submit


class Reassembly:
    """Collects announced buffers from `Chunk` frames (mixed into `Connection`, which owns the state
    and the counters named below and calls `_announce` / `_chunk` / `_start_chunk` from its frame loop)."""

    state: State
    store: BufferStore | None
    frames_received: int
    bytes_received: int

    def _init_reassembly(self) -> None:
        self._pending: dict[int, _Pending] = {}
        self._pending_bytes = 0
        # content cache: key -> (task id, index) of a keyed buffer still arriving, and the later
        # Submits that sent the same key by reference meanwhile, waiting for it: key -> [(task id, index)]
        self._arriving: dict[bytes, tuple[int, int]] = {}
        self._waiting: dict[bytes, list[tuple[int, int]]] = {}
        # keys of buffers that came beside the connection (`shared`) for the caller to keep: a later
        # reference to one is left None, for the caller to take from its store (it keeps the earlier
        # Submit's copy before it handles this one)
        self._shared_keys: set[bytes] = set()
        self._streaming: list[Any] | None = None  # a chunk whose bytes are still arriving

    def _announce(self, msg: Submit | Result, out: list[Message]) -> None:
        sizes = msg.buffer_sizes
        if len(sizes) > MAX_BUFFERS:
            raise RemoteProtocolError(
                f"{type(msg).__name__} for task {msg.task_id} announces {len(sizes)} buffers; "
                f"the MAX_BUFFERS limit is {MAX_BUFFERS}"
            )
        if msg.task_id in self._pending:
            raise RemoteProtocolError(f"task {msg.task_id} announced buffers twice")
        if any(type(s) is not int or s < 0 for s in sizes):
            raise RemoteProtocolError(f"buffer sizes must be non-negative integers, got {sizes!r}")
        if msg.shared or (msg.__class__ is Submit and (msg.buffer_keys or msg.cached)):  # type: ignore[union-attr]
            problem = cache_fields_problem(msg)  # type: ignore[arg-type]
            if problem:
                raise RemoteProtocolError(problem)
            self._announce_cached(msg, out)  # type: ignore[arg-type]
            return
        total = sum(sizes)
        if self._pending_bytes + total > MAX_PENDING_BUFFERS:
            raise RemoteProtocolError(
                f"peer announced {total} bytes of buffers ({self._pending_bytes} already pending); "
                f"the MAX_PENDING_BUFFERS limit is {MAX_PENDING_BUFFERS} bytes"
            )
        try:
            buffers = [mmap.mmap(-1, s) if s >= _MMAP_FROM else bytearray(s) for s in sizes]
        except (OSError, MemoryError, OverflowError, ValueError) as exc:
            raise RemoteProtocolError(f"cannot allocate {total} bytes for the announced buffers: {exc}") from None
        self._pending[msg.task_id] = _Pending(msg, buffers, total)
        self._pending_bytes += total
        if total == 0:
            out.append(self._complete(msg.task_id, buffers))

    def _announce_cached(self, msg: Submit, out: list[Message]) -> None:
        """`_announce` for a `Submit` with content keys or shared buffers (or a `Result` with shared
        buffers): buffers sent by reference come from the store (or are asked for with `Missing`),
        keyed buffers that arrive go into it, shared ones are left None for the caller."""
        sizes, store = msg.buffer_sizes, self.store
        keys = msg.buffer_keys if msg.__class__ is Submit else b""  # type: ignore[union-attr]
        cached = msg.cached if msg.__class__ is Submit else ()  # type: ignore[union-attr]
        buffers: list[Any] = [None] * len(sizes)
        shared = frozenset(msg.shared)
        need: list[int] = []
        keep: list[int] = []
        waits: list[tuple[bytes, int]] = []
        deferred: set[int] = set()
        total = 0
        try:
            for i in cached:
                key = keys[i * KEY_SIZE : (i + 1) * KEY_SIZE]
                held = store.lookup(key, sizes[i]) if store else None
                if held is not None:
                    buffers[i] = held
                    self._shared_keys.discard(key)
                elif key in self._shared_keys:
                    deferred.add(i)  # left None: the caller resolves it (see _shared_keys)
                elif key in self._arriving:  # an earlier Submit's copy is on its way: wait for it
                    buffers[i] = _WAIT
                    waits.append((key, i))
                else:
                    need.append(i)
            if store is not None and keys:
                if len(self._shared_keys) > 4 * MAX_BUFFERS:
                    self._shared_keys.clear()
                self._shared_keys.update(
                    k for i in shared if (k := keys[i * KEY_SIZE : (i + 1) * KEY_SIZE]) != NO_KEY
                )
            for i, size in enumerate(sizes):
                if buffers[i] is not None or i in shared or i in deferred:
                    continue
                total += size
                if total + self._pending_bytes > MAX_PENDING_BUFFERS:
                    raise RemoteProtocolError(
                        f"peer announced {total} bytes of buffers ({self._pending_bytes} already pending); "
                        f"the MAX_PENDING_BUFFERS limit is {MAX_PENDING_BUFFERS} bytes"
                    )
                key = keys[i * KEY_SIZE : (i + 1) * KEY_SIZE] if keys else NO_KEY
                if store is not None and key != NO_KEY:
                    buffers[i] = store.allocate(size)
                    keep.append(i)
                    self._arriving.setdefault(key, (msg.task_id, i))
                else:
                    buffers[i] = mmap.mmap(-1, size) if size >= _MMAP_FROM else bytearray(size)
        except (OSError, MemoryError, OverflowError, ValueError) as exc:
            raise RemoteProtocolError(f"cannot allocate {total} bytes for the announced buffers: {exc}") from None
        pending = self._pending[msg.task_id] = _Pending(msg, buffers, total, keep)
        self._pending_bytes += total
        for key, i in waits:
            self._waiting.setdefault(key, []).append((msg.task_id, i))
        pending.waiting = len(waits)
        if need:
            out.append(Missing(task_id=msg.task_id, indices=tuple(need)))
        if total == 0 and not waits:
            out.append(self._complete(msg.task_id, buffers))

    def _start_chunk(self, view: memoryview, body: int, length: int, end: int, out: list[Message]) -> None:
        head = decode_body(view[body : body + CHUNK_HEADER.size])
        assert isinstance(head, Chunk)
        self.frames_received += 1
        size = length - CHUNK_HEADER.size
        pending, target = self._chunk_target(head, size)
        self._streaming = [pending, target, head.offset, size, head.ref]
        self._stream_chunk(view[body + CHUNK_HEADER.size : end], out)

    def receive_target(self) -> memoryview | None:
        """Where the next bytes from the peer belong, when a large chunk is arriving: a writable view
        of the rest of its destination buffer. The caller may read into it directly (saving a copy)
        and then report how much it read with `received_into`. None when no chunk is in progress.
        """
        if self._streaming is None or self.state is State.ERROR:
            return None
        _, target, offset, remaining, _ = self._streaming
        return memoryview(target)[offset : offset + remaining]

    def received_into(self, n: int) -> list[Message]:
        """`n` bytes were read into `receive_target()`; returns the messages that completes."""
        out: list[Message] = []
        if n:
            self.bytes_received += n
            self._advance(n, out)
        return out

    def _stream_chunk(self, view: memoryview, out: list[Message]) -> int:
        """Copy the next piece of a chunk in progress into its buffer; returns the bytes used."""
        _, target, offset, remaining, _ = self._streaming  # type: ignore[misc]
        n = min(remaining, len(view))
        target[offset : offset + n] = view[:n]
        self._advance(n, out)
        return n

    def _advance(self, n: int, out: list[Message]) -> None:
        pending, target, offset, remaining, ref = self._streaming  # type: ignore[misc]
        if n > remaining:
            raise LocalProtocolError(f"{n} bytes reported into a chunk that needed {remaining}")
        pending.missing -= n
        self._pending_bytes -= n
        if n == remaining:
            self._streaming = None
            if pending.missing <= 0 and not pending.waiting:
                self._complete_into(ref, out)
        else:
            self._streaming[2:4] = [offset + n, remaining - n]  # type: ignore[index]

    def _chunk_target(self, chunk: Chunk, n: int) -> tuple[_Pending, Any]:
        if self.state is not State.READY and self.state is not State.CLOSED:
            raise RemoteProtocolError(f"peer sent Chunk in state {self.state.value}")
        pending = self._pending.get(chunk.ref)
        if pending is None:
            raise RemoteProtocolError(f"Chunk for task {chunk.ref}, which announced no buffers")
        if chunk.index >= len(pending.buffers):
            raise RemoteProtocolError(
                f"Chunk for buffer {chunk.index} of task {chunk.ref}, which has {len(pending.buffers)}"
            )
        target = pending.buffers[chunk.index]
        if chunk.offset + n > len(target):
            raise RemoteProtocolError(
                f"Chunk at {chunk.offset}+{n} overruns buffer {chunk.index} ({len(target)} bytes) "
                f"of task {chunk.ref}"
            )
        return pending, target

    def _chunk(self, chunk: Chunk, out: list[Message]) -> None:
        n = len(chunk.data)
        pending, target = self._chunk_target(chunk, n)
        target[chunk.offset : chunk.offset + n] = chunk.data
        pending.missing -= n
        self._pending_bytes -= n
        if pending.missing <= 0 and not pending.waiting:
            self._complete_into(chunk.ref, out)

    def _complete(self, ref: int, buffers: list[Any]) -> Message:
        pending = self._pending.pop(ref)
        self._pending_bytes -= max(pending.missing, 0)
        if pending.keep and self.store is not None:
            keys = pending.message.buffer_keys  # type: ignore[union-attr]
            for i in pending.keep:
                key = keys[i * KEY_SIZE : (i + 1) * KEY_SIZE]
                buffers[i] = self.store.keep(key, buffers[i])
                if self._arriving.get(key) == (ref, i):
                    del self._arriving[key]
        return replace(pending.message, buffers=tuple(buffers))

    def _complete_into(self, ref: int, out: list[Message]) -> None:
        """Complete task `ref`, then the later Submits that were waiting for a buffer it brought."""
        pending = self._pending[ref]
        out.append(self._complete(ref, pending.buffers))
        if not pending.keep:
            return
        keys, sizes = pending.message.buffer_keys, pending.message.buffer_sizes  # type: ignore[union-attr]
        for i in pending.keep:
            key = keys[i * KEY_SIZE : (i + 1) * KEY_SIZE]
            for other, j in self._waiting.pop(key, ()):
                waiter = self._pending.get(other)
                if waiter is None:
                    continue
                held = self.store.lookup(key, sizes[i]) if self.store is not None else None
                # not held (larger than the whole cache): the arrived copy itself, shared
                waiter.buffers[j] = held if held is not None else out[-1].buffers[i]  # type: ignore[attr-defined]
                waiter.waiting -= 1
                if waiter.waiting == 0 and waiter.missing <= 0:
                    self._complete_into(other, out)

