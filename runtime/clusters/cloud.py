"""A kept cloud pool's instances: terminated by their recorded ids (`skyhive down NAME`, autostop of a
cloud pool, a client that forgets the pool), with the provider rebuilt from the description in the
record (no credentials there: the cloud SDK finds them as for any pool).

Nothing is recorded as done that the provider has not confirmed: when terminating the instances, or
deleting the pool's security group and key pair, fails, the record is kept and marked `leaking` (what
may still run), the pool's log says `leaking` too (`skyhive ls` shows it without -a), and the caller
gets `TeardownIncomplete`; a later `skyhive down NAME` retries, and forgets the pool only once the
provider confirms (instances terminated, shutting down or not found; the shared resources deleted).

This module is the kept pool's machines (`kept_pool.KeptPool` asks it): what the record holds of machines
made to order (`machine_fields`: the provider's description, the instance ids, what a machine runs to power
itself off), whatever kind keeps their workers; nothing else reads those fields."""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from ...errors import PoolGone, TeardownIncomplete
from ...providers.base import LocalReach, NodeHandle, Provider
from ...providers.features import Feature
from ...providers.registry import from_description
from ..common import bridge
from ..events.log import pool_log_path, read_log
from ..events.state import fold
from ..events.types import PoolStopped, to_json
from . import record as records
from .record import ClusterRecord

__all__ = ["terminate_instances", "can_stop", "SHARED", "stop_instances", "shutdown_behavior", "instance_states",
           "machine_fields", "instance_ids", "machines_provider", "start_instances", "resumed_provider"]

log = logging.getLogger("skyhive.clusters")

#: What `leaking` names for the pool's security group and key pair (as an ordinary pool's log does).
SHARED = "shared resources"
#: What a machine runs to power itself off when its provider's description names nothing else.
POWER_OFF = "sudo shutdown -h now"


def machine_fields(provider: Provider, handles: Sequence[NodeHandle]) -> dict[str, Any]:
    """What the record of a new kept pool on `provider` holds of its machines, merged into its
    `provider_info`: nothing for fixed machines (your hosts, this machine); for machines made to order,
    the provider's description (rebuilt, credentials aside, to stop or terminate them), their ids (what
    `down` terminates) and what one runs to power itself off (the autostop watchdog on it: `power_off`)."""
    if Feature.CREATES_MACHINES not in provider.features:
        return {}
    described = provider.describe()
    return {"cloud": described, "instances": [h.provider_id for h in handles],
            "power_off": str(described.get("shutdown_command") or POWER_OFF)}


def instance_ids(rec: ClusterRecord) -> list[str]:
    """The ids of the pool's machines made to order ([] for a pool on fixed machines)."""
    return [str(i) for i in rec.provider_info.get("instances", ())]


def machines_provider(rec: ClusterRecord) -> Provider:
    """The provider of the pool's machines, rebuilt from the record's description."""
    return from_description(rec.provider_info["cloud"])


def terminate_instances(rec: ClusterRecord, *, why: str = "") -> list[str]:
    """Terminate the instances of the cloud pool `rec` and wait until none is pending or running; then
    the pool's cloud resources (security group, key pair) when nothing else of the pool's tag is left;
    then the pool's log records its nodes terminated (with `why`), once the provider confirmed it.
    Returns the instance ids. When the provider fails either step, the record is kept, marked leaking
    (and the pool's log too), and `TeardownIncomplete` names the pool, what may still run and the
    provider's error."""
    ids = instance_ids(rec)
    if not ids:
        return []
    provider = machines_provider(rec)
    handles = [NodeHandle(node=i, provider_id=pid, private_addr="", reach=LocalReach(), extra={"pool_id": rec.name})
               for i, pid in enumerate(ids)]
    leaked: list[str] = [*ids, SHARED]  # until the provider confirms each step

    async def main() -> None:
        await provider.terminate(handles)  # returns once none is pending or running (or found)
        del leaked[:-1]
        if not await provider.list_owned(rec.name):
            await provider.cleanup(rec.name)
        leaked.clear()

    try:
        bridge.run(main, thread=True, name="skyhive-cloud")
    except Exception as exc:  # noqa: BLE001 - whatever failed, the record stays until the provider confirms
        cause = f"{type(exc).__name__}: {exc}" if not str(exc).startswith(provider.name) else str(exc)
        mark_leaking(rec, tuple(leaked), cause)
        left = [i for i in leaked if i != SHARED]
        what = [f"instances {', '.join(left)} may still run (and cost)"] if left else []
        what += ["its security group and key pair may be left"] if SHARED in leaked else []
        raise TeardownIncomplete(
            f"pool {rec.name!r}: the {provider.name} provider did not confirm the pool gone: {' and '.join(what)} "
            f"({cause}). The record is kept, shown leaking by `skyhive ls` and `skyhive status`; run "
            f"`skyhive down {rec.name}` again once {provider.name} answers", pool_id=rec.name, leaked=leaked) from exc
    log.info("pool %s: instances %s terminated", rec.name, ", ".join(ids))
    from .closing import close_log

    close_log(rec.name, why=why or f"instances {', '.join(ids)} terminated", destroy=False)
    return ids


