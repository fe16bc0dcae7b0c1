"""Streaming: a generator task's items come back as they are yielded (`pool.stream`, `gen(x) >> pool`),
its error after the items before it, an early exit cancels it; a generator argument travels as its
items; the `Item` message is one more row of the protocol's transition table (sans-IO)."""

from __future__ import annotations

import time

import anyio
import pytest

import skyhive as sky
from skyhive.protocol import Item, LocalProtocolError, RemoteProtocolError, Submit
from skyhive.protocol.codec import encode
from tests.protocol.test_protocol import feed_bytewise, pair

LIMIT = 120


@sky.function
def countdown(n, pause=0.0):
    for i in range(n, 0, -1):
        yield {"value": i}
        time.sleep(pause)


def gate(path):
    """Yields one item, then waits until the client, having received it, creates `path`."""
    import os

    yield "first"
    deadline = time.time() + LIMIT
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.02)
    yield "second"


def fails_after_two():
    yield 1
    yield 2
    raise ValueError("third went wrong")


def forever():
    i = 0
    while True:
        yield i
        i += 1
        time.sleep(0.01)


@sky.function
def running_mean(data):
    total, means = 0.0, []
    for i, x in enumerate(data, 1):
        total += x
        means.append(total / i)
    return means


def test_generator_items_arrive_while_the_task_still_runs(tmp_path):
    flag = tmp_path / "got-first"
    with sky.Compute(provider=sky.Local(), nodes=1) as compute:
        items = compute.stream(gate, str(flag))
        assert next(items) == "first"  # the task is still waiting for this file: it was streamed
        flag.touch()
        assert list(items) == ["second"]


def test_the_seeds_spelling_streams_a_generator_function():
    with sky.Compute(provider=sky.Local(), nodes=1) as compute:
        assert [x["value"] for x in countdown(4) >> compute] == [4, 3, 2, 1]
        assert [x["value"] for x in compute.stream(countdown, n=2)] == [2, 1]
        assert [x["value"] for x in compute.run(countdown, 3)] == [3, 2, 1]  # run: the items as a list


def test_an_error_comes_after_the_items_before_it():
    with sky.Compute(provider=sky.Local(), nodes=1) as compute:
        items = compute.stream(fails_after_two)
        assert [next(items), next(items)] == [1, 2]
        with pytest.raises(ValueError, match="third went wrong"):
            next(items)


def test_leaving_early_cancels_the_task_on_its_node():
    with sky.Compute(provider=sky.Local(), nodes=1) as compute:
        items = compute.stream(forever)
        assert [next(items) for _ in range(3)] == [0, 1, 2]
        items.close()
        deadline = time.monotonic() + LIMIT
        while compute.statistics()["tasks_cancelled"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert compute.statistics()["tasks_cancelled"] == 1
        assert compute.run(sum, [1, 2]) == 3  # the worker is free again


@pytest.mark.anyio
async def test_async_pool_streams_as_an_async_iterator():
    async with sky.Pool(nodes=1) as pool:
        with anyio.fail_after(LIMIT):
            got = [x["value"] async for x in pool.stream(countdown, 3)]
            sugar = [x["value"] async for x in (countdown(2) >> pool)]
    assert got == [3, 2, 1] and sugar == [2, 1]


def test_a_generator_argument_travels_as_its_items():
    with sky.Compute(provider=sky.Local(), nodes=1) as compute:
        assert running_mean(x for x in [1.0, 2.0, 3.0]) >> compute == [1.0, 1.5, 2.0]
        assert compute.run(next, (c for c in "ab")) == "a"  # an iterator on the node, not a list


def test_item_is_legal_from_worker_to_client_only():
    client, worker = pair()
    worker.receive_data(client.send(Submit(task_id=1, fn_id=b"\x01" * 16, fn=b"f", args=b"a")))
    frame = worker.send(Item(task_id=1, index=0, value=b"\x80\x05K\x01."))
    assert client.receive_data(frame) == [Item(task_id=1, index=0, value=b"\x80\x05K\x01.")]
    assert feed_bytewise(client, worker.send(Item(task_id=1, index=1, value=b"x"))) == [
        Item(task_id=1, index=1, value=b"x")]
    with pytest.raises(LocalProtocolError, match="Item"):
        client.send(Item(task_id=1, index=2, value=b""))
    _, other_worker = pair()
    with pytest.raises(RemoteProtocolError, match="Item"):  # a client may not send one
        other_worker.receive_data(encode(Item(task_id=1, index=0, value=b"")))


def test_a_streams_timeout_cancels_it_after_the_items_that_came_in_time():
    with sky.Compute(provider=sky.Local(), nodes=1) as compute:
        items = sky.compute(forever)().with_timeout(1.0) >> compute
        got = []
        with pytest.raises(sky.TaskTimeout, match=r"forever\(\) did not finish within timeout=1.0 s after \d+ item"):
            for x in items:
                got.append(x)
        assert got[:3] == [0, 1, 2]
        deadline = time.monotonic() + LIMIT
        while compute.statistics()["tasks_cancelled"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert compute.statistics()["tasks_cancelled"] == 1


def big_then_small():
    yield b"x" * (8 << 20)


def test_an_item_too_large_for_a_frame_is_a_clear_error_and_the_worker_lives():
    with sky.Compute(provider=sky.Local(), nodes=1) as compute:
        with pytest.raises(sky.SerializationError, match=r"item 0 of type bytes is \d+ bytes pickled"):
            list(compute.stream(big_then_small))
        assert compute.run(len, b"x" * (8 << 20)) == 8 << 20  # same worker, and returning it works
        assert compute.statistics()["tasks_lost"] == 0


def dies_after_two():
    import os

    yield 1
    yield 2
    os._exit(3)


def test_a_worker_lost_mid_stream_raises_worker_lost_after_the_items():
    with sky.Compute(provider=sky.Local(), nodes=1) as compute:
        items = compute.stream(dies_after_two)
        assert [next(items), next(items)] == [1, 2]
        with pytest.raises(sky.WorkerLost, match="exited with status 3"):
            next(items)
        assert compute.run(sum, [2, 3]) == 5  # the worker was restarted
