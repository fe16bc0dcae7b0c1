"""skyhive's bootstrap for any kind of node that declares `registry.BOOTSTRAP_OVER_SHELL` (the pool's node
actor hands it to `NodeKind.bootstrap_node`): the node's `Shell` says
whether it shares this machine's Python (checked or built here, `here.py`) or not (the Image built on
the node over the shell, `remote.py`); the result is handed back to the transport (`Transport.use_env`)
by the registry. No transport class is asked about: a new kind gets bootstrap by giving its transport a
shell."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..nodes.shell import Prepared

if TYPE_CHECKING:
    from ..nodes.context import NodeContext
    from ..nodes.transport import Transport

__all__ = ["bootstrap_node"]


async def bootstrap_node(ctx: NodeContext, node: int, transport: Transport) -> Prepared:
    """Prepare node `node` over its transport's shell; the `ready` detail and the workers' `NodeEnv`."""
    shell = transport.shell()
    if shell.same_machine:
        if ctx.image is None:  # this Python as it is: nothing to check or build (nor to import for it)
            return Prepared()
        from .here import prepare_here

        return await prepare_here(ctx, node, shell)
    from .remote import prepare_remote

    return await prepare_remote(ctx, node, shell)
