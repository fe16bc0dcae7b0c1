"""An elastic pool: `nodes=(1, 3)` starts with one node, adds nodes while tasks wait for a free worker
(up to three) and gives back nodes idle for `autoscale_idle_timeout` seconds. Every node that comes or
goes is an event that says why (`skyhive events POOL`).

    python examples/elastic.py
"""

from __future__ import annotations

import time

import skyhive as sky


@sky.function
def work(seconds: float) -> int:
    time.sleep(seconds)
    return sky.instance_info().node


if __name__ == "__main__":
    with sky.Pool(provider=sky.Local(), nodes=(1, 3), autoscale_idle_timeout=2, output=None) as pool:
        print(f"start: {pool.current_nodes()} node(s)")
        ran_on = pool.map(work, [2.0] * 6)  # six tasks wait: the pool grows to three nodes
        print(f"under load: ran on nodes {sorted(set(ran_on))}")
        while pool.current_nodes() > 1:  # idle: the added nodes are given back
            time.sleep(0.2)
        print(f"idle: {pool.current_nodes()} node(s); why each came and went: skyhive events {pool.id}")
