"""A named pool on SSH hosts, seen from a command that holds no connection to them: rebuild its
provider from the record (pinned host keys), find which of its workers still run, stop it on every host.

The calls here are synchronous (the CLI's and the autostop's); each runs its SSH logins on an event loop
of its own in a worker thread, so they also work when called from inside a running loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ...errors import SSHError
from ...providers.ssh_cluster import SSHCluster, sweep_script
from .record import ClusterRecord, WorkerEntry

__all__ = ["provider_of", "live_remote", "stop_remote"]

T = TypeVar("T")


def _run(make: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await make()

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="skyhive-cluster") as ex:
        return ex.submit(asyncio.run, main()).result()


def provider_of(rec: ClusterRecord, *, attach: bool = True) -> SSHCluster:
    """The provider that reaches the hosts of the SSH pool `rec` (its host keys pinned)."""
    return SSHCluster.from_record(rec.provider_info, pool=rec.name, cluster=rec.cluster, host_keys=rec.host_keys,
                                  attach=attach)


def live_remote(rec: ClusterRecord) -> tuple[list[WorkerEntry], list[str]]:
    """(the workers of `rec` still serving their socket, the hosts that could not be asked and why).
    A worker on a host that cannot be reached counts as not live."""
    provider = provider_of(rec)
    script = sweep_script(rec.cluster, rec.name, "list", 0)
    nodes = sorted({w.node for w in rec.workers})

    async def look() -> tuple[list[WorkerEntry], list[str]]:
        live: list[WorkerEntry] = []
        errors: list[str] = []

        async def one(node: int) -> None:
            try:
                out = await provider._sweep(provider.hosts[node], script)
            except SSHError as exc:
                errors.append(str(exc))
                return
            serving = [ln for ln in out.splitlines() if ln.startswith("P ") and "skyhive.runtime.worker.server" in ln]
            live.extend(w for w in rec.workers if w.node == node and any(f" {w.socket} " in f"{ln} " for ln in serving))

        await asyncio.gather(*(one(n) for n in nodes))
        return sorted(live, key=lambda w: (w.node, w.rank)), errors

    return _run(look)


def stop_remote(rec: ClusterRecord) -> tuple[list[str], list[str]]:
    """Stop the SSH pool `rec` on each of its hosts: its processes, socket directory, jobs' working
    directories. (what was done per host, failures naming the host)."""
    provider = provider_of(rec)
    return _run(lambda: provider.down(rec.nodes))


def describe(rec: ClusterRecord) -> dict[str, Any]:
    """Where the pool runs, for `skyhive status`."""
    return {"hosts": list(rec.provider_info.get("hosts", ()))[: rec.nodes]}
