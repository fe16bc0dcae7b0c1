"""`Connection`: one side of a client ↔ worker conversation, with no I/O (in the manner of h11).

Three verbs: `receive_data(bytes)` takes whatever arrived (``b""`` means the stream ended) and returns
the complete messages in it; `send(message)` returns the bytes to write; `send_buffers(...)` returns
the frames that carry a message's out-of-band buffers, one chunk at a time, so the caller can put a
heartbeat or an output line between two chunks of a large argument.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator, Sequence
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
)
from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .messages import PROTOCOL_VERSION, Chunk, Hello, Message, Result, Submit, Welcome
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
_WITH_BUFFERS = frozenset({Submit, Result})


class _Pending:
    __slots__ = ("message", "buffers", "missing")

    def __init__(self, message: Submit | Result, buffers: list[Any], missing: int) -> None:
        self.message = message
        self.buffers = buffers
        self.missing = missing


class Connection:
    """One side (`Role.CLIENT` or `Role.WORKER`) of the protocol, as a pure state machine."""

    def __init__(self, role: Role, *, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.role = role
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

    def send_buffers(
        self, ref: int, buffers: Sequence[Any], chunk_size: int = CHUNK_SIZE
    ) -> Iterator[tuple[bytes, memoryview]]:
        """Frames carrying `buffers` (announced by the `Submit`/`Result` with id `ref`), chunk by chunk.

        Each item is (header, data): write both, in order, before the next item. Nothing is copied.
        """
        if self.state not in (State.READY, State.CLOSED):
            raise LocalProtocolError(f"cannot send buffers in state {self.state.value}")
        for index, buf in enumerate(buffers):
            view = memoryview(buf).cast("B")
            for offset in range(0, len(view), chunk_size):
                piece = view[offset : offset + chunk_size]
                self.frames_sent += 1
                yield encode_chunk_header(ref, index, offset, len(piece)), piece

    def hello(self, skyhive_version: str, python_version: str, resume_from: int = -1) -> bytes:
        """Convenience: the client's first frame."""
        return self.send(
            Hello(
                protocol_version=PROTOCOL_VERSION,
                python_version=python_version,
                skyhive_version=skyhive_version,
                max_frame=self.max_frame,
                resume_from=resume_from,
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
                done = self._announce(msg)  # type: ignore[arg-type]
                if done is not None:
                    out.append(done)
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

    def _announce(self, msg: Submit | Result) -> Message | None:
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
            return self._complete(msg.task_id, buffers)
        return None

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
            if pending.missing <= 0:
                out.append(self._complete(ref, pending.buffers))
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
        if pending.missing <= 0:
            out.append(self._complete(chunk.ref, pending.buffers))

    def _complete(self, ref: int, buffers: list[Any]) -> Message:
        pending = self._pending.pop(ref)
        self._pending_bytes -= max(pending.missing, 0)
        return replace(pending.message, buffers=tuple(buffers))
