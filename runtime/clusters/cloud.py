"""A kept cloud pool's instances: terminated by their recorded ids (`skyhive down NAME`, autostop of a
cloud pool, a client that forgets the pool), with the provider rebuilt from the description in the
record (no credentials there: the cloud SDK finds them as for any pool)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging

from ...providers.base import LocalReach, NodeHandle
from ...providers.registry import from_description
from .record import ClusterRecord

__all__ = ["terminate_instances"]

log = logging.getLogger("skyhive.clusters")


def terminate_instances(rec: ClusterRecord) -> list[str]:
    """Terminate the instances of the cloud pool `rec` and wait until none is pending or running; then
    the pool's cloud resources (security group, key pair) when nothing else of the pool's tag is left.
    Returns the instance ids. Raises the provider's error naming what failed (the record is kept)."""
    ids = rec.instances
    if not ids:
        return []
    provider = from_description(rec.provider_info["cloud"])
    handles = [NodeHandle(node=i, provider_id=pid, private_addr="", reach=LocalReach(), extra={"pool_id": rec.name})
               for i, pid in enumerate(ids)]

    async def main() -> None:
        await provider.terminate(handles)
        if not await provider.list_owned(rec.name):
            await provider.cleanup(rec.name)

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="skyhive-cloud") as ex:
        ex.submit(asyncio.run, main()).result()
    log.info("pool %s: instances %s terminated", rec.name, ", ".join(ids))
    return ids