def mark_leaking(rec: ClusterRecord, leaked: tuple[str, ...], cause: str) -> None:
    """Keep the record with `leaking` set, and end the pool's log with a `PoolStopped` naming `leaked`
    (its status `leaking`: `skyhive ls` lists it without -a)."""
    records.save(dataclasses.replace(rec, leaking=leaked))
    log.error("pool %s: leaking %s: %s", rec.name, ", ".join(leaked), cause)
    path = pool_log_path(rec.name)
    if not path.is_file():
        return
    with open(path, "r+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # as `skyhive down` holds it while it appends
        size = fh.seek(0, os.SEEK_END)
        if size:  # a torn last line (a client killed mid-write): dropped, so ours starts a line
            fh.seek(max(0, size - 65536))
            tail = fh.read()
            cut = size - (len(tail) - (tail.rfind(b"\n") + 1)) if b"\n" in tail else size
            if cut < size:
                fh.truncate(cut)
        state = fold(read_log(path))
        event = PoolStopped(pool_id=rec.name, seq=state.last_seq + 1, ts=time.time(),
                            error=f"skyhive down {rec.name}: {cause}", leaked=leaked)
        fh.seek(0, os.SEEK_END)
        fh.write((to_json(event) + "\n").encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())


def _cloud_call(make: Any) -> Any:
    return bridge.run(make, thread=True, name="skyhive-cloud")


def can_stop(rec: ClusterRecord) -> bool:
    """Whether the provider of the cloud pool `rec` can stop its machines (`Feature.STOP`)."""
    return Feature.STOP in machines_provider(rec).features


def stop_instances(rec: ClusterRecord, provider: Provider | None = None) -> bool:
    """Stop the instances of the cloud pool `rec` (disks kept) and wait until each is stopped, where its
    provider (`provider`, else the one rebuilt from the record) can (`Feature.STOP`); False (nothing
    done) where it cannot."""
    provider = provider or machines_provider(rec)
    if Feature.STOP not in provider.features:
        return False
    _cloud_call(lambda: provider.stop_nodes(instance_ids(rec)))
    return True


def shutdown_behavior(rec: ClusterRecord, behavior: str) -> None:
    """What an OS shutdown of the cloud pool's instances does from now on ("stop": disks kept, or
    "terminate"), where its provider can stop machines; a provider that cannot keeps terminating (a
    warning says so when "stop" was asked)."""
    provider = machines_provider(rec)
    if Feature.STOP not in provider.features:
        if behavior == "stop":
            log.warning("pool %s: provider %s cannot stop machines: its autostop takes the pool down", rec.name,
                        provider.name)
        return
    _cloud_call(lambda: provider.set_shutdown_behavior(instance_ids(rec), behavior))


def instance_states(rec: ClusterRecord) -> dict[str, str] | None:
    """The provider's state of each instance of the cloud pool `rec` ("running", "stopped", ...), where
    its provider can stop machines; None where it cannot, or when it does not answer (a warning)."""
    provider = machines_provider(rec)
    if Feature.STOP not in provider.features:
        return None
    try:
        return dict(_cloud_call(lambda: provider.node_states(instance_ids(rec))))
    except Exception as exc:  # noqa: BLE001 - the cloud not answering leaves the record as it says
        log.warning("pool %s: could not ask %s for its instances' states: %s", rec.name, provider.name, exc)
        return None


def start_instances(rec: ClusterRecord, provider: Provider | None = None) -> Provider:
    """Start the stopped machines of the pool `rec` (the same ids, disks kept) with `provider` (None: the one
    rebuilt from the record), and return the provider whose `launch` hands them out again (`skyhive start`).
    Raises `ValueError` naming the pool for a provider that cannot stop and start machines."""
    cloud = stoppable(rec, provider)
    ids = instance_ids(rec)
    _cloud_call(lambda: cloud.start_nodes(ids))
    return resumed_provider(cloud, ids)


def stoppable(rec: ClusterRecord, provider: Provider | None = None) -> Provider:
    """The provider of the pool's machines (`provider`, or rebuilt from the record); `ValueError` naming the
    pool when it cannot stop its machines and start the same ones again."""
    cloud = provider or machines_provider(rec)
    if Feature.STOP not in cloud.features:
        raise ValueError(f"pool {rec.name!r}: provider {cloud.name!r} cannot stop its machines and start the same "
                         f"ones again; `skyhive down {rec.name}` ends the pool (its instances terminated)")
    return cloud


def resumed_provider(provider: Provider, ids: Sequence[str]) -> Provider:
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

    cls = type(f"Resumed{base.__name__}", (base,), {"launch": launch, "__module__": base.__module__})
    resumed = object.__new__(cls)
    resumed.__dict__.update(provider.__dict__)
    return resumed
