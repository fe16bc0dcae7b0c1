"""`skyhive stop NAME` and `skyhive start NAME`: a named pool paused and resumed.

A cloud pool whose provider offers `Feature.STOP` (AWS): its workers, agent and watchdog are ended, then its
instances stopped — their disks kept (billed for storage only), nothing terminated; `start` starts the
same instances (the same ids), and the pool is created again over them: bootstrap finds what it cached
on their disks, new detached workers, a new record with the same instance ids. A provider that cannot
stop says so (`Provider.features`) and nothing is touched: `skyhive down NAME` is its way out.

A Local or SSH pool: `stop` ends its workers, agent and watchdog (the machines stay as they are, the
bootstrap caches on them kept); `start` starts new workers on the same nodes.

While stopped, the record stays (`stopped="stop"`), so `status` lists the pool as STOPPED, `skyhive
ssh` still knows its hosts, and `down` finishes it (a stopped cloud pool's instances are terminated).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TextIO, TypeVar


from ...errors import PoolGone
from ...providers.base import NodeHandle, Provider
from ...providers.features import Feature
from ..clusters import record as records
from ..common import bridge
from ..clusters.named import live_workers, new_kept_pool
from ..clusters.stop import stop_pool

__all__ = ["stop_cluster", "start_cluster", "STOPPED"]

STOPPED = "stop"  # the record's `stopped` after `skyhive stop`

T = TypeVar("T")


def _run(make: Callable[[], Awaitable[T]]) -> T:
    return bridge.run(make, thread=True, name="skyhive-pause")


def _say(err: TextIO, text: str) -> None:
    err.write(f"skyhive: {text}\n")
    err.flush()


def _cloud(rec: records.ClusterRecord, provider: Provider | None) -> Provider:
    from ...providers.registry import from_description

    cloud = provider or from_description(rec.provider_info["cloud"])
    if Feature.STOP not in cloud.features:
        raise ValueError(f"pool {rec.name!r}: provider {cloud.name!r} cannot stop its machines and start the same "
                         f"ones again; `skyhive down {rec.name}` ends the pool (its instances terminated)")
    return cloud


def stop_cluster(name: str, *, provider: Provider | None = None, err: TextIO | None = None) -> None:
    """`skyhive stop NAME` (see the module docstring). `provider` replaces the one rebuilt from the
    record (tests). Raises `PoolNotFound`, `PoolInUse` (a client is attached), or `ValueError` for a
    provider that cannot stop (nothing touched)."""
    err = err or sys.stderr
    rec = records.load(name)
    cloud = _cloud(rec, provider) if rec.instances else None
    if rec.stopped == STOPPED:
        _say(err, f"pool {name} is stopped already")
        return
    lock = records.AttachLock(name, who="skyhive stop")
    if not lock.try_acquire():
        raise lock.busy()
    try:
        ended = stop_pool(name, why=f"skyhive stop {name}", keep_machines=True)
        if cloud is not None:
            _run(lambda: cloud.stop_nodes(rec.instances))
        records.save(dataclasses.replace(rec, stopped=STOPPED, watchdog_pid=0))
    finally:
        lock.release()
    if cloud is not None:
        _say(err, f"pool {name}: stopped ({ended} processes ended; instances {', '.join(rec.instances)} stopped, "
                  f"their disks kept: billed for storage only until `skyhive start {name}` or `skyhive down {name}`)")
    else:
        _say(err, f"pool {name}: stopped ({ended} processes ended; the nodes and their caches kept; "
                  f"`skyhive start {name}` starts it again)")


def _resumed(provider: Provider, ids: Sequence[str]) -> Provider:
    """`provider` whose `launch` hands out the pool's existing instances `ids` (by their node tag)
    instead of creating new ones."""
    base = type(provider)

    async def launch(self: Any, spec: Any, nodes: Sequence[int]) -> list[NodeHandle]:
        listed = await self.call(self.list_sync, spec.pool_id, None)
        by_node = {h.node: h for h in listed if h.provider_id in ids}
        missing = [n for n in nodes if n not in by_node]
        if missing:
            raise PoolGone(f"pool {spec.pool_id!r}: nodes {missing} have no instance among {', '.join(ids)} any more")
        return [by_node[n] for n in nodes]

    cls = type(f"Resumed{base.__name__}", (base,), {"launch": launch, "__module__": __name__})
    resumed = cls.__new__(cls)
    resumed.__dict__.update(provider.__dict__)
    return resumed


def _hosts_provider(rec: records.ClusterRecord) -> Provider:
    """A plain SSH provider over the SSH pool's recorded hosts, their host keys pinned (a known_hosts
    file of the pool's, written from the record)."""
    from ...paths import private_dir
    from ...providers.ssh import SSH
    from ..clusters.sshfiles import hosts_path, node_addresses

    info = rec.provider_info
    private_dir("ssh")
    known = hosts_path(rec.name)  # (removed with the pool's other SSH files, at `down`)
    lines = []
    for a in node_addresses(rec):
        where = a.host if a.port == 22 else f"[{a.host}]:{a.port}"
        if a.host_key:
            lines.append(f"{where} {a.host_key}\n")
    fd = os.open(known, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write("".join(lines))
    os.chmod(known, 0o600)
    return SSH(hosts=list(info["hosts"]), key=info.get("key"), known_hosts=str(known), python=info.get("python"),
               use_agent=bool(info.get("use_agent")), connect_timeout=float(info.get("connect_timeout", 10.0)))


def start_cluster(name: str, *, provider: Provider | None = None, err: TextIO | None = None) -> None:
    """`skyhive start NAME` (see the module docstring). `provider` replaces the one rebuilt from the
    record (tests). Raises `PoolNotFound`, or `ValueError` when the pool runs."""
    err = err or sys.stderr
    from ..clusters.stop import stopped_by_shutdown

    rec = stopped_by_shutdown(records.load(name))  # autostop on its instances shut them down: stopped
    if not rec.stopped and rec.workers and (rec.on_hosts or live_workers(rec)):
        raise ValueError(f"pool {name!r} is not stopped (`skyhive stop {name}` first, or `skyhive status`)")
    if rec.instances:
        cloud = _cloud(rec, provider)
        _run(lambda: cloud.start_nodes(rec.instances))
        _say(err, f"pool {name}: instances {', '.join(rec.instances)} running again")
        base: Provider = _resumed(cloud, rec.instances)
    elif rec.on_hosts:
        base = provider or _hosts_provider(rec)
    else:
        from ...providers.local import Local

        base = provider or Local(cwd=rec.cwd)
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
