"""The sans-IO protocol: two Connections joined by handing bytes across, no sockets."""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyhive.protocol import (
    PROTOCOL_VERSION,
    Cancel,
    Connection,
    Function,
    Hello,
    LocalProtocolError,
    Output,
    Ping,
    Pong,
    ProtocolError,
    RemoteProtocolError,
    Result,
    Role,
    Shutdown,
    Started,
    State,
    Submit,
    WantFunction,
    Welcome,
)
from skyhive.protocol.codec import HEADER, encode


def welcome(**kw):
    base = dict(protocol_version=PROTOCOL_VERSION, python_version="3.11.7", skyhive_version="0.1.0",
                max_frame=1 << 20, pid=42)
    base.update(kw)
    return Welcome(**base)


def pair():
    client, worker = Connection(Role.CLIENT), Connection(Role.WORKER)
    [hello] = worker.receive_data(client.hello("0.1.0", "3.11.7"))
    assert isinstance(hello, Hello) and hello.protocol_version == PROTOCOL_VERSION
    [w] = client.receive_data(worker.send(welcome()))
    assert w.pid == 42
    assert client.state is worker.state is State.READY
    return client, worker


def feed_bytewise(conn: Connection, data: bytes) -> list:
    out = []
    for i in range(len(data)):
        out += conn.receive_data(data[i : i + 1])
    return out


def test_round_trip_every_message_and_bytewise():
    client, worker = pair()
    sub = Submit(task_id=7, fn_id=b"\x01" * 16, fn=b"fnbytes", args=b"args", options={"kind": "call"})
    data = client.send(sub) + client.send(Cancel(task_id=7)) + client.send(Ping(nonce=3))
    assert feed_bytewise(worker, data) == [sub, Cancel(task_id=7), Ping(nonce=3)]
    replies = [Started(task_id=7), Output(task_id=7, stream=1, data="héllo\n"), Pong(nonce=3),
               Result(task_id=7, ok=False, value=b"", error_type="ZeroDivisionError", traceback="tb")]
    data = b"".join(worker.send(m) for m in replies)
    assert client.receive_data(data) == replies


def test_a_worker_asks_for_a_function_and_the_client_sends_it():
    client, worker = pair()
    sub = Submit(task_id=9, fn_id=b"\x02" * 16, fn=b"", args=b"args")  # sent without the function's bytes
    assert feed_bytewise(worker, client.send(sub)) == [sub]
    assert feed_bytewise(client, worker.send(WantFunction(task_id=9))) == [WantFunction(task_id=9)]
    answer = Function(task_id=9, fn=b"fnbytes")
    assert feed_bytewise(worker, client.send(answer)) == [answer]
    assert client.state is worker.state is State.READY
    # only in those directions: a client does not ask, a worker does not send functions
    with pytest.raises(LocalProtocolError, match="cannot send WantFunction: client in state ready"):
        client.send(WantFunction(task_id=9))
    with pytest.raises(LocalProtocolError, match="cannot send Function: worker in state ready"):
        worker.send(answer)
    client, worker = pair()
    with pytest.raises(RemoteProtocolError, match="peer sent Function to client in state ready"):
        client.receive_data(encode(answer))
    with pytest.raises(RemoteProtocolError, match="Function.fn should be bytes, got str"):
        worker.receive_data(HEADER.pack(len(body := msgpack.packb([Function.tag, 9, "x"]))) + body)


def test_out_of_band_buffers_reassemble_in_chunks_and_interleave():
    client, worker = pair()
    big = bytes(range(256)) * 5000  # 1.28 MB
    small = b"xyz"
    sub = Submit(task_id=1, fn_id=b"f" * 16, fn=b"", args=b"a", buffer_sizes=(len(big), len(small)))
    assert worker.receive_data(client.send(sub)) == []  # waits for its buffers
    frames = list(client.send_buffers(1, [big, small], chunk_size=100_000))
    assert len(frames) == 14
    out = []
    for i, (header, piece) in enumerate(frames):
        out += worker.receive_data(header + bytes(piece))
        if i == 3:  # a heartbeat between two chunks is delivered at once
            assert worker.receive_data(client.send(Ping(nonce=1))) == [Ping(nonce=1)]
    [done] = out
    assert isinstance(done, Submit) and done.task_id == 1
    assert bytes(done.buffers[0]) == big and bytes(done.buffers[1]) == small


