"""Protocol 7: a frame leaves out the trailing fields at their defaults; a receiver fills them in,
checking what did travel as strictly as before (count, exact types)."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skyhive.protocol import (
    PROTOCOL_VERSION,
    Connection,
    Hello,
    RemoteProtocolError,
    Result,
    Resume,
    Role,
    Shutdown,
    State,
    Submit,
    Welcome,
)
from skyhive.protocol.codec import HEADER, decode_body, encode


def ready_pair() -> tuple[Connection, Connection]:
    client, worker = Connection(Role.CLIENT), Connection(Role.WORKER)
    for conn in (client, worker):
        conn.state = State.READY
    return client, worker


def body_of(frame: bytes) -> list:
    return msgpack.unpackb(frame[HEADER.size:])


def frame_of(values: list) -> bytes:
    body = msgpack.packb(values, use_bin_type=True)
    return HEADER.pack(len(body)) + body


def test_a_plain_submit_and_an_ok_result_carry_only_their_fields_without_defaults():
    assert body_of(encode(Submit(task_id=7, fn_id=b"f", fn=b"", args=b"a"))) == [Submit.tag, 7, b"f", b"", b"a"]
    assert body_of(encode(Result(task_id=7, ok=True, value=b"v"))) == [Result.tag, 7, True, b"v"]
    assert body_of(encode(Shutdown())) == [Shutdown.tag]
    assert body_of(encode(Resume(from_seq=3))) == [Resume.tag, 3]
    # a field before the last non-default one travels even at its default
    assert body_of(encode(Submit(task_id=7, fn_id=b"f", fn=b"", args=b"a", batch=True))) == \
        [Submit.tag, 7, b"f", b"", b"a", [], True]
    assert body_of(encode(Result(task_id=7, ok=False, value=b"", cancelled=True))) == \
        [Result.tag, 7, False, b"", [], "", "", "", True]


def test_hello_and_welcome_always_travel_whole():
    """Their leading fields are what peers of other versions read: the count stays what it was."""
    hello = Hello(protocol_version=PROTOCOL_VERSION, python_version="3.11.7", skyhive_version="0.1.0",
                  max_frame=1 << 20)
    assert len(body_of(encode(hello))) == 1 + 7
    welcome = Welcome(protocol_version=PROTOCOL_VERSION, python_version="3.11.7", skyhive_version="0.1.0",
                      max_frame=1 << 20)
    assert len(body_of(encode(welcome))) == 1 + 6
    worker = Connection(Role.WORKER)
    with pytest.raises(RemoteProtocolError, match="Hello frame has 4 fields, expected 7"):
        worker.receive_data(frame_of([Hello.tag, PROTOCOL_VERSION, "3.11.7", "0.1.0", 1 << 20]))


def test_a_value_of_the_wrong_type_is_not_mistaken_for_its_default():
    """`batch=0` equals False but is no bool: it travels, and the receiver refuses it as before."""
    frame = encode(Submit(task_id=1, fn_id=b"f", fn=b"", args=b"a", batch=0))  # type: ignore[arg-type]
    assert body_of(frame) == [Submit.tag, 1, b"f", b"", b"a", [], 0]
    _, worker = ready_pair()
    with pytest.raises(RemoteProtocolError, match="Submit.batch should be bool, got int"):
        worker.receive_data(frame)
    assert worker.state is State.ERROR


@pytest.mark.parametrize("count", range(4, 11))
def test_every_length_between_the_shortest_and_the_whole_form_decodes_to_the_same_submit(count):
    whole = [Submit.tag, 9, b"f", b"", b"a", [], False, {}, b"", [], []]
    _, worker = ready_pair()
    [msg] = worker.receive_data(frame_of(whole[: 1 + count]))
    assert msg == Submit(task_id=9, fn_id=b"f", fn=b"", args=b"a")
    assert msg.buffers == () and msg.options == {}


@pytest.mark.parametrize("values, error", [
    ([Submit.tag, 9, b"f", b""], "Submit frame has 3 fields, expected 4 to 10"),
    ([Submit.tag] + [9, b"f", b"", b"a", [], False, {}, b"", [], [], []], "Submit frame has 11 fields, expected 4 to 10"),
    ([Result.tag, 9, True], "Result frame has 2 fields, expected 3 to 9"),
    ([Submit.tag, 9, b"f", "", b"a"], "Submit.fn should be bytes, got str"),  # the shortest form
    ([Submit.tag, 9, b"f", b"", b"a", [], 1], "Submit.batch should be bool, got int"),  # a form in between
    ([Submit.tag, 9, b"f", b"", b"a", [], False, []], "Submit.options should be dict, got tuple"),
    ([Result.tag, 9, 1, b"v"], "Result.ok should be bool, got int"),
    ([Result.tag, 9, True, b"v", [], "", "", "", False, [1]], None),  # whole: accepted
    ([Shutdown.tag, 3], "Shutdown.reason should be str, got int"),
])
def test_short_and_long_forms_are_refused_as_strictly_as_the_whole_one(values, error):
    client, worker = ready_pair()
    receiver = client if values[0] == Result.tag else worker
    if error is None:
        assert receiver.receive_data(frame_of(values))
        return
    with pytest.raises(RemoteProtocolError, match=error):
        receiver.receive_data(frame_of(values))
    assert receiver.state is State.ERROR


@settings(max_examples=200, deadline=None)
@given(task_id=st.integers(0, 2**64 - 1), ok=st.booleans(), value=st.binary(max_size=20),
       sizes=st.lists(st.integers(0, 5), max_size=2).map(tuple), error_type=st.sampled_from(["", "E"]),
       traceback=st.sampled_from(["", "tb"]), cancelled=st.booleans(),
       shared=st.sampled_from([(), (0,)]))
def test_any_result_round_trips_whatever_fields_are_at_their_defaults(task_id, ok, value, sizes, error_type,
                                                                     traceback, cancelled, shared):
    msg = Result(task_id=task_id, ok=ok, value=value, buffer_sizes=sizes, error_type=error_type,
                 traceback=traceback, cancelled=cancelled, shared=shared)
    frame = encode(msg)
    assert decode_body(memoryview(frame)[HEADER.size:]) == msg
    # what is left out is exactly the trailing run of defaults
    values = body_of(frame)[1:]
    whole = [task_id, ok, value, list(sizes), error_type, "", traceback, cancelled, list(shared)]
    assert values == whole[: len(values)]
    assert all(v in ([], "", False) for v in whole[max(3, len(values)):])
    assert len(values) == 3 or whole[len(values) - 1] not in ([], "", False)


def test_a_default_left_out_is_a_fresh_object_per_message():
    """`options` (a dict) is filled in fresh for each decoded `Submit`: one task's options never
    leak into another's."""
    _, worker = ready_pair()
    short = [Submit.tag, 9, b"f", b"", b"a"]
    [one], [two] = worker.receive_data(frame_of(short)), worker.receive_data(frame_of(short))
    assert one.options == two.options == {} and one.options is not two.options
