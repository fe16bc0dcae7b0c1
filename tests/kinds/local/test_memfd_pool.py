"""The client's pool of reusable memfds (`shm.MemfdPool`) for large arguments to Local workers.

A file is refilled only when no worker holds it (their shared `flock`, taken by `shm.hold`), it is
resized and overwritten whole (nothing of an earlier buffer can be read from it), the pool is bounded,
and it leaks no descriptor.
"""

from __future__ import annotations

import gc
import os
import sys

import pytest

import skyhive as sky
from skyhive.runtime.common.shm import MemfdPool, hold, map_file

np = pytest.importorskip("numpy")
MiB = 1 << 20

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="memfd and /proc/self/fd are Linux's")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def whole_file(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, size + 4096, 0)  # asks for more than there is: the file ends where it says


def passed_to_a_worker(fd: int, size: int):
    """What a worker does with a memfd passed to it: its own descriptor under its shared lock (the
    descriptor passed with SCM_RIGHTS shares the sender's open file, as a dup does), mapped; the
    mapping alone holds the lock then."""
    held = hold(os.dup(fd))
    try:
        return map_file(held, size)
    finally:
        os.close(held)


def test_a_file_nobody_holds_is_refilled_resized_and_overwritten_whole():
    pool = MemfdPool(64 * MiB)
    try:
        first = pool.fill(b"\xaa" * (3 * MiB))
        pool.release(first, reusable=True)
        second = pool.fill(b"\x55" * MiB + b"tail")
        assert second == first and pool.reused == 1 and pool.created == 1
        assert os.fstat(second).st_size == MiB + 4
        assert whole_file(second) == b"\x55" * MiB + b"tail"  # nothing of the 3 MiB before
        pool.release(second, reusable=True)
        third = pool.fill(b"\x11" * (2 * MiB))  # larger: grown, every byte written again
        assert third == first and whole_file(third) == b"\x11" * (2 * MiB)
    finally:
        pool.close()


def test_a_file_a_worker_still_holds_is_never_refilled():
    pool = MemfdPool(64 * MiB)
    try:
        fd = pool.fill(b"A" * MiB)
        mapping = passed_to_a_worker(fd, MiB)  # a task's argument, or the worker's content cache
        pool.release(fd, reusable=True)
        other = pool.fill(b"B" * MiB)
        assert other != fd and pool.created == 2 and pool.reused == 0
        assert mapping[:] == b"A" * MiB  # what the worker holds is still what was sent for it
        pool.release(other, reusable=True)
        mapping.close()  # the worker let go: now it may be refilled
        again = pool.fill(b"C" * MiB)
        assert again in (fd, other) and pool.reused == 1
    finally:
        pool.close()


def test_a_call_cut_short_closes_its_file():
    pool = MemfdPool(64 * MiB)
    try:
        fd = pool.fill(b"x" * MiB)
        pool.release(fd, reusable=False)  # a worker might still be about to take it
        with pytest.raises(OSError):
            os.fstat(fd)
        assert pool.statistics()["free"] == 0
        with pytest.raises(ValueError, match="not one of this pool's busy files"):
            pool.release(fd, reusable=True)
    finally:
        pool.close()


def test_the_pool_is_bounded_in_bytes_and_files():
    pool = MemfdPool(2 * MiB + 1, max_files=8)
    try:
        fds = [pool.fill(b"z" * MiB) for _ in range(3)]
        for fd in fds:
            pool.release(fd, reusable=True)
        assert pool.bytes <= 2 * MiB + 1 and pool.statistics()["free"] == 2
    finally:
        pool.close()
    pool = MemfdPool(64 * MiB, max_files=2)
    try:
        fds = [pool.fill(b"z" * 1024) for _ in range(4)]
        for fd in fds:
            pool.release(fd, reusable=True)
        assert pool.statistics()["free"] == 2
    finally:
        pool.close()


def test_no_descriptor_is_leaked_and_close_closes_everything():
    gc.collect()  # an earlier test's garbage closing its descriptor meanwhile is not ours (test_retries left some)
    before = open_fds()
    pool = MemfdPool(64 * MiB)
    held = []
    for i in range(20):
        fd = pool.fill(bytes([i]) * (MiB // 4))
        if i % 3 == 0:
            held.append(passed_to_a_worker(fd, MiB // 4))
        pool.release(fd, reusable=i % 5 != 0)
    busy = pool.fill(b"still in use")
    assert open_fds() > before
    pool.close()
    pool.release(busy, reusable=True)  # a call ending after the pool closed: nothing to do
    for m in held:
        m.close()
    gc.collect()
    assert open_fds() == before
    with pytest.raises(RuntimeError, match="closed"):
        pool.fill(b"late")


def checksum(arr) -> int:
    return int(arr.sum())


def keep_and_checksum(arr) -> int:
    """Keeps its argument on the worker after the task (the worker then still maps that file)."""
    import sys
    sys.skyhive_test_kept = arr
    return int(arr.sum())


def kept_checksum() -> int:
    import sys
    return int(sys.skyhive_test_kept.sum())


@pytest.mark.anyio
async def test_local_pool_reuses_files_only_when_no_worker_holds_them():
    before = open_fds()
    # cache off, so that only a task keeping its argument holds a file on a worker
    async with sky.Pool(nodes=1, cache_bytes=0) as pool:
        memfds = pool._runtime.memfds
        arrays = [np.full(2 * MiB, i, dtype=np.uint8) for i in range(1, 5)]
        assert await pool.run(checksum, arrays[0]) == 2 * MiB * 1
        assert await pool.run(checksum, arrays[1]) == 2 * MiB * 2
        assert memfds.reused == 1 and memfds.created == 1  # the worker let go: the file was refilled
        assert await pool.run(keep_and_checksum, arrays[2]) == 2 * MiB * 3  # refilled again, then kept
        created = memfds.created
        assert await pool.run(checksum, arrays[3]) == 2 * MiB * 4
        assert memfds.created == created + 1  # the kept file was not touched: a new one
        assert await pool.run(kept_checksum) == 2 * MiB * 3  # still exactly what that task was sent
    gc.collect()
    assert open_fds() == before


@pytest.mark.anyio
async def test_a_pool_without_reuse_makes_a_fresh_file_each_call():
    async with sky.Pool(nodes=1, cache_bytes=0, shm_pool_bytes=0) as pool:
        assert pool._runtime.memfds is None
        for i in range(3):
            assert await pool.run(checksum, np.full(MiB, i, dtype=np.uint8)) == MiB * i