def test_zero_length_buffer_completes_at_once():
    client, worker = pair()
    [done] = worker.receive_data(client.send(Submit(task_id=2, fn_id=b"", fn=b"", args=b"", buffer_sizes=(0,))))
    assert bytes(done.buffers[0]) == b""


def test_version_mismatch_names_both_versions():
    worker = Connection(Role.WORKER)
    hello = Hello(protocol_version=PROTOCOL_VERSION + 1, python_version="3.11.7", skyhive_version="9", max_frame=10)
    with pytest.raises(RemoteProtocolError) as err:
        worker.receive_data(encode(hello))
    assert f"version {PROTOCOL_VERSION + 1}" in str(err.value) and f"version {PROTOCOL_VERSION}" in str(err.value)
    client = Connection(Role.CLIENT)
    client.hello("0.1.0", "3.11.7")
    with pytest.raises(RemoteProtocolError, match=f"worker speaks version {PROTOCOL_VERSION + 7}"):
        client.receive_data(encode(welcome(protocol_version=PROTOCOL_VERSION + 7)))


def test_refusal_reaches_the_client_as_an_error():
    client, worker = Connection(Role.CLIENT), Connection(Role.WORKER)
    worker.receive_data(client.hello("0.1.0", "3.12.1"))
    with pytest.raises(RemoteProtocolError, match="Python 3.12.1"):
        client.receive_data(worker.refusal(welcome(error="client runs Python 3.12.1 ...")))


def test_illegal_moves_local_and_remote_and_sticky_error():
    client = Connection(Role.CLIENT)
    with pytest.raises(LocalProtocolError, match="cannot send Submit: client in state idle"):
        client.send(Submit(task_id=1, fn_id=b"", fn=b"", args=b""))
    with pytest.raises(LocalProtocolError, match="ERROR state"):
        client.hello("0.1.0", "3.11.7")
    worker = Connection(Role.WORKER)
    with pytest.raises(RemoteProtocolError, match="peer sent Submit to worker in state idle"):
        worker.receive_data(encode(Submit(task_id=1, fn_id=b"", fn=b"", args=b"")))
    with pytest.raises(RemoteProtocolError, match="ERROR state"):
        worker.receive_data(b"\x00")


def test_worker_cannot_submit_and_client_cannot_send_results():
    client, worker = pair()
    with pytest.raises(LocalProtocolError):
        worker.send(Submit(task_id=1, fn_id=b"", fn=b"", args=b""))
    with pytest.raises(LocalProtocolError):
        client.send(Result(task_id=1, ok=True, value=b""))


def test_shutdown_closes_and_eof_mid_frame_is_an_error():
    client, worker = pair()
    assert worker.receive_data(client.send(Shutdown())) == [Shutdown()]
    assert worker.state is State.CLOSED and client.state is State.CLOSED
    with pytest.raises(LocalProtocolError):
        client.send(Ping(nonce=1))
    c2, w2 = pair()
    frame = c2.send(Ping(nonce=1))
    w2.receive_data(frame[:5])
    with pytest.raises(RemoteProtocolError, match="in the middle of a frame"):
        w2.receive_data(b"")


def test_frame_over_limit_is_refused_before_buffering():
    worker = Connection(Role.WORKER, max_frame=1000)
    with pytest.raises(RemoteProtocolError, match="exceeds the 1000-byte limit"):
        worker.receive_data(HEADER.pack(10_000))


