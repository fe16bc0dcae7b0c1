"""A worker bounds the functions it keeps loaded by their pickled bytes (FN_CACHE_BYTES), not only by
their count: a loop that makes a distinct large function each call (a closure or `functools.partial`
over a different big array) does not make the worker's memory grow without bound. And whatever the
worker dropped, every call still runs: the client counts the bytes of the functions it sent, and past
the bound a large function's bytes go with each of its tasks again.
"""

from __future__ import annotations

import functools
import gc

import pytest

import skyhive as sky
from skyhive.runtime.actors.prepared import Prepared
from skyhive.runtime.onnode.setup import FN_CACHE_BYTES, FN_CACHE_LIMIT
from skyhive.runtime.worker.tasks import TaskCore

MiB = 1 << 20
np = pytest.importorskip("numpy", reason="numpy (the dev extra) makes the large functions")
QUIET = {"heartbeat_interval": 60.0, "heartbeat_timeout": 120.0}


def first_plus(arr, x=0):
    return int(arr[0]) + x


def rss_mib() -> float:
    """(on the worker) Its resident set, MiB (VmRSS of /proc/self/status)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def held() -> tuple[int, int]:
    """(on the worker) How many functions it holds loaded, and the sum of their pickled sizes."""
    from skyhive.runtime.worker.daemon import WorkerDaemon
    [worker] = [o for o in gc.get_objects() if isinstance(o, WorkerDaemon)]
    return len(worker.fns), worker.fn_bytes_held


def big(value: int, size: int = 16 * MiB):
    arr = np.random.default_rng(value).integers(0, 255, size, dtype=np.uint8)
    arr[0] = value
    return arr


@pytest.mark.anyio
async def test_distinct_large_functions_do_not_grow_the_workers_memory_without_bound():
    # the content cache off (a real setting): only the loaded functions hold the arrays
    async with sky.Pool(nodes=1, cache_bytes=0, **QUIET) as pool:
        base = await pool.run(rss_mib)
        total = 0
        for i in range(48):  # 48 x 16 MiB = 768 MiB of distinct functions, each one call
            arr = big(i % 200)
            total += arr.nbytes
            assert await pool.run(functools.partial(first_plus, arr), 1) == i % 200 + 1
            del arr
        grown = await pool.run(rss_mib) - base
        count, held_bytes = await pool.run(held)
    assert total > 2 * FN_CACHE_BYTES
    assert held_bytes <= FN_CACHE_BYTES
    # the worker keeps at most FN_CACHE_BYTES of functions (and the one it is loading), not all 768 MiB
    assert grown < FN_CACHE_BYTES / MiB + 128, f"worker RSS grew {grown:.0f} MiB over {count} functions held"


@pytest.mark.anyio
async def test_every_call_runs_past_the_byte_bound_with_large_and_small_functions_mixed():
    kept_small = functools.partial(first_plus, [5])
    kept_large = functools.partial(first_plus, big(9, 4 * MiB))
    async with sky.Pool(nodes=1, **QUIET) as pool:
        [channel] = [c for n in pool._runtime.nodes for c in n.usable_channels()]
        assert await pool.run(kept_large, 1) == 10
        assert await pool.run(kept_small, 1) == 6
        assert not channel.carries_buffers(Prepared.for_map(kept_large))  # held: goes without its buffer
        sent = 4 * MiB
        i = 0
        while sent <= 2 * FN_CACHE_BYTES:
            arr = big(i % 200)
            sent += arr.nbytes
            assert await pool.run(functools.partial(first_plus, arr), 2) == i % 200 + 2
            assert await pool.run(functools.partial(first_plus, [i]), 3) == i + 3  # distinct small ones
            assert await pool.run(kept_small, i) == 5 + i
            assert await pool.run(kept_large, i) == 9 + i
            assert await pool.map(kept_large, range(4), chunksize=1) == [9, 10, 11, 12]
            i += 1
        count, held_bytes = await pool.run(held)
        assert held_bytes <= FN_CACHE_BYTES
        # past the bound the worker may have dropped it: its bytes go (by reference) with each task
        assert channel.carries_buffers(Prepared.for_map(kept_large))
        assert await pool.run(kept_large, 100) == 109


class _Frames(TaskCore):
    """A `TaskCore` whose frames go to a list (what a worker would write to its client): enough to
    drive its function cache directly, with sizes as numbers rather than pickles of that size."""

    _streams = ()

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[object] = []

    def send(self, msg):
        self.sent.append(msg)

    def send_value(self, task_id, value):
        self.sent.append((task_id, value))

    def send_result(self, msg, buffers):
        self.sent.append(msg)


def test_the_worker_drops_its_oldest_functions_to_stay_under_the_byte_bound():
    core = _Frames()
    mib = 1 << 20
    core._hold(b"a", len, 100 * mib)
    core._hold(b"b", len, 100 * mib)
    core._hold(b"small", len, 1000)
    assert core.fn_bytes_held == 200 * mib + 1000
    core._hold(b"c", len, 100 * mib)  # would pass 256 MiB: "a", the oldest, goes
    assert list(core.fns) == [b"b", b"small", b"c"]
    assert core.fn_bytes_held == 200 * mib + 1000 <= FN_CACHE_BYTES
    core._hold(b"huge", len, FN_CACHE_BYTES + 1)  # larger than the bound alone: held, alone
    assert list(core.fns) == [b"huge"] and core.fn_bytes_held == FN_CACHE_BYTES + 1
    core._hold(b"d", len, 10)
    assert list(core.fns) == [b"d"] and core.fn_bytes_held == 10
    core.forget_functions()
    assert core.fns == {} and core.fn_bytes_held == 0


def test_the_worker_drops_its_oldest_function_at_the_count_bound():
    core = _Frames()
    for i in range(FN_CACHE_LIMIT + 3):
        core._hold(i.to_bytes(4, "big"), len, 1)
    assert len(core.fns) == FN_CACHE_LIMIT and core.fn_bytes_held == FN_CACHE_LIMIT
    assert next(iter(core.fns)) == (3).to_bytes(4, "big")
