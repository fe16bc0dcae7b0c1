"""`Simulated`: thousands of nodes in one client process — a simulation, and named as one.

No machine is provisioned and no process is started: each node's worker is the real worker-side
logic (the protocol `Connection` of the worker role, the daemon's unpickle/run/result path,
`instance_info`, output, heartbeats) run inside the client's event loop over an in-memory transport
(`skyhive.runtime.kinds.simulated.transport`, reach kind "simulated"). What it is for: measuring and testing
the control plane (pool actor, node actors, scheduling, the event log) at the scale clusters reach,
and exercising the supervision and provider policies with failures injected per node:

- `nodes_latency`: each node's start-up delay in seconds — a number (every node the same) or a
  `(low, high)` pair drawn uniformly per node from a `random.Random(seed)`, so a run is repeatable.
- `fail`: {node: stage} — that node fails at `stage`: "launch" (the launch request is refused naming
  the node), "wait_running" (the provider reports it "failed"), "connecting" (its transport refuses
  the connection for good) or "bootstrapping" (preparing its environment fails).
- `die_at`: {node: n} — that node's worker dies (its pipe closes, exit -9) when its n-th task arrives.
- `hang_at`: {node: n} — that node's worker stops answering anything (tasks, heartbeats) from its n-th
  task on: only the heartbeat watchdog can tell.
  Both strike the node's first worker process only: the one its supervisor starts after it is fresh.
- `spares`: how many replacement nodes (`Pool(replace_failed=True)`) it gives a pool; None (the
  default): any number. One more is refused with `ProvisionError(kind="capacity")`.

Faults are injected into the first node launched for an index; a replacement is a fresh machine.

Simulated nodes live as long as the client process: `list_owned` after a crash finds nothing.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import anyio

from .features import Feature, Features
from .base import ClusterSpec, NodeHandle, Provider, ProvisionError, Reach

__all__ = ["Simulated", "SimulatedReach", "STAGES"]

#: The stages at which `Simulated(fail={node: stage})` can fail a node.
STAGES = ("launch", "wait_running", "connecting", "bootstrapping")


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulatedReach(Reach):
    """A node served by the in-memory "simulated" transport; carries the node's injected faults."""

    kind: ClassVar[str] = "simulated"
    fail_stage: str = ""  # "connecting" | "bootstrapping" | ""
    die_at: int = 0  # the worker dies when its n-th task arrives (0: never)
    hang_at: int = 0  # the worker goes silent from its n-th task on (0: never)


