"""`Connection`: one side of a client ↔ worker conversation, with no I/O (in the manner of h11).

Three verbs: `receive_data(bytes)` takes whatever arrived (``b""`` means the stream ended) and returns
the complete messages in it; `send(message)` returns the bytes to write; `send_buffers(...)` returns
the frames that carry a message's out-of-band buffers, one chunk at a time, so the caller can put a
heartbeat or an output line between two chunks of a large argument.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import Any

from .codec import (
    _CHUNK_PREFIX,
    CHUNK_HEADER,
    DEFAULT_MAX_FRAME,
    HEADER,
    MAX_BUFFERS,
    MAX_MESSAGE,
    decode_body,
    decode_message,
    encode,
    encode_chunk_header,
    encode_submit,
    encode_value_result,
)
from .cache import BufferStore, cache_fields_problem
from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .messages import MESSAGE_TYPES, PROTOCOL_VERSION, Chunk, Hello, Message, Result, Submit, Welcome
from .reassembly import MAX_PENDING_BUFFERS, Reassembly
from .states import RECV, SEND, Role, State, table

__all__ = ["Connection", "Role", "State", "CHUNK_SIZE", "MAX_PENDING_BUFFERS"]

#: Size of one out-of-band chunk: big enough to move data at memory speed, small enough that a
#: heartbeat waits at most about a millisecond behind one.
CHUNK_SIZE = 1024 * 1024
_HEADER_SIZE = HEADER.size
_CHUNK_TAG = Chunk.tag
_unpack_length = HEADER.unpack_from
_HANDSHAKE = frozenset({Hello, Welcome})
_WITH_BUFFERS = frozenset({Submit, Result})
#: the received messages that need more than a state move: a version check, or buffers to wait for
_SPECIAL = _HANDSHAKE | _WITH_BUFFERS
#: the received messages whose only effect is the state move (everything but `Chunk` and `_SPECIAL`)
_PLAIN = frozenset(MESSAGE_TYPES) - _SPECIAL - {Chunk}
#: more than a templated frame adds to the bytes its caller packed (array head, tag, a uint64 task
#: id, `True`, a bin header): a frame within `_message_limit - _TEMPLATE_ROOM` needs no measuring
_TEMPLATE_ROOM = 32
#: (an enum member read through its class costs ~45 ns on Python 3.11, a module global ~5)
_ERROR = State.ERROR


class Connection(Reassembly):
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
        self._init_reassembly()

    @property
    def state(self) -> State:
        return self._state

    @state.setter
    def state(self, value: State) -> None:
        self._state = value
        # the legal moves from here, looked up by message type alone on the hot path
        self._can_send = self._send_table[value]
        self._can_recv = self._recv_table[value]

    @property
    def max_frame(self) -> int:
        """The largest frame accepted from the peer (and the bound on what we send)."""
        return self._max_frame

    @max_frame.setter
    def max_frame(self, value: int) -> None:
        self._max_frame = value
        self._message_limit = min(MAX_MESSAGE, value)  # the bound on a message frame's body we send

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
        if self._state is _ERROR:
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
        if (self._can_send.get(Submit) is not self._state or task_id.__class__ is not int
                or len(tail) + _TEMPLATE_ROOM > self._message_limit):
            return self._send_template(Submit, encode_submit, task_id, tail)  # (the checks, the errors)
        # the common case, decided by the three comparisons above: the move keeps the state, the
        # task id is an int, and the frame is certainly within the limit
        self.frames_sent += 1
        return encode_submit(task_id, tail)

    def send_value_result(self, task_id: int, value: bytes) -> bytes:
        """`send(Result(task_id=task_id, ok=True, value=value))`: a task's value without buffers."""
        if (self._can_send.get(Result) is not self._state or task_id.__class__ is not int
                or len(value) + _TEMPLATE_ROOM > self._message_limit):
            return self._send_template(Result, encode_value_result, task_id, value)
        self.frames_sent += 1  # (as in send_submit)
        return encode_value_result(task_id, value)

    def _send_template(self, cls: type[Message], encoder: Any, task_id: int, data: bytes) -> bytes:
        if self._state is _ERROR:
            raise LocalProtocolError("connection is in ERROR state after an earlier protocol error")
        nxt = self._can_send.get(cls)
        if nxt is None:
            what = f"{self.role.value} in state {self.state.value}"
            self.state = State.ERROR
            raise LocalProtocolError(f"cannot send {cls.__name__}: {what}")
        if task_id.__class__ is not int:
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
        if self._state is _ERROR:
            raise RemoteProtocolError("connection is in ERROR state after an earlier protocol error")
        n = len(data)
        if (n > _HEADER_SIZE + 1 and self._streaming is None and not self._buf
                and n - _HEADER_SIZE <= self._message_limit and _unpack_length(data, 0)[0] == n - _HEADER_SIZE):
            # the common case, one whole small frame and nothing else: no reassembly to do (a Chunk
            # or a message announcing buffers still goes through `_accept`, as in `_frames`)
            self.bytes_received += n
            self.frames_received += 1
            try:
                # (a bytes body is sliced as bytes: copying a small one costs less than a memoryview)
                if data[5] == _CHUNK_TAG and data[4] == 0x94:  # (a Chunk's data: a view, not a copy)
                    view = data if data.__class__ is memoryview else memoryview(data)
                    msg = decode_body(view[_HEADER_SIZE:])
                else:
                    msg = decode_message(data[_HEADER_SIZE:])
                cls = msg.__class__
                if self._can_recv.get(cls) is self._state and (  # (Submit and Result first: most frames)
                        (cls in _WITH_BUFFERS and not msg.buffer_sizes) or cls in _PLAIN):  # type: ignore[attr-defined]
                    return [msg]
                out: list[Message] = []
                self._accept(msg, out)
                return out
            except ProtocolError:
                self.state = State.ERROR
                raise
        if not n:
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
        """`receive_data` but for its one-whole-frame case: reassembly across reads and frames."""
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
            view = data if data.__class__ is memoryview else memoryview(data)
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
            start = pos + header
            if length > self._message_limit:  # (one comparison for the small frames most are)
                if length > self._max_frame:
                    raise RemoteProtocolError(
                        f"frame of {length} bytes exceeds the {self.max_frame}-byte limit"
                    )
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
            self._accept(decode_body(view[start:pos]), out)
        return pos

    def _accept(self, msg: Message, out: list[Message]) -> None:
        """What one received message does: a `Chunk` fills its buffer; any other moves the state (or
        raises, naming the illegal move), a handshake checks the version, a message announcing buffers
        waits for them; the others go to `out`."""
        cls = msg.__class__
        if cls is Chunk:
            self._chunk(msg, out)  # type: ignore[arg-type]
            return
        nxt = self._can_recv.get(cls)
        if nxt is None:
            self._move(RECV, msg)  # raises, naming the illegal move
        elif nxt is not self._state:
            self.state = nxt
        if cls in _SPECIAL:
            if cls in _HANDSHAKE:
                self._check_version(msg)  # type: ignore[arg-type]
            elif msg.buffer_sizes:  # type: ignore[attr-defined]
                self._announce(msg, out)  # type: ignore[arg-type]
                return
        out.append(msg)

    def _check_version(self, msg: Hello | Welcome) -> None:
        if isinstance(msg, Welcome) and msg.error:
            raise RemoteProtocolError(f"worker refused the connection: {msg.error}")
        if msg.protocol_version != PROTOCOL_VERSION:
            peer = "worker" if isinstance(msg, Welcome) else "client"
            raise RemoteProtocolError(
                f"protocol version mismatch: the {peer} speaks version {msg.protocol_version}, "
                f"this side speaks version {PROTOCOL_VERSION} (install the same skyhive on both sides)"
            )
