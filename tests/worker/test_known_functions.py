"""A function's bytes go to a worker until a task that carried them ran there; after that its tasks go
without them — for a large function (a `functools.partial` over a big array, which travels as buffer 0)
that means no buffer at all, so each `map` batch is a small call. A task that brought the function and
did not run it (its load failed, it was cancelled before it started) does not count: the next task
carries the function again, never a "worker does not hold the function" error. And a worker that lost
a function anyway (its cache of functions cleared where the client could not tell) fails one call:
any failed task makes the next one carry its function again.
"""

from __future__ import annotations

import asyncio
import functools
import gc

import pytest

import skyhive as sky
from skyhive.runtime.actors.prepared import Prepared

np = pytest.importorskip("numpy", reason="numpy (the dev extra) makes the large function")

MiB = 1 << 20
QUIET = {"heartbeat_interval": 60.0, "heartbeat_timeout": 120.0}


def total(arr, x):
    return int(arr[0]) + x


def store_hits() -> int:
    """(on the worker) How often its content cache resolved a buffer sent by reference."""
    from skyhive.runtime.worker.daemon import WorkerDaemon
    [worker] = [o for o in gc.get_objects() if isinstance(o, WorkerDaemon)]
    store = worker.conn.store
    return store.hits if store is not None else -1


def channels_of(pool):
    return [c for n in pool._runtime.nodes for c in n.usable_channels()]


@pytest.fixture(params=["pipe", "shared memory"])
def local_path(request, monkeypatch):
    from skyhive.runtime.kinds.local.transport import LocalTransport
    if request.param == "pipe":
        monkeypatch.setattr(LocalTransport, "share_memory", False)
    return request.param


@pytest.mark.anyio
async def test_map_batches_of_a_large_function_the_worker_holds_carry_no_buffer(local_path):
    arr = np.full(4 * MiB, 7, dtype=np.uint8)
    fn = functools.partial(total, arr)
    async with sky.Pool(nodes=1, **QUIET) as pool:
        [channel] = channels_of(pool)
        assert await pool.map(fn, range(40), chunksize=10) == [7 + i for i in range(40)]
        # the first batch brought the function; the other lane's batch, sent before its result, too
        # (by reference); the rest referred to nothing
        first = await pool.run(store_hits)
        assert first <= 1
        assert not channel.carries_buffers(Prepared.for_map(fn))
        assert await pool.map(fn, range(40), chunksize=10) == [7 + i for i in range(40)]
        assert await pool.run(store_hits) == first
        # a call that also has a large argument still sends its buffers (the function's by reference)
        other = np.full(2 * MiB, 1, dtype=np.uint8)
        assert await pool.run(lambda a, b: int(a[0]) + int(b[0]), arr, other) == 8


class _FailsToLoad:
    """Pickles fine here; unpickling it (on the worker) raises."""

    def __reduce__(self):
        return (_refuse, ())


def _refuse():
    raise LookupError("this function cannot be loaded here")


def uses_it(marker, x=0):
    return x


@pytest.mark.anyio
@pytest.mark.parametrize("size", ["small", "large"])
async def test_a_function_that_fails_to_load_fails_the_same_way_every_time(size):
    extra = np.zeros(MiB, dtype=np.uint8) if size == "large" else None
    fn = functools.partial(uses_it, (_FailsToLoad(), extra))
    async with sky.Pool(nodes=1, **QUIET) as pool:
        for _ in range(3):
            with pytest.raises(LookupError, match="cannot be loaded here"):
                await pool.run(fn)
        [channel] = channels_of(pool)
        assert not channel.known_fns


def sleep_then(seconds: float) -> str:
    import time
    time.sleep(seconds)
    return "slept"


@pytest.mark.anyio
@pytest.mark.parametrize("size", ["small", "large"])
async def test_a_function_whose_first_task_was_cancelled_before_it_started_still_runs(size):
    extra = np.ones(MiB, dtype=np.uint8) if size == "large" else None
    fn = functools.partial(uses_it, extra)
    async with sky.Pool(nodes=1, **QUIET) as pool:
        busy = asyncio.ensure_future(pool.run(sleep_then, 0.6))
        await asyncio.sleep(0.1)
        with pytest.raises(sky.TaskTimeout):
            await pool.run(fn, 1, timeout=0.05)  # queued behind `busy`: cancelled before it starts
        again = asyncio.ensure_future(pool.run(fn, 2))  # sent while that one is still queued
        assert await busy == "slept"
        assert await again == 2
        assert await pool.run(fn, 3) == 3


def forget_functions() -> int:
    """(on the worker) Drop every loaded function, as its cache does when full."""
    from skyhive.runtime.worker.daemon import WorkerDaemon
    [worker] = [o for o in gc.get_objects() if isinstance(o, WorkerDaemon)]
    n = len(worker.fns)
    worker.fns.clear()
    return n


@pytest.mark.anyio
async def test_a_worker_that_lost_a_small_function_asks_for_it_and_the_call_runs():
    fn = functools.partial(uses_it, None)
    async with sky.Pool(nodes=1, **QUIET) as pool:
        [channel] = channels_of(pool)
        assert await pool.run(fn, 1) == 1
        assert await pool.run(forget_functions) >= 1
        assert await pool.run(fn, 2) == 2  # sent without it; the worker asked (WantFunction), got it, ran
        assert fn_id_of(fn) in channel.known_fns
        assert await pool.run(fn, 3) == 3
        assert await pool.run(held_functions) == 1 + 1  # it holds it again (and held_functions itself)


