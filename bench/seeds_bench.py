"""Concurrency and streaming, measured (the seeds' features, Local provider, public API only).

    python -m bench.seeds_bench            # the full run (about a minute)
    python -m bench.seeds_bench --quick    # smaller, for a smoke test

- waits: N tasks that each sleep S seconds on one node, with `Worker(concurrency=1)` and with
  `Worker(concurrency=N)`; the wall time of the gather (pool start reported apart).
- stream latency: a generator yields `time.time()` every 50 ms; how late each item arrives here.

`run()` returns the figures as a dict; `main()` prints them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import skyhive as sky

# defined by exec in a module name that cannot be imported, so they travel by value
_NS: dict[str, Any] = {}
exec(  # noqa: S102 - see above
    "import time\n"
    "def nap(seconds):\n"
    "    time.sleep(seconds)\n"
    "    return seconds\n"
    "def ticks(n, period):\n"
    "    for _ in range(n):\n"
    "        yield time.time()\n"
    "        time.sleep(period)\n",
    _NS,
)
_NS["__name__"] = "bench_seeds_node_code"


def waits(tasks: int, seconds: float, concurrency: int) -> dict[str, float]:
    t0 = time.perf_counter()
    with sky.Pool(nodes=1, worker=sky.Worker(concurrency=concurrency), output=None) as pool:
        started = time.perf_counter()
        sky.gather(*(sky.compute(_NS["nap"])(seconds) for _ in range(tasks))) >> pool
        done = time.perf_counter()
    return {"start_s": round(started - t0, 2), "gather_s": round(done - started, 2)}


def stream_latency(items: int, period: float) -> dict[str, float]:
    with sky.Pool(nodes=1, output=None) as pool:
        lags = [time.time() - sent for sent in pool.stream(_NS["ticks"], items, period)]
    lags_ms = sorted(1000 * x for x in lags)
    return {"items": len(lags_ms), "median_ms": round(statistics.median(lags_ms), 2),
            "max_ms": round(lags_ms[-1], 2)}


def run(quick: bool = False) -> dict[str, Any]:
    tasks, seconds = (10, 0.5) if quick else (50, 1.0)
    return {
        "tasks": tasks, "seconds_each": seconds,
        "concurrency_1": waits(tasks, seconds, 1),
        f"concurrency_{tasks}": waits(tasks, seconds, tasks),
        "stream": stream_latency(20 if quick else 100, 0.05),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    figures = run(quick=args.quick)
    print(json.dumps(figures, indent=2))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=2)
    return figures


if __name__ == "__main__":
    main()
