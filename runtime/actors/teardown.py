"""Tearing down a pool's nodes together: drain every node's workers, close the transports, give the
nodes back to the provider.

Draining runs in the caller's task for all nodes at once: every worker is asked to shut down, all are
waited for under one deadline, what is left is killed and waited for once more. A task per node that
did the same (and another per node to terminate it) was 20,000 tasks for a 10,000-node pool, alive
together, whose objects the garbage collector walked in full passes. Closing transports and
terminating take a task per node (remote nodes need them concurrently: a cloud confirms each
termination), except for a provider that declares `Feature.BULK_TEARDOWN` (nodes in this process):
its transports are closed one after another and all its nodes terminated in one call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio

from ...providers.base import Provider
from ...providers.features import Feature
from .node import NodeActor, stop_nodes
from .provisioning import with_retries

log = logging.getLogger("skyhive.pool")

__all__ = ["stop_nodes", "release_nodes"]  # (stop_nodes lives beside NodeActor.stop, which is it for one node)


async def release_nodes(nodes: Sequence[NodeActor], provider: Provider) -> list[str]:
    """Close each stopped node's transport and terminate it: terminating -> terminated. Returns the
    errors of the terminations that failed (never raises for the provider's failure)."""
    if Feature.BULK_TEARDOWN in provider.features:
        for node in nodes:
            await node.close_transport()
        return await _terminate_in_bulk(nodes, provider)
    errors: list[str] = []

    async def release(node: NodeActor) -> None:
        await node.close_transport()
        failed = await node.terminate()
        if failed:
            errors.append(failed)

    async with anyio.create_task_group() as tg:
        for node in nodes:
            tg.start_soon(release, node)
    return errors


async def _terminate_in_bulk(nodes: Sequence[NodeActor], provider: Provider) -> list[str]:
    """All nodes terminated by one `provider.terminate` call; if it fails, node by node, so that each
    failure is recorded on its own node."""
    handles = [handle for node in nodes if (handle := node.begin_terminate()) is not None]
    try:
        if handles:
            await with_retries(provider, f"terminate {len(handles)} nodes", lambda: provider.terminate(handles))
    except Exception as exc:
        log.warning("%s provider: terminating %d nodes at once failed (%s): node by node now", provider.name,
                    len(handles), exc)
        errors: list[str] = []
        for node in nodes:
            failed = await node.terminate()
            if failed:
                errors.append(failed)
        return errors
    for node in nodes:
        node.end_terminate("")
    return []
