"""Several tasks at once per node: `worker=sky.Worker(concurrency=N)`. Twenty tasks that each wait a
second finish in about two seconds on two nodes with five slots each, not twenty.

    python examples/concurrency.py
"""

from __future__ import annotations

import time

import skyhive as sky


@sky.function
def wait(task: int, seconds: float) -> dict:
    """An I/O-bound task: it waits, the CPU is free."""
    time.sleep(seconds)
    return {"task": task, "node": sky.instance_info().node}


if __name__ == "__main__":
    with sky.Compute(provider=sky.Local(), nodes=2, worker=sky.Worker(concurrency=5)) as compute:
        start = time.monotonic()
        done = []
        for r in sky.gather(*(wait(i, 1.0) for i in range(20)), stream=True, ordered=False) >> compute:
            done.append(r["task"])
        elapsed = time.monotonic() - start
        print(f"20 tasks of 1 s on {compute.workers} slots: {elapsed:.1f} s, all done: {sorted(done) == list(range(20))}")
