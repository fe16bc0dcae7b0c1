"""The Pool on the Local provider: results, errors, bad input, many pools at once."""

from __future__ import annotations

import os
import threading

import anyio
import pytest

import skyhive as sky

pytestmark = pytest.mark.anyio


def whoami(tag):
    info = sky.instance_info()
    return {"node": info.node, "total": info.total_nodes, "head": info.is_head, "tag": tag,
            "pid": os.getpid(), "env": os.environ["COMPUTE_POOL"], "peers": [p.addr for p in info.peers],
            "head_port": info.head_port}


def node_of(x):
    return (sky.instance_info().node, x * x)


def divide(a, b):
    return a / b


class Picky(Exception):
    def __init__(self, a, b):  # pickles, but cannot be rebuilt from its args
        super().__init__(f"{a}-{b}")


def raise_picky():
    raise Picky(1, 2)


async def test_broadcast_one_result_per_node_in_order_with_own_info():
    async with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        results = await pool.broadcast(whoami, "t")
    assert [r["node"] for r in results] == [0, 1]
    assert [r["head"] for r in results] == [True, False]
    assert {r["total"] for r in results} == {2} and {r["tag"] for r in results} == {"t"}
    assert results[0]["pid"] != results[1]["pid"]
    # the same information is exported to the worker's environment for child processes
    assert [sky.InstanceInfo.from_json(r["env"]).node for r in results] == [0, 1]
    assert results[0]["peers"] == ["127.0.0.1", "127.0.0.1"]
    assert results[0]["head_port"] == results[1]["head_port"] > 0


async def test_map_1000_items_in_order_using_both_nodes():
    async with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        out = await pool.map(node_of, range(1000))
    assert [sq for _, sq in out] == [x * x for x in range(1000)]
    assert {node for node, _ in out} == {0, 1}


async def test_run_spreads_concurrent_calls_and_map_of_nothing():
    async with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        nodes = set()

        async def one():
            nodes.add((await pool.run(node_of, 2))[0])

        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(one)
        assert nodes == {0, 1}
        assert await pool.map(node_of, []) == []


async def test_calls_one_at_a_time_keep_to_one_warm_worker():
    # (the worker picked last, while idle: round-robin woke a process idle since the call before)
    async with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        nodes = [(await pool.run(node_of, i))[0] for i in range(6)]
        assert len(set(nodes)) == 1, nodes
        assert {r[0] for r in await pool.broadcast(node_of, 1)} == {0, 1}  # (both still there)
        assert [(await pool.run(node_of, i))[0] for i in range(3)] == nodes[:3]


async def test_remote_exception_keeps_type_and_traceback():
    async with sky.Pool(nodes=1) as pool:
        with pytest.raises(ZeroDivisionError) as err:
            await pool.run(divide, 1, 0)
        tb = err.value.remote_traceback
        assert "in divide" in tb and "ZeroDivisionError" in tb
        assert any("Remote traceback (from node 0)" in n for n in err.value.__notes__)
        with pytest.raises(sky.RemoteError) as err2:
            await pool.run(raise_picky)
        assert err2.value.type_name.endswith("Picky")
        assert err2.value.remote_message == "1-2"
        assert "raise_picky" in err2.value.remote_traceback
        # the pool is still usable
        assert await pool.run(divide, 6, 3) == 2


async def test_map_error_names_the_item_and_cancels_the_rest():
    async with sky.Pool(nodes=2) as pool:
        with pytest.raises(ZeroDivisionError) as err:
            await pool.map(lambda x: 1 / (x - 500), range(1000), chunksize=100)
        assert any("map item 0 of this batch" in n for n in err.value.__notes__)
        assert await pool.map(abs, [-1, -2]) == [1, 2]


