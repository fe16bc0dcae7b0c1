"""Large values cross the wire as chunked out-of-band buffers, both ways; `map` cuts its batches by
size; a connection that reaches an error state is a lost worker, and the pool goes on.

The default run moves 100 MB values; `test_one_gib_bytes_argument_and_one_gib_str_result` (marked
slow) moves 1 GiB each way — the largest that is polite on a shared 24 GiB machine (the worker and
the client each hold the value, its received buffer and its pickle at their peaks: ~3 GiB each).
"""

from __future__ import annotations

import json
import logging
import os

import anyio
import pytest

import skyhive as sky

pytestmark = pytest.mark.anyio

MB = 1_000_000


def describe(value):
    """What arrived on the worker: its type, length and a cheap fingerprint."""
    data = value.tobytes() if isinstance(value, memoryview) else value
    return type(value).__name__, len(data), data[:3], data[-3:]


def make_str(n, ch):
    return ch * n


def submitted_items(path):
    with open(path) as f:
        return [json.loads(line)["items"] for line in f if '"type":"task_submitted"' in line]


async def test_large_bytes_bytearray_memoryview_and_str_travel_both_ways():
    blob = os.urandom(1000) * 100_000  # 100 MB, over the old 64 MiB frame limit
    async with sky.Pool(nodes=1) as pool:
        assert await pool.run(describe, blob) == ("bytes", len(blob), blob[:3], blob[-3:])
        assert await pool.run(describe, bytearray(blob)) == ("bytearray", len(blob), blob[:3], blob[-3:])
        kind, n, _, _ = await pool.run(describe, memoryview(blob))
        assert (kind, n) == ("memoryview", len(blob))
        assert await pool.run(describe, memoryview(blob[:10])) == ("memoryview", 10, blob[:3], blob[7:10])
        text = await pool.run(make_str, 100 * MB, "é")  # 200 MB of UTF-8
        assert type(text) is str and len(text) == 100 * MB and text[:2] == "éé"
        back = await pool.run(lambda b: b, blob)
        assert back == blob
        # nested at any depth and inside a user object: the in-band pickle itself goes out of band
        assert await pool.run(lambda d: len(d["k"][0]), {"k": [blob]}) == len(blob)
        # the worker is the same one all along: nothing broke it
        assert len({await pool.run(os.getpid) for _ in range(3)}) == 1


async def test_a_map_over_hundreds_of_one_mb_strings_on_one_node_cuts_batches_by_size():
    items = [chr(ord("a") + i % 26) * MB for i in range(300)]
    async with sky.Pool(nodes=1) as pool:
        out = await pool.map(len, items)
        path = pool.log_path
    assert out == [MB] * 300
    sizes = submitted_items(path)
    assert sum(sizes) == 300 and max(sizes) < 300  # several batches, though one worker's quarter is 75
    assert max(sizes) * MB <= 16 * MB


async def test_a_large_function_closure_and_a_large_error_travel():
    table = os.urandom(10 * MB)

    def lookup(i):
        return table[i]

    def fail_loudly():
        raise ValueError("x" * 10_000_000)  # over any message frame limit

    async with sky.Pool(nodes=1) as pool:
        assert await pool.run(lookup, 5) == table[5]
        assert await pool.map(lookup, range(3)) == list(table[:3])
        with pytest.raises(sky.RemoteError) as info:  # too large to rebuild: its text, cut
            await pool.run(fail_loudly)
        assert info.value.type_name == "ValueError"
        assert info.value.remote_message.startswith("xxx") and "characters cut" in info.value.remote_message
        assert await pool.run(abs, -1) == 1


