"""Resumable links: the layer under the protocol that lets a dropped byte stream pick up again (sans-IO).

A resumable link (the SSH transport ↔ the detached worker, see `runtime/worker/server.py`)
carries the protocol's frames unchanged — *data frames* — and, between them, a few *control frames*
of its own, marked by the top bit of the length prefix (no data frame can have it: frames are far
smaller than 2 GiB). Control frames carry protocol messages too, but never reach a `Connection`:

- client → worker, first frame of every stream: `Hello(resume_from=N)`, "I hold your data frames
  up to number N" (N = 0 on the first connection);
- worker → client, the answer: `Resume(from_seq=N, received=M)`, "your frames up to number M
  arrived; mine from N + 1 on follow" — or `Welcome(error=...)` when it cannot resume;
- either way, now and then: `Ack(seq)`, "I hold your frames up to `seq`", so the other side can drop
  them from its replay buffer;
- worker → client, last: `Goodbye(exit_status)`, the worker is done and the stream ends on purpose.

Each side numbers the data frames it sends from 1 (the position in the stream, like TCP's sequence
numbers: nothing is added to the frames themselves) and keeps them in an `Outbox` until they are
acknowledged. An `Inbox` cuts what arrives into whole frames — a frame cut by a drop is never
handed on, it is sent again whole — and counts them. So after a reconnect each side sends exactly
the frames the other lacks: nothing is lost and nothing arrives twice.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Sequence
from typing import Any

from .codec import _CHUNK_PREFIX, DEFAULT_MAX_FRAME, HEADER, MAX_MESSAGE, decode_body, encode
from .errors import LocalProtocolError, RemoteProtocolError
from .messages import Ack, Message

__all__ = [
    "CONTROL_FLAG",
    "MAX_CONTROL_FRAME",
    "ACK_EVERY_FRAMES",
    "ACK_EVERY_BYTES",
    "encode_control",
    "Inbox",
    "Outbox",
]

#: Top bit of a frame's length prefix: this frame belongs to the link, not to the protocol.
CONTROL_FLAG = 0x8000_0000
#: Control messages are a few dozen bytes; a larger one is garbage, not something to buffer.
MAX_CONTROL_FRAME = 4096
#: An `Ack` goes out after this many frames or bytes received (and, by the I/O layer, on a timer):
#: often enough that replay buffers stay small, rarely enough to cost nothing per call.
ACK_EVERY_FRAMES = 64
ACK_EVERY_BYTES = 512 * 1024

_U32 = struct.Struct(">I")
_LENGTH_MASK = CONTROL_FLAG - 1


def encode_control(msg: Message) -> bytes:
    """The control frame (length prefix with `CONTROL_FLAG`) that carries `msg`."""
    frame = encode(msg)
    return _U32.pack((len(frame) - HEADER.size) | CONTROL_FLAG) + frame[HEADER.size :]


class Inbox:
    """The receiving half: cuts the incoming stream into whole data frames and control messages.

    `feed(data)` returns, in stream order, memoryviews holding one or more *whole* data frames
    (hand them to the `Connection`) and the control messages decoded in between. `received` counts
    the data frames handed out so far. After a drop, `reset()` discards a partly received frame:
    the peer sends it again, whole, after the resume.
    """

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self.received = 0
        self.acked = 0  # the last number we acknowledged
        self._bytes_since_ack = 0
        self._partial = bytearray()  # the start of a frame not complete yet
        self._need = 0  # its full size with prefix, once the prefix is in; 0 before

    def __repr__(self) -> str:
        return f"<Inbox received={self.received} acked={self.acked} partial={len(self._partial)}>"

    def reset(self) -> None:
        """A new stream starts: drop the partial frame of the old one."""
        self._partial = bytearray()
        self._need = 0

    def _size(self, raw: int) -> int:
        length = raw & _LENGTH_MASK
        limit = MAX_CONTROL_FRAME if raw & CONTROL_FLAG else self.max_frame
        if length > limit:
            kind = "control frame" if raw & CONTROL_FLAG else "frame"
            raise RemoteProtocolError(f"{kind} of {length} bytes exceeds the {limit}-byte limit")
        return HEADER.size + length

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview | Message]:
        """Take bytes from the stream; returns whole data frames and control messages, in order.

        Raises `RemoteProtocolError` for an oversized frame or a control frame that does not decode.
        """
        out: list[memoryview | Message] = []
        view = memoryview(data)
        end = len(view)
        pos = 0
        if self._partial:
            pos = self._complete_partial(view, out)
            if self._partial:
                return out
        start = pos
        header = HEADER.size
        while end - pos >= header:
            (raw,) = _U32.unpack_from(view, pos)
            size = self._size(raw)
            if end - pos < size:
                break
            if raw & CONTROL_FLAG:
                if pos > start:
                    out.append(view[start:pos])
                out.append(self._control(view[pos + header : pos + size]))
                start = pos + size
            else:
                self.received += 1
                self._bytes_since_ack += size
            pos += size
        if pos > start:
            out.append(view[start:pos])
        if pos < end:
            if end - pos >= header:
                _check_start(view[pos:], self._size(_U32.unpack_from(view, pos)[0]))
            self._partial += view[pos:]
            if len(self._partial) >= header:
                self._need = self._size(_U32.unpack_from(self._partial)[0])
        return out

    def _complete_partial(self, view: memoryview, out: list[memoryview | Message]) -> int:
        buf = self._partial
        pos = 0
        if not self._need:
            pos = min(HEADER.size - len(buf), len(view))
            buf += view[:pos]
            if len(buf) < HEADER.size:
                return pos
            self._need = self._size(_U32.unpack_from(buf)[0])
        take = min(self._need - len(buf), len(view) - pos)
        buf += view[pos : pos + take]
        pos += take
        if len(buf) < self._need:
            _check_start(buf, self._need)
            return pos
        (raw,) = _U32.unpack_from(buf)
        self._partial, self._need = bytearray(), 0
        if raw & CONTROL_FLAG:
            out.append(self._control(memoryview(buf)[HEADER.size :]))
        else:
            self.received += 1
            self._bytes_since_ack += len(buf)
            out.append(memoryview(buf))
        return pos

    @staticmethod
    def _control(body: memoryview) -> Message:
        return decode_body(body)

    # ---- acknowledgements --------------------------------------------------------------------------

    @property
    def unacked(self) -> int:
        return self.received - self.acked

    def ack_due(self) -> bool:
        """True when enough has arrived since the last `Ack` that one should go out now."""
        return self.received - self.acked >= ACK_EVERY_FRAMES or self._bytes_since_ack >= ACK_EVERY_BYTES

    def ack(self) -> bytes:
        """The control frame acknowledging every data frame received so far."""
        self.acked = self.received
        self._bytes_since_ack = 0
        return encode_control(Ack(seq=self.received))


def _check_start(start: bytes | bytearray | memoryview, need: int) -> None:
    """Refuse a data frame of `need` bytes (prefix included) over `MAX_MESSAGE` that is not a `Chunk`
    as soon as its body's first two bytes (in `start`, the frame's beginning) are in, rather than
    buffer it whole for the `Connection` to refuse."""
    if need - HEADER.size > MAX_MESSAGE and len(start) >= HEADER.size + 2:
        (raw,) = _U32.unpack_from(start)
        if not raw & CONTROL_FLAG and start[HEADER.size : HEADER.size + 2] != _CHUNK_PREFIX:
            raise RemoteProtocolError(
                f"message frame of {need - HEADER.size} bytes exceeds the MAX_MESSAGE limit of "
                f"{MAX_MESSAGE} bytes (only Chunk frames may be larger)"
            )


class Outbox:
    """The sending half: numbers the data frames written (from 1) and keeps them until acknowledged.

    `record(pieces)` takes exactly the bytes written to the stream (whole frames or not; nothing is
    copied: the pieces are kept by reference). `ack(seq)` drops frames up to `seq`; `replay(after)`
    returns what to write on a new stream so that the peer, holding frames up to `after`, gets the
    rest — including the start of a frame whose end has not been written yet.
    """

    def __init__(self) -> None:
        self.sent = 0  # data frames recorded whole
        self.acked = 0
        self.bytes = 0  # bytes held for replay
        self._frames: deque[tuple[int, int, list[Any]]] = deque()  # (seq, size, pieces)
        self._cur: list[Any] = []  # pieces of the frame being written
        self._cur_have = 0
        self._cur_need = 0  # its full size once its prefix is known
        self._hdr = bytearray()  # a prefix cut between two pieces

    def __repr__(self) -> str:
        return f"<Outbox sent={self.sent} acked={self.acked} held={len(self._frames)} frames/{self.bytes} bytes>"

    def record(self, pieces: Sequence[bytes | bytearray | memoryview]) -> None:
        """Note bytes written to the stream. Raises `LocalProtocolError` if they are not frames."""
        for piece in pieces:
            if piece.__class__ is bytes and not self._cur and len(piece) >= HEADER.size:
                size = len(piece)
                if _U32.unpack_from(piece)[0] + HEADER.size == size:  # one whole data frame: the usual case
                    self.sent += 1
                    self._frames.append((self.sent, size, [piece]))
                    self.bytes += size
                    continue
            view = memoryview(piece).cast("B") if not isinstance(piece, bytes) else memoryview(piece)
            pos, end = 0, len(view)
            while pos < end:
                if not self._cur_need:
                    take = min(HEADER.size - len(self._hdr), end - pos)
                    self._hdr += view[pos : pos + take]
                    self._cur.append(view[pos : pos + take])
                    self._cur_have += take
                    pos += take
                    if len(self._hdr) < HEADER.size:
                        continue
                    (raw,) = _U32.unpack_from(self._hdr)
                    if raw & CONTROL_FLAG:
                        raise LocalProtocolError("control frames are not recorded for replay")
                    self._cur_need = HEADER.size + raw
                    self._hdr = bytearray()
                    if self._cur_have < self._cur_need:
                        continue
                else:
                    take = min(self._cur_need - self._cur_have, end - pos)
                    self._cur.append(view[pos : pos + take])
                    self._cur_have += take
                    pos += take
                if self._cur_have == self._cur_need:
                    self.sent += 1
                    self._frames.append((self.sent, self._cur_need, self._cur))
                    self.bytes += self._cur_need
                    self._cur, self._cur_have, self._cur_need = [], 0, 0

    def ack(self, seq: int) -> None:
        """The peer holds our frames up to `seq`. Raises `RemoteProtocolError` past what we sent."""
        if seq > self.sent:
            raise RemoteProtocolError(f"peer acknowledged frame {seq}, but only {self.sent} were sent")
        frames = self._frames
        while frames and frames[0][0] <= seq:
            self.bytes -= frames.popleft()[1]
        self.acked = max(self.acked, seq)

    def replay(self, after: int) -> list[Any]:
        """The pieces to write on a new stream for a peer that holds our frames up to `after`.

        Raises `RemoteProtocolError` if the peer claims frames we never sent, or asks for frames
        already dropped (acknowledged earlier: a peer that forgot them cannot be resumed).
        """
        if after > self.sent:
            raise RemoteProtocolError(f"peer holds frame {after}, but only {self.sent} were sent")
        if after < self.acked:
            raise RemoteProtocolError(
                f"peer asks for frames after {after}, but frames up to {self.acked} were acknowledged "
                "and dropped"
            )
        self.ack(after)
        out: list[Any] = []
        for _, _, pieces in self._frames:
            out += pieces
        return out + self._cur

    @property
    def partial(self) -> bool:
        """True while a frame has been started but not finished."""
        return bool(self._cur)
