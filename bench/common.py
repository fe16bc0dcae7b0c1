"""What every system runs: the user functions, the workload sizes, and the one measuring loop.

Every system is driven through the same three awaitables, which are skyhive's public API:
``await x.run(fn, *a)``, ``await x.broadcast(fn, *a)`` (list, one per worker) and
``await x.map(fn, items)`` (list, input order). The skyhive pool is used as is; the floor, Ray and
Dask are wrapped in small adapters with those methods (a blocking call inside ``async def`` costs
about a microsecond more than calling it directly, nothing next to a round trip).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import statistics
import time
from typing import Any, Callable

# --- the user functions -----------------------------------------------------------------------
# Compiled into a module name that is not importable, so cloudpickle (and Ray's copy of it) ships
# them by value, exactly like functions a user defines in a script's __main__. No worker needs the
# `bench` package on its path.
_USER_SRC = '''
def nop():
    return 1

def inc(x):
    return x + 1

def nbytes(a):
    return a.nbytes

def shared_inc(a, x):
    return x + 1
'''
_user_ns: dict[str, Any] = {"__name__": "bench_user_functions"}
exec(compile(_USER_SRC, "<bench user functions>", "exec"), _user_ns)
nop: Callable[[], int] = _user_ns["nop"]
inc: Callable[[int], int] = _user_ns["inc"]
nbytes: Callable[[Any], int] = _user_ns["nbytes"]
shared_inc: Callable[[Any, int], int] = _user_ns["shared_inc"]

MIB = 1024 * 1024
WORKLOADS = ("rtt", "broadcast2", "map10k", "cold", "arg100m", "arg1g", "arg_again", "map_shared")
#: the workloads about sending the same large data again (a content cache): not every system runs them
AGAIN = ("arg_again", "map_shared")


@dataclasses.dataclass(frozen=True)
class Params:
    rtt_warmup: int = 200
    rtt_n: int = 2000
    bcast_warmup: int = 50
    bcast_n: int = 500
    map_items: int = 10_000
    map_reps: int = 3
    map_min_s: float = 1.0
    arg_mib: int = 100
    arg_reps: int = 7
    arg1g_mib: int = 1024
    arg1g_reps: int = 3
    shared_items: int = 1000
    cold_runs: int = 5
    script_runs: int = 7  # the short script's whole life, fresh processes in turns with the floor's
    budget_s: float = 120.0  # per warm workload; a loop past it stops early and says so

    @classmethod
    def quick(cls) -> "Params":
        return cls(rtt_warmup=50, rtt_n=300, bcast_warmup=20, bcast_n=100, map_reps=1,
                   map_min_s=0.3, arg_reps=2, arg1g_reps=1, cold_runs=2, script_runs=2,
                   budget_s=30.0)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)]


def _check(what: str, got: Any, want: Any) -> None:
    if got != want:
        raise AssertionError(f"{what}: expected {want!r}, got {got!r}")


async def measure_map(map_fn: Callable, p: Params) -> dict:
    """`await map_fn(inc, range(map_items))`: tasks/s over the median of at least map_reps runs
    (more, up to 50, while they take less than map_min_s in all: a batched map is milliseconds)."""
    t_start = time.perf_counter()
    try:
        items = list(range(p.map_items))
        want = [x + 1 for x in items]
        _check("map(inc) warm-up", await map_fn(inc, items[:200]), want[:200])
        ts, deadline = [], time.perf_counter() + p.budget_s
        while len(ts) < p.map_reps or (len(ts) < 50 and sum(ts) < p.map_min_s):
            t0 = time.perf_counter()
            got = await map_fn(inc, items)
            t1 = time.perf_counter()
            _check("map(inc) result in input order", got == want, True)
            ts.append(t1 - t0)
            if t1 > deadline:
                break
        m = median(ts)
        res = {"tasks_per_s": p.map_items / m, "median_s": m, "items": p.map_items,
               "n": len(ts), "all_s": ts, "truncated": len(ts) < p.map_reps}
    except Exception as exc:  # noqa: BLE001 - reported in the table
        res = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    res["wall_s"] = time.perf_counter() - t_start
    return res


async def measure_warm(pool: Any, p: Params, record: Callable[[str, dict], None],
                       log: Callable[[str], None] = lambda s: None, skip: tuple[str, ...] = ()) -> None:
    """Run the warm workloads (but those in `skip`) against `pool`; `record(name, result)` is called
    after each one (a result is a dict of figures, or {"error": "..."}). One workload failing does not
    stop the others."""

    async def rtt() -> dict:
        for _ in range(p.rtt_warmup):
            _check("run(nop)", await pool.run(nop), 1)
        ts, deadline = [], time.perf_counter() + p.budget_s
        for _ in range(p.rtt_n):
            t0 = time.perf_counter()
            await pool.run(nop)
            t1 = time.perf_counter()
            ts.append(t1 - t0)
            if t1 > deadline:
                break
        return {"median_s": median(ts), "p90_s": p90(ts), "n": len(ts),
                "truncated": len(ts) < p.rtt_n}

    async def broadcast2() -> dict:
        for _ in range(p.bcast_warmup):
            _check("broadcast(nop)", await pool.broadcast(nop), [1, 1])
        ts, deadline = [], time.perf_counter() + p.budget_s
        for _ in range(p.bcast_n):
            t0 = time.perf_counter()
            await pool.broadcast(nop)
            t1 = time.perf_counter()
            ts.append(t1 - t0)
            if t1 > deadline:
                break
        return {"median_s": median(ts), "p90_s": p90(ts), "n": len(ts),
                "truncated": len(ts) < p.bcast_n}

    async def map10k() -> dict:
        return await measure_map(pool.map, p)

    async def arg_new(mib: int, reps: int) -> dict:
        """The array to both workers, its content different each time (a first send: no cache helps)."""
        import numpy as np

        nb = mib * MIB
        arr = np.ones(nb, dtype=np.uint8)  # pages touched: no first-touch cost inside the timing
        _check("broadcast(nbytes, arr) warm-up", await pool.broadcast(nbytes, arr), [nb, nb])
        ts, deadline = [], time.perf_counter() + p.budget_s
        for rep in range(reps):
            arr[rep * 4099 % nb] ^= 0xFF  # new content: a new array to every system
            t0 = time.perf_counter()
            got = await pool.broadcast(nbytes, arr)
            t1 = time.perf_counter()
            _check("broadcast(nbytes, arr)", got, [nb, nb])
            ts.append(t1 - t0)
            if t1 > deadline:
                break
        m = median(ts)
        return {"gb_per_s": 2 * nb / m / 1e9, "median_s": m, "mib": mib,
                "n": len(ts), "all_s": ts, "truncated": len(ts) < reps}

    async def arg100m() -> dict:
        return await arg_new(p.arg_mib, p.arg_reps)

    async def arg1g() -> dict:
        return await arg_new(p.arg1g_mib, p.arg1g_reps)

    async def arg_again() -> dict:
        """The same array to both workers again (after a first send): what the second call costs."""
        import numpy as np

        nb = p.arg_mib * MIB
        arr = np.full(nb, 7, dtype=np.uint8)
        t0 = time.perf_counter()
        _check("broadcast(nbytes, arr) first", await pool.broadcast(nbytes, arr), [nb, nb])
        first = time.perf_counter() - t0
        ts, deadline = [], time.perf_counter() + p.budget_s
        for _ in range(p.arg_reps):
            t0 = time.perf_counter()
            got = await pool.broadcast(nbytes, arr)
            t1 = time.perf_counter()
            _check("broadcast(nbytes, arr) again", got, [nb, nb])
            ts.append(t1 - t0)
            if t1 > deadline:
                break
        return {"median_s": median(ts), "first_s": first, "mib": p.arg_mib, "n": len(ts), "all_s": ts}

    async def map_shared() -> dict:
        """map over `shared_items` items of functools.partial(f, the 100 MiB array) — the partial made
        once, as a training loop would — against the same map of a plain function."""
        import functools

        import numpy as np

        items = list(range(p.shared_items))
        want = [x + 1 for x in items]
        arr = np.full(p.arg_mib * MIB, 3, dtype=np.uint8)
        fn = functools.partial(shared_inc, arr)
        t0 = time.perf_counter()
        _check("map(partial) first", await pool.map(fn, items), want)
        first = time.perf_counter() - t0
        _check("map(inc) warm-up", await pool.map(inc, items), want)
        shared, plain = [], []
        for _ in range(max(3, p.map_reps)):
            t0 = time.perf_counter()
            _check("map(partial)", await pool.map(fn, items), want)
            t1 = time.perf_counter()
            _check("map(inc)", await pool.map(inc, items), want)
            t2 = time.perf_counter()
            shared.append(t1 - t0)
            plain.append(t2 - t1)
        m, mp = median(shared), median(plain)
        return {"median_s": m, "plain_s": mp, "ratio": m / mp, "first_s": first, "items": p.shared_items,
                "n": len(shared), "all_s": shared, "plain_all_s": plain}

    for name, fn in (("rtt", rtt), ("broadcast2", broadcast2), ("map10k", map10k),
                     ("arg100m", arg100m), ("arg1g", arg1g), ("arg_again", arg_again),
                     ("map_shared", map_shared)):
        if name in skip:
            record(name, {"skipped": True})
            continue
        log(f"  {name} …")
        t0 = time.perf_counter()
        try:
            # a hung call in an asyncio system is cut here; a blocking one (Ray, Dask) by the
            # orchestrator's timeout on the whole process
            res = await asyncio.wait_for(fn(), timeout=2 * p.budget_s + 30)
        except asyncio.TimeoutError:
            res = {"error": f"timed out after {2 * p.budget_s + 30:.0f} s"}
        except Exception as exc:  # noqa: BLE001 - reported in the table
            res = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        res["wall_s"] = time.perf_counter() - t0
        record(name, res)


#: where `measure_paired` puts the processes: (name, the client's CPU, the workers' CPU), as indexes
#: into the CPUs this process may use; on a machine with fewer than two, only "free" (no pinning)
PLACEMENTS = (("one core", 0, 0), ("two cores", 0, 1))


def _pin(pids: list[int], cpus: set[int]) -> None:
    """Every thread of each process in `pids` to `cpus` (Linux: affinity is per thread)."""
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            tids = [pid]
        for tid in tids:
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:  # the thread ended meanwhile
                pass


class LocalTurns:
    """A pool in this process taking its turns (`measure_paired`): its rounds timed here."""

    def __init__(self, pool: Any, workers: list[int]) -> None:
        self.pool = pool
        self.clients = [os.getpid()]
        self.workers = workers

    async def round(self, workload: str, calls: int) -> list[float]:
        call, want = ((lambda: self.pool.run(nop)), 1) if workload == "rtt" else ((lambda: self.pool.broadcast(nop)), [1, 1])
        ts = []
        for _ in range(calls):
            t0 = time.perf_counter()
            got = await call()
            ts.append(time.perf_counter() - t0)
            _check(workload, got, want)
        return ts


async def measure_paired(turns: dict[str, Any], p: Params, record: Callable[[str, dict], None]) -> None:
    """rtt and broadcast2 of several systems taken in alternating rounds, the processes pinned.

    `turns` maps a name to a turn-taker (`LocalTurns`, or `bench.floor_turns.FloorTurns`: the floor
    in a process of its own): its client and worker pids, and `round(workload, calls)` giving the
    calls' latencies. For each placement of `PLACEMENTS` (every client process on one CPU, every
    worker process on the same one or on another) and each workload: every system's warm-up, then
    rounds of `k` calls each (k = n / 20, at least 10), the systems in turn, the order reversed every
    other round (A B, B A, ...), until each made n calls; median and p90 of all of a system's calls.
    Recorded as ``rtt_paired_<placement>`` (the first system, the subject) and
    ``rtt_paired_<placement>_<name>`` (each other one), placement with "_" for " ". Why pinned: on
    this 2-core machine a client and its worker on one core answer in about half the time they take
    on two, and left free the scheduler settles each pair of processes on one or two cores by what
    else runs — in one run the floor's pair on two cores and skyhive's on one, or the reverse, so
    alternating rounds alone compared different placements. The placement is restored after.
    """
    names = list(turns)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    clients = sorted({pid for t in turns.values() for pid in t.clients})
    workers = [pid for t in turns.values() for pid in t.workers]
    placements = PLACEMENTS if len(cpus) >= 2 else (("free", None, None),)

    async def paired(tag: str, workload: str, warmup: int, n: int) -> None:
        t_start = time.perf_counter()
        try:
            for name in names:
                await turns[name].round(workload, warmup)
            k = max(10, n // 20)
            samples: dict[str, list[float]] = {name: [] for name in names}
            deadline = time.perf_counter() + p.budget_s
            rounds = 0
            while len(samples[names[0]]) < n and time.perf_counter() < deadline:
                for name in (names if rounds % 2 == 0 else names[::-1]):
                    samples[name] += await turns[name].round(workload, min(k, n - len(samples[name])))
                rounds += 1
            wall = time.perf_counter() - t_start
            for i, name in enumerate(names):
                ts = samples[name]
                record(f"{workload}_paired_{tag}" + ("" if i == 0 else f"_{name}"),
                       {"median_s": median(ts), "p90_s": p90(ts), "n": len(ts), "round": k, "rounds": rounds,
                        "truncated": len(ts) < n, "wall_s": wall})
        except Exception as exc:  # noqa: BLE001 - reported in the table
            record(f"{workload}_paired_{tag}", {"error": f"{type(exc).__name__}: {exc}"[:300],
                                                "wall_s": time.perf_counter() - t_start})

    try:
        for placement, client_cpu, worker_cpu in placements:
            tag = placement.replace(" ", "_")
            if client_cpu is not None and worker_cpu is not None:
                _pin(clients, {cpus[client_cpu]})
                _pin(workers, {cpus[worker_cpu]})
            await paired(tag, "rtt", p.rtt_warmup, p.rtt_n)
            await paired(tag, "broadcast2", p.bcast_warmup, p.bcast_n)
    finally:
        if cpus:
            _pin(clients + workers, set(cpus))
