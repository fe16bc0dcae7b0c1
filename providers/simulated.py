"""`Simulated`: nodes that are not processes — for measuring the control plane at 10,000 nodes.

A FAKE provider, by design: nothing real runs where a simulated node "is". Each node's worker is the
real worker-side logic (the protocol `Connection` of the worker role, the shared task core, heartbeats)
run inside the client's event loop over an in-memory transport (`runtime/transport/memory.py`).
Per node: a start-up delay (fixed, or drawn from a seeded uniform range), a stage at which it fails,
and a task at which its worker dies or hangs.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from ..errors import NodeUnreachable, ProvisionError
from .base import ClusterSpec, NodeHandle, Provider, Reach

__all__ = ["Simulated", "SimulatedReach", "STAGES"]

#: Where a simulated node can be made to fail.
STAGES = ("launch", "wait_running", "connecting", "bootstrapping")


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulatedReach(Reach):
    """A simulated node: how its in-memory worker behaves."""

    kind: ClassVar[str] = "simulated"
    fail_stage: str | None = None
    die_at_task: int | None = None  # the worker "exits" on receiving its n-th task (0-based)
    hang_at_task: int | None = None  # the worker stops answering anything at its n-th task


class Simulated(Provider):
    """Simulated nodes (a fake provider: see the module docstring).

    Args:
        delay: each node's start-up delay in seconds: a number, or a ``(low, high)`` range drawn per
            node from a `random.Random(seed)`.
        fail: node index -> stage (one of `STAGES`) at which that node fails.
        die_at: node index -> task number (0-based, per worker) on which its worker dies.
        hang_at: node index -> task number on which its worker hangs (stops answering heartbeats).
        seed: seed for the drawn delays.
    """

    name = "simulated"

    def __init__(self, *, delay: float | tuple[float, float] = 0.0, fail: Mapping[int, str] | None = None,
                 die_at: Mapping[int, int] | None = None, hang_at: Mapping[int, int] | None = None,
                 seed: int = 0) -> None:
        fail = dict(fail or {})
        for node, stage in fail.items():
            if stage not in STAGES:
                raise ValueError(f"Simulated(fail=...): node {node}: stage {stage!r} is not one of {', '.join(STAGES)}")
        if isinstance(delay, tuple):
            low, high = delay
            if not 0 <= low <= high:
                raise ValueError(f"Simulated(delay={delay!r}): need 0 <= low <= high")
            rng = random.Random(seed)
            self._delay: Callable[[int], float] = lambda i: random.Random(rng.random() + i).uniform(low, high)
        elif delay < 0:
            raise ValueError(f"Simulated(delay={delay!r}): a delay cannot be negative")
        else:
            self._delay = lambda i: float(delay)
        self.delay, self.fail, self.seed = delay, fail, seed
        self.die_at, self.hang_at = dict(die_at or {}), dict(hang_at or {})

    def __repr__(self) -> str:
        return f"Simulated(delay={self.delay!r}, fail={len(self.fail)} nodes)"

    def _check(self, node: int, stage: str) -> None:
        if self.fail.get(node) == stage:
            raise ProvisionError(f"simulated node {node} failed at {stage} (Simulated(fail=...))", node=node)

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        """Handles for the nodes (declared in `Provider.launch`); a node set to fail at launch raises."""
        for i in nodes:
            self._check(i, "launch")
        return [
            NodeHandle(node=i, provider_id=f"sim-{spec.pool_id}-{i}", private_addr="127.0.0.1",
                       reach=SimulatedReach(fail_stage=self.fail.get(i), die_at_task=self.die_at.get(i),
                                            hang_at_task=self.hang_at.get(i)))
            for i in nodes
        ]

    async def wait_running(self, handle: NodeHandle, report: Callable[[str], None]) -> NodeHandle:
        """Wait out the node's start-up delay; a node set to fail here raises."""
        delay = self._delay(handle.node)
        if delay:
            await asyncio.sleep(delay)
        self._check(handle.node, "wait_running")
        return handle

    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        """Nothing to do: the node actors stop the in-memory workers."""
        return None

    def head_port(self, spec: ClusterSpec) -> int:
        return 0


def connect_failure(node: int) -> NodeUnreachable:
    """The error a node set to fail at "connecting" raises (used by the memory transport)."""
    return NodeUnreachable(f"simulated node {node} does not answer (Simulated(fail=...: 'connecting'))", node=node)
