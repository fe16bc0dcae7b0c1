"""A hostile or broken peer cannot make a `Connection` stall or bloat: what a frame may announce and
what it may cost to decode are bounded, and a refusal is a `ProtocolError` naming the limit.

Memory is measured with tracemalloc (a generous bound, not a timing): before these limits the
67-million-buffer frame cost ~5.8 GB and ~32 s of CPU, the 64 MiB nil frame ~1.1 GB.
"""

from __future__ import annotations

import struct
import tracemalloc

import msgpack
import pytest

from skyhive.protocol import Connection, RemoteProtocolError, Result, Role, State
from skyhive.protocol.codec import HEADER, MAX_BUFFERS, MAX_MESSAGE, decode_body, encode

from .test_protocol import pair

MiB = 1024 * 1024


def result_frame_with_empty_buffers(count: int) -> bytes:
    """A `Result` frame announcing `count` empty out-of-band buffers, built by hand (a 64 MiB tuple
    of zeros would cost the test itself half a gigabyte)."""
    head = b"\x9a" + b"".join(msgpack.packb(v) for v in (Result.tag, 1, True, b"v"))
    sizes = b"\xdd" + struct.pack(">I", count) + b"\x00" * count
    tail = b"".join(msgpack.packb(v) for v in ("", "", "", False, ()))  # ... cancelled, shared
    body = head + sizes + tail
    return HEADER.pack(len(body)) + body


def nil_frame(size: int) -> bytes:
    """A frame whose body is one msgpack array of `size - 5` nils."""
    count = size - 5
    body = b"\xdd" + struct.pack(">I", count) + b"\xc0" * count
    return HEADER.pack(len(body)) + body


