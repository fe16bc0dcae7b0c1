"""`Staged`: a test provider — a fake cloud, in-process, whose nodes are real local worker processes.

Nothing real provisions machines here, so this provider only pretends to: `launch` hands out ids,
`wait_running` reports cloud-like states ("pending", then "running"), and every phase can be told to
fail, to fail transiently a few times, or to come up late — per node and per stage. The nodes it
returns are reached either as Local nodes (`reach="local"`) or through the reach kind "staged", whose
transport (registered by `register_staged_transport`) wraps the real `LocalTransport` but refuses the
first connections like a fresh VM whose sshd is still starting.

Every call is recorded in `calls` so tests can see which phases ran for which nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import anyio

from skyhive.providers.base import (
    ClusterSpec,
    LocalReach,
    NodeHandle,
    NodeUnreachable,
    Provider,
    ProvisionError,
    Reach,
    RetryPolicy,
)

__all__ = ["Staged", "Throttled", "StagedReach", "register_staged_transport"]


class Throttled(Exception):
    """The fake cloud's "slow down" error: listed in `Staged.transient_errors`, so it is retried."""


class Broken(Exception):
    """An error the fake cloud does not list as transient: never retried."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StagedReach(Reach):
    """A node served by the "staged" transport: local workers behind a connect that refuses at first."""

    kind: ClassVar[str] = "staged"
    cwd: str | None = None
    refuse_connects: int = 0  # connections refused before one succeeds


class Staged(Provider):
    """A fake cloud for tests (see the module docstring).

    - `fail`: {(stage, node)} — that stage raises `ProvisionError` for that node (node -1: every node;
      stages "prepare", "launch", "wait_running", "terminate", "cleanup").
    - `transient`: {(stage, node): n} — the first n calls raise `Throttled` (retried), then succeed.
    - `broken`: {(stage, node)} — raises `Broken`, an error not in `transient_errors` (not retried).
    - `late`: {node: n} — `wait_running` reports "pending" n times (a short sleep each) before "running".
    - `final_state`: {node: state} — `wait_running` reports this state and never runs ("terminated").
    - `reach`: "local", or "staged" with `refuse_connects` refused connections per node.
    """

    name = "staged"
    transient_errors = (Throttled,)
    retry = RetryPolicy(attempts=3, initial_delay=0.01, max_delay=0.02)
    state_map = {"pending": "provisioning", "running": "running", "shutting-down": "terminating",
                 "terminated": "terminated", "error": "failed"}

    def __init__(self, *, fail: set[tuple[str, int]] | None = None,
                 transient: dict[tuple[str, int], int] | None = None,
                 broken: set[tuple[str, int]] | None = None, late: dict[int, int] | None = None,
                 final_state: dict[int, str] | None = None, reach: str = "local", refuse_connects: int = 0,
                 connect_retry: float = 0.0) -> None:
        self.fail = fail or set()
        self.transient = dict(transient or {})
        self.broken = broken or set()
        self.late = late or {}
        self.final_state = final_state or {}
        self.reach = reach
        self.refuse_connects = refuse_connects
        self.connect_retry = connect_retry  # type: ignore[misc]  # per instance, for tests
        self.calls: list[tuple[str, int]] = []
        self.live: set[int] = set()  # nodes launched and not terminated

    def __repr__(self) -> str:
        return "Staged()"

    def _enter(self, stage: str, node: int) -> None:
        self.calls.append((stage, node))
        for key in ((stage, node), (stage, -1)):
            if key in self.fail:
                raise ProvisionError(f"node {node}: staged failure at {stage}", node=node)
            if key in self.broken:
                raise Broken(f"node {node}: broken at {stage}")
            if self.transient.get(key, 0) > 0:
                self.transient[key] -= 1
                raise Throttled(f"node {node}: throttled at {stage}")

    async def prepare(self, spec: ClusterSpec) -> None:
        self._enter("prepare", -1)

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        self._enter("launch", -1)
        handles = []
        for i in nodes:
            reach: Reach = (StagedReach(refuse_connects=self.refuse_connects) if self.reach == "staged"
                            else LocalReach())
            handles.append(NodeHandle(node=i, provider_id=f"staged-{spec.pool_id}-{i}", private_addr="",
                                      reach=reach, state="pending"))
            self.live.add(i)
        return handles

    async def wait_running(self, handle, report):
        self._enter("wait_running", handle.node)
        for _ in range(self.late.get(handle.node, 0)):
            report("pending")
            await anyio.sleep(0.01)
        if handle.node in self.final_state:
            report(self.final_state[handle.node])
            await anyio.sleep(60)  # a provider that never returns: the mapped state must end it
        report("running")
        return NodeHandle(node=handle.node, provider_id=handle.provider_id, private_addr="127.0.0.1",
                          reach=handle.reach, state="running")

    async def bootstrapped(self, handle: NodeHandle) -> None:
        self._enter("bootstrapped", handle.node)

    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        for h in handles:
            self._enter("terminate", h.node)
            self.live.discard(h.node)

    async def cleanup(self, pool_id: str) -> None:
        self._enter("cleanup", -1)

    async def list_owned(self, pool_id: str) -> list[NodeHandle]:
        self.calls.append(("list_owned", -1))
        return [NodeHandle(node=i, provider_id=f"staged-{pool_id}-{i}", private_addr="127.0.0.1",
                           reach=LocalReach()) for i in sorted(self.live)]


def register_staged_transport() -> None:
    """Register reach kind "staged": the real LocalTransport, whose `connect` refuses the first
    `refuse_connects` attempts with `NodeUnreachable` (as a fresh VM's sshd does)."""
    from skyhive.runtime.kinds.local.transport import LocalTransport
    from skyhive.runtime.nodes.registry import register_transport

    class RefusingLocalTransport(LocalTransport):
        def __init__(self, refuse: int, **kw) -> None:
            super().__init__(**kw)
            self.refuse = refuse
            self.attempts = 0

        async def connect(self) -> None:
            self.attempts += 1
            if self.attempts <= self.refuse:
                raise NodeUnreachable(f"staged node: connection refused (attempt {self.attempts})")

    def factory(handle, ctx):
        return RefusingLocalTransport(handle.reach.refuse_connects, cwd=handle.reach.cwd, redact=ctx.log.redact)

    register_transport("staged", factory)
