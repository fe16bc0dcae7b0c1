"""The raw floor: what a hand-written asyncio pipe transport costs, with no framework at all.

`FloorPool(n)` starts n bare worker subprocesses (`bench/_floor_worker.py`) and talks to each over
its stdin/stdout pipes (asyncio subprocess pipes, the same kind of pipe skyhive's Local provider
uses). Exactly what it does:

- every request is one frame: 4-byte big-endian length + msgpack
  ``[req_id, fn_payload, args_payload, n_buffers, batch]``: fn_payload is ``cloudpickle.dumps(fn)``
  (by value, as a script's functions travel), made once per function object and cached on both
  sides (the worker keys its unpickled functions by those bytes; pickling a small function costs
  ~30 us, more than the rest of a call); args_payload is
  ``cloudpickle.dumps((args, kwargs), protocol=5, buffer_callback=...)``, made per call. Any
  out-of-band buffers (the numpy array of arg100m) follow as raw frames of their own, written
  straight from the array's memory in 1 MiB slices with a drain after each (no join, no copy
  into one frame; handing asyncio a 100 MiB buffer in one write is ~5x slower here);
- the write end of each pipe is raised to 1 MiB with F_SETPIPE_SZ (Linux, best effort);
- one reader task per worker reads reply frames and resolves a future per request id;
- `run` sends to the worker with the fewest requests in flight (ties: the first worker);
- `broadcast` pickles once and writes the same frames to every worker concurrently, then gathers;
- `map` sends items one by one, one request (one pickled call, one write) per item, keeping at
  most 64 requests in flight over all workers, each to the least busy worker; results are put
  back in input order. No batching of items into one request.
- `map_batched` is the same map with skyhive's batching scheme, as a floor for it: chunks of
  ``min(1000, ceil(len(items) / (4 * workers)))`` items, one request per chunk answered with
  ``[fn(x) for x in chunk]``, two chunks in flight per worker (each to the least busy worker).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable

import cloudpickle
import msgpack

WORKER = Path(__file__).with_name("_floor_worker.py")
WINDOW = 64
CHUNK = 1 << 20
F_SETPIPE_SZ = 1031
_head = struct.Struct(">I")


class FloorError(RuntimeError):
    pass


_fn_cache: dict[Any, bytes] = {}


def _pickle_call(fn: Any, args: tuple, kwargs: dict) -> tuple[bytes, bytes, list]:
    fn_payload = _fn_cache.get(fn)
    if fn_payload is None:
        fn_payload = _fn_cache[fn] = cloudpickle.dumps(fn)
    buffers: list = []
    payload = cloudpickle.dumps((args, kwargs), protocol=5, buffer_callback=buffers.append)
    return fn_payload, payload, [b.raw() for b in buffers]


class _Worker:
    def __init__(self, index: int, proc: asyncio.subprocess.Process) -> None:
        self.index = index
        self.proc = proc
        self.pending: dict[int, asyncio.Future] = {}
        self.reader = asyncio.ensure_future(self._read_loop())
        try:
            fd = proc.stdin.get_extra_info("pipe").fileno()
            import fcntl

            fcntl.fcntl(fd, F_SETPIPE_SZ, CHUNK)
        except Exception:  # not Linux, or not allowed: keep the default pipe size
            pass

    async def _read_loop(self) -> None:
        out = self.proc.stdout
        try:
            while True:
                (n,) = _head.unpack(await out.readexactly(4))
                req_id, ok, payload = msgpack.unpackb(await out.readexactly(n))
                fut = self.pending.pop(req_id, None)
                if fut is None or fut.done():
                    continue
                if ok:
                    fut.set_result(cloudpickle.loads(payload))
                else:
                    fut.set_exception(cloudpickle.loads(payload))
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            err = FloorError(f"floor worker {self.index} closed its pipe ({exc!r})")
        except Exception as exc:  # noqa: BLE001
            err = FloorError(f"floor worker {self.index}: bad reply ({exc!r})")
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(err)
        self.pending.clear()

    async def send(self, req_id: int, call: tuple[bytes, bytes, list],
                   batch: bool = False) -> asyncio.Future:
        fn_payload, payload, buffers = call
        fut = asyncio.get_running_loop().create_future()
        self.pending[req_id] = fut
        w = self.proc.stdin
        body = msgpack.packb([req_id, fn_payload, payload, len(buffers), batch])
        w.write(_head.pack(len(body)) + body)
        for buf in buffers:
            w.write(_head.pack(buf.nbytes))
            for off in range(0, buf.nbytes, CHUNK):
                w.write(buf[off:off + CHUNK])
                await w.drain()
        await w.drain()
        return fut


class FloorPool:
    """`async with FloorPool(2) as pool:` then `run`, `broadcast`, `map` as in skyhive."""

    def __init__(self, nodes: int = 2, window: int = WINDOW) -> None:
        self.nodes = nodes
        self.window = window
        self.workers: list[_Worker] = []
        self._ids = itertools.count()

    async def __aenter__(self) -> "FloorPool":
        procs = await asyncio.gather(*(
            asyncio.create_subprocess_exec(sys.executable, str(WORKER), stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE)
            for _ in range(self.nodes)))
        self.workers = [_Worker(i, p) for i, p in enumerate(procs)]
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self, timeout: float = 5.0) -> None:
        for w in self.workers:
            try:
                w.proc.stdin.close()
            except Exception:
                pass
        for w in self.workers:
            try:
                await asyncio.wait_for(w.proc.wait(), timeout)
            except (asyncio.TimeoutError, ProcessLookupError):
                try:
                    w.proc.kill()
                except ProcessLookupError:
                    pass
                await w.proc.wait()
            w.reader.cancel()
        self.workers = []

    def _least_busy(self) -> _Worker:
        # ties go to the first worker: an idle pool keeps one warm worker busy (43 us vs 58 us a
        # round trip here, against round robin, which keeps waking a colder process)
        return min(self.workers, key=lambda w: len(w.pending))

    async def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        call = _pickle_call(fn, args, kwargs)
        return await (await self._least_busy().send(next(self._ids), call))

    async def broadcast(self, fn: Any, *args: Any, **kwargs: Any) -> list:
        call = _pickle_call(fn, args, kwargs)
        futs = await asyncio.gather(*(w.send(next(self._ids), call) for w in self.workers))
        return list(await asyncio.gather(*futs))

    async def map(self, fn: Any, items: Iterable) -> list:
        sem = asyncio.Semaphore(self.window)
        futs = []
        for x in items:
            await sem.acquire()
            fut = await self._least_busy().send(next(self._ids), _pickle_call(fn, (x,), {}))
            fut.add_done_callback(lambda _f: sem.release())
            futs.append(fut)
        return list(await asyncio.gather(*futs))

    async def map_batched(self, fn: Any, items: Iterable) -> list:
        items = list(items)
        size = max(1, min(1000, math.ceil(len(items) / (4 * len(self.workers)))))
        chunks = iter(range(0, len(items), size))
        results: list = [None] * len(items)

        async def lane() -> None:
            for start in chunks:
                call = _pickle_call(fn, (items[start:start + size],), {})
                fut = await self._least_busy().send(next(self._ids), call, batch=True)
                results[start:start + size] = await fut

        await asyncio.gather(*(lane() for _ in range(2 * len(self.workers))))
        return results


async def warm(params: Any, record: Any, log: Any) -> None:
    from bench.common import AGAIN, measure_map, measure_warm

    async with FloorPool(2) as pool:
        await measure_warm(pool, params, record, log, skip=AGAIN)  # no cache: the same as a first send
        record("map10k_batched", await measure_map(pool.map_batched, params))


async def cold() -> dict:
    from bench.common import nop

    t0 = time.perf_counter()
    async with FloorPool(2) as pool:
        r = await pool.run(nop)
        t1 = time.perf_counter()
    t2 = time.perf_counter()
    assert r == 1, r
    return {"cold_s": t1 - t0, "shutdown_s": t2 - t1}


if __name__ == "__main__":  # quick manual check: python -m bench.floor
    from bench.common import inc, nop

    async def _main() -> None:
        async with FloorPool(2) as pool:
            print(await pool.run(nop), await pool.broadcast(nop), (await pool.map(inc, range(5))))

    asyncio.run(_main())
    print("pid", os.getpid(), "ok")
