"""The floor in a process of its own, taking its turns when told (`bench.common.measure_paired`).

``python -m bench.floor_turns``: opens a `FloorPool(2)`, writes one JSON line with its pids
(``{"client": pid, "workers": [pid, pid]}``), then answers each command line read from stdin —
``{"workload": "rtt" | "broadcast2", "calls": k}`` — with one JSON line: the k calls' latencies in
seconds, each timed here (``{"ts": [...]}``), or ``{"error": "..."}``. It ends at the end of stdin.
So the floor's client runs alone in its process (beside an open skyhive pool it was ~5% slower:
the pool's timers in its event loop, its objects in its heap), while the rounds still alternate.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

from bench.common import nop
from bench.floor import FloorPool


async def _serve() -> None:
    async with FloorPool(2) as pool:
        print(json.dumps({"client": os.getpid(), "workers": [w.proc.pid for w in pool.workers]}), flush=True)
        calls = {"rtt": (lambda: pool.run(nop), 1), "broadcast2": (lambda: pool.broadcast(nop), [1, 1])}
        for line in sys.stdin:  # (blocking between rounds: nothing else runs here meanwhile)
            try:
                command = json.loads(line)
                call, want = calls[command["workload"]]
                ts = []
                for _ in range(int(command["calls"])):
                    t0 = time.perf_counter()
                    got = await call()
                    ts.append(time.perf_counter() - t0)
                    if got != want:
                        raise AssertionError(f"{command['workload']}: expected {want!r}, got {got!r}")
                reply: dict[str, Any] = {"ts": ts}
            except Exception as exc:  # noqa: BLE001 - reported to the caller
                reply = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            print(json.dumps(reply), flush=True)


class FloorTurns:
    """The other end: starts the process, knows its pids, runs a round (`round`) when asked."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.floor_turns"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        first = json.loads(self.proc.stdout.readline() or "{}")  # type: ignore[union-attr]
        if "client" not in first:
            self.close()
            raise RuntimeError("bench.floor_turns did not start")
        self.clients: list[int] = [first["client"]]
        self.workers: list[int] = first["workers"]

    async def round(self, workload: str, calls: int) -> list[float]:
        """`calls` calls of `workload` in the floor's process; their latencies (blocking meanwhile:
        this process has nothing to do while the floor takes its turn)."""
        self.proc.stdin.write(json.dumps({"workload": workload, "calls": calls}) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        reply = json.loads(self.proc.stdout.readline() or '{"error": "bench.floor_turns ended"}')  # type: ignore[union-attr]
        if "error" in reply:
            raise RuntimeError(f"floor: {reply['error']}")
        return list(reply["ts"])

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # type: ignore[union-attr]
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    asyncio.run(_serve())