async def test_unpicklable_argument_fails_before_sending_and_names_it():
    async with sky.Pool(nodes=1) as pool:
        before = pool.state.tasks_submitted
        with pytest.raises(sky.SerializationError) as err:
            await pool.run(divide, threading.Lock(), 2)
        assert "argument 'a' (position 0)" in str(err.value) and "nothing was sent" in str(err.value)
        with pytest.raises(sky.SerializationError, match="argument 'b'"):
            await pool.run(divide, 1, b=threading.Lock())
        assert pool.state.tasks_submitted == before


async def test_unpicklable_result_is_a_clear_error():
    async with sky.Pool(nodes=1) as pool:
        with pytest.raises(sky.SerializationError, match=r"result of allocate_lock\(\) of type lock cannot be pickled"):
            await pool.run(threading.Lock)


def test_instance_info_off_a_node_raises(monkeypatch):
    monkeypatch.delenv("COMPUTE_POOL", raising=False)
    with pytest.raises(sky.NotOnNodeError, match="only works inside a function running on a skyhive node"):
        sky.instance_info()


async def test_many_pools_at_once_do_not_interfere():
    results = {}

    async def one(k):
        async with sky.Pool(nodes=2, name=f"multi-{k}") as pool:
            b = await pool.broadcast(whoami, k)
            m = await pool.map(node_of, range(50))
            results[k] = (pool.id, [r["tag"] for r in b], [sq for _, sq in m])

    async with anyio.create_task_group() as tg:
        for k in range(3):
            tg.start_soon(one, k)
    assert sorted(r[0] for r in results.values()) == ["multi-0", "multi-1", "multi-2"]
    for k, (_, tags, squares) in results.items():
        assert tags == [k, k] and squares == [x * x for x in range(50)]


async def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="nodes=0"):
        sky.Pool(nodes=0)
    with pytest.raises(TypeError, match="unexpected keyword arguments: bogus"):
        sky.Pool(bogus=1)
    with pytest.raises(ValueError, match="output"):
        sky.Pool(output="some")
    with pytest.raises(sky.PoolClosed):
        await sky.Pool().run(abs, 1)
    async with sky.Pool(nodes=1) as pool:
        with pytest.raises(ValueError, match="chunksize"):
            await pool.map(abs, [1], chunksize=0)
        with pytest.raises(TypeError, match="expected a function"):
            await pool.run(3)
    with pytest.raises(sky.PoolClosed):
        await pool.run(abs, 1)


async def test_large_numpy_argument_and_result_round_trip():
    np = pytest.importorskip("numpy")
    arr = np.arange(3_000_000, dtype=np.float64)  # 24 MB, out of band, in chunks
    async with sky.Pool(nodes=2) as pool:
        sums = await pool.broadcast(lambda a: float(a.sum()), arr)
        back = await pool.run(lambda a: a * 2, arr)
    assert sums == [float(arr.sum())] * 2
    assert np.array_equal(back, arr * 2)


def log_the_secret():
    import logging

    logging.getLogger("user.code").warning("the key is %s", os.environ["API_KEY"])
    print("printed:", os.environ["API_KEY"])
    return len(os.environ["API_KEY"])


async def test_secrets_are_redacted_from_worker_logs_output_and_events(caplog):
    secret = "s3cr3t-value-123"
    caplog.set_level("WARNING")
    async with sky.Pool(nodes=1, image=sky.Image(secrets={"API_KEY": secret}), output=None) as pool:
        records = []
        stream = pool.output()
        assert await pool.run(log_the_secret) == len(secret)  # the worker has the real value
        with anyio.fail_after(10):
            async for rec in stream:
                records.append(rec.text)
                if "printed" in "".join(records):
                    break
        path = pool.log_path
        await anyio.sleep(0.3)  # the worker's log line travels on its diagnostics pipe
    assert secret not in "".join(records) and "printed: ***" in "".join(records)
    assert secret not in caplog.text and "the key is ***" in caplog.text
    assert secret not in open(path).read()