@pytest.mark.parametrize(
    "body, message",
    [
        (b"\xc1", "not valid msgpack"),
        (msgpack.packb({"a": 1}), "not a \\[tag"),
        (msgpack.packb([99, 1]), "unknown message type tag 99"),
        (msgpack.packb([Ping.tag]), "Ping frame has 0 fields, expected 1"),
        (msgpack.packb([Ping.tag, "x"]), "Ping.nonce should be int, got str"),
        (bytes([0x94, 11, 0, 0]), "shorter than its header"),
    ],
)
def test_bad_bodies_are_named(body, message):
    client, worker = pair()
    with pytest.raises(RemoteProtocolError, match=message):
        worker.receive_data(HEADER.pack(len(body)) + body)


def test_chunk_for_unknown_task_and_overrun():
    client, worker = pair()
    header, piece = next(client.send_buffers(5, [b"abc"]))
    with pytest.raises(RemoteProtocolError, match="announced no buffers"):
        worker.receive_data(header + bytes(piece))
    client, worker = pair()
    worker.receive_data(client.send(Submit(task_id=5, fn_id=b"", fn=b"", args=b"", buffer_sizes=(2,))))
    header, piece = next(client.send_buffers(5, [b"abc"]))
    with pytest.raises(RemoteProtocolError, match="overruns buffer 0"):
        worker.receive_data(header + bytes(piece))


def test_junk_after_valid_frames_yields_frames_then_error():
    client, worker = pair()
    data = client.send(Ping(nonce=1)) + HEADER.pack(3) + b"\xc1\xc1\xc1"
    with pytest.raises(RemoteProtocolError):
        worker.receive_data(data)


def _ready_worker() -> tuple[Connection, bytes]:
    client, worker = pair()
    valid = client.send(Submit(task_id=1, fn_id=b"f", fn=b"x", args=b"y", options={"a": [1, 2]}))
    valid += client.send(Ping(nonce=5))
    return worker, valid


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600))
def test_random_bytes_raise_only_protocol_error(data):
    worker, _ = _ready_worker()
    try:
        worker.receive_data(data)
        worker.receive_data(b"")
    except ProtocolError:
        pass


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_frames_raise_only_protocol_error(data):
    worker, valid = _ready_worker()
    buf = bytearray(valid)
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    try:
        worker.receive_data(bytes(buf[:cut]))
        worker.receive_data(bytes(buf[cut:]))
        worker.receive_data(b"")
    except ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**31), st.binary(max_size=64)), max_size=5))
def test_random_chunk_headers_raise_only_protocol_error(chunks):
    worker, _ = _ready_worker()
    for ref, payload in chunks:
        body = struct.pack(">BBBQBQBQ", 0x94, 11, 0xCF, ref, 0xCF, ref % 3, 0xCF, ref) + payload
        try:
            worker.receive_data(HEADER.pack(len(body)) + body)
        except ProtocolError:
            return


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**64 - 1), min_size=0, max_size=4))
def test_hostile_buffer_sizes_are_refused(sizes):
    worker, _ = _ready_worker()
    body = msgpack.packb([Submit.tag, 9, b"", b"", b"", sizes, False, {}])
    try:
        out = worker.receive_data(HEADER.pack(len(body)) + body)
    except ProtocolError:
        return
    assert all(0 <= s for s in sizes) or out == []


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_chunks_split_anywhere_reassemble_exactly(data):
    client, worker = pair()
    big = bytes(data.draw(st.binary(min_size=1, max_size=3000)))
    other = data.draw(st.binary(max_size=50))
    sub = Submit(task_id=3, fn_id=b"f", fn=b"", args=b"", buffer_sizes=(len(big), len(other)))
    stream = client.send(sub)
    for header, piece in client.send_buffers(3, [big, other], chunk_size=data.draw(st.integers(1, 700))):
        stream += header + bytes(piece)
    stream += client.send(Ping(nonce=9))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    out, prev = [], 0
    for cut in [*cuts, len(stream)]:
        if cut > prev:  # (b"" would mean end of stream)
            out += worker.receive_data(stream[prev:cut])
        prev = cut
    assert len(out) == 2 and out[1] == Ping(nonce=9)
    assert bytes(out[0].buffers[0]) == big and bytes(out[0].buffers[1]) == other
    assert worker.receive_data(b"") == []


