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
from ..nodes.keep import KeepContext, KeepSupport, keep_support

__all__ = ["KeptProvider", "keeper_of_handle"]

#: The class-level facts of a provider, read through to the wrapped one.
_FACTS = ("name", "transient_errors", "retry", "state_map", "chooses", "advisory", "features", "resource_options",
          "connect_retry")


def keeper_of_handle(handle: NodeHandle, pool: str) -> KeepSupport:
    """The keep support of `handle`'s kind. Raises `ProvisionError` naming the pool, the node and the
    kind when that kind declares none."""
    kind = type(handle.reach).kind
    support = keep_support(kind)
    if support is None:
        raise ProvisionError(f"pool {pool}: node {handle.node} is reached as {kind!r}, a kind of node that declares "
                             "no keep support: its pool cannot outlive the client", node=handle.node)
    return support


class KeptProvider(Provider):
    """`inner` whose running nodes are a named pool's (see the module docstring)."""

    def __init__(self, inner: Provider, ctx: KeepContext) -> None:
        self.inner = inner
        self.ctx = ctx
        self.keeper: KeepSupport | None = None
        self._on_launch: Callable[[KeepSupport, Provider], None] | None = None
        for fact in _FACTS:
            if hasattr(inner, fact):
                vars(self)[fact] = getattr(inner, fact)

    def __repr__(self) -> str:
        return f"KeptProvider({self.inner!r}, pool={self.ctx.pool!r})"

    def __getattr__(self, name: str) -> Any:  # the wrapped provider's own options (region, hosts, ...)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property  # type: ignore[override]
    def shutdown_behavior(self) -> str:  # what the machines do on an OS shutdown: set on the wrapped provider
        return self.inner.shutdown_behavior

    @shutdown_behavior.setter
    def shutdown_behavior(self, value: str) -> None:
        self.inner.shutdown_behavior = value

    @property
    def max_nodes(self) -> int:
        return self.inner.max_nodes

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

    async def prepare(self, spec: ClusterSpec) -> None:
        await self.inner.prepare(spec)

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        handles = await self.inner.launch(spec, nodes)
        keeper = keep_support(type(handles[0].reach).kind) if handles and self._on_launch is not None else None
        if keeper is not None and self._on_launch is not None:  # (a kind without one fails in `wait_running`)
            on_launch, self._on_launch = self._on_launch, None
            on_launch(keeper, self.inner)
        return handles

    async def wait_running(self, handle: NodeHandle, report: Callable[[str], None]) -> NodeHandle:
        return self._keep(await self.inner.wait_running(handle, report))

    async def bootstrapped(self, handle: NodeHandle) -> None:
        await self.inner.bootstrapped(handle)

    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        await self.inner.terminate(handles)

    async def cleanup(self, pool_id: str) -> None:
        await self.inner.cleanup(pool_id)

    async def list_owned(self, pool_id: str) -> list[NodeHandle]:
        return await self.inner.list_owned(pool_id)

    async def node_problem(self, handle: NodeHandle) -> str | None:
        return await self.inner.node_problem(handle)

    async def owned_summary(self, pool_id: str) -> str | None:
        return await self.inner.owned_summary(pool_id)

    async def machines_gone(self, handles: Sequence[NodeHandle]) -> dict[int, str]:
        return await self.inner.machines_gone(handles)

    async def stop_nodes(self, ids: Sequence[str]) -> None:
        await self.inner.stop_nodes(ids)

    async def start_nodes(self, ids: Sequence[str]) -> None:
        await self.inner.start_nodes(ids)

    async def open_ports(self, pool_id: str, ports: Sequence[tuple[int, int]]) -> list[str]:
        return await self.inner.open_ports(pool_id, ports)

    async def node_states(self, ids: Sequence[str]) -> dict[str, str]:
        return await self.inner.node_states(ids)

    async def set_shutdown_behavior(self, ids: Sequence[str], behavior: str) -> None:
        await self.inner.set_shutdown_behavior(ids, behavior)

    def is_transient(self, exc: BaseException) -> bool:
        return self.inner.is_transient(exc)

    def lifecycle_state(self, provider_state: str) -> str | None:
        return self.inner.lifecycle_state(provider_state)

    def head_port(self, spec: ClusterSpec) -> int:
        return self.inner.head_port(spec)

    def plan(self, spec: ClusterSpec) -> Any:
        return self.inner.plan(spec)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()  # `skyhive down` of the pool's log rebuilds the plain provider

    def avoiding(self, lost: Sequence[NodeHandle]) -> Provider:
        return KeptProvider(self.inner.avoiding(lost), self.ctx)

    async def sweep_lost(self, pool_id: str, lost: Sequence[NodeHandle]) -> None:
        await self.inner.sweep_lost(pool_id, lost)

    def avoid_in_place(self, lost: Sequence[NodeHandle]) -> None:
        self.inner.avoid_in_place(lost)

    def for_nodes(self, nodes: int) -> Provider:
        return self.inner.for_nodes(nodes)
