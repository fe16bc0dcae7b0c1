"""Which nodes a pool starts with: all it asked for, or — with `Pool(min_nodes=M)` — those that
could be provisioned, when at least M could.

Without `min_nodes` (or with `min_nodes == nodes`) any node that fails fails the pool, as before.
With `min_nodes < nodes`, a node that fails before its workers start — its launch refused or left
out by the provider, `wait_running`, connecting, bootstrapping — is *dropped*: it is recorded
(`NodeStateChanged` "failed" with the reason, then `NodeDropped`), given back to its provider at
once (terminating -> terminated), and the pool goes on with the others. `skyhive ls` counts dropped
nodes and the timeline ends their lanes at the failure. As soon as more nodes failed than
`nodes - min_nodes`, the pool fails with a `ProvisionError` naming every failed node and why (and
destroys what it made, as any failed start does).

The nodes the pool keeps are its *members*. Workers are told their place among the members:
`instance_info().node` counts them 0..k-1 and `total_nodes` is k, so ranks stay contiguous for
distributed frameworks; `peers` lists the members only. The pool's own node indices (events,
`skyhive ls`, errors, `WorkerLost.node`) stay those of the request, 0..nodes-1.

Workers need every peer's address, so they wait at a barrier (`wait_addresses`): with every node
required, until every node runs (a node's workers may start while others still bootstrap); with
`min_nodes`, until every node has either finished bootstrapping or been dropped — the membership
is settled before any worker hears of it. A node whose workers then fail to start was already
announced to its peers: that fails the pool, as without `min_nodes`.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import TYPE_CHECKING

import anyio

from ...protocol.info import InstanceInfo, Peer
from ...providers.base import ClusterSpec, NodeHandle, Provider, ProvisionError
from ..events.types import NodeDropped
from ..events.lifecycle import NodeState
from .provisioning import with_retries

if TYPE_CHECKING:
    from .node import NodeActor

__all__ = ["Membership"]

log = logging.getLogger("skyhive.pool")

#: Reasons spelled out in the error of a pool that could not reach `min_nodes` (every node is named).
REASONS_SHOWN = 20


class Membership:
    """The pool's members and the address barrier (see the module docstring). Used by the pool actor."""

    def __init__(self, *, pool_id: str, spec: ClusterSpec, provider: Provider, min_nodes: int,
                 infos: MutableMapping[tuple[int, int], InstanceInfo]) -> None:
        self.pool_id = pool_id
        self.spec = spec
        self.provider = provider
        self.min_nodes = min_nodes
        self.infos = infos
        self.handles: dict[int, NodeHandle] = {}  # node -> handle, once the node runs
        self.dropped: dict[int, str] = {}  # node -> why it was left out
        # an elastic pool's indices that are not members now: growing into them, or given back (autoscale.py)
        self.outside: set[int] = set()
        self.arrived: set[int] = set()  # nodes waiting at the barrier
        self.known = anyio.Event()  # set once every member's `InstanceInfo` is in `infos`

    def __repr__(self) -> str:
        return f"<Membership {self.spec.nodes - len(self.dropped)}/{self.spec.nodes} min_nodes={self.min_nodes}>"

    @property
    def partial(self) -> bool:
        """True when the pool may start without some of its nodes."""
        return self.min_nodes < self.spec.nodes

    @property
    def allowance(self) -> int:
        """How many nodes may be left out (`nodes - min_nodes`)."""
        return self.spec.nodes - self.min_nodes

    def is_member(self, index: int) -> bool:
        return index not in self.dropped

    # ---- the barrier ----------------------------------------------------------------------------

    def running(self, handle: NodeHandle) -> None:
        """A node runs and has its addresses (`NodeContext.node_running`)."""
        self.handles[handle.node] = handle
        if self.known.is_set():  # a replacement (`replace_failed`): the peers' view gets its address
            if handle.node not in self.dropped:
                self._describe()
            return
        self._check()

    async def wait_addresses(self, index: int) -> None:
        """Node `index` is ready to start its workers: wait until every member's info is known."""
        if not self.known.is_set():
            self.arrived.add(index)
            self._check()
        await self.known.wait()

    def _check(self) -> None:
        if self.known.is_set():
            return
        nodes = self.spec.nodes
        if self.partial:
            settled = len(self.arrived) + len(self.dropped) == nodes
        else:
            settled = len(self.handles) == nodes
        if settled:
            self._describe()
            self.known.set()

    def _describe(self) -> None:
        spec = self.spec
        # (an elastic pool's nodes added later have indices past spec.nodes: every running node counts)
        members = [self.handles[i] for i in sorted(self.handles) if i not in self.dropped]
        head = members[0]
        # picked once: a node replaced later (`actors/replace.py`) keeps the pool's coordination port
        port = next(iter(self.infos.values())).head_port if self.infos else self.provider.head_port(spec)
        peers = tuple(Peer(node=rank, addr=h.private_addr, accelerators=h.accelerators)
                      for rank, h in enumerate(members))
        for rank, h in enumerate(members):
            for local in range(spec.processes_per_node):
                self.infos[(h.node, local)] = InstanceInfo(
                    node=rank, total_nodes=len(members), head_addr=head.private_addr, head_port=port,
                    pool_id=self.pool_id, accelerators=h.accelerators, peers=peers, local_rank=local,
                    processes_per_node=spec.processes_per_node, accelerator=h.accelerator,
                )

    def leave(self, index: int) -> None:
        """Node `index` was given back (an elastic pool shrank): workers started later no longer see it
        among their peers (those running keep the view they started with)."""
        self.handles.pop(index, None)

    # ---- dropping -------------------------------------------------------------------------------

    def may_drop(self) -> bool:
        """Whether one more node may be left out (before the barrier, within `nodes - min_nodes`)."""
        return self.partial and not self.known.is_set() and len(self.dropped) < self.allowance

    async def drop(self, node: NodeActor, why: str) -> None:
        """Leave `node` out: record it failed and dropped, and give it back to its provider now."""
        if node.state not in (NodeState.FAILED, NodeState.TERMINATING, NodeState.TERMINATED):
            node.move(NodeState.FAILED, detail=why)
        self.dropped[node.index] = why
        self.arrived.discard(node.index)
        node.ctx.log.emit(NodeDropped, node=node.index, reason=why, min_nodes=self.min_nodes)
        log.warning("pool %s: node %d is left out (min_nodes=%d): %s", self.pool_id, node.index, self.min_nodes, why)
        self._check()
        with anyio.CancelScope(shield=True):  # what was made for it must go, whatever happens next
            await node.stop(node.ctx.settings.stop_timeout)
            failed = await node.terminate()
        if not failed:
            node.handle = None  # given back: the pool's close has nothing left to terminate for it

    def too_few(self, failed: dict[int, str]) -> ProvisionError:
        """The error of a pool that cannot have `min_nodes`: names every failed node, and why."""
        everyone = {**self.dropped, **failed}
        nodes = sorted(everyone)
        reasons = "; ".join(f"node {i}: {everyone[i]}" for i in nodes[:REASONS_SHOWN])
        more = f"; and {len(nodes) - REASONS_SHOWN} more (skyhive events {self.pool_id})" if len(nodes) > REASONS_SHOWN else ""
        return ProvisionError(
            f"pool {self.pool_id}: {len(nodes)} of {self.spec.nodes} nodes failed to start (nodes "
            f"{', '.join(map(str, nodes))}); min_nodes={self.min_nodes} allows {self.spec.nodes - self.min_nodes}: "
            f"{reasons}{more}", node=nodes[0])

    # ---- launch ---------------------------------------------------------------------------------

    async def launch(self, nodes: list[NodeActor]) -> list[NodeHandle]:
        """The pool's one `launch` request. With `min_nodes`, a launch refused naming one node
        (`ProvisionError.node`) drops that node and asks again for the others, and nodes the
        provider left out of its answer are dropped, while `min_nodes` allows. An answer that cannot
        be used is terminated at once and raises `ProvisionError`."""
        provider, spec = self.provider, self.spec
        asked = [i for i in range(spec.nodes) if i not in self.dropped]
        while True:
            try:
                handles = await with_retries(provider, "launch", lambda: provider.launch(spec, asked))
            except ProvisionError as exc:
                if exc.node is None or exc.node not in asked:
                    raise
                if not self.may_drop():
                    if self.dropped:
                        raise self.too_few({exc.node: f"launch refused: {exc}"}) from exc
                    raise
                asked.remove(exc.node)
                await self.drop(nodes[exc.node], f"launch refused: {exc}")
                continue
            got = [h.node for h in handles]
            missing = sorted(set(asked) - set(got))
            usable = len(set(got)) == len(got) and set(got) <= set(asked)
            if usable and missing and self.partial and len(self.dropped) + len(missing) <= spec.nodes - self.min_nodes:
                for i in missing:
                    await self.drop(nodes[i], f"the {provider.name} provider did not launch it")
            elif not usable or missing:
                with anyio.CancelScope(shield=True):
                    await with_retries(provider, "terminate", lambda: provider.terminate(handles))
                raise ProvisionError(f"provider {provider.name} launched nodes {got}, asked for {len(asked)} "
                                     f"({_span(asked)})")
            return handles


def _span(nodes: list[int]) -> str:
    if nodes and nodes == list(range(nodes[0], nodes[-1] + 1)):
        return f"{nodes[0]}..{nodes[-1]}"
    return ", ".join(map(str, nodes))