class Simulated(Provider):
    """Simulated nodes (see the module docstring): cheap enough for 10,000 in one process."""

    name = "simulated"
    #: in-process nodes: one `terminate` for all of them; never kept
    features = Features(Feature.BULK_TEARDOWN,
                        cannot={Feature.KEEP: "simulated nodes live inside the client's process and end with it"})
    state_map = {"pending": "provisioning", "running": "running", "terminated": "terminated",
                 "failed": "failed"}

    @property
    def max_nodes(self) -> int:
        """100,000 (nodes in this process; `SKYHIVE_MAX_NODES` configures another bound)."""
        from .limits import configured_max_nodes

        return configured_max_nodes(100_000)

    def __init__(self, *, nodes_latency: float | tuple[float, float] = 0.0, seed: int = 0,
                 fail: Mapping[int, str] | None = None, die_at: Mapping[int, int] | None = None,
                 hang_at: Mapping[int, int] | None = None, spares: int | None = None) -> None:
        fail = dict(fail or {})
        for node, stage in fail.items():
            if stage not in STAGES:
                raise ValueError(f"Simulated(fail={{{node}: {stage!r}}}): the stage must be one of {', '.join(STAGES)}")
        for what, table in (("die_at", die_at or {}), ("hang_at", hang_at or {})):
            for node, n in table.items():
                if not isinstance(n, int) or n < 1:
                    raise ValueError(f"Simulated({what}={{{node}: {n!r}}}): the task number must be an int >= 1")
        if isinstance(nodes_latency, (tuple, list)):  # a list: rebuilt from the event log's JSON
            nodes_latency = (float(nodes_latency[0]), float(nodes_latency[1]))
            low, high = nodes_latency
            if not 0 <= low <= high:
                raise ValueError(f"Simulated(nodes_latency={nodes_latency!r}): need 0 <= low <= high")
        elif nodes_latency < 0:
            raise ValueError(f"Simulated(nodes_latency={nodes_latency!r}): a delay cannot be negative")
        self.nodes_latency = nodes_latency
        self.seed = seed
        self.fail = fail
        self.die_at = dict(die_at or {})
        self.hang_at = dict(hang_at or {})
        if spares is not None and (isinstance(spares, bool) or not isinstance(spares, int) or spares < 0):
            raise ValueError(f"Simulated(spares={spares!r}): need a whole number >= 0, or None")
        self.spares = spares
        self.live: dict[str, set[int]] = {}  # pool id -> nodes launched and not terminated
        self.launched: dict[str, dict[int, int]] = {}  # pool id -> node -> launches (> 1: replaced)

    def __repr__(self) -> str:
        return f"Simulated(nodes_latency={self.nodes_latency!r}, seed={self.seed})"

    def delays(self, nodes: int) -> list[float]:
        """Each node's start-up delay (repeatable: drawn from `random.Random(seed)`)."""
        if not isinstance(self.nodes_latency, tuple):
            return [float(self.nodes_latency)] * nodes
        rng = random.Random(self.seed)
        low, high = self.nodes_latency
        return [rng.uniform(low, high) for _ in range(nodes)]

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        launched = self.launched.setdefault(spec.pool_id, {})
        again = [i for i in nodes if launched.get(i)]  # replacements: fresh machines, no faults
        used = sum(n - 1 for n in launched.values())
        if again and self.spares is not None and used + len(again) > self.spares:
            raise ProvisionError(f"simulated provider: no spare node left for node(s) {again} "
                                 f"(spares={self.spares}, {used} used)", node=again[0], kind="capacity")
        refused = [i for i in nodes if self.fail.get(i) == "launch" and i not in again]
        if refused:
            raise ProvisionError(f"simulated provider: launch refused for node(s) {refused} (injected failure)",
                                 node=refused[0])
        delays = self.delays(max(nodes, default=-1) + 1)
        live = self.live.setdefault(spec.pool_id, set())
        handles = []
        for i in nodes:
            fresh = i in again
            stage = "" if fresh else self.fail.get(i, "")
            reach = SimulatedReach(fail_stage=stage if stage in ("connecting", "bootstrapping") else "",
                                   die_at=0 if fresh else self.die_at.get(i, 0),
                                   hang_at=0 if fresh else self.hang_at.get(i, 0))
            n = launched[i] = launched.get(i, 0) + 1
            handles.append(NodeHandle(node=i, provider_id=f"sim-{spec.pool_id}-{i}" + (f".{n - 1}" if n > 1 else ""),
                                      private_addr="", reach=reach, state="pending",
                                      extra={"delay": delays[i], "fail": stage}))
            live.add(i)
        return handles

    async def wait_running(self, handle: NodeHandle, report: Callable[[str], None]) -> NodeHandle:
        delay = handle.extra.get("delay", 0.0)
        if delay:
            await anyio.sleep(delay)
        if handle.extra.get("fail") == "wait_running":
            report("failed")
            raise ProvisionError(f"node {handle.node}: simulated node failed while starting (injected failure)",
                                 node=handle.node)
        report("running")
        return NodeHandle(node=handle.node, provider_id=handle.provider_id, private_addr=f"sim-{handle.node}",
                          reach=handle.reach, state="running", extra=handle.extra)

    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        for h in handles:
            pool_id = h.provider_id.split("-", 1)[1].rsplit("-", 1)[0] if h.provider_id.startswith("sim-") else ""
            self.live.get(pool_id, set()).discard(h.node)

    async def list_owned(self, pool_id: str) -> list[NodeHandle]:
        return [NodeHandle(node=i, provider_id=f"sim-{pool_id}-{i}", private_addr=f"sim-{i}",
                           reach=SimulatedReach(), state="running") for i in sorted(self.live.get(pool_id, ()))]

    def describe(self) -> dict[str, Any]:
        return {"provider": self.name, "nodes_latency": self.nodes_latency, "seed": self.seed}
