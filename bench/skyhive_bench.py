"""skyhive, through its public API only - the code a user writes:

    import skyhive as sky
    async with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        await pool.run(f)             # rtt
        await pool.broadcast(f)       # broadcast2: list, one per node
        await pool.map(f, items)      # map10k: list, input order
        await pool.broadcast(g, arr)  # arg100m: the 100 MiB array to both nodes

The pool object is handed to the same measuring loop as every other system (bench.common); first,
rtt and broadcast2 are also taken in alternating rounds with the floor (`bench.floor_turns`: a
`FloorPool` in a process of its own), the processes pinned to one core or to two (`measure_paired`).
cold: ``async with sky.Pool(provider=sky.Local(), nodes=2)`` entered -> first ``pool.run(f)``,
in a fresh process, after the import (`load`: ``import skyhive``, ``sky.Pool``, ``sky.Local`` and
``sky.preload()``, the runtime that ``sky.Pool`` imported when the row was defined and a pool's start has
imported since its workers start first; the import is the runner's ``import_s``). A script's whole life,
imports included, is the ``script`` row (`bench/script_life.py`).
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import LocalTurns, Params, measure_paired, measure_warm, nop


def load() -> Any:
    """Import skyhive, or raise ImportError saying why it cannot be benchmarked."""
    try:
        import skyhive as sky
    except Exception as exc:
        raise ImportError(f"import skyhive: {type(exc).__name__}: {exc}"
                          " — is it installed (pip install -e .)?") from exc
    where = getattr(sky, "__file__", None) or list(getattr(sky, "__path__", []))
    for name in ("Pool", "Local"):
        try:
            getattr(sky, name)
        except AttributeError:
            raise ImportError(f"skyhive ({where}) has no sky.{name} yet") from None
        except Exception as exc:  # the public names are imported lazily
            raise ImportError(f"sky.{name}: {type(exc).__name__}: {exc}"
                              " — is it installed (pip install -e .)?") from exc
    sky.preload()  # the runtime (see the module's docstring: what `cold` leaves out, as it always did)
    return sky


async def warm(params: Params, record: Any, log: Any) -> None:
    from bench.floor_turns import FloorTurns

    sky = load()
    async with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        # rtt and broadcast2 again, in rounds taken in turn with the floor's (its client in a process
        # of its own), pinned: the ratio to the floor that holds whatever the machine does meanwhile
        floor = FloorTurns()
        try:
            sky_pids = [w.pid for node in pool.state.nodes for w in node.workers]
            await measure_paired({"skyhive": LocalTurns(pool, sky_pids), "floor": floor}, params, record)
        finally:
            floor.close()
        await measure_warm(pool, params, record, log)


async def cold() -> dict:
    sky = load()
    t0 = time.perf_counter()
    async with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        r = await pool.run(nop)
        t1 = time.perf_counter()
    t2 = time.perf_counter()
    assert r == 1, r
    return {"cold_s": t1 - t0, "shutdown_s": t2 - t1}