async def test_a_connection_in_error_state_is_a_lost_worker_and_the_pool_goes_on(caplog):
    caplog.set_level(logging.DEBUG)
    async with sky.Pool(nodes=1) as pool:
        first_pid = await pool.run(os.getpid)
        [channel] = [c for n in pool._runtime.nodes for c in n.usable_channels()]
        channel.conn.max_frame = 10  # the next frame breaks the connection (a stand-in for any bug)
        with pytest.raises(sky.WorkerLost, match=r"node 0.*protocol error") as info:
            await pool.run(abs, -5)
        assert info.value.node == 0
        with anyio.fail_after(30):
            while True:  # the worker is restarted and the pool goes on
                try:
                    assert await pool.run(abs, -5) == 5
                    break
                except sky.WorkerLost:
                    await anyio.sleep(0.1)
        assert await pool.run(os.getpid) != first_pid
        assert pool.state.nodes[0].state == "ready"
    assert not any("never retrieved" in r.getMessage() for r in caplog.records)
    with pytest.raises(ProcessLookupError):
        os.kill(first_pid, 0)


@pytest.mark.slow
async def test_one_gib_bytes_argument_and_one_gib_str_result():
    gib = 1024**3
    blob = b"\x07" * gib
    async with sky.Pool(nodes=1) as pool:
        assert await pool.run(describe, blob) == ("bytes", gib, b"\x07" * 3, b"\x07" * 3)
        del blob
        text = await pool.run(make_str, gib, "z")
        assert type(text) is str and len(text) == gib and text[:1] == text[-1:] == "z"


# ---- instances of client-only classes travel by value at any depth (issue 9, point 3) -------------

def total(boxes):
    return sum(b.v for b in boxes)


def total_of_dict(d):
    return sum(b.v for b in d["boxes"].values()) + d["deep"][0][0].v


def unbox(b):
    return b.v * 10


def rebox(boxes):
    return [type(b)(b.v + 1) for b in boxes], {"one": type(boxes[0])(100)}


def call_first(things, x):
    first = things[0]
    return first(x) if callable(first) else first.Box(x)


def importable(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


@pytest.fixture
def client_only_module(tmp_path, monkeypatch):
    """A module on the client's sys.path only (the worker's environment does not name tmp_path)."""
    import importlib
    import sys
    import uuid

    name = f"client_only_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "class Box:\n"
        "    def __init__(self, v):\n"
        "        self.v = v\n"
        "    def __eq__(self, other):\n"
        "        return type(other).__name__ == 'Box' and other.v == self.v\n"
        "def double(x):\n"
        "    return Box(2 * x)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    try:
        yield module
    finally:
        sys.modules.pop(name, None)


async def test_client_only_class_instances_travel_by_value_at_any_depth(client_only_module):
    Box = client_only_module.Box
    async with sky.Pool(nodes=1) as pool:
        assert not await pool.run(importable, client_only_module.__name__)  # the node cannot import it
        assert await pool.run(total, [Box(1), Box(2)]) == 3
        assert await pool.run(total_of_dict, {"boxes": {"a": Box(3), "b": Box(4)}, "deep": [[Box(5)]]}) == 12
        assert await pool.map(unbox, [Box(i) for i in range(20)]) == [i * 10 for i in range(20)]
        listed, named = await pool.run(rebox, [Box(1), Box(2)])
        # the module's functions, and the module itself, met inside an argument
        assert await pool.run(call_first, [client_only_module.double], 4) == Box(8)
        assert await pool.run(call_first, [client_only_module], 5) == Box(5)
    assert [type(b) for b in listed] == [Box, Box] and listed == [Box(2), Box(3)]
    assert type(named["one"]) is Box and named["one"].v == 100


@pytest.mark.slow
async def test_large_values_and_client_only_classes_over_ssh(sshd_host, client_only_module):
    from tests.kinds.ssh.test_ssh_pool import ssh_for

    Box = client_only_module.Box
    blob = os.urandom(1000) * 100_000  # 100 MB over the resumable SSH link, both ways
    async with sky.Pool(provider=ssh_for(sshd_host), nodes=1) as pool:
        assert await pool.run(describe, blob) == ("bytes", len(blob), blob[:3], blob[-3:])
        text = await pool.run(make_str, 100 * MB, "é")
        assert len(text) == 100 * MB and text[-1] == "é"
        assert await pool.run(total_of_dict, {"boxes": {"a": Box(3)}, "deep": [[Box(5)]]}) == 8
        listed, _ = await pool.run(rebox, [Box(1)])
    assert listed == [Box(2)] and type(listed[0]) is Box
