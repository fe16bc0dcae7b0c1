"""Reach kind "slurm" (nodes of a `sky.Slurm` allocation): its transport factory and bootstrap, as
registered in `registry`. Mode 1 (`SlurmReach.login` is None): srun on this machine (`srun`). Mode 2:
srun on the login node over SSH (`srun_ssh`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....providers.base import NodeHandle
from ....providers.slurm import SlurmReach
from ...nodes.transport import Transport
from .srun import NodeWatch, SrunTransport

if TYPE_CHECKING:
    from ...nodes.context import NodeContext

__all__ = ["srun_transport", "bootstrap_srun"]


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


async def bootstrap_srun(ctx: NodeContext, node: int, transport: Transport) -> str:
    """The bootstrap registered for reach kind "slurm". Mode 1: the nodes run this interpreter (a
    shared file system), so the image is checked here as for Local. Mode 2: the SSH bootstrap on the
    login node, whose home the nodes share."""
    if isinstance(transport, SrunTransport):
        from ..local.bootstrap import bootstrap_local

        return await bootstrap_local(ctx, node, transport)
    from ..ssh.bootstrap import bootstrap_node

    return await bootstrap_node(ctx, node, transport)


