"""An elastic pool's size: `Pool(nodes=(min, max), autoscale_idle_timeout=SECONDS)`.

The pool starts with `min` nodes. `Autoscaler` looks at it every `TICK` seconds (a loop in the pool's
task group, not a task per node):

- **grow** while calls wait: an elastic pool sends a call only to a worker with a free task slot
  (`PoolRuntime.pick`), so calls beyond what the present nodes can take wait in the pool
  (`PoolRuntime.waiting`). When more wait than the free slots and the nodes already starting can
  take, nodes are added (at most one decision per `autoscale_cooldown` seconds, Skyward's name) at
  the lowest free indices below `max`: `NodeScaled` "grow" says why, then
  the node goes through the same phases as any node (`provider.launch([index])`, `wait_running`,
  connect, bootstrap, workers — `NodeActor.run`). It is not a member (not reached by `broadcast`,
  not picked) until it is ready.
- **held**: a provider that refuses the launch (capacity, quota, an SSH pool with no host left) or a
  node that does not start does not fail the pool: the index is given back, `NodeScaled` "held" and
  a warning say why, and no node is added for `HOLD` seconds.
- **shrink**: a ready node added by growing (the `min` nodes the pool started with stay) none of whose
  workers ran a call for `autoscale_idle_timeout` seconds is given back while the pool has more than
  `min` nodes: it leaves the members at once (no call is
  sent to it after that; a node with a call never leaves), `NodeScaled` "shrink" says why, then it is
  drained and terminated as at the pool's close (`NodeActor.stop`, `NodeActor.terminate`) and the
  provider is told its place is free again (`Provider.released`).

`broadcast` reaches the nodes that are members at the call; `map`/`run` use the free slots and wait
in the queue for more. Workers see the peers that were members when they started.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from ...providers.base import ClusterSpec, Provider
from ..events.lifecycle import NodeState
from ..events.types import NodeScaled
from .node import NodeActor, first_error
from .provisioning import with_retries

if TYPE_CHECKING:
    from ..common.settings import Settings
    from ..events.log import EventLog
    from ..nodes.context import NodeContext
    from .channel import WorkerChannel
    from .membership import Membership
    from .startclock import StartClocks

log = logging.getLogger("skyhive.pool")

__all__ = ["Autoscaler", "TICK", "HOLD"]

#: How often the autoscaler looks at the pool (seconds).
TICK = 0.2
#: The longest a queued call waits before it looks for a free slot again when nothing signalled (seconds): a
#: call in flight that ends and a node that turns ready or is lost wake it at once.
SLOT_FALLBACK = 0.2
#: How long growth waits after the provider refused a node or a node failed to start (seconds).
HOLD = 30.0


class ScaleHost(Protocol):
    """What `Autoscaler` needs of its pool (the pool actor, `PoolRuntime`, is one)."""

    pool_id: str
    open: bool
    nodes: list[NodeActor]
    settings: Settings
    log: EventLog
    provider: Provider
    spec: ClusterSpec
    context: NodeContext
    membership: Membership
    tg: Any
    launching: int
    start_clocks: StartClocks
    waiting: int  # calls waiting for a free task slot

    def members(self) -> list[NodeActor]: ...

    def live_nodes(self) -> list[NodeActor]: ...

    def pick_nowait(self) -> WorkerChannel | None: ...

    def slots_changed(self) -> None: ...

    def slots_event(self) -> asyncio.Event: ...


class Autoscaler:
    """Grows and shrinks an elastic pool between `low` and `high` nodes (see the module docstring)."""

    def __init__(self, rt: ScaleHost, low: int, high: int, idle_timeout: float, *, cooldown: float = 0.0,
                 hold: float = HOLD) -> None:
        self.rt = rt
        self.cooldown = cooldown  # seconds between two decisions to grow (Skyward's autoscale_cooldown)
        self.low, self.high = low, high
        self.idle_timeout = idle_timeout
        self.hold = hold
        self.growing: dict[int, anyio.CancelScope] = {}  # index -> its start under way
        self.shrinking: set[int] = set()
        self.idle_since: dict[int, float] = {}
        self.held_until = 0.0
        self.closing = False
        self.looks = 0  # steps taken (the tests wait on it)
        self._scope: anyio.CancelScope | None = None
        self._idle = anyio.Event()
        self._idle.set()

    def __repr__(self) -> str:
        return (f"<Autoscaler nodes=({self.low}, {self.high}) growing={sorted(self.growing)} "
                f"shrinking={sorted(self.shrinking)}>")

    @property
    def slots_per_node(self) -> int:
        ctx = self.rt.context
        return self.rt.spec.processes_per_node * ctx.concurrency * ctx.task_threads

    def start(self) -> None:
        """Start looking at the pool (in its task group), once it has started."""
        self._scope = anyio.CancelScope()
        self.rt.tg.start_soon(self._loop, self._scope)

    async def aclose(self) -> None:
        """Stop growing and shrinking: a node starting is cancelled (the pool's close gives it back with
        the others), a node being given back is waited for (bounded)."""
        self.closing = True
        if self._scope is not None:
            self._scope.cancel()
        for scope in self.growing.values():
            scope.cancel()
        with anyio.move_on_after(self.rt.settings.stop_timeout + 10, shield=True):
            await self._idle.wait()

    async def _loop(self, scope: anyio.CancelScope) -> None:
        with scope:
            while True:
                await anyio.sleep(TICK)
                self.step(time.monotonic())

    async def wait_for_slot(self) -> WorkerChannel | None:
        """The pool's queue: wait until a worker has a free task slot (counted in `waiting` meanwhile,
        which makes the pool grow). None when no node is ready and none is starting (the caller then
        waits as a pool without nodes does, and fails)."""
        rt = self.rt
        rt.waiting += 1
        try:
            while True:
                await self._until_a_slot_may_be_free()
                if not rt.open:
                    return None
                best = rt.pick_nowait()
                if best is not None:
                    return best
                if not rt.live_nodes() and not self.growing:
                    return None
        finally:
            rt.waiting -= 1

    async def _until_a_slot_may_be_free(self) -> None:
        """Until a call in flight on the pool ends, the pool's slots change (a node ready, lost or given back)
        or `SLOT_FALLBACK` passes — no poll on the calls' fast path (a call's end signals nothing of its own:
        its future is what is waited on)."""
        rt = self.rt
        waits: list[asyncio.Future[Any]] = [call.future for node in rt.live_nodes() for c in node.usable_channels()
                                            for call in c.calls.values() if call.future is not None]
        changed = asyncio.ensure_future(rt.slots_event().wait())
        try:
            await asyncio.wait([*waits, changed], timeout=SLOT_FALLBACK, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()

    # ---- deciding ---------------------------------------------------------------------------------

    def step(self, now: float) -> None:
        """One look at the pool: start the nodes the waiting calls need, give back the idle ones."""
        rt = self.rt
        if self.closing or not rt.open:
            return
        self.looks += 1
        members = rt.members()
        ready = [n for n in members if n.state is NodeState.READY]
        threads = rt.context.task_threads
        free = sum(threads - len(c.calls) for n in ready for c in n.usable_channels() if len(c.calls) < threads)
        waiting = rt.waiting
        count = len(members) + len(self.growing)
        need = waiting - free - len(self.growing) * self.slots_per_node
        if need > 0 and count < self.high and now >= self.held_until:
            if self.cooldown:
                self.held_until = now + self.cooldown
            adding = min(self.high - count, math.ceil(need / self.slots_per_node))
            reason = (f"grow: {waiting} task{'s' if waiting != 1 else ''} waiting, {free} slot{'s' if free != 1 else ''} "
                      f"free on {len(ready)} ready node{'s' if len(ready) != 1 else ''}")
            for _ in range(adding):
                self._grow(self._free_index(), reason)
            return
        if waiting:
            self.idle_since.clear()  # calls wait: no node is idle
            return
        for node in sorted(ready, key=lambda n: -n.index):
            if node.index < self.low:
                continue  # the nodes the pool started with stay (its head among them)
            if any(c is not None and c.calls for c in node.channels):
                self.idle_since.pop(node.index, None)
                continue
            since = self.idle_since.setdefault(node.index, now)
            if now - since >= self.idle_timeout and count > self.low:
                self._shrink(node, f"shrink: idle {now - since:.0f}s (autoscale_idle_timeout={self.idle_timeout:g})")
                count -= 1

    def _free_index(self) -> int:
        rt = self.rt
        outside = rt.membership.outside
        for index in range(self.high):
            if index >= len(rt.nodes) or (index in outside and index not in self.growing
                                          and index not in self.shrinking):
                return index
        raise AssertionError(f"pool {rt.pool_id}: no free index below {self.high}")  # count < high was checked

    def _busy(self) -> None:
        self._idle = anyio.Event() if self._idle.is_set() else self._idle

    def _settled(self) -> None:
        if not self.growing and not self.shrinking:
            self._idle.set()

    # ---- growing ----------------------------------------------------------------------------------

    def _grow(self, index: int, reason: str) -> None:
        rt = self.rt
        node = NodeActor(rt.context, index)
        if index == len(rt.nodes):
            rt.nodes.append(node)
        else:
            rt.nodes[index] = node
        rt.membership.outside.add(index)  # a member once it is ready
        scope = anyio.CancelScope()
        self.growing[index] = scope
        self._busy()
        rt.log.emit(NodeScaled, node=index, change="grow", reason=reason)
        log.info("pool %s: node %d added (%s)", rt.pool_id, index, reason)
        rt.tg.start_soon(self._run_grow, scope, node, reason)

    async def _run_grow(self, scope: anyio.CancelScope, node: NodeActor, reason: str) -> None:
        rt, index = self.rt, node.index
        try:
            with scope:
                why = await self._start(node)
                if why:
                    self._hold(node, why)
                    await self._give_back(node)
                else:
                    rt.membership.outside.discard(index)
                    self.idle_since[index] = time.monotonic()
        finally:
            del self.growing[index]
            self._settled()
            rt.slots_changed()

    async def _start(self, node: NodeActor) -> str:
        """Launch and start `node` through its provider: '' once it is ready, else why not."""
        rt, index = self.rt, node.index
        provider = rt.provider
        spec = replace(rt.spec, nodes=max(rt.spec.nodes, index + 1))  # the pool, with this node in it
        node.move(NodeState.PROVISIONING)
        rt.launching += 1  # a launch in flight: close asks list_owned if it never answers
        try:
            handles = await with_retries(provider, f"node {index}: grow", lambda: provider.launch(spec, [index]),
                                         on_retry=node.progress)
        except Exception as exc:
            rt.launching -= 1  # a launch that raised has terminated what it made (Provider.launch)
            return f"{type(exc).__name__}: {exc}"
        if [h.node for h in handles] != [index]:
            with anyio.CancelScope(shield=True):
                await with_retries(provider, "terminate", lambda: provider.terminate(handles))
            rt.launching -= 1
            return f"the {provider.name} provider launched nodes {[h.node for h in handles]}, asked for [{index}]"
        rt.launching -= 1
        node.handle = handles[0]
        try:
            with rt.start_clocks.bound():
                await rt.tg.start(node.run, handles[0])
        except Exception as group:
            failure = first_error(group)  # a node's failure arrives wrapped in task groups
            if isinstance(failure, TimeoutError):
                return f"not ready within start_timeout={rt.settings.start_timeout} s"
            return f"{type(failure).__name__}: {failure}"
        return ""

    def _hold(self, node: NodeActor, why: str) -> None:
        rt = self.rt
        self.held_until = time.monotonic() + self.hold
        text = f"not grown: {why}; no node is added for {self.hold:g} s"
        log.warning("pool %s: node %d %s", rt.pool_id, node.index, text)
        rt.log.emit(NodeScaled, node=node.index, change="held", reason=text)

    # ---- shrinking --------------------------------------------------------------------------------

    def _shrink(self, node: NodeActor, reason: str) -> None:
        rt = self.rt
        rt.membership.outside.add(node.index)  # no call is sent to it from now on
        self.idle_since.pop(node.index, None)
        self.shrinking.add(node.index)
        self._busy()
        rt.log.emit(NodeScaled, node=node.index, change="shrink", reason=reason)
        log.info("pool %s: node %d given back (%s)", rt.pool_id, node.index, reason)
        rt.slots_changed()
        rt.tg.start_soon(self._run_shrink, node)

    async def _run_shrink(self, node: NodeActor) -> None:
        try:
            await self._give_back(node)
        finally:
            self.shrinking.discard(node.index)
            self._settled()

    async def _give_back(self, node: NodeActor) -> None:
        """Drain `node` and terminate it (shielded, bounded); once the provider confirms it gone, its
        place is free again. One it does not confirm keeps its handle: the pool's close tries again."""
        rt = self.rt
        settings = rt.settings
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(settings.stop_timeout + 5):
                await node.stop(settings.stop_timeout)
            handle = node.handle
            failed = await node.terminate()
        rt.membership.leave(node.index)
        if not failed:
            node.handle = None  # given back: the pool's close has nothing left to terminate for it
            if handle is not None:
                rt.provider.released(rt.pool_id, [handle])
