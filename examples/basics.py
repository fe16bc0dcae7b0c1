"""The basics, in the seeds' newer spelling: `sky.Compute`, `@sky.function`, `>>` (one node), `@`
(every node), `sky.gather` / `&` (spread over the nodes, a tuple back), a streamed gather, and
`sky.shard` splitting data over the nodes.

    python examples/basics.py
"""

from __future__ import annotations

import skyhive as sky


@sky.function
def add(a: int, b: int) -> int:
    return a + b


@sky.function
def summary(values: list[int]) -> dict:
    return {"count": len(values), "sum": sum(values), "mean": sum(values) / len(values)}


@sky.function
def factorial(n: int) -> int:
    out = 1
    for k in range(2, n + 1):
        out *= k
    return out


@sky.function
def my_part(data: list[int], labels: list[str]) -> dict:
    """Every node gets the whole list and keeps its own part (aligned with the labels)."""
    xs, ys = sky.shard(data, labels, shuffle=True, seed=7)
    assert all(y == f"#{x}" for x, y in zip(xs, ys))
    return {"node": sky.instance_info().node, "size": len(xs), "sum": sum(xs)}


if __name__ == "__main__":
    with sky.Compute(provider=sky.Local(), nodes=3) as compute:
        print(f"2 + 3 = {add(2, 3) >> compute}")
        print(f"summary: {summary([1, 2, 3, 4, 5]) >> compute}")

        chunks = sky.gather(*(summary(list(range(k, k + 3))) for k in (0, 3, 6))) >> compute
        print(f"chunk sums: {tuple(c['sum'] for c in chunks)}")
        s, f = (add(10, 20) & factorial(5)) >> compute
        print(f"mixed: sum={s} factorial={f}")
        done = [r for r in sky.gather(*(factorial(n) for n in (20, 5, 10)), stream=True, ordered=False) >> compute]
        print(f"streamed: {sorted(done)}")

        data = list(range(1000))
        parts = my_part(data, [f"#{x}" for x in data]) @ compute
        for p in parts:
            print(f"node {p['node']}: {p['size']} items, sum={p['sum']}")
        print(f"total {sum(p['sum'] for p in parts)} (expected {sum(data)})")