@pytest.mark.anyio
async def test_a_worker_that_lost_a_large_function_fails_one_call_and_the_next_brings_it_again():
    fn = functools.partial(uses_it, np.ones(MiB, dtype=np.uint8))
    async with sky.Pool(nodes=1, **QUIET) as pool:
        assert await pool.run(fn, 1) == 1
        assert await pool.run(forget_functions) >= 1
        # sent without it; a large function cannot travel in a `Function` message: the worker is told
        # so, and the task fails saying what it lacks
        with pytest.raises(RuntimeError, match="does not hold the function"):
            await pool.run(fn, 2)
        assert await pool.run(fn, 3) == 3
        assert await pool.run(fn, 4) == 4


def held_functions() -> int:
    """(on the worker) How many functions it holds loaded."""
    from skyhive.runtime.worker.daemon import WorkerDaemon
    [worker] = [o for o in gc.get_objects() if isinstance(o, WorkerDaemon)]
    return len(worker.fns)


def holds(fn_id: bytes) -> bool:
    """(on the worker) Whether it holds the function `fn_id` loaded."""
    from skyhive.runtime.worker.daemon import WorkerDaemon
    [worker] = [o for o in gc.get_objects() if isinstance(o, WorkerDaemon)]
    return fn_id in worker.fns


@pytest.mark.anyio
async def test_past_the_workers_function_cache_limit_no_call_fails():
    """The worker drops its oldest loaded functions when FN_CACHE_LIMIT of them are loaded; it also loads
    the functions of tasks that failed, which the client does not count as held — so the client may
    send a task of a function it believes held after the worker cleared it. The worker asks for it."""
    from skyhive.runtime.onnode.setup import FN_CACHE_LIMIT

    kept = functools.partial(uses_it, None)
    async with sky.Pool(nodes=1, **QUIET) as pool:
        [channel] = channels_of(pool)
        assert await pool.run(kept, 1) == 1
        for i in range(FN_CACHE_LIMIT + 10):  # distinct functions, each loaded by the worker, each failing
            with pytest.raises(ValueError):
                await pool.run(functools.partial(raises, i))
        assert fn_id_of(kept) in channel.known_fns  # the client still counts it held: goes without it
        # the worker dropped its oldest functions meanwhile (held at most FN_CACHE_LIMIT), this one first
        assert await pool.run(held_functions) <= FN_CACHE_LIMIT
        assert not await pool.run(holds, fn_id_of(kept))
        assert await pool.run(kept, 2) == 2


@pytest.mark.anyio
async def test_past_the_function_cache_limit_a_large_function_goes_with_its_buffer_again(monkeypatch):
    from skyhive.runtime.actors import channel as channel_module
    monkeypatch.setattr(channel_module, "FN_CACHE_LIMIT", 3)  # (the worker's own limit stays 4096)
    fn = functools.partial(uses_it, np.ones(MiB, dtype=np.uint8))
    async with sky.Pool(nodes=1, **QUIET) as pool:
        [channel] = channels_of(pool)
        assert await pool.run(fn, 1) == 1
        assert not channel.carries_buffers(Prepared.for_map(fn))  # held: goes without its buffer
        for i in range(3):  # more distinct functions went (they ran, and raised: the client's own
            with pytest.raises(ValueError):  # record of what the worker holds did not fill up)
                await pool.run(functools.partial(raises, i))
        assert fn_id_of(fn) in channel.known_fns
        assert channel.carries_buffers(Prepared.for_map(fn))  # the worker may have cleared them all
        assert await pool.run(forget_functions) >= 1  # and it did
        assert await pool.run(fn, 2) == 2  # its buffer went by reference: loaded again from there


def raises(i):
    raise ValueError(f"no {i}")


def fn_id_of(fn):
    return Prepared.for_map(fn).fn_id


FACTOR = 2


def scaled(x):
    return x * FACTOR


@pytest.mark.anyio
async def test_a_call_again_with_the_same_small_arguments_reuses_its_prepared_call_and_no_other_does():
    """`Prepared.for_call` shares one object between calls of a function whose arguments pickle to
    the same small bytes (nothing in it changes once made); other arguments, a buffer, a rebound
    global or a changed function each get their own — and every call still gives its own result."""
    from skyhive.runtime.actors.prepared import REUSE_MAX

    global FACTOR
    same = Prepared.for_call(scaled, (3,), {})
    assert Prepared.for_call(scaled, (3,), {}) is same
    assert Prepared.for_call(scaled, (), {"x": 3}) is not same  # other bytes, though the same call
    other = Prepared.for_call(scaled, (4,), {})
    assert other is not same and other.args != same.args
    large = "y" * (REUSE_MAX + 1)  # kept no more: the next one with it is made anew
    assert Prepared.for_call(scaled, (large,), {}) is not Prepared.for_call(scaled, (large,), {})
    array = np.zeros(1 << 17)  # an out-of-band buffer: never shared
    with_buffer = Prepared.for_call(scaled, (array,), {})
    assert with_buffer.buffers and Prepared.for_call(scaled, (array,), {}) is not with_buffer
    async with sky.Pool(nodes=1, **QUIET) as pool:
        assert [await pool.run(scaled, 3), await pool.run(scaled, 3), await pool.run(scaled, 4)] == [6, 6, 8]
        try:
            FACTOR = 5  # a rebound global: the function is pickled again, with a Prepared of its own
            assert Prepared.for_call(scaled, (3,), {}) is not same
            assert [await pool.run(scaled, 3), await pool.run(scaled, 3)] == [15, 15]
        finally:
            FACTOR = 2
        assert await pool.run(scaled, 3) == 6