def refused(conn: Connection, data: bytes) -> tuple[str, int]:
    """Feed `data`; returns (the ProtocolError's text, peak bytes tracemalloc saw while decoding)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with pytest.raises(RemoteProtocolError) as info:
            conn.receive_data(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert conn.state is State.ERROR
    return str(info.value), peak


def test_a_frame_announcing_67_million_empty_buffers_is_refused_cheaply():
    client, _ = pair()
    frame = result_frame_with_empty_buffers(64 * MiB - 64)
    assert len(frame) - 4 <= 64 * MiB  # under the frame limit, as in the report
    text, peak = refused(client, frame)
    assert "MAX_MESSAGE" in text
    assert peak < 16 * MiB


def test_announcing_more_buffers_than_the_limit_in_a_small_frame_is_refused():
    client, _ = pair()
    text, peak = refused(client, result_frame_with_empty_buffers(MAX_BUFFERS + 1))
    assert "MAX_BUFFERS" in text and str(MAX_BUFFERS) in text
    assert peak < 16 * MiB
    # the limit itself is fine
    client, _ = pair()
    [msg] = client.receive_data(result_frame_with_empty_buffers(MAX_BUFFERS))
    assert len(msg.buffers) == MAX_BUFFERS


def test_a_64_mib_frame_of_nils_is_refused_from_its_first_bytes():
    client, _ = pair()
    frame = nil_frame(64 * MiB)
    text, peak = refused(client, frame)
    assert "MAX_MESSAGE" in text
    assert peak < 16 * MiB
    # arriving in pieces, it is refused as soon as the body's first two bytes are in: nothing of the
    # 64 MiB is buffered
    client, _ = pair()
    text, peak = refused(client, frame[:6])
    assert "MAX_MESSAGE" in text


def test_a_frame_of_nils_under_the_message_limit_is_refused_by_the_array_limit():
    text, _ = "", 0
    with pytest.raises(RemoteProtocolError, match=r"max_array_len"):
        decode_body(memoryview(nil_frame(MAX_MESSAGE)[4:]))
    client, _ = pair()
    text, peak = refused(client, nil_frame(MAX_MESSAGE))
    assert "max_array_len" in text and peak < 16 * MiB


def test_a_large_map_is_refused_by_the_map_limit():
    body = msgpack.packb([Result.tag, 1, {str(i): i for i in range(100_000)}])
    with pytest.raises(RemoteProtocolError, match=r"max_map_len"):
        decode_body(memoryview(body))


def test_the_worst_frame_under_the_limits_costs_bounded_memory():
    # the densest object graph msgpack allows in a message frame: one-element arrays, two bytes each
    inner = b"\xdc" + struct.pack(">H", MAX_BUFFERS) + b"\x91\xc0" * MAX_BUFFERS
    count = (MAX_MESSAGE - 16) // len(inner)
    body = b"\xdd" + struct.pack(">I", count) + inner * count
    assert len(body) <= MAX_MESSAGE
    tracemalloc.start()
    try:
        with pytest.raises(RemoteProtocolError):
            decode_body(memoryview(body))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 * MiB  # versus ~1.1 GB for the 64 MiB nil frame before


def test_sending_more_buffers_than_the_limit_is_a_local_error():
    from skyhive.protocol import LocalProtocolError

    _, worker = pair()
    with pytest.raises(LocalProtocolError, match="MAX_BUFFERS"):
        worker.send(Result(task_id=1, ok=True, value=b"", buffer_sizes=(1,) * (MAX_BUFFERS + 1)))


def test_an_encoded_message_over_the_message_limit_is_refused_on_both_sides():
    from skyhive.protocol import LocalProtocolError

    _, worker = pair()
    big = Result(task_id=1, ok=True, value=b"x" * (MAX_MESSAGE + 1))
    with pytest.raises(LocalProtocolError, match="MAX_MESSAGE"):
        worker.send(big)
    client = Connection(Role.CLIENT)
    with pytest.raises(RemoteProtocolError, match="MAX_MESSAGE"):
        decode_body(memoryview(encode(big)[4:]))
    del client


def test_the_resumable_links_inbox_refuses_a_large_message_frame_before_buffering_it():
    from skyhive.protocol.resume import Inbox

    frame = nil_frame(64 * MiB)
    inbox = Inbox()
    inbox.feed(frame[:5])  # not yet known what the frame is
    with pytest.raises(RemoteProtocolError, match="MAX_MESSAGE"):
        inbox.feed(frame[5:1024])
    piece = memoryview(frame)[: 32 * MiB]  # half the frame in one read: refused, not copied
    tracemalloc.start()
    try:
        with pytest.raises(RemoteProtocolError, match="MAX_MESSAGE"):
            Inbox().feed(piece)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * MiB
    # a large Chunk frame still streams through in pieces
    from skyhive.protocol.codec import encode_chunk_header

    chunk = encode_chunk_header(1, 0, 0, 8 * MiB) + b"\0" * (8 * MiB)
    inbox = Inbox()
    out = inbox.feed(chunk[:4096]) + inbox.feed(chunk[4096:])
    assert sum(len(v) for v in out) == len(chunk) and inbox.received == 1


def send_hostile_frame():
    """Run on a worker: write the start of a 64 MiB nil frame to the client, as a broken or hostile
    worker would, then wait to be killed."""
    import gc
    import os
    import struct
    import time

    [worker] = [o for o in gc.get_objects() if type(o).__name__ == "WorkerDaemon" and hasattr(o, "fd_out")]
    with worker.write_lock:
        size = 64 * 1024 * 1024
        os.write(worker.fd_out, struct.pack(">I", size) + b"\xdd" + struct.pack(">I", size - 5) + b"\xc0" * 4096)
        time.sleep(60)


@pytest.mark.anyio
async def test_a_worker_that_sends_a_hostile_frame_is_lost_and_replaced():
    import os

    import anyio

    import skyhive as sky

    async with sky.Pool(nodes=1) as pool:
        pid = await pool.run(os.getpid)
        with anyio.fail_after(30):  # far less in practice: refused from the frame's first bytes
            with pytest.raises(sky.WorkerLost, match=r"node 0.*MAX_MESSAGE"):
                await pool.run(send_hostile_frame)
            while True:
                try:
                    new_pid = await pool.run(os.getpid)
                    break
                except sky.WorkerLost:
                    await anyio.sleep(0.1)
        assert new_pid != pid and pool.state.nodes[0].state == "ready"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
