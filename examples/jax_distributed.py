"""JAX across two nodes: one distributed runtime, collectives between the processes.

    python examples/jax_distributed.py

Needs the jax extra (not in the demo's set-up): `.venv/bin/python -m pip install -e '.[jax]'`
(from the repository root; `python3 dev.py test` installs it too).

The jax plugin calls `jax.distributed.initialize()` on every node before the function runs, so
`jax.devices()` lists the devices of both processes and `process_allgather` collects a value from
each. Here every process computes a partial sum of squares over its shard of the data, and the
all-gather gives every process the full result.
"""

from __future__ import annotations

import skyhive as sky


@sky.compute
@sky.stdout(only="head")
def partial_sums(values: list[float]) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils

    mine = jnp.asarray(sky.shard(values), dtype=jnp.float32)  # this process's part of the data
    local = float(jnp.sum(mine**2))
    gathered = multihost_utils.process_allgather(np.array([jax.process_index(), local], dtype=np.float32))
    total = float(gathered[:, 1].sum())
    print(f"{jax.process_count()} processes, {len(jax.devices())} devices; "
          f"partial sums {gathered[:, 1].tolist()} -> total {total}")
    return {"process": jax.process_index(), "processes": jax.process_count(),
            "gathered": gathered.tolist(), "total": total}


def main() -> list[dict]:
    values = [float(v) for v in range(10)]
    with sky.Pool(provider=sky.Local(), nodes=2, plugins=[sky.plugins.jax()]) as pool:
        results = partial_sums(values) @ pool
    for r in results:
        print(f"process {r['process']} of {r['processes']}: total={r['total']}")
    print(f"expected total={sum(v * v for v in values)}")
    return results


if __name__ == "__main__":
    main()
