"""Reach kind "slurm" (nodes of a `sky.Slurm` allocation): its transport factory, as registered in
`registry` (bootstrap is skyhive's, over the transport's shell). Mode 1 (`SlurmReach.login` is None): srun on this machine (`srun`). Mode 2:
srun on the login node over SSH (`srun_ssh`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....providers.base import NodeHandle
from ....providers.slurm import SlurmReach
from ...nodes.transport import Transport
from .srun import NodeWatch, SrunTransport

if TYPE_CHECKING:
    from ...nodes.context import NodeContext

__all__ = ["srun_transport"]


def srun_transport(handle: NodeHandle, ctx: NodeContext) -> Transport:
    """The registered factory for reach kind "slurm" (see `registry`): Mode 1 (srun here) or Mode 2
    (srun on the login node over SSH)."""
    reach = handle.reach
    assert isinstance(reach, SlurmReach)
    if reach.login is None:
        watch = NodeWatch(lambda: ctx.provider.node_problem(handle), interval=ctx.settings.heartbeat_interval,
                          grace=ctx.settings.stop_timeout, spawn=ctx.spawn)
        return SrunTransport(reach, redact=ctx.log.redact, watch=watch)
    from .srun_ssh import SrunSSHTransport

    return SrunSSHTransport(reach, pool_id=ctx.pool_id, settings=ctx.settings)
