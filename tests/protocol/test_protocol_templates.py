"""The per-call templates (`Connection.send_submit`, `send_value_result`) give exactly `send`'s bytes and checks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skyhive.protocol import Connection, LocalProtocolError, Result, Role, State, Submit
from skyhive.protocol.codec import MAX_MESSAGE, decode_body, encode, submit_tail

task_ids = st.integers(0, 2**64 - 1)
options = st.dictionaries(st.sampled_from(["kind", "stream", "fn_buffer", "show"]),
                          st.one_of(st.booleans(), st.text(max_size=8), st.integers(0, 9)), max_size=3)


def ready_pair() -> tuple[Connection, Connection]:
    client, worker = Connection(Role.CLIENT), Connection(Role.WORKER)
    for conn in (client, worker):
        conn.state = State.READY
    return client, worker


@settings(max_examples=200, deadline=None)
@given(task_id=task_ids, fn_id=st.binary(max_size=32), fn=st.binary(max_size=300), args=st.binary(max_size=70_000),
       batch=st.booleans(), opts=options)
def test_a_templated_submit_is_the_same_frame_as_send_gives(task_id, fn_id, fn, args, batch, opts):
    client, worker = ready_pair()
    msg = Submit(task_id=task_id, fn_id=fn_id, fn=fn, args=args, batch=batch, options=opts)
    frame = client.send_submit(task_id, submit_tail(fn_id=fn_id, fn=fn, args=args, batch=batch, options=opts))
    assert frame == encode(msg)
    assert worker.receive_data(frame) == [msg]
    assert client.frames_sent == 1


@settings(max_examples=200, deadline=None)
@given(task_id=task_ids, value=st.binary(max_size=70_000))
def test_a_templated_result_is_the_same_frame_as_send_gives(task_id, value):
    client, worker = ready_pair()
    msg = Result(task_id=task_id, ok=True, value=value)
    frame = worker.send_value_result(task_id, value)
    assert frame == encode(msg)
    assert client.receive_data(frame) == [msg]
    assert decode_body(memoryview(frame)[4:]) == msg


def test_templates_keep_the_state_machine_and_the_limits():
    client, worker = ready_pair()
    tail = submit_tail(fn_id=b"f", fn=b"", args=b"a", batch=False, options={})
    with pytest.raises(LocalProtocolError, match="cannot send Submit: worker in state ready"):
        worker.send_submit(1, tail)  # a worker never sends a Submit
    assert worker.state is State.ERROR
    with pytest.raises(LocalProtocolError, match="ERROR state"):
        worker.send_value_result(1, b"v")
    client, _ = ready_pair()
    with pytest.raises(LocalProtocolError, match="cannot send Result: client in state ready"):
        client.send_value_result(1, b"v")
    client, worker = ready_pair()
    with pytest.raises(LocalProtocolError, match="exceeds the message limit"):
        worker.send_value_result(1, b"x" * (MAX_MESSAGE + 1))
    assert worker.state is State.ERROR
    client, _ = ready_pair()
    with pytest.raises(LocalProtocolError, match="task_id should be int"):
        client.send_submit("1", tail)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Submit.options should be dict"):
        submit_tail(fn_id=b"f", fn=b"", args=b"a", batch=False, options=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("max_frame", [200, 1000, 70_000])
def test_templated_frames_at_the_limit_are_sent_and_one_byte_over_refused(max_frame):
    """The templates decide most frames without measuring them (`_TEMPLATE_ROOM`): every size
    around the limit still gets exactly `send`'s answer."""
    for size in range(max_frame - 40, max_frame + 2):
        for task_id in (1, 2**64 - 1):
            client, worker = ready_pair()
            worker.max_frame = client.max_frame = max_frame
            value = b"v" * size
            fits = len(encode(Result(task_id=task_id, ok=True, value=value))) - 4 <= max_frame
            if fits:
                assert worker.send_value_result(task_id, value) == encode(Result(task_id=task_id, ok=True, value=value))
            else:
                with pytest.raises(LocalProtocolError, match="exceeds the message limit"):
                    worker.send_value_result(task_id, value)
                assert worker.state is State.ERROR
            tail = submit_tail(fn_id=b"f", fn=b"", args=value, batch=False, options={})
            msg = Submit(task_id=task_id, fn_id=b"f", fn=b"", args=value)
            if len(encode(msg)) - 4 <= max_frame:
                assert client.send_submit(task_id, tail) == encode(msg)
            else:
                with pytest.raises(LocalProtocolError, match="exceeds the message limit"):
                    client.send_submit(task_id, tail)
