"""The peers, as a user would write them, behind skyhive's run/broadcast/map names.

Ray (local, ``ray.init(num_cpus=2)``; each function wrapped once with ``ray.remote``):
  run        ``ray.get(f.remote())``
  broadcast  ``ray.get([f.remote(*a), f.remote(*a)])`` - two tasks; Ray cannot pin a task to a
             worker process, so the two may or may not land on different workers
  map        ``ray.get([f.remote(x) for x in items])`` - 10,000 tasks submitted, then one get
  arg100m    ``ray.get([g.remote(arr), g.remote(arr)])`` - the array passed directly to both
             (Ray puts each large argument in its object store; no ray.put by hand); arg1g and
             arg_again (the same array again) alike
  map of a functools.partial(f, arr): ``ref = ray.put(arr)`` once per map, then
             ``ray.get([f.remote(ref, x) for x in items])`` - as Ray's docs advise for a shared
             large argument (passing the partial itself would put the array once per task)
  cold       ``ray.init(num_cpus=2)`` -> first ``ray.get(f.remote())``, in a fresh process

Dask (``LocalCluster(n_workers=2, threads_per_worker=1, processes=True)`` + ``Client``):
  run        ``client.submit(f, pure=False).result()``
  broadcast  ``client.gather([client.submit(f, *a, pure=False, workers=[w]) for w in workers])``
             - one task pinned to each of the two workers
  map        ``client.gather(client.map(f, items, pure=False))``
  arg100m    the broadcast above with the array as the argument (``client.submit(g, arr, ...)``
             on each worker): the same user code as ``pool.broadcast(g, arr)``. Dask's docs would
             have you ``scatter`` first; that variant is measured too and shown in the notes.
             arg1g, arg_again and map_shared are not run on Dask (machine time: 2 shared cores).
  cold       ``LocalCluster(...)`` + ``Client(cluster)`` -> first result, in a fresh process
"""

from __future__ import annotations

import functools
import time
import warnings
from typing import Any, Iterable

from bench.common import AGAIN, Params, measure_warm, nop

# ---------------------------------------------------------------------------------------- Ray


class RayPool:
    def __init__(self) -> None:
        import ray

        self.ray = ray
        self._remote: dict[Any, Any] = {}

    def start(self) -> "RayPool":
        self.ray.init(num_cpus=2)
        return self

    def close(self) -> None:
        self.ray.shutdown()

    def _r(self, fn: Any) -> Any:
        r = self._remote.get(fn)
        if r is None:
            r = self._remote[fn] = self.ray.remote(fn)
        return r

    async def run(self, fn: Any, *args: Any) -> Any:
        return self.ray.get(self._r(fn).remote(*args))

    async def broadcast(self, fn: Any, *args: Any) -> list:
        r = self._r(fn)
        return self.ray.get([r.remote(*args), r.remote(*args)])

    async def map(self, fn: Any, items: Iterable) -> list:
        if isinstance(fn, functools.partial):  # a shared large argument: in the object store once
            refs = [self.ray.put(a) for a in fn.args]
            r = self._r(fn.func)
            return self.ray.get([r.remote(*refs, x) for x in items])
        r = self._r(fn)
        return self.ray.get([r.remote(x) for x in items])


async def ray_warm(params: Params, record: Any, log: Any) -> None:
    pool = RayPool().start()
    try:
        await measure_warm(pool, params, record, log)
    finally:
        pool.close()


async def ray_cold() -> dict:
    import ray

    t0 = time.perf_counter()
    ray.init(num_cpus=2)
    f = ray.remote(nop)
    r = ray.get(f.remote())
    t1 = time.perf_counter()
    ray.shutdown()
    t2 = time.perf_counter()
    assert r == 1, r
    return {"cold_s": t1 - t0, "shutdown_s": t2 - t1}


# --------------------------------------------------------------------------------------- Dask


def _dask_quiet() -> None:
    import logging

    warnings.filterwarnings("ignore")  # "Large object of size 100 MiB detected in task graph"
    for name in ("distributed", "distributed.worker", "distributed.scheduler", "distributed.nanny"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _dask_cluster() -> tuple[Any, Any]:
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True)
    return cluster, Client(cluster)


class DaskPool:
    def __init__(self, client: Any) -> None:
        self.client = client
        self.workers = sorted(client.scheduler_info()["workers"])
        if len(self.workers) != 2:
            raise RuntimeError(f"expected 2 dask workers, got {len(self.workers)}")

    async def run(self, fn: Any, *args: Any) -> Any:
        return self.client.submit(fn, *args, pure=False).result()

    async def broadcast(self, fn: Any, *args: Any) -> list:
        c = self.client
        return c.gather([c.submit(fn, *args, pure=False, workers=[w]) for w in self.workers])

    async def map(self, fn: Any, items: Iterable) -> list:
        return self.client.gather(self.client.map(fn, list(items), pure=False))


async def dask_warm(params: Params, record: Any, log: Any) -> None:
    _dask_quiet()
    cluster, client = _dask_cluster()
    try:
        pool = DaskPool(client)
        await measure_warm(pool, params, record, log, skip=("arg1g", *AGAIN))
        log("  arg100m_scatter …")
        record("arg100m_scatter", _dask_scatter(client, pool.workers, params))
    finally:
        client.close()
        cluster.close()


def _dask_scatter(client: Any, workers: list, p: Params) -> dict:
    """The variant Dask's docs recommend for large data: scatter to both workers, then submit."""
    import numpy as np

    from bench.common import MIB, median, nbytes

    t_start = time.perf_counter()
    try:
        nb = p.arg_mib * MIB
        arr = np.ones(nb, dtype=np.uint8)

        def once() -> float:
            t0 = time.perf_counter()
            fut = client.scatter(arr, broadcast=True, hash=False)
            got = client.gather([client.submit(nbytes, fut, pure=False, workers=[w])
                                 for w in workers])
            t1 = time.perf_counter()
            assert got == [nb, nb], got
            del fut
            return t1 - t0

        once()
        ts = [once() for _ in range(p.arg_reps)]
        m = median(ts)
        res: dict = {"gb_per_s": 2 * nb / m / 1e9, "median_s": m, "n": len(ts), "all_s": ts}
    except Exception as exc:  # noqa: BLE001
        res = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    res["wall_s"] = time.perf_counter() - t_start
    return res


async def dask_cold() -> dict:
    _dask_quiet()
    t0 = time.perf_counter()
    cluster, client = _dask_cluster()
    r = client.submit(nop, pure=False).result()
    t1 = time.perf_counter()
    client.close()
    cluster.close()
    t2 = time.perf_counter()
    assert r == 1, r
    return {"cold_s": t1 - t0, "shutdown_s": t2 - t1}
