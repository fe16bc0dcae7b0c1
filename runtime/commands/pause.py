"""`skyhive stop NAME` and `skyhive start NAME`: a named pool paused and resumed.

A cloud pool whose provider offers `Feature.STOP` (AWS): its workers, agent and watchdog are ended, then its
instances stopped — their disks kept (billed for storage only), nothing terminated; `start` starts the
same instances (the same ids), and the pool is created again over them: bootstrap finds what it cached
on their disks, new detached workers, a new record with the same instance ids. A provider that cannot
stop says so (`Provider.features`) and nothing is touched: `skyhive down NAME` is its way out.

A pool on fixed machines (Local, SSH hosts, another kind's nodes): `stop` ends its workers, agent and
watchdog (the machines stay as they are, the bootstrap caches on them kept); `start` starts new workers on
the same nodes, as the kind that keeps the pool finds them again (`KeepSupport.relaunch_provider`). Both
ask the pool's `KeptPool`, never the record's shape.

While stopped, the record stays (`stopped="stop"`), so `status` lists the pool as STOPPED, `skyhive
ssh` still knows its hosts, and `down` finishes it (a stopped cloud pool's instances are terminated).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TextIO


from ...providers.base import Provider
from ..clusters import record as records
from ..clusters.kept_pool import KeptPool
from ..common import bridge
from ..clusters.named import live_workers, new_kept_pool
from ..clusters.stop import stop_pool

__all__ = ["stop_cluster", "start_cluster", "STOPPED"]

STOPPED = "stop"  # the record's `stopped` after `skyhive stop`

def _say(err: TextIO, text: str) -> None:
    err.write(f"skyhive: {text}\n")
    err.flush()


def stop_cluster(name: str, *, provider: Provider | None = None, err: TextIO | None = None) -> None:
    """`skyhive stop NAME` (see the module docstring). `provider` replaces the one rebuilt from the
    record (tests). Raises `PoolNotFound`, `PoolInUse` (a client is attached), or `ValueError` for a
    provider that cannot stop (nothing touched)."""
    err = err or sys.stderr
    kept = KeptPool.load(name)
    rec = kept.rec
    machines = kept.stoppable(provider)  # (None: fixed machines, nothing to stop there)
    if rec.stopped == STOPPED:
        _say(err, f"pool {name} is stopped already")
        return
    lock = records.AttachLock(name, who="skyhive stop")
    if not lock.try_acquire():
        raise lock.busy()
    try:
        ended = stop_pool(name, why=f"skyhive stop {name}", keep_machines=True)
        if machines is not None:
            kept.stop_machines(machines)
        records.save(dataclasses.replace(rec, stopped=STOPPED, watchdog_pid=0))
    finally:
        lock.release()
    if machines is not None:
        _say(err, f"pool {name}: stopped ({ended} process{'es' if ended != 1 else ''} ended; instances "
                  f"{', '.join(kept.machines)} stopped, "
                  f"their disks kept: billed for storage only until `skyhive start {name}` or `skyhive down {name}`)")
    else:
        _say(err, f"pool {name}: stopped ({ended} process{'es' if ended != 1 else ''} ended; the nodes and their "
                  f"caches kept; `skyhive start {name}` starts it again)")


def start_cluster(name: str, *, provider: Provider | None = None, err: TextIO | None = None) -> None:
    """`skyhive start NAME` (see the module docstring). `provider` replaces the one rebuilt from the
    record (tests). Raises `PoolNotFound`, or `ValueError` when the pool runs."""
    err = err or sys.stderr
    from ..clusters.stop import stopped_by_shutdown

    rec = stopped_by_shutdown(records.load(name))  # autostop on its instances shut them down: stopped
    kept = KeptPool(rec)
    if not rec.stopped and rec.workers and (not kept.here or live_workers(rec)):
        raise ValueError(f"pool {name!r} is not stopped (`skyhive stop {name}` first, or `skyhive status`)")
    base, said = kept.relaunch_provider(provider)  # its machines started again, or its nodes found again
    if said:
        _say(err, f"pool {name}: {said}")
    # the pool is created again over the same nodes: its record is written anew (the jobs stay)
    (records.cluster_dir(name) / "record.json").unlink()
    from ..pool import Pool

    async def create() -> None:
        async with new_kept_pool(Pool, name, rec.nodes, spec=rec.spec, autostop=rec.autostop_minutes,
                                 autostop_down=rec.autostop_down, provider=base):
            pass

    try:
        bridge.run(create)
    except BaseException:
        try:
            records.load(name)
        except Exception:  # noqa: BLE001 - nothing recorded by the failed start: the old record back
            records.save(rec)
        raise
    _say(err, f"pool {name}: started ({rec.nodes} node{'s' if rec.nodes != 1 else ''})")
