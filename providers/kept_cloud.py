"""A cloud pool kept after its client leaves (`Pool(sky.AWS(...), name=..., keep=True)`, `skyhive launch -c
NAME --provider aws`): the provider's instances, with their workers as detached daemons.

`kept_cloud(provider, ...)` returns the same provider (same instances, same tags, same teardown on a
failed start) whose running nodes are reached as a named pool's: an SSH node (`SSHReach`) becomes a
`KeptSSHReach` (a socket per (pool, node, rank) on the instance, no idle timeout) and the instance's own
idle watchdog is left out — it powers the instance off once no SSH client is connected, which a kept pool
has between clients; the pool's autostop replaces it. A node this machine reaches as a local worker (the
tests' instances mapped to local processes) becomes a `DetachedLocalReach`.

Attaching and `skyhive down` never need the cloud to find the nodes: the record holds the instance ids,
the addresses, the host keys and the provider's description (no credentials); `down` terminates the
recorded instance ids (`runtime/clusters/cloud.py`).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Callable
from typing import Any

from .base import DetachedLocalReach, LocalReach, NodeHandle, Provider, ProvisionError, SSHReach
from .ssh_cluster import KeptSSHReach

__all__ = ["kept_cloud", "KeptCloud"]


class KeptCloud:
    """Mixin over a cloud provider's class (see `kept_cloud`): running nodes reached as a named pool's."""

    kept_pool: str
    kept_socket_dir: str
    kept_cluster: str

    async def wait_running(self, handle: NodeHandle, report: Callable[[str], None]) -> NodeHandle:
        running = await super().wait_running(handle, report)  # type: ignore[misc]
        return self.keep_handle(running)

    def keep_handle(self, handle: NodeHandle) -> NodeHandle:
        reach = handle.reach
        if isinstance(reach, SSHReach) and not isinstance(reach, KeptSSHReach):
            fields = {f.name: getattr(reach, f.name) for f in dataclasses.fields(reach)}
            fields.update(idle_timeout=float("inf"), idle_shutdown=0.0, keep_env=True)
            kept: Any = KeptSSHReach(**fields, cluster=self.kept_cluster, pool=self.kept_pool)
        elif type(reach) is LocalReach:
            kept = DetachedLocalReach(cwd=reach.cwd or os.getcwd(), build_env=reach.build_env,
                                      socket_dir=self.kept_socket_dir)
        else:
            raise ProvisionError(f"pool {self.kept_pool}: node {handle.node} is reached as {reach.kind!r}, which a "
                                 f"kept pool cannot outlive", node=handle.node)
        return dataclasses.replace(handle, reach=kept)


def kept_cloud(provider: Provider, *, pool: str, socket_dir: str, cluster: str) -> Provider:
    """`provider` (a cloud provider, its options and state shared) whose running nodes are a named
    pool's: see the module docstring."""
    cls = type(f"Kept{type(provider).__name__}", (KeptCloud, type(provider)), {"__module__": __name__})
    kept = cls.__new__(cls)
    kept.__dict__.update(copy.copy(provider.__dict__))  # the same options and state, as `copy.copy` would
    kept.kept_pool, kept.kept_socket_dir, kept.kept_cluster = pool, socket_dir, cluster  # type: ignore[attr-defined]
    return kept
