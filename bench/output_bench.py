"""Live output: how many lines per second reach `pool.output()`, and how late a line arrives.

    python -m bench.output_bench            # the full run (about half a minute)
    python -m bench.output_bench --quick    # smaller, for a smoke test
    python -m bench.output_bench --json out.json   # also write the figures (and parameters) as JSON

Workloads (skyhive's public API only, Local provider):

- throughput: 4 nodes each run ``for i in range(n): print(i)`` as fast as they can; one
  ``pool.output()`` consumer takes every record. Timed from the broadcast to the last line received;
  afterwards every node's text is checked line by line (``lost`` counts missing or out-of-order
  lines: it must be 0).
- floor: the same loop in 4 bare, already started subprocesses whose stdout (block-buffered) is a
  pipe read by this process — what Python printing into pipes costs with no protocol, no event
  log and no routing.
- printing: the default presentation (``output="all"``): 4 nodes' lines printed with their
  ``[node N]`` prefixes to this process's stdout, sent to /dev/null.
- latency: a node prints a line holding ``time.time()`` every 5 ms; the consumer notes when it
  gets it. Once with plain ``print`` (a line waits for the worker's flush tick, up to 20 ms) and
  once with ``print(..., flush=True)``.

`run()` returns the figures as a dict; `main()` prints the table and returns the same dict.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

# The node functions live in a module name that cannot be imported, so cloudpickle ships them by
# value (as it does for a user's script), and no worker needs the `bench` package.
_NODE_SRC = '''
import time

def spew(n):
    for i in range(n):
        print(i)
    return n

def stamps(n, period, flush):
    for i in range(n):
        print(f"{i} {time.time():.6f}", flush=flush)
        time.sleep(period)
    return n
'''
_node_ns: dict[str, Any] = {"__name__": "bench_output_functions"}
exec(compile(_NODE_SRC, "<bench output functions>", "exec"), _node_ns)
spew: Callable[[int], int] = _node_ns["spew"]
stamps: Callable[[int, float, bool], int] = _node_ns["stamps"]

_FLOOR_CHILD = (
    "import fcntl, sys\n"
    "try:\n"
    "    fcntl.fcntl(1, getattr(fcntl, 'F_SETPIPE_SZ', 1031), 1 << 20)\n"  # as skyhive's pipes
    "except OSError:\n"
    "    pass\n"
    "sys.stdout = open(1, 'w', buffering=1 << 16, closefd=False)\n"  # 64 KiB writes, as skyhive's
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "for i in range(int(sys.argv[1])):\n"
    "    print(i)\n"
)


@dataclasses.dataclass(frozen=True)
class Params:
    nodes: int = 4
    lines_per_node: int = 500_000
    reps: int = 3
    latency_lines: int = 400
    latency_period: float = 0.005
    budget_s: float = 120.0  # per workload

    @classmethod
    def quick(cls) -> Params:
        return cls(lines_per_node=100_000, reps=1, latency_lines=100)


def _p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[max(0, -(-9 * len(s) // 10) - 1)]


def _lost(text: str, n: int) -> int:
    """Lines missing or out of place in `text`, which should be "0\\n1\\n…(n-1)\\n"."""
    if n and text == "\n".join(map(str, range(n))) + "\n":
        return 0
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return n - sum(1 for a, b in zip(lines, map(str, range(n))) if a == b)


async def throughput(sky: Any, p: Params) -> dict[str, Any]:
    """Lines/s through `pool.output()` from `p.nodes` nodes printing as fast as they can."""
    n, total = p.lines_per_node, p.lines_per_node * p.nodes
    times: list[float] = []
    lost = 0
    records = 0
    async with sky.Pool(provider=sky.Local(), nodes=p.nodes, output=None) as pool:
        await pool.broadcast(spew, 1000)  # warm: functions shipped, pipes and caches warm
        deadline = time.perf_counter() + p.budget_s
        for _ in range(p.reps):
            texts: dict[int, list[str]] = {k: [] for k in range(p.nodes)}
            stream = pool.output()
            got = 0
            t0 = time.perf_counter()
            call = asyncio.ensure_future(pool.broadcast(spew, n))
            async for rec in stream:
                texts[rec.node].append(rec.text)
                records += 1
                got += rec.text.count("\n")
                if got >= total:
                    break
            t1 = time.perf_counter()
            assert await call == [n] * p.nodes
            await stream.aclose()
            lost += sum(_lost("".join(texts[k]), n) for k in range(p.nodes))
            times.append(t1 - t0)
            if t1 > deadline:
                break
    best, med = min(times), statistics.median(times)
    return {"lines_per_s": total / med, "best_lines_per_s": total / best, "lost": lost,
            "nodes": p.nodes, "lines_per_node": n, "reps": len(times), "lines_per_record": total * len(times) / records,
            "all_s": times}


async def floor(p: Params) -> dict[str, Any]:
    """The same print loop in bare subprocesses writing to pipes this process reads."""
    n, total = p.lines_per_node, p.lines_per_node * p.nodes
    times: list[float] = []
    lost = 0
    for _ in range(p.reps):
        procs = [await asyncio.create_subprocess_exec(sys.executable, "-c", _FLOOR_CHILD, str(n),
                                                      stdin=asyncio.subprocess.PIPE,
                                                      stdout=asyncio.subprocess.PIPE)
                 for _ in range(p.nodes)]
        for proc in procs:  # started and waiting: the timing leaves interpreter start-up out
            assert proc.stdout is not None and await proc.stdout.readline() == b"ready\n"
        t0 = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")

        async def drain(proc: asyncio.subprocess.Process) -> str:
            assert proc.stdout is not None
            chunks = []
            while chunk := await proc.stdout.read(1 << 20):
                chunks.append(chunk.decode())
            await proc.wait()
            return "".join(chunks)

        outs = await asyncio.gather(*(drain(proc) for proc in procs))
        times.append(time.perf_counter() - t0)
        lost += sum(_lost(out, n) for out in outs)
    med = statistics.median(times)
    return {"lines_per_s": total / med, "lost": lost, "reps": len(times), "all_s": times}


async def printing(sky: Any, p: Params) -> dict[str, Any]:
    """Lines/s printed with node prefixes (the default), to /dev/null."""
    n, total = p.lines_per_node, p.lines_per_node * p.nodes
    times: list[float] = []
    async with sky.Pool(provider=sky.Local(), nodes=p.nodes) as pool:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            await pool.broadcast(spew, 1000)
            for _ in range(p.reps):
                t0 = time.perf_counter()
                assert await pool.broadcast(spew, n) == [n] * p.nodes  # printed as the frames arrive
                times.append(time.perf_counter() - t0)
    return {"lines_per_s": total / statistics.median(times), "reps": len(times), "all_s": times}


async def latency(sky: Any, p: Params, *, flush: bool) -> dict[str, Any]:
    """Write on the node (time.time() in the line) -> taken from `pool.output()` here."""
    delays: list[float] = []
    async with sky.Pool(provider=sky.Local(), nodes=1, output=None) as pool:
        await pool.run(stamps, 3, 0.0, flush)
        stream = pool.output()
        call = asyncio.ensure_future(pool.run(stamps, p.latency_lines, p.latency_period, flush))
        pending = ""
        seen = 0
        async for rec in stream:
            now = time.time()
            pending += rec.text
            *lines, pending = pending.split("\n")
            for line in lines:
                delays.append(now - float(line.split()[1]))
            seen += len(lines)
            if seen >= p.latency_lines:
                break
        await call
        await stream.aclose()
    delays = delays[10:]  # the first lines pay for starting the loop
    return {"median_ms": 1000 * statistics.median(delays), "p90_ms": 1000 * _p90(delays),
            "max_ms": 1000 * max(delays), "n": len(delays)}


async def run(p: Params, log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    import skyhive as sky

    results: dict[str, Any] = {}
    for name, work in (
        ("throughput", lambda: throughput(sky, p)),
        ("floor", lambda: floor(p)),
        ("printing", lambda: printing(sky, p)),
        ("latency", lambda: latency(sky, p, flush=False)),
        ("latency_flush", lambda: latency(sky, p, flush=True)),
    ):
        log(f"output_bench: {name} ...")
        try:
            results[name] = await work()
        except Exception as exc:  # noqa: BLE001 - reported in the table
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return results


def table(results: dict[str, Any], p: Params) -> str:
    rows = [("workload", "figure", "notes")]

    def rate(name: str, label: str) -> None:
        r = results.get(name, {})
        if "error" in r:
            rows.append((label, "error", r["error"]))
            return
        note = f"lost {r['lost']}" if "lost" in r else ""
        if name == "throughput":
            note += f", {r['lines_per_record']:.0f} lines/record, best {r['best_lines_per_s']:,.0f}"
        rows.append((label, f"{r['lines_per_s']:,.0f} lines/s", note.strip(", ")))

    def lat(name: str, label: str) -> None:
        r = results.get(name, {})
        if "error" in r:
            rows.append((label, "error", r["error"]))
            return
        rows.append((label, f"{r['median_ms']:.1f} ms median", f"p90 {r['p90_ms']:.1f} ms, n={r['n']}"))

    rate("throughput", f"pool.output(), {p.nodes} nodes x {p.lines_per_node:,} lines")
    rate("floor", f"floor: {p.nodes} bare processes -> pipes")
    rate("printing", "printed with [node N] prefixes (/dev/null)")
    lat("latency", "line latency, print")
    lat("latency_flush", "line latency, print(flush=True)")
    if "lines_per_s" in results.get("throughput", {}) and "lines_per_s" in results.get("floor", {}):
        ratio = results["throughput"]["lines_per_s"] / results["floor"]["lines_per_s"]
        rows.append(("skyhive / floor", f"{ratio:.2f}x", "throughput ratio"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.output_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH as JSON")
    args = parser.parse_args(argv)
    p = Params.quick() if args.quick else Params()
    results = asyncio.run(run(p, log=lambda s: print(s, file=sys.stderr)))
    print(table(results, p))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"params": dataclasses.asdict(p), "results": results}, fh, indent=2)
    return results


if __name__ == "__main__":
    main()
