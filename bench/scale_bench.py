"""The control plane at the scale clusters reach: `sky.Simulated` pools of 1,000 and 10,000 nodes.

    python -m bench.scale_bench --nodes 1000,10000 [--repeat 3] [--profile up] [--map-items 100000]

Per size, in a fresh child process (so memory is that pool's alone): pool up, one broadcast of a
trivial function, teardown (wall time each), client memory per node (RSS growth from before the pool
to when it is up, divided by the nodes), the event log's size and replay time, and `skyhive ls`
(`inventory.scan`) over that log. Then time per node at each size, relative to the smallest. Each
size runs `--repeat` times (default 3), each in a fresh process, and every figure is the median: a
1,000-node run takes half a second, so one run's noise decided the growth ratio. "KB/node added" is
the memory each node adds past the first size (the fixed cost of lazy imports and first-use caches
left out); "KB/node" divides all the growth by the nodes.
Targets (issue 14): 10k nodes up + broadcast + teardown <= 10 s; <= 20 KB per node; replay <= 2 s;
per-node time at 10k within 1.3x of 1k. `--profile STAGE` prints a cProfile of that stage instead.
`--map-items N` also times `pool.map` of N trivial items and 200 `pool.run` calls (least-busy pick;
their events then count in the log size, replay and ls).
The machine's load average is printed before each size and at the end: read no number without it.
`--split-memory N` instead measures, with tracemalloc at N nodes, how much of the Python heap per node
is the simulated workers' (an artefact of simulating: a real pool's workers live on the nodes) and
how much the client's own (pool, node actors, channels, event log). Tracing slows the start ~20x:
N = 2,000 is practical (10,000 passes the default start_timeout).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any


def _rss() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _nop() -> int:
    return 1


def measure(nodes: int, profile: str = "", map_items: int = 0) -> dict[str, Any]:
    """One pool of `nodes` simulated nodes, measured (run in a child process)."""
    import cProfile
    import pstats

    import anyio

    import skyhive as sky
    from skyhive.runtime.events.inventory import scan
    from skyhive.runtime.events.log import EventLog

    out: dict[str, Any] = {"nodes": nodes}
    prof = cProfile.Profile()

    async def main() -> None:
        rss0 = _rss()
        t0 = time.perf_counter()
        if profile == "up":
            prof.enable()
        pool = sky.Pool(provider=sky.Simulated(), nodes=nodes)
        await pool.__aenter__()
        prof.disable()
        t1 = time.perf_counter()
        out["up_s"] = t1 - t0
        out["bytes_per_node"] = (_rss() - rss0) / nodes
        if profile == "broadcast":
            prof.enable()
        results = await pool.broadcast(_nop)
        prof.disable()
        assert len(results) == nodes
        t2 = time.perf_counter()
        out["broadcast_s"] = t2 - t1
        out["log"] = pool.log_path
        if map_items:
            t = time.perf_counter()
            assert await pool.map(abs, range(map_items)) == list(range(map_items))
            out["map_s"] = time.perf_counter() - t
            t = time.perf_counter()
            for _ in range(200):
                await pool.run(abs, -1)
            out["run200_s"] = time.perf_counter() - t
        t2 = time.perf_counter()
        if profile == "down":
            prof.enable()
        await pool.__aexit__(None, None, None)
        prof.disable()
        out["down_s"] = time.perf_counter() - t2

    anyio.run(main)
    path = out.pop("log")
    out["log_bytes"] = os.path.getsize(path) if path else 0
    if profile == "replay":
        prof.enable()
    t = time.perf_counter()
    if path:
        EventLog.replay(path)
    out["replay_s"] = time.perf_counter() - t
    prof.disable()
    if profile == "ls":
        prof.enable()
    t = time.perf_counter()
    scan(include_stopped=True)
    out["ls_s"] = time.perf_counter() - t
    prof.disable()
    out["total_s"] = out["up_s"] + out["broadcast_s"] + out["down_s"]
    if profile:
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(20)
    return out


def split_memory(nodes: int) -> None:
    """Print the Python heap per node, simulated workers' vs the client's own (tracemalloc)."""
    import gc
    import tracemalloc

    import anyio

    import skyhive as sky

    async def run() -> None:
        gc.collect()
        tracemalloc.start(25)
        before = tracemalloc.take_snapshot()
        pool = sky.Pool(provider=sky.Simulated(), nodes=nodes)
        await pool.__aenter__()
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        worker = client = 0
        for stat in after.compare_to(before, "traceback"):
            files = [frame.filename for frame in stat.traceback]
            if any("/runtime/worker/" in f or "transport/simulated.py" in f for f in files):
                worker += stat.size_diff
            else:
                client += stat.size_diff
        await pool.__aexit__(None, None, None)
        print(f"{nodes} nodes, Python heap per node: simulated workers {worker / nodes / 1024:.1f} KB, "
              f"client (pool, node actors, channels, event log) {client / nodes / 1024:.1f} KB")

    anyio.run(run)


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the runs of one size."""
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="1000,10000", help="comma-separated pool sizes")
    ap.add_argument("--profile", default="", choices=["", "up", "broadcast", "down", "replay", "ls"])
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per size (each in a fresh process); the table shows each figure's median")
    ap.add_argument("--map-items", type=int, default=0, help="also time pool.map over this many items")
    ap.add_argument("--split-memory", type=int, default=0, metavar="N",
                    help="only measure the heap per node at N nodes: simulated workers vs the client")
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.split_memory:
        split_memory(args.split_memory)
        return 0
    if args.child:
        print(json.dumps(measure(args.child, args.profile, args.map_items)))
        return 0
    rows = []
    for n in [int(x) for x in args.nodes.split(",") if x]:
        load = os.getloadavg()
        runs = []
        for _ in range(args.repeat):
            # a state directory per run: `skyhive ls` reads that run's log only
            with tempfile.TemporaryDirectory(prefix="skyhive-scale-") as home:
                env = {**os.environ, "SKYHIVE_HOME": home}
                proc = subprocess.run([sys.executable, "-m", "bench.scale_bench", "--child", str(n),
                                       "--profile", args.profile, "--map-items", str(args.map_items)],
                                      env=env, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    sys.stderr.write(proc.stderr)
                    return proc.returncode
                if args.profile:
                    sys.stderr.write(proc.stderr)
                runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        spread = (min(r["total_s"] for r in runs), max(r["total_s"] for r in runs))
        rows.append({**_medians(runs), "nodes": n, "load": load[0], "spread": spread})
    base = rows[0]["total_s"] / rows[0]["nodes"]
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print(f"each figure: the median of {args.repeat} runs (a fresh process each); total s: median (min-max)")
    extra = " map s | 200 runs s |" if args.map_items else ""
    print("| nodes | load before | up s | broadcast s | teardown s | total s | KB/node | KB/node added | log MB "
          "| replay s | ls s | per-node vs first |" + extra)
    print("|---" * (14 if args.map_items else 12) + "|")
    for r in rows:
        more = f" {r['map_s']:.2f} | {r['run200_s']:.3f} |" if args.map_items else ""
        # the memory each node adds past the first size: the fixed cost (lazy imports, first-use
        # caches) does not count in it, while it does in KB/node
        added = ((r["bytes_per_node"] * r["nodes"] - rows[0]["bytes_per_node"] * rows[0]["nodes"])
                 / (r["nodes"] - rows[0]["nodes"]) / 1024) if r["nodes"] != rows[0]["nodes"] else None
        low, high = r["spread"]
        print(f"| {r['nodes']} | {r['load']:.2f} | {r['up_s']:.2f} | {r['broadcast_s']:.2f} | {r['down_s']:.2f} "
              f"| {r['total_s']:.2f} ({low:.2f}-{high:.2f}) | {r['bytes_per_node'] / 1024:.1f} "
              f"| {'-' if added is None else f'{added:.1f}'} | {r['log_bytes'] / 1e6:.1f} | {r['replay_s']:.2f} "
              f"| {r['ls_s']:.2f} | {r['total_s'] / r['nodes'] / base:.2f}x |" + more)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
