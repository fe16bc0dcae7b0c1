"""`Connection`: one side of a client ↔ worker conversation, with no I/O (in the manner of h11).

Three verbs: `receive_data(bytes)` takes whatever arrived (``b""`` means the stream ended) and returns
the complete messages in it; `send(message)` returns the bytes to write; `send_buffers(...)` returns
the frames that carry a message's out-of-band buffers, one chunk at a time, so the caller can put a
heartbeat or an output line between two chunks of a large argument.
"""

from __future__ import annotations

import mmap
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace
from typing import Any

from .codec import (
    _CHUNK_PREFIX,
    CHUNK_HEADER,
    DEFAULT_MAX_FRAME,
    HEADER,
    MAX_BUFFERS,
    MAX_MESSAGE,
    decode_body,
    encode,
    encode_chunk_header,
    encode_submit,
    encode_value_result,
)
from .cache import KEY_SIZE, NO_KEY, BufferStore, cache_fields_problem
from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .messages import PROTOCOL_VERSION, Chunk, Hello, Message, Missing, Result, Submit, Welcome
from .states import RECV, SEND, Role, State, table

__all__ = ["Connection", "Role", "State", "CHUNK_SIZE", "MAX_PENDING_BUFFERS"]

#: Size of one out-of-band chunk: big enough to move data at memory speed, small enough that a
#: heartbeat waits at most about a millisecond behind one.
CHUNK_SIZE = 1024 * 1024
#: Upper bound on the bytes of out-of-band buffers announced and not yet complete. Large buffers are
#: backed by anonymous mmap (pages are only touched as chunks arrive), but a peer must not be able to
#: make us reserve unbounded address space.
MAX_PENDING_BUFFERS = 64 * 1024**3
_MMAP_FROM = 256 * 1024
_HEADER_SIZE = HEADER.size
_unpack_length = HEADER.unpack_from
_HANDSHAKE = frozenset({Hello, Welcome})
_WAIT = object()  # placeholder of a buffer sent by reference that is still arriving for another task
_WITH_BUFFERS = frozenset({Submit, Result})


class _Pending:
    __slots__ = ("message", "buffers", "missing", "keep", "waiting")

    def __init__(self, message: Submit | Result, buffers: list[Any], missing: int,
                 keep: list[int] | None = None) -> None:
        self.message = message
        self.buffers = buffers
        self.missing = missing
        self.keep = keep  # indices of keyed buffers arriving now, for the content cache
        self.waiting = 0  # buffers sent by reference that are still arriving for an earlier Submit


