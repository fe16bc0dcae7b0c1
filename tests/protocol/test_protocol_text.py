"""Text that is not valid Unicode crosses the wire (issue 36 point 3): a file name that is not UTF-8,
decoded by Python with lone surrogates (`os.fsdecode(b"bad-\\xff.bin")`), in an error message, a
traceback, a task's output, an output filter or a shutdown reason, is sent escaped (`bad-\\xff.bin`)
instead of failing the whole frame — which killed the worker that tried to report it. Sans-IO: two
`Connection`s joined by handing bytes across, fed whole and one byte at a time, with junk after it."""

from __future__ import annotations

import os

import pytest

from skyhive.protocol import Connection, Output, RemoteProtocolError, Result, Role, Shutdown, Submit
from skyhive.protocol.codec import encode, escape_text, submit_tail
from tests.protocol.test_protocol import feed_bytewise, pair

BAD = os.fsdecode(b"bad-\xff.bin")  # "bad-\udcff.bin": what os.listdir gives for that file
ODD = "half \ud800 of a pair"  # a lone surrogate that is no escaped byte


def test_escape_text_keeps_valid_text_and_escapes_surrogates_as_their_bytes():
    assert escape_text("héllo ✓ \n") == "héllo ✓ \n"  # valid text: the same object's value
    assert escape_text(BAD) == "bad-\\xff.bin"
    assert escape_text(os.fsdecode(b"caf\xc3\xa9-\xfe")) == "café-\\xfe"
    assert escape_text(ODD) == "half \\ud800 of a pair"
    assert escape_text(BAD + ODD) == "bad-\\xff.binhalf \\ud800 of a pair"
    for text in (BAD, ODD, BAD + ODD):
        escape_text(text).encode("utf-8")  # (strict: what the peer decodes)


def test_a_result_naming_a_non_utf8_file_is_sent_escaped_and_the_connection_goes_on():
    client, worker = pair()
    sub = Submit(task_id=1, fn_id=b"\x01" * 16, fn=b"fn", args=b"args")
    assert feed_bytewise(worker, client.send(sub)) == [sub]
    failed = Result(task_id=1, ok=False, value=b"", error_type="ValueError",
                    error_message=f"could not read {BAD}", traceback=f'File "{BAD}", line 1\n{ODD}')
    data = worker.send(Output(task_id=1, stream=1, data=f"listing {BAD}\n")) + worker.send(failed)
    got = feed_bytewise(client, data)
    assert got == [Output(task_id=1, stream=1, data="listing bad-\\xff.bin\n"),
                   Result(task_id=1, ok=False, value=b"", error_type="ValueError",
                          error_message="could not read bad-\\xff.bin",
                          traceback='File "bad-\\xff.bin", line 1\nhalf \\ud800 of a pair')]
    # the connection is fine afterwards: the next call and its result go through
    sub2 = Submit(task_id=2, fn_id=b"\x01" * 16, fn=b"", args=b"args")
    assert client.receive_data(worker.receive_data(client.send(sub2)) and worker.send(
        Result(task_id=2, ok=True, value=b"v"))) == [Result(task_id=2, ok=True, value=b"v")]


def test_options_and_a_shutdown_reason_with_surrogates_are_escaped_too():
    client, worker = pair()
    options = {"filter": BAD, BAD: [ODD, 1]}
    sub = Submit(task_id=3, fn_id=b"\x01" * 16, fn=b"fn", args=b"a", options=options)
    [got] = feed_bytewise(worker, client.send(sub))
    assert got.options == {"filter": "bad-\\xff.bin", "bad-\\xff.bin": ("half \\ud800 of a pair", 1)}
    # the template of a Submit sent to many workers packs its options once: escaped the same way
    tail = submit_tail(fn_id=b"\x01" * 16, fn=b"", args=b"a", batch=False, options=options)
    [again] = feed_bytewise(worker, client.send_submit(4, tail))
    assert again.options == got.options
    [bye] = worker.receive_data(client.send(Shutdown(reason=f"stopping at {BAD}")))
    assert bye == Shutdown(reason="stopping at bad-\\xff.bin")


def test_an_escaped_frame_is_the_frame_of_the_escaped_message_and_a_receiver_stays_strict():
    msg = Result(task_id=5, ok=False, value=b"", error_message=BAD)
    assert encode(msg) == encode(Result(task_id=5, ok=False, value=b"", error_message="bad-\\xff.bin"))
    # a peer that sends raw invalid UTF-8 (it did not escape) is refused, naming the problem: the
    # receiver never guesses; fed one byte at a time, with junk after it, the same
    body = b"\x95\x06\x05\xc2\xc4\x00" + b"\xa1\xff"  # [Result, 5, False, b"", then a str holding the byte 0xff]
    frame = len(body).to_bytes(4, "big") + body
    for feed in (lambda c, d: c.receive_data(d), feed_bytewise):
        client, worker = pair()
        worker.receive_data(client.send(Submit(task_id=5, fn_id=b"\x01" * 16, fn=b"fn", args=b"a")))
        with pytest.raises(RemoteProtocolError, match="not valid msgpack.*utf-8"):
            feed(client, frame + b"junk")
