"""The provider of a new named pool (`Pool(name=..., keep=True)`, `skyhive launch -c NAME`): any provider
that offers `Feature.KEEP` (`Provider.features`), its running nodes handed to the keep support of their kind
(`runtime/nodes/keep.py`) so that their workers outlive the client.

`KeptProvider` wraps the provider (composition: the same object makes, waits for and terminates the
machines, its options and state shared); only a running node's handle changes (`wait_running`), e.g. an
SSH node becomes a `KeptSSHReach` (a socket per (pool, node, rank), no idle timeout) and a Local node a
`DetachedLocalReach`. The kind that keeps the nodes is the one their reach names; all nodes of a pool are
kept by one kind (the record says which: `ClusterRecord.keeper`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...errors import ProvisionError
from ...providers.base import ClusterSpec, NodeHandle, Provider
from ...providers.delegating import Delegating
from ..nodes.keep import KeepContext, KeepSupport, keep_support

__all__ = ["KeptProvider", "keeper_of_handle"]

def keeper_of_handle(handle: NodeHandle, pool: str) -> KeepSupport:
    """The keep support of `handle`'s kind. Raises `ProvisionError` naming the pool, the node and the
    kind when that kind declares none."""
    kind = type(handle.reach).kind
    support = keep_support(kind)
    if support is None:
        raise ProvisionError(f"pool {pool}: node {handle.node} is reached as {kind!r}, a kind of node that declares "
                             "no keep support: its pool cannot outlive the client", node=handle.node)
    return support


class KeptProvider(Delegating):
    """`inner` whose running nodes are a named pool's (see the module docstring)."""

    def __init__(self, inner: Provider, ctx: KeepContext) -> None:
        super().__init__(inner)
        self.ctx = ctx
        self.keeper: KeepSupport | None = None
        self._on_launch: Callable[[KeepSupport, Provider], None] | None = None

    def __repr__(self) -> str:
        return f"KeptProvider({self.inner!r}, pool={self.ctx.pool!r})"

    def __getattr__(self, name: str) -> Any:  # the wrapped provider's own options (region, hosts, ...)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def rewrap(self, inner: Provider) -> Provider:
        return KeptProvider(inner, self.ctx)

    def on_launch(self, call: Callable[[KeepSupport, Provider], None]) -> None:
        """Call `call(keeper, inner)` once the first nodes are launched, before any of their workers starts."""
        self._on_launch = call

    def _keep(self, handle: NodeHandle) -> NodeHandle:
        keeper = keeper_of_handle(handle, self.ctx.pool)
        if self.keeper is None:
            self.keeper = keeper
        elif type(keeper) is not type(self.keeper):
            raise ProvisionError(f"pool {self.ctx.pool}: node {handle.node} would be kept by kind {keeper.kind!r}, the "
                                 f"pool's other nodes by {self.keeper.kind!r}: one named pool is kept by one kind",
                                 node=handle.node)
        return keeper.keep_handle(handle, self.ctx)

    # ---- the phases: the wrapped provider's, a running node kept ----------------------------------------

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        handles = await self.inner.launch(spec, nodes)
        keeper = keep_support(type(handles[0].reach).kind) if handles and self._on_launch is not None else None
        if keeper is not None and self._on_launch is not None:  # (a kind without one fails in `wait_running`)
            on_launch, self._on_launch = self._on_launch, None
            on_launch(keeper, self.inner)
        return handles

    async def wait_running(self, handle: NodeHandle, report: Callable[[str], None]) -> NodeHandle:
        return self._keep(await self.inner.wait_running(handle, report))