class Connection:
    """One side (`Role.CLIENT` or `Role.WORKER`) of the protocol, as a pure state machine.

    A worker's `store` (set once the `Hello` said how large it may be) is its content cache: buffers a
    `Submit` sends by reference come from it, keyed buffers that arrive go into it. A reference it
    cannot resolve makes `receive_data` hand back a `Missing` among the messages: the caller `send`s
    it, and the `Submit` completes when the client's chunks for those buffers have arrived.
    """

    def __init__(self, role: Role, *, max_frame: int = DEFAULT_MAX_FRAME,
                 store: BufferStore | None = None) -> None:
        self.role = role
        self.store = store
        self._send_table = table(role, SEND)
        self._recv_table = table(role, RECV)
        self.state = State.IDLE
        self.max_frame = max_frame
        self.frames_sent = 0
        self.frames_received = 0
        self.bytes_received = 0
        self._buf = bytearray()
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

    @property
    def state(self) -> State:
        return self._state

    @state.setter
    def state(self, value: State) -> None:
        self._state = value
        # the legal moves from here, looked up by message type alone on the hot path
        self._can_send = self._send_table[value]
        self._can_recv = self._recv_table[value]

    def __repr__(self) -> str:
        return (
            f"<Connection {self.role.value} {self.state.value} sent={self.frames_sent} "
            f"received={self.frames_received} buffered={len(self._buf)}>"
        )

    # ---- state -------------------------------------------------------------------------------------

    def _move(self, direction: str, msg: Message) -> None:
        nxt = (self._can_send if direction is SEND else self._can_recv).get(type(msg))
        if nxt is None:
            what = f"{self.role.value} in state {self.state.value}"
            if direction == SEND:
                self.state = State.ERROR
                raise LocalProtocolError(f"cannot send {type(msg).__name__}: {what}")
            self.state = State.ERROR
            raise RemoteProtocolError(f"peer sent {type(msg).__name__} to {what}")
        if nxt is not self._state:
            self.state = nxt

    # ---- sending -----------------------------------------------------------------------------------

    def send(self, msg: Message) -> bytes:
        """The bytes of `msg`'s frame. Raises `LocalProtocolError` if `msg` is not legal now."""
        if self.state is State.ERROR:
            raise LocalProtocolError("connection is in ERROR state after an earlier protocol error")
        if isinstance(msg, Chunk):
            raise LocalProtocolError("chunks are sent with send_buffers()")
        sizes = getattr(msg, "buffer_sizes", ())
        if len(sizes) > MAX_BUFFERS:
            self.state = State.ERROR
            raise LocalProtocolError(
                f"{type(msg).__name__} announces {len(sizes)} buffers; the MAX_BUFFERS limit is {MAX_BUFFERS}"
            )
        if sizes and (msg.shared or (msg.__class__ is Submit and (msg.buffer_keys or msg.cached))):  # type: ignore[attr-defined]
            problem = cache_fields_problem(msg)  # type: ignore[arg-type]
            if problem:
                self.state = State.ERROR
                raise LocalProtocolError(problem)
        self._move(SEND, msg)
        frame = encode(msg)
        limit, name = (MAX_MESSAGE, "MAX_MESSAGE") if MAX_MESSAGE <= self.max_frame else (self.max_frame, "max_frame")
        if len(frame) - HEADER.size > limit:
            self.state = State.ERROR
            raise LocalProtocolError(
                f"{type(msg).__name__} frame of {len(frame)} bytes exceeds the {name} limit of {limit} bytes "
                "(large values travel as buffers)"
            )
        self.frames_sent += 1
        return frame

    def send_submit(self, task_id: int, tail: bytes) -> bytes:
        """`send(Submit(task_id=task_id, ...))` for a `Submit` without buffers whose other fields were
        packed once by `codec.submit_tail` (a call sent to many workers, or again and again, packs
        them once). The same checks, the same bytes."""
        return self._send_template(Submit, encode_submit, task_id, tail)

    def send_value_result(self, task_id: int, value: bytes) -> bytes:
        """`send(Result(task_id=task_id, ok=True, value=value))`: a task's value without buffers."""
        return self._send_template(Result, encode_value_result, task_id, value)

    def _send_template(self, cls: type[Message], encoder: Any, task_id: int, data: bytes) -> bytes:
        if self.state is State.ERROR:
            raise LocalProtocolError("connection is in ERROR state after an earlier protocol error")
        nxt = self._can_send.get(cls)
        if nxt is None:
            what = f"{self.role.value} in state {self.state.value}"
            self.state = State.ERROR
            raise LocalProtocolError(f"cannot send {cls.__name__}: {what}")
        if type(task_id) is not int:
            raise LocalProtocolError(f"{cls.__name__}.task_id should be int, got {type(task_id).__name__}")
        frame = encoder(task_id, data)
        if len(frame) - _HEADER_SIZE > self._message_limit:
            self.state = State.ERROR
            raise LocalProtocolError(
                f"{cls.__name__} frame of {len(frame)} bytes exceeds the message limit of {self._message_limit} "
                "bytes (large values travel as buffers)"
            )
        if nxt is not self._state:
            self.state = nxt
        self.frames_sent += 1
        return frame

    @property
    def _message_limit(self) -> int:
        return min(MAX_MESSAGE, self.max_frame)

    def send_buffers(
        self, ref: int, buffers: Sequence[Any], chunk_size: int = CHUNK_SIZE, *,
        skip: Collection[int] = (), only: Collection[int] | None = None,
    ) -> Iterator[tuple[bytes, memoryview]]:
        """Frames carrying `buffers` (announced by the `Submit`/`Result` with id `ref`), chunk by chunk:
        all but those in `skip` (the `Submit`'s `cached`), or only those in `only` (a `Missing`).

        Each item is (header, data): write both, in order, before the next item. Nothing is copied.
        """
        if self.state not in (State.READY, State.CLOSED):
            raise LocalProtocolError(f"cannot send buffers in state {self.state.value}")
        for index, buf in enumerate(buffers):
            if index in skip or (only is not None and index not in only):
                continue
            view = memoryview(buf).cast("B")
            for offset in range(0, len(view), chunk_size):
                piece = view[offset : offset + chunk_size]
                self.frames_sent += 1
                yield encode_chunk_header(ref, index, offset, len(piece)), piece

    def hello(self, skyhive_version: str, python_version: str, resume_from: int = -1,
              cache_bytes: int = 0) -> bytes:
        """Convenience: the client's first frame."""
        return self.send(
            Hello(
                protocol_version=PROTOCOL_VERSION,
                python_version=python_version,
                skyhive_version=skyhive_version,
                max_frame=self.max_frame,
                resume_from=resume_from,
                cache_bytes=cache_bytes,
            )
        )

    def refusal(self, welcome: Welcome) -> bytes:
        """The worker's answer to a `Hello` it refused (`welcome.error` set); valid in any state."""
        self.state = State.ERROR
        return encode(welcome)

    # ---- receiving ---------------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Message]:
        """Feed bytes from the peer; returns the messages completed by them (maybe none).

        ``b""`` means the stream ended: that is fine between frames and a `RemoteProtocolError` in
        the middle of one. Raises `RemoteProtocolError` for anything the peer got wrong, after which
        the connection is in the sticky ERROR state.
        """
        if self.state is State.ERROR:
            raise RemoteProtocolError("connection is in ERROR state after an earlier protocol error")
        if not data:
            return self._eof()
        try:
            return self._receive(data)
        except ProtocolError:
            self.state = State.ERROR
            raise

    def _eof(self) -> list[Message]:
        partial = len(self._buf) + (self._streaming[3] if self._streaming is not None else 0)
        self.state = State.CLOSED
        if partial or self._pending:
            self.state = State.ERROR
            raise RemoteProtocolError(
                f"stream ended in the middle of a frame ({partial} bytes buffered, "
                f"{len(self._pending)} messages waiting for buffers)"
            )
        return []

    def _receive(self, data: bytes | bytearray | memoryview) -> list[Message]:
        self.bytes_received += len(data)
        out: list[Message] = []
        if self._streaming is not None:
            view = memoryview(data)
            used = self._stream_chunk(view, out)
            if used == len(view):
                return out
            data = view[used:]
        if self._buf:
            self._buf += data
            view = memoryview(self._buf)
            try:
                consumed = self._frames(view, out)
            finally:
                view.release()
            del self._buf[:consumed]
        else:
            view = memoryview(data)
            consumed = self._frames(view, out)
            if consumed < len(view):
                self._buf += view[consumed:]
        return out

    def _frames(self, view: memoryview, out: list[Message]) -> int:
        pos, end = 0, len(view)
        header = _HEADER_SIZE
        unpack_length = _unpack_length
        while end - pos >= header:
            (length,) = unpack_length(view, pos)
            if length > self.max_frame:
                raise RemoteProtocolError(
                    f"frame of {length} bytes exceeds the {self.max_frame}-byte limit"
                )
            start = pos + header
            if length > MAX_MESSAGE and end - start >= 2 and view[start : start + 2] != _CHUNK_PREFIX:
                # refused before its body is buffered: only Chunk frames may be this large
                raise RemoteProtocolError(
                    f"message frame of {length} bytes exceeds the MAX_MESSAGE limit of {MAX_MESSAGE} bytes "
                    "(only Chunk frames may be larger)"
                )
            if end - start < length:
                if end - start >= CHUNK_HEADER.size and view[start : start + 2] == _CHUNK_PREFIX:
                    # a large chunk arriving in pieces: copy each piece straight to its buffer
                    self._start_chunk(view, start, length, end, out)
                    return end
                break
            pos = start + length
            self.frames_received += 1
            msg = decode_body(view[start:pos])
            cls = type(msg)
            if cls is Chunk:
                self._chunk(msg, out)  # type: ignore[arg-type]
                continue
            nxt = self._can_recv.get(cls)
            if nxt is None:
                self._move(RECV, msg)  # raises, naming the illegal move
            elif nxt is not self._state:
                self.state = nxt
            if cls in _HANDSHAKE:
                self._check_version(msg)  # type: ignore[arg-type]
            if cls in _WITH_BUFFERS and msg.buffer_sizes:  # type: ignore[attr-defined]
                self._announce(msg, out)  # type: ignore[arg-type]
            else:
                out.append(msg)
        return pos

    def _check_version(self, msg: Hello | Welcome) -> None:
        if isinstance(msg, Welcome) and msg.error:
            raise RemoteProtocolError(f"worker refused the connection: {msg.error}")
        if msg.protocol_version != PROTOCOL_VERSION:
            peer = "worker" if isinstance(msg, Welcome) else "client"
            raise RemoteProtocolError(
                f"protocol version mismatch: the {peer} speaks version {msg.protocol_version}, "
                f"this side speaks version {PROTOCOL_VERSION} (install the same skyhive on both sides)"
            )

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

