"""`Delegating`: a provider that is another one with one thing changed — what every wrapper of a provider
(a Spec's candidate: `runtime/spec.py`'s `SpecProvider`; a named pool's: `runtime/clusters/kept.py`'s
`KeptProvider`) builds on, so that each says only what it changes.

Every phase, policy and machine operation of `Provider` goes to `inner`; the request a phase gets passes
through `request` first (a Spec's candidate puts its own fields in); `avoiding` wraps what the inner
provider returns again (`rewrap`). The provider's class-level facts (its name, what it chooses, its
features, ...) are read from `inner` when the wrapper is made. `tests/providers/test_delegating.py` holds
that a method added to `Provider` is forwarded here too (a wrapper that silently took `Provider`'s default —
"stop is not offered", "no volumes" — was how a wrapped pool lost what its provider can do).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .base import ClusterSpec, NodeHandle, Provider

__all__ = ["Delegating", "FACTS"]

#: The class-level facts of a provider, read through to the wrapped one (with the derived old names of
#: `Provider.features`, which some readers still use).
FACTS = ("name", "transient_errors", "retry", "state_map", "chooses", "advisory", "features", "resource_options",
         "connect_retry", "unsupported", "can_stop", "opens_ports", "fixed_machines", "bulk_teardown", "node_homes",
         "same_machine", "interruption_notices")


class Delegating(Provider):
    """`inner`, with what a subclass changes (see the module docstring)."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        for fact in FACTS:
            vars(self)[fact] = getattr(inner, fact)

    def request(self, spec: ClusterSpec) -> ClusterSpec:
        """The request `inner` gets for `spec` (default: the same)."""
        return spec

    @abc.abstractmethod
    def rewrap(self, inner: Provider) -> Provider:
        """This wrapper around another provider (what `avoiding` returns around `inner.avoiding(...)`)."""

    # ---- facts that live on the wrapped provider ----------------------------------------------------

    @property
    def max_nodes(self) -> int:
        return self.inner.max_nodes

    @property  # type: ignore[override]
    def shutdown_behavior(self) -> str:  # what the machines do on an OS shutdown: set on the wrapped provider
        return self.inner.shutdown_behavior

    @shutdown_behavior.setter
    def shutdown_behavior(self, value: str) -> None:
        self.inner.shutdown_behavior = value

    # ---- the phases -----------------------------------------------------------------------------------

    def plan(self, spec: ClusterSpec) -> Mapping[str, Any]:
        return self.inner.plan(self.request(spec))

    async def prepare(self, spec: ClusterSpec) -> None:
        await self.inner.prepare(self.request(spec))

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        return await self.inner.launch(self.request(spec), nodes)

    def head_port(self, spec: ClusterSpec) -> int:
        return self.inner.head_port(self.request(spec))

    def start_early(self, pool_id: str, nodes: int, workers_per_node: int, argv: Sequence[str],
                    env: Mapping[str, str]) -> None:
        self.inner.start_early(pool_id, nodes, workers_per_node, argv, env)

    def end_early(self, pool_id: str) -> None:
        self.inner.end_early(pool_id)

    async def wait_running(self, handle: NodeHandle, report: Callable[[str], None]) -> NodeHandle:
        return await self.inner.wait_running(handle, report)

    async def bootstrapped(self, handle: NodeHandle) -> None:
        await self.inner.bootstrapped(handle)

    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        await self.inner.terminate(handles)

    async def cleanup(self, pool_id: str) -> None:
        await self.inner.cleanup(pool_id)

    def released(self, pool_id: str, handles: Sequence[NodeHandle]) -> None:
        self.inner.released(pool_id, handles)

    async def list_owned(self, pool_id: str) -> list[NodeHandle]:
        return await self.inner.list_owned(pool_id)

    async def down(self, pool_id: str) -> list[NodeHandle]:
        return await self.inner.down(pool_id)

    async def node_problem(self, handle: NodeHandle) -> str | None:
        return await self.inner.node_problem(handle)

    async def owned_summary(self, pool_id: str) -> str | None:
        return await self.inner.owned_summary(pool_id)

    async def machines_gone(self, handles: Sequence[NodeHandle]) -> dict[int, str]:
        return await self.inner.machines_gone(handles)

    # ---- the machines of a kept pool ------------------------------------------------------------------

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

    def find_volume(self, name: str) -> Any:
        return self.inner.find_volume(name)

    def delete_volume(self, name: str) -> None:
        self.inner.delete_volume(name)

    # ---- policy ---------------------------------------------------------------------------------------

    def is_transient(self, exc: BaseException) -> bool:
        return self.inner.is_transient(exc)

    def lifecycle_state(self, provider_state: str) -> str | None:
        return self.inner.lifecycle_state(provider_state)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()  # `skyhive down` of the pool's log rebuilds the plain provider

    def avoiding(self, lost: Sequence[NodeHandle]) -> Provider:
        return self.rewrap(self.inner.avoiding(lost))

    async def sweep_lost(self, pool_id: str, lost: Sequence[NodeHandle]) -> None:
        await self.inner.sweep_lost(pool_id, lost)

    def avoid_in_place(self, lost: Sequence[NodeHandle]) -> None:
        self.inner.avoid_in_place(lost)

    def for_nodes(self, nodes: int) -> Provider:
        return self.inner.for_nodes(nodes)  # for `skyhive down`: the plain provider, narrowed