async def test_small_calls_interleave_with_a_large_argument_and_every_frame_stays_whole():
    np = pytest.importorskip("numpy")
    arr = np.arange(8_000_000, dtype=np.int64)  # 64 MB: written straight to the pipes, chunk by chunk
    async with sky.Pool(nodes=2) as pool:
        small: list[int] = []

        async def chatter():
            for i in range(200):
                small.append(await pool.run(abs, -i))

        async with anyio.create_task_group() as tg:
            tg.start_soon(chatter)
            sums = await pool.broadcast(lambda a: int(a.sum()), arr)
            again = await pool.broadcast(lambda a: int(a[-1]), arr)
        assert sums == [int(arr.sum())] * 2 and again == [int(arr[-1])] * 2
        assert small == list(range(200))


def fail_on_node_1_else_wait(seconds):
    import time as _time

    if sky.instance_info().node == 1:
        raise KeyError("node 1 broke")
    _time.sleep(seconds)
    return "slept"


async def test_broadcast_raises_the_first_failure_at_once_and_cancels_the_others():
    async with sky.Pool(nodes=3) as pool:
        with anyio.fail_after(20):  # node 0 and 2 would sleep 60 s
            with pytest.raises(KeyError, match="node 1 broke"):
                await pool.broadcast(fail_on_node_1_else_wait, 60)
        # the others were cancelled on their nodes: the pool is free again at once
        with anyio.fail_after(20):
            assert await pool.broadcast(abs, -2) == [2, 2, 2]
        assert pool.state.tasks_cancelled == 2


async def test_a_call_whose_buffers_are_all_cached_may_answer_before_its_buffers_would_be_sent():
    # the worker holds the array (content cache) and answers at once: the Result can come back before
    # the client's buffer-sending step for that call runs; it must send nothing then (not chunks for a
    # task the worker saw announce none, which broke the connection 1 run in ~20 before the fix)
    np = pytest.importorskip("numpy")
    arr = np.arange(8_000_000, dtype=np.int64)  # 64 MB: shared memory first, then the content cache
    async with sky.Pool(nodes=2) as pool:
        pids = await pool.broadcast(os.getpid)

        async def chatter() -> None:  # other traffic interleaves, as in a real program
            for i in range(300):
                assert await pool.run(abs, -i) == i

        async with anyio.create_task_group() as tg:
            tg.start_soon(chatter)
            assert await pool.broadcast(lambda a: int(a[0]), arr) == [0, 0]
            for _ in range(40):
                assert await pool.broadcast(lambda a: int(a[-1]), arr) == [7_999_999] * 2
        assert await pool.broadcast(os.getpid) == pids  # no worker was lost to a protocol error


def fail_everywhere():
    raise ValueError(f"broke on node {sky.instance_info().node}")


async def test_a_broadcast_where_every_node_fails_names_every_node(monkeypatch):
    # the failures come back microseconds apart; a generous settle window keeps the test free of timing
    # (the gather stops waiting as soon as every node has answered)
    from skyhive.runtime.actors import gather

    monkeypatch.setattr(gather, "SETTLE_QUIET", 60.0)
    monkeypatch.setattr(gather, "SETTLE_MAX", 60.0)
    async with sky.Pool(nodes=3) as pool:
        with anyio.fail_after(50):
            with pytest.raises(ValueError) as caught:  # the first error's type: `except ValueError` still works
                await pool.broadcast(fail_everywhere)
        err = caught.value
        first = err.node
        others = sorted({0, 1, 2} - {first})
        assert str(err) == f"broke on node {first}"
        assert err.nodes == (0, 1, 2)
        assert sorted(err.node_errors) == others
        assert all(isinstance(e, ValueError) and str(e) == f"broke on node {n}" for n, e in err.node_errors.items())
        note = next(n for n in err.__notes__ if n.startswith("(also failed"))
        assert note.startswith(f"(also failed on nodes {others[0]}, {others[1]}: ")
        for n in others:
            assert f"node {n}: ValueError: broke on node {n}" in note
        assert await pool.broadcast(abs, -1) == [1, 1, 1]  # the pool is fine afterwards