def test_eof_in_the_middle_of_a_streamed_chunk():
    client, worker = pair()
    worker.receive_data(client.send(Submit(task_id=4, fn_id=b"", fn=b"", args=b"", buffer_sizes=(100,))))
    header, piece = next(client.send_buffers(4, [b"x" * 100]))
    worker.receive_data(header + bytes(piece)[:40])
    with pytest.raises(RemoteProtocolError, match="in the middle of a frame"):
        worker.receive_data(b"")


def test_reading_straight_into_the_chunk_target():
    client, worker = pair()
    big = bytes(range(256)) * 4000
    worker.receive_data(client.send(Submit(task_id=8, fn_id=b"", fn=b"", args=b"", buffer_sizes=(len(big),))))
    stream = b"".join(h + bytes(p) for h, p in client.send_buffers(8, [big], chunk_size=300_000))
    pos, out = 0, []
    while pos < len(stream):
        target = worker.receive_target()
        if target is None:  # a header (and maybe the start of the payload): the ordinary path
            step = 100
            out += worker.receive_data(stream[pos : pos + step])
            pos += step
            continue
        n = min(len(target), 70_000)
        target[:n] = stream[pos : pos + n]  # what readv would do
        target.release()
        out += worker.received_into(n)
        pos += n
    [done] = out
    assert bytes(done.buffers[0]) == big
    assert worker.receive_target() is None


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_one_whole_frame_per_receive_is_the_same_protocol(wrap):
    """Each frame handed over alone (the receive path most frames take: one whole small frame) gives
    the messages, counters and state moves that the same bytes give fed together and fed bytewise —
    a Result announcing a buffer still waits for its Chunk, a Shutdown still closes."""
    c1, w1 = pair()
    sub = Submit(task_id=3, fn_id=b"\x02" * 16, fn=b"", args=b"a")
    from_worker = [w1.send(Started(task_id=3)), w1.send(Result(task_id=3, ok=True, value=b"v", buffer_sizes=(2,))),
                   *(h + bytes(p) for h, p in w1.send_buffers(3, [b"xy"])),
                   w1.send(Result(task_id=4, ok=True, value=b"w"))]
    from_client = [c1.send(sub), c1.send(Ping(nonce=9)), c1.send(Shutdown())]
    outcomes = []
    for feed in ("whole", "together", "bytewise"):
        client, worker = pair()
        if feed == "whole":
            got_c = [m for f in from_worker for m in client.receive_data(wrap(f))]
            got_w = [m for f in from_client for m in worker.receive_data(wrap(f))]
        elif feed == "together":
            got_c = client.receive_data(wrap(b"".join(from_worker)))
            got_w = worker.receive_data(wrap(b"".join(from_client)))
        else:
            got_c = feed_bytewise(client, b"".join(from_worker))
            got_w = feed_bytewise(worker, b"".join(from_client))
        outcomes.append((got_c, got_w, client.frames_received, worker.frames_received, client.bytes_received,
                         worker.bytes_received, client.state, worker.state))
    assert outcomes[0] == outcomes[1] == outcomes[2]
    got_c, got_w = outcomes[0][:2]
    assert [type(m) for m in got_c] == [Started, Result, Result] and got_c[1].buffers[0] == b"xy"
    assert got_w == [sub, Ping(nonce=9), Shutdown()] and outcomes[0][7] is State.CLOSED
    # an illegal message arriving as one whole frame is refused as before (and the error sticks)
    client, worker = pair()
    with pytest.raises(RemoteProtocolError, match="peer sent Submit to client in state ready"):
        client.receive_data(wrap(encode(Submit(task_id=5, fn_id=b"", fn=b"", args=b""))))
    with pytest.raises(RemoteProtocolError, match="ERROR state"):
        client.receive_data(wrap(encode(Started(task_id=3))))
