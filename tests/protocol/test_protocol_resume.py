"""Resumable links (protocol.resume), sans-IO: numbered frames, acks, replay — no sockets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skyhive.protocol import Output, Result, Submit
from skyhive.protocol.codec import encode
from skyhive.protocol.errors import LocalProtocolError, RemoteProtocolError
from skyhive.protocol.messages import PROTOCOL_VERSION, Ack, Goodbye, Hello, Resume
from skyhive.protocol.resume import CONTROL_FLAG, Inbox, Outbox, encode_control


def frames(n: int, start: int = 0) -> list[bytes]:
    return [encode(Output(task_id=1, stream=1, data=f"line {i}\n" * (i % 5 + 1))) for i in range(start, start + n)]


def data_of(items) -> bytes:
    return b"".join(bytes(i) for i in items if isinstance(i, memoryview))


def controls(items):
    return [i for i in items if not isinstance(i, memoryview)]


def test_control_frames_are_marked_and_split_from_data():
    inbox = Inbox()
    stream = frames(2)[0] + encode_control(Ack(seq=7)) + frames(2)[1] + encode_control(Goodbye(exit_status=0))
    items = inbox.feed(stream)
    assert data_of(items) == b"".join(frames(2))
    assert controls(items) == [Ack(seq=7), Goodbye(exit_status=0)]
    assert inbox.received == 2
    assert encode_control(Ack(seq=1))[0] & 0x80 and CONTROL_FLAG == 0x8000_0000


def test_bytewise_feed_hands_out_only_whole_frames():
    inbox = Inbox()
    stream = b"".join(frames(5)) + encode_control(Resume(from_seq=3, received=4))
    out = []
    for i in range(len(stream)):
        for item in inbox.feed(stream[i : i + 1]):
            if isinstance(item, memoryview):
                out.append(bytes(item))  # one whole frame per byte fed: never a piece of one
            else:
                out.append(item)
    assert out[:-1] == frames(5) and out[-1] == Resume(from_seq=3, received=4)
    assert inbox.received == 5


def test_reset_drops_a_frame_cut_by_the_drop():
    inbox = Inbox()
    a, b = frames(2)
    assert data_of(inbox.feed(a + b[:5])) == a
    inbox.reset()
    assert data_of(inbox.feed(b)) == b  # sent again, whole
    assert inbox.received == 2


def test_oversized_and_garbage_frames_are_remote_errors():
    with pytest.raises(RemoteProtocolError, match="exceeds"):
        Inbox(max_frame=100).feed((1000).to_bytes(4, "big") + b"x" * 10)
    with pytest.raises(RemoteProtocolError, match="control frame"):
        Inbox().feed((CONTROL_FLAG | 100_000).to_bytes(4, "big"))
    with pytest.raises(RemoteProtocolError):
        Inbox().feed((CONTROL_FLAG | 3).to_bytes(4, "big") + b"\xc1\xc1\xc1")


def test_outbox_numbers_frames_however_they_are_written():
    out = Outbox()
    stream = b"".join(frames(4))
    out.record([stream[:3], memoryview(stream)[3:50]])
    out.record([bytearray(stream[50:])])
    assert out.sent == 4 and out.bytes == len(stream)
    out.ack(2)
    assert out.bytes == sum(map(len, frames(4)[2:]))
    assert b"".join(bytes(p) for p in out.replay(2)) == b"".join(frames(4)[2:])
    with pytest.raises(RemoteProtocolError):
        out.ack(9)
    with pytest.raises(RemoteProtocolError, match="acknowledged"):
        out.replay(1)
    with pytest.raises(LocalProtocolError):
        Outbox().record([encode_control(Ack(seq=1))])


def test_outbox_takes_whole_frames_and_pieces_alike():
    # whole frames as bytes (the worker's and the client's usual writes), two frames in one piece,
    # and a frame in two pieces (a chunk: header, then data) all count the same
    f = frames(6)
    out = Outbox()
    out.record([f[0]])
    out.record([f[1] + f[2]])
    out.record([f[3][:5], memoryview(f[3])[5:]])
    out.record([f[4]])
    out.record([f[5][:4]])
    assert out.sent == 5 and out.partial
    out.record([f[5][4:]])
    assert out.sent == 6 and out.bytes == sum(map(len, f))
    assert b"".join(bytes(p) for p in out.replay(1)) == b"".join(f[1:])


def test_replay_includes_a_frame_still_being_written():
    out = Outbox()
    f = frames(2)
    out.record([f[0], f[1][:6]])
    assert out.partial
    assert b"".join(bytes(p) for p in out.replay(1)) == f[1][:6]
    out.record([f[1][6:]])
    assert out.sent == 2 and not out.partial


def test_acks_are_due_after_enough_frames():
    inbox = Inbox()
    inbox.feed(b"".join(frames(10)))
    assert not inbox.ack_due() and inbox.unacked == 10
    inbox.feed(b"".join(frames(60)))
    assert inbox.ack_due()
    [ack] = controls(Inbox().feed(inbox.ack()))
    assert ack == Ack(seq=70) and inbox.unacked == 0


class Side:
    """One end: a protocol Connection over an Outbox/Inbox pair (what ResumableLink and the relay do)."""

    def __init__(self) -> None:
        self.outbox = Outbox()
        self.inbox = Inbox()
        self.got: list[bytes] = []
        self.wire: list[bytes] = []  # written, not yet delivered

    def write(self, frame: bytes) -> None:
        self.outbox.record([frame])
        self.wire.append(frame)

    def receive(self, data: bytes) -> list:
        items = self.inbox.feed(data)
        self.got += [bytes(i) for i in items if isinstance(i, memoryview)]
        return controls(items)


@settings(max_examples=60, deadline=None)
@given(cut_a=st.integers(0, 4000), cut_b=st.integers(0, 4000), acked=st.integers(0, 30))
def test_a_drop_anywhere_loses_nothing_and_duplicates_nothing(cut_a, cut_b, acked):
    client, relay = Side(), Side()
    sent_by_client = [encode(Submit(task_id=i, fn_id=b"f" * 16, fn=b"", args=b"a" * (i * 7))) for i in range(1, 25)]
    sent_by_relay = [encode(Result(task_id=i, ok=True, value=b"v" * (i * 11))) for i in range(1, 40)]
    for f in sent_by_client:
        client.write(f)
    for f in sent_by_relay:
        relay.write(f)
    # the drop: each direction delivers only a prefix of what was written
    c_stream, r_stream = b"".join(client.wire), b"".join(relay.wire)
    relay.receive(c_stream[:cut_a])
    client.receive(r_stream[:cut_b])
    relay.outbox.ack(min(acked, client.inbox.received))  # some of the client's acks made it across
    client.wire.clear()
    relay.wire.clear()
    # frames written while disconnected are only recorded
    late = encode(Submit(task_id=99, fn_id=b"f" * 16, fn=b"", args=b"late"))
    client.outbox.record([late])
    # reconnect: both inboxes restart on a new stream
    client.inbox.reset()
    relay.inbox.reset()
    hello = encode_control(Hello(protocol_version=PROTOCOL_VERSION, python_version="3.11.7", skyhive_version="x",
                                 max_frame=1 << 20, resume_from=client.inbox.received))
    [h] = relay.receive(hello)
    replay = relay.outbox.replay(h.resume_from)
    resume = encode_control(Resume(from_seq=h.resume_from, received=relay.inbox.received))
    [r] = client.receive(resume + b"".join(bytes(p) for p in replay))
    relay.receive(b"".join(bytes(p) for p in client.outbox.replay(r.received)))
    assert b"".join(client.got) == b"".join(sent_by_relay)
    assert b"".join(relay.got) == b"".join([*sent_by_client, late])
    assert client.inbox.received == len(sent_by_relay) and relay.inbox.received == len(sent_by_client) + 1
