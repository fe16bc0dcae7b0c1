"""Large buffers to and from Local workers travel in shared memory (runtime/common/shm.py): memfds
passed over a socket pair beside the pipes, mapped copy-on-write by the receiver. Nothing is left
behind in /dev/shm or in open descriptors: after a call, a pool, or a SIGKILLed client.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from tests.procs import Lines

from skyhive.protocol import Connection, LocalProtocolError, RemoteProtocolError, Result, Role, Submit
from skyhive.protocol.codec import encode

np = pytest.importorskip("numpy", reason="numpy (the dev extra) makes the large arguments")

import skyhive as sky  # noqa: E402

MiB = 1 << 20


def ready_pair() -> tuple[Connection, Connection]:
    from tests.common.test_content_cache import pair
    client, worker, _ = pair()
    return client, worker


def test_shared_buffers_complete_without_chunks_and_are_left_for_the_caller():
    client, worker = ready_pair()
    msg = Submit(task_id=1, fn_id=b"f", fn=b"", args=b"a", buffer_sizes=(10 * MiB, 3), shared=(0,))
    data = client.send(msg) + b"".join(h + bytes(p) for h, p in client.send_buffers(1, [b"x" * 10, b"abc"], skip=(0,)))
    [got] = worker.receive_data(data)
    assert got.buffers[0] is None and bytes(got.buffers[1]) == b"abc"
    result = Result(task_id=1, ok=True, value=b"v", buffer_sizes=(5 * MiB,), shared=(0,))
    [back] = client.receive_data(worker.send(result))
    assert back.buffers == (None,)


@pytest.mark.parametrize("shared, cached, keys, what", [
    ((2,), (), b"", "not distinct buffers"),
    ((0, 0), (), b"", "not distinct buffers"),
    ((0,), (0,), b"\x01" * 16 + bytes(16), "both shared and by reference"),
])
def test_malformed_shared_fields_are_refused_on_both_sides(shared, cached, keys, what):
    client, worker = ready_pair()
    bad = Submit(task_id=1, fn_id=b"f", fn=b"", args=b"a", buffer_sizes=(MiB, 1), shared=shared, cached=cached,
                 buffer_keys=keys)
    with pytest.raises(LocalProtocolError, match=what):
        client.send(bad)
    with pytest.raises(RemoteProtocolError, match=what):
        worker.receive_data(encode(bad))


def mapped_from_memfd(arr):
    """Whether the task's argument is a mapping of a skyhive memfd (shared memory, not pipe bytes)."""
    import ctypes
    address = arr.__array_interface__["data"][0]
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= address < hi:
                return "memfd:skyhive" in line
    return False


def make_array(n):
    import numpy
    return numpy.arange(n, dtype=numpy.int64)


def skyhive_memfds(pid="self") -> int:
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += "memfd:skyhive" in os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass
    return n


def shm_names() -> set[str]:
    """The /dev/shm entries skyhive could have made (Python's `SharedMemory` names, `psm_*`, or its own):
    the suite's other test processes (pytest-xdist) make theirs (torch, joblib) meanwhile."""
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return {n for n in names if n.startswith("psm_") or "skyhive" in n}


@pytest.mark.anyio
async def test_arguments_and_results_travel_in_shared_memory_and_nothing_is_left():
    before, fds_before = shm_names(), skyhive_memfds()
    arr = np.arange(4 * MiB, dtype=np.int64)  # 32 MiB
    async with sky.Pool(nodes=2) as pool:
        assert await pool.broadcast(mapped_from_memfd, arr) == [True, True]
        channels = [c for n in pool._runtime.nodes for c in n.usable_channels()]
        received = sum(c.conn.bytes_received for c in channels)
        back = await pool.run(make_array, 4 * MiB)
        assert np.array_equal(back, arr)
        assert sum(c.conn.bytes_received for c in channels) - received < MiB  # not through the pipe
        back[:] = 0  # the result is the caller's to change
        kept = pool._runtime.memfds.statistics()
        assert (kept["free"], kept["busy"]) == (1, 0)  # the argument's memfd, kept for reuse
        # + the result's mapping (Python < 3.13 keeps a descriptor per mmap)
        assert skyhive_memfds() - fds_before <= 1 + kept["free"]
        del back
        await pool.run(len, "x")  # (the pool lets go of the last call's result with the next call)
        gc.collect()
        assert skyhive_memfds() == fds_before + kept["free"]  # the result's mapping went
    gc.collect()
    assert skyhive_memfds() == fds_before  # the pool's memfds are closed with it
    assert shm_names() == before


CLIENT = textwrap.dedent("""
    import os, sys, time, anyio, numpy as np
    import skyhive as sky

    def hold(arr):
        import time
        time.sleep(60)

    async def main():
        async with sky.Pool(nodes=1) as pool:
            pids = [c.pid for n in pool._runtime.nodes for c in n.usable_channels()]
            print(" ".join(map(str, pids)), flush=True)
            arr = np.ones(64 * 2**20, dtype=np.uint8)
            async with anyio.create_task_group() as tg:
                tg.start_soon(pool.run, hold, arr)
                await anyio.sleep(1.0)
                print("sent", flush=True)
                await anyio.sleep(60)

    anyio.run(main)
""")


def test_a_sigkilled_client_leaves_no_worker_and_nothing_in_dev_shm(tmp_path):
    before = shm_names()
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        out = Lines(proc.stdout)
        pids = [int(p) for p in out.wait_for(re.compile(r"^\d+( \d+)*$"), 120, "the workers' pids").split()]
        assert pids
        out.wait_for(lambda line: line.strip() == "sent", 120, "the argument sent")
        assert any(skyhive_memfds(pid) or _maps_memfd(pid) for pid in pids)  # the worker holds the argument
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 20
    while any(os.path.exists(f"/proc/{pid}") and _alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if _alive(pid)], "workers outlived their SIGKILLed client"
    assert shm_names() == before


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _maps_memfd(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "memfd:skyhive" in f.read()
    except OSError:
        return False
