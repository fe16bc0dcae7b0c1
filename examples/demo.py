"""The demo: a real 2-node job on this machine (the Local provider).

    python examples/demo.py

Each node is a separate worker process with its own `instance_info()`. The pool broadcasts a
function to both nodes, spreads a map over them, and streams their output live.
"""

from __future__ import annotations

import os
import time

import anyio

import skyhive as sky


@sky.compute
def hello(greeting: str) -> dict:
    info = sky.instance_info()
    print(f"{greeting} from node {info.node} of {info.total_nodes} (pid {os.getpid()})")
    return {"node": info.node, "is_head": info.is_head, "pid": os.getpid()}


def square(x: int) -> int:
    return x * x


async def main() -> None:
    started = time.perf_counter()
    async with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        print(f"pool {pool.id} ready in {time.perf_counter() - started:.2f} s")
        answers = await (hello("hello") @ pool)  # broadcast: one answer per node, in node order
        for answer in answers:
            role = "head" if answer["is_head"] else "worker"
            print(f"node {answer['node']} ({role}) answered from pid {answer['pid']}")
        squares = await pool.map(square, range(10_000))
        print(f"map over 10,000 items on both nodes: sum of squares = {sum(squares)}")
        one = await pool.run(square, 12)
        print(f"run on the least busy node: 12 * 12 = {one}")
    print(f"done in {time.perf_counter() - started:.2f} s; event log: {pool.state.status}, "
          f"{pool.state.tasks_ok} tasks ok")


if __name__ == "__main__":
    anyio.run(main)
