"""Control-plane scale with `sky.Simulated` nodes: pool up, one broadcast, teardown, client memory.

    python -m bench.scale_bench --nodes 1000,10000

Prints one line per size: wall time of each phase, time per node, and client memory per node
(tracemalloc peak while the pool is up, divided by nodes). Not yet measured here: the event log's
size and replay time and `skyhive ls` over it (see /work/notes/sim.md).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import tracemalloc

import skyhive as sky


def _trivial(x: int) -> int:
    return x


async def _one(nodes: int, trace: bool) -> dict[str, float]:
    if trace:
        tracemalloc.start()
    t0 = time.perf_counter()
    async with sky.Pool(provider=sky.Simulated(), nodes=nodes) as pool:
        t1 = time.perf_counter()
        results = await pool.broadcast(_trivial, 1)
        assert len(results) == nodes
        t2 = time.perf_counter()
        mem = tracemalloc.get_traced_memory()[0] if trace else 0
    t3 = time.perf_counter()
    if trace:
        tracemalloc.stop()
    return {"up": t1 - t0, "broadcast": t2 - t1, "down": t3 - t2, "total": t3 - t0, "mem_per_node": mem / nodes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000,10000")
    parser.add_argument("--memory", action="store_true", help="also trace memory (slower)")
    args = parser.parse_args()
    per_node = {}
    for n in (int(x) for x in args.nodes.split(",")):
        r = asyncio.run(_one(n, args.memory))
        per_node[n] = r["total"] / n
        print(f"{n:>6} nodes: up {r['up']:.2f} s  broadcast {r['broadcast']:.2f} s  down {r['down']:.2f} s  "
              f"total {r['total']:.2f} s  {per_node[n] * 1e3:.2f} ms/node"
              + (f"  {r['mem_per_node'] / 1024:.1f} KiB/node" if args.memory else ""), flush=True)
    if len(per_node) > 1:
        sizes = sorted(per_node)
        print(f"growth: time per node at {sizes[-1]} / at {sizes[0]} = {per_node[sizes[-1]] / per_node[sizes[0]]:.2f}x")


if __name__ == "__main__":
    main()
