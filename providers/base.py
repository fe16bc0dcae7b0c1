"""The provider interface: where nodes come from.

Each operation is declared once here, with its contract; every provider (Local, SSH, the clouds,
Simulated) implements the same operations in its own small module. Records crossing the boundary are
frozen dataclasses: what to create (`ClusterSpec`), what was created and how to reach it (`NodeHandle`
with a `LocalReach` or `SSHReach`).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from ..protocol.errors import SkyhiveError

__all__ = ["ProvisionError", "ClusterSpec", "LocalReach", "SSHReach", "NodeHandle", "Provider"]


class ProvisionError(SkyhiveError):
    """A node could not be created, reached or set up. The message names the node/host and the cause."""

    def __init__(self, message: str, *, host: str | None = None, node: int | None = None) -> None:
        super().__init__(message)
        self.host = host
        self.node = node


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    """What the pool asks a provider for."""

    pool_id: str
    nodes: int
    processes_per_node: int = 1
    accelerator: str | None = None
    tags: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalReach:
    """The node is this machine: workers are local subprocesses."""

    cwd: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SSHReach:
    """The node is reached over SSH."""

    host: str
    port: int = 22
    user: str | None = None
    key: str | None = None
    known_hosts: str | None = None
    host_key: str | None = None  # a pinned public key, when the provider knows it
    python: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeHandle:
    """A created node: its index in the pool, the provider's id, its addresses and how to reach it."""

    node: int
    provider_id: str
    private_addr: str  # what peers use (MASTER_ADDR, peers list)
    reach: LocalReach | SSHReach
    accelerators: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


class Provider(abc.ABC):
    """Where nodes come from. Blocking SDK calls run in worker threads, never on the event loop."""

    #: Short name shown in events and `skyhive ls`.
    name: str = "provider"

    @abc.abstractmethod
    async def create(self, spec: ClusterSpec) -> list[NodeHandle]:
        """Create (or claim) `spec.nodes` nodes and return them once running, node 0 (the head) first.

        Raises `ProvisionError` naming the node and the cause; whatever was created before the error
        has been destroyed when it is raised.
        """

    @abc.abstractmethod
    async def destroy(self, handles: list[NodeHandle]) -> None:
        """Destroy what `create` made. Idempotent; never raises for a node that is already gone."""

    async def list_owned(self, pool_id: str) -> list[NodeHandle]:
        """The nodes this provider holds for `pool_id` (found by tag), for cleaning up after a crash."""
        return []

    def head_port(self, spec: ClusterSpec) -> int:
        """The coordination port on the head node (MASTER_PORT, the JAX coordinator)."""
        return 29500

    def describe(self) -> dict[str, Any]:
        """Plain values that identify this provider's configuration (for the event log)."""
        return {"provider": self.name}
