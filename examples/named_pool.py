"""A pool that outlives the program that made it: what was computed once stays in the worker
processes, and a later program (`attach`) uses the same workers.

    python examples/named_pool.py create    # start pool "example", load data into its workers, leave it up
    python examples/named_pool.py attach    # from another process: the same workers, the data still there
    python examples/named_pool.py down      # attach one last time and shut the workers down
    skyhive status                          # named pools; `skyhive down example` also ends it

See docs/clusters.md (and `skyhive launch -c NAME task.yaml` for the same from the command line).
"""

from __future__ import annotations

import os
import sys

import skyhive as sky

def load(n: int) -> int:
    """Compute this node's share once and keep it in the worker process: its environment lives as
    long as the worker does (a function of this script carries its own copy of the script's globals,
    so `load` and `total` would not see each other's)."""
    info = sky.instance_info()
    rows = list(range(info.node, n, info.total_nodes))
    os.environ["EXAMPLE_SUM"] = str(sum(rows))
    return len(rows)


def total() -> tuple[int, int]:
    return os.getpid(), int(os.environ.get("EXAMPLE_SUM", "0"))


def main(step: str) -> None:
    if step == "create":
        with sky.Pool(provider=sky.Local(), nodes=2, name="example", keep=True, output=None) as pool:
            print("loaded rows per node:", pool.broadcast(load, 1000))
    elif step in ("attach", "down"):
        with sky.Pool.attach("example", keep=step == "attach", output=None) as pool:
            results = pool.broadcast(total)
            print("workers:", [pid for pid, _ in results], "sum:", sum(s for _, s in results))
        if step == "down":
            print("pool example is down")
    else:
        raise SystemExit(f"usage: python {sys.argv[0]} create|attach|down")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
