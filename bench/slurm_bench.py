"""skyhive on Slurm against the raw srun floor, on a real Slurm cluster made here (needs root).

    python -m bench.slurm_bench [--quick]

A controller and 2 slurmd nodes in network namespaces (`tests/infra/slurm.py`), then, in one run:

- ``pool up → first result, 2 nodes``: entering a 2-node `sky.Slurm()` pool (sbatch of the allocation,
  waiting for it to run, one srun worker per node, handshake) until its first broadcast result, on
  an idle cluster; median and fastest of several pools (the first pool after the controller starts is
  timed alone: Slurm schedules it late). Most of it is Slurm's own scheduling: submit → RUNNING takes
  0.1 s when the controller places the job at once, 0.5-1.3 s when its scheduler picks it up on its
  next pass; skyhive's part (srun workers, handshake, first call) is ~0.1 s. Target ≤ 1 s;
- ``rtt floor``: the raw floor of `bench/floor.py` (bare Python workers, `bench/_floor_worker.py`,
  asyncio pipes, no framework) with each worker a job step, `srun --jobid J -w NODE --overlap -u`,
  talked to over srun's stdin/stdout, one call at a time;
- ``rtt skyhive``: `await pool.run(nop)` on the same allocation's skyhive worker (the same srun pipes).
  Both in alternating blocks over the same minutes (medians of all calls); target ≤ 1.5× the floor;
- ``broadcast 2 nodes``: `await pool.broadcast(nop)` against the floor's broadcast to its 2 srun workers.

Returns (and prints) a dict of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from bench.floor import WORKER, FloorPool, _Worker

REPO = Path(__file__).resolve().parent.parent


def nop() -> int:
    return 1


class SrunFloor(FloorPool):
    """The raw floor (`bench/floor.py`: bare workers, asyncio pipes, no framework) with each worker
    started as one more step of the pool's job, `srun --jobid J -w NODE --overlap -u`: the same srun
    pipes as skyhive's workers."""

    def __init__(self, job_id: str, nodes: list[str]) -> None:
        super().__init__(len(nodes))
        self.job_id, self.node_names = job_id, nodes

    async def __aenter__(self) -> SrunFloor:
        procs = await asyncio.gather(*(
            asyncio.create_subprocess_exec(
                "srun", f"--jobid={self.job_id}", f"--nodelist={node}", "--nodes=1", "--ntasks=1", "--overlap",
                "--unbuffered", "--quiet", sys.executable, str(WORKER),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
            for node in self.node_names))
        self.workers = [_Worker(i, p) for i, p in enumerate(procs)]
        return self


async def _timed_calls(call: Any, n: int, warmup: int) -> list[float]:
    times = []
    for i in range(warmup + n):
        t0 = time.perf_counter()
        await call()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


async def _pool_up(sky: Any) -> float:
    t0 = time.perf_counter()
    async with sky.Pool(provider=sky.Slurm(), nodes=2, output=None) as pool:
        await pool.broadcast(nop)
        return time.perf_counter() - t0


async def run_bench(quick: bool = False) -> dict[str, Any]:
    import skyhive as sky
    from tests.infra.slurm import SlurmCluster

    n, warmup, rounds = (600, 50, 6) if quick else (2000, 200, 10)
    out: dict[str, Any] = {}
    with SlurmCluster(2, gpus=0) as cluster:
        os.environ.update(cluster.env)
        out["first_pool_up_s"] = await _pool_up(sky)
        ups = [await _pool_up(sky) for _ in range(3 if quick else 7)]
        out["pool_up_s"], out["pool_up_min_s"] = statistics.median(ups), min(ups)
        async with sky.Pool(provider=sky.Slurm(), nodes=2, output=None) as pool:
            handles = [pool._runtime.handles[i] for i in sorted(pool._runtime.handles)]
            names = [h.reach.node_name for h in handles]
            async with SrunFloor(str(handles[0].extra["job_id"]), names) as floor:
                sky_times: list[float] = []
                floor_times: list[float] = []
                sky_b: list[float] = []
                floor_b: list[float] = []
                await _timed_calls(lambda: pool.run(nop), 0, warmup)
                await _timed_calls(lambda: floor.run(nop), 0, warmup)
                for _ in range(rounds):
                    floor_times += await _timed_calls(lambda: floor.run(nop), n // rounds, 5)
                    sky_times += await _timed_calls(lambda: pool.run(nop), n // rounds, 5)
                    floor_b += await _timed_calls(lambda: floor.broadcast(nop), n // rounds // 4, 5)
                    sky_b += await _timed_calls(lambda: pool.broadcast(nop), n // rounds // 4, 5)
        out["broadcast2_floor_us"] = statistics.median(floor_b) * 1e6
        out["broadcast2_us"] = statistics.median(sky_b) * 1e6
        out["broadcast2_ratio"] = out["broadcast2_us"] / out["broadcast2_floor_us"]
        out["rtt_floor_us"] = statistics.median(floor_times) * 1e6
        out["rtt_skyhive_us"] = statistics.median(sky_times) * 1e6
        out["rtt_ratio"] = out["rtt_skyhive_us"] / out["rtt_floor_us"]
        out["jobs_left"] = len(cluster.wait_clean()[0])
    return out


def table(r: dict[str, Any]) -> str:
    nan = float("nan")
    rows = [
        ("first pool after slurmctld started, 2 nodes", f"{r.get('first_pool_up_s', nan):.2f} s", ""),
        ("pool up → first result, 2 nodes (idle cluster)", f"{r.get('pool_up_s', nan):.2f} s",
         f"target ≤ 1 s; fastest {r.get('pool_up_min_s', nan):.2f} s"),
        ("rtt floor (srun pipes → bare worker)", f"{r.get('rtt_floor_us', nan):.0f} µs", ""),
        ("rtt skyhive over srun (warm)", f"{r.get('rtt_skyhive_us', nan):.0f} µs",
         f"{r.get('rtt_ratio', nan):.2f}× floor (target ≤ 1.5×)"),
        ("broadcast floor, 2 Slurm nodes", f"{r.get('broadcast2_floor_us', nan):.0f} µs", ""),
        ("broadcast skyhive, 2 Slurm nodes", f"{r.get('broadcast2_us', nan):.0f} µs",
         f"{r.get('broadcast2_ratio', nan):.2f}× floor"),
        ("jobs left after the pools", f"{r.get('jobs_left', nan)}", "must be 0"),
    ]
    width = max(len(a) for a, _, _ in rows)
    lines = [f"| {'what'.ljust(width)} | figure | note |", f"|{'-' * (width + 2)}|---|---|"]
    lines += [f"| {a.ljust(width)} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m bench.slurm_bench")
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    args = ap.parse_args(argv)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    result = anyio.run(run_bench, args.quick, backend="asyncio")
    print(table(result))
    return result


if __name__ == "__main__":
    main()
