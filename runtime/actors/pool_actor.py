"""`PoolRuntime`: the pool actor. It owns the event log, the node actors and the scheduling of calls;
sending a call and gathering its results is its `CallDispatch` half (dispatch.py).

The public `Pool` (pool.py) is a thin face over it. A call is not a spawned task: it runs in the
caller's own task (its "task actor"), so cancelling the caller cancels the call — which sends `Cancel`
to the worker and, if the worker does not stop within `cancel_grace`, has the worker killed and
restarted by its supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ...errors import PoolClosed, TeardownIncomplete, WorkerLost
from ...protocol.info import InstanceInfo
from ...providers.base import ClusterSpec, NodeHandle, Provider, ProvisionError
from ..events.log import EventLog, pool_log_path
from ..events.types import NodeStateChanged, PoolDetached, PoolStarted, PoolStopped
from ..onnode.setup import WorkerSetup
from ..output.progress import ProvisioningDisplay
from ..output.router import OutputRouter
from ..common.selection import OutputSpec
from ..common.serialize import register_user_code
from ..common.settings import Settings
from ..common.shm import MemfdPool
from .channel import WorkerChannel
from ..nodes.context import NodeContext
from .dispatch import CallDispatch
from ..events.lifecycle import NodeState
from .membership import Membership
from .node import NodeActor
from .node import first_error as _first_error
from .loss import LossPolicy, RestartInPlace
from .autoscale import Autoscaler
from .replace import ReplaceFailed
from .startclock import StartClocks
from .teardown import release_nodes, stop_nodes
from .provisioning import with_retries

if TYPE_CHECKING:
    from ...plugins.image import Image

log = logging.getLogger("skyhive.pool")

__all__ = ["PoolRuntime"]


class PoolRuntime(CallDispatch):
    def __init__(self, *, provider: Provider, nodes: int, processes_per_node: int, plugins: Sequence[Any],
                 image: Image | None, output: OutputSpec, settings: Settings, name: str | None,
                 log_events: bool, accelerator: str | None = None, cpus: float | None = None,
                 memory_gb: float | None = None, allocation: str | None = None, spot: bool | None = None,
                 concurrency: int = 1, replace_failed: bool = False, progress: bool = False,
                 task_threads: int = 1,
                 min_nodes: int | None = None, elastic: tuple[int, int, float, float] | None = None) -> None:
        self.pool_id = name or f"pool-{os.urandom(5).hex()}"  # (not uuid: its import costs; `Pool` may choose it first)
        self.provider = provider
        self.settings = settings
        self.plugins = list(plugins)
        self.image = image
        self.spec = ClusterSpec(pool_id=self.pool_id, nodes=nodes, processes_per_node=processes_per_node,
                                accelerator=accelerator, cpus=cpus, memory_gb=memory_gb, allocation=allocation,
                                spot=spot)
        secrets = frozenset(image.secret_values()) if image is not None else frozenset()
        self.log = EventLog(self.pool_id, path=pool_log_path(self.pool_id) if log_events else None, secrets=secrets,
                            output_limit=settings.log_output_limit)
        self.infos: dict[tuple[int, int], InstanceInfo] = {}
        self.memfds = MemfdPool(settings.shm_pool_bytes) if settings.shm_pool_bytes > 0 else None
        self.router = OutputRouter(self.log, output, self.infos, multi_process=processes_per_node > 1)
        # which nodes the pool starts with (all, or with min_nodes those that could be provisioned)
        self.membership = Membership(pool_id=self.pool_id, spec=self.spec, provider=provider, infos=self.infos,
                                     min_nodes=nodes if min_nodes is None else min_nodes)
        self.worker_env: dict[str, str] = dict(image.all_env()) if image is not None else {}
        self.setup: WorkerSetup | None = self._worker_setup()
        self._launching = False  # a `launch` in flight, or one that answered wrongly: `close` asks list_owned
        self.launching = 0  # replacements' launches in flight (`actors/replace.py`): the same, for them
        self.teardown_errors: list[str] = []  # why `close` could not confirm everything gone
        self.replace_failed = replace_failed
        self.loss_policy: LossPolicy = ReplaceFailed(self) if replace_failed else RestartInPlace()
        self.start_clocks = StartClocks(settings)  # start_timeout bounds that a node's build lifts
        self.context = NodeContext(
            pool_id=self.pool_id, spec=self.spec, provider=provider, settings=settings, log=self.log,
            image=image, worker_env=self.worker_env, infos=self.infos, deliver_output=self.router.deliver,
            flush_output=self.router.flush, slots_changed=self.slots_changed,
            node_running=self.membership.running, wait_addresses=self.membership.wait_addresses,
            setup_worker=self._setup_worker if self.setup is not None else None,
            concurrency=concurrency, task_threads=task_threads, loss_policy=self.loss_policy, spawn=self._spawn,
            memfds=self.memfds,
            building=self.start_clocks.building, step_lines=not progress,
        )
        self.nodes = [NodeActor(self.context, i) for i in range(nodes)]
        self.detach_on_failure = False  # set for a client attaching to a named pool (`Pool.attach`)
        self.tg: Any = None
        self.open = False
        self.progress = progress  # draw the provisioning display (output/progress.py) while starting
        self._ids = itertools.count(1)
        self._slots_changed = asyncio.Event()
        self._rr = 0
        self.heartbeat_ticks = 0  # how many times the heartbeat clock judged every worker
        self._last: WorkerChannel | None = None  # the idle worker picked last (see pick_nowait)
        self.waiting = 0  # calls waiting for a free task slot (an elastic pool's queue)
        # an elastic pool's (`nodes=(min, max)`: min, max, idle timeout, cooldown): autoscale.py
        self.autoscaler = Autoscaler(self, *elastic[:3], cooldown=elastic[3]) if elastic is not None else None

    def __repr__(self) -> str:
        return f"<PoolRuntime {self.pool_id} {self.log.state.status} nodes={len(self.nodes)}>"

    # ---- start -------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[PoolRuntime]:
        """The pool's task group (its heartbeats, its nodes' tasks), for as long as the pool runs: the
        only way it is entered. `start`, then `close` or `detach`, run inside it; leaving cancels what
        is left in it.

            async with rt.running():
                await rt.start()
                ...
                await rt.close()
        """
        async with anyio.create_task_group() as tg:
            self.tg = tg
            try:
                yield self
            finally:
                self.tg = None
                tg.cancel_scope.cancel()

    async def start(self) -> None:
        """Start the pool's nodes (inside `running()`). On failure the nodes are closed (or, taking over a
        named pool, detached) before the error is raised."""
        if self.tg is None:
            raise RuntimeError(f"pool {self.pool_id}: PoolRuntime.start() runs inside `async with rt.running()`")
        self.loop = asyncio.get_running_loop()  # (asyncio's lookup makes a getpid() syscall per call)
        _name_the_event_loop()
        self.tg.start_soon(self._heartbeats)
        display = None
        if self.progress:
            display = ProvisioningDisplay(self.pool_id, len(self.nodes))
            self.tg.start_soon(display.run, self.log.subscribe(replay=True))
        try:
            try:
                with self.start_clocks.bound():
                    await self._start()
            finally:  # ready or not, the display ends with the start
                if display is not None:
                    await display.stop()
        except BaseException as exc:
            failure = _first_error(exc)  # a node's failure arrives wrapped in task groups
            error = f"{type(failure).__name__}: {failure}"
            if self.detach_on_failure:  # taking over a named pool failed: its workers stay as they were
                await self.detach()
            else:
                await self.close(error)
            leak = self.leak_error(error)
            if leak is not None:  # the money first: what may still run, and the start's failure with it
                raise leak from failure
            if isinstance(failure, TimeoutError):
                raise ProvisionError(
                    f"pool {self.pool_id} was not ready within start_timeout={self.settings.start_timeout} s"
                ) from exc
            if failure is not exc:
                raise failure from None
            raise

    async def _start(self) -> None:
        """requested -> provisioning for every node (one `launch` request, after `prepare`), then each
        node actor goes on by itself: running, connecting, bootstrapping, ready."""
        spec, provider = self.spec, self.provider
        plan = dict(provider.plan(spec))  # the machine and its price, shown before anything is made
        if plan:
            log.info("pool %s: %s", self.pool_id, plan.get("summary") or plan)
        self.log.emit(PoolStarted, plan=plan, provider=provider.name, nodes=spec.nodes,
                      processes_per_node=spec.processes_per_node, pid=os.getpid(), host=socket.gethostname(),
                      provider_config=provider.describe(),
                      nodes_max=self.autoscaler.high if self.autoscaler is not None else 0)
        for node in self.nodes:
            self.log.emit(NodeStateChanged, node=node.index, state=NodeState.REQUESTED.value)
        await with_retries(provider, "prepare", lambda: provider.prepare(spec))
        for node in self.nodes:
            node.move(NodeState.PROVISIONING)
        self._launching = True  # stays set if the launch fails or answers wrongly: close asks list_owned
        handles = await self.membership.launch(self.nodes)
        self._launching = False
        failed: dict[int, str] = {}
        async with anyio.create_task_group() as starter:
            for handle in handles:
                starter.start_soon(self._start_node, self.nodes[handle.node], handle, failed)
        if self.autoscaler is not None:
            self.autoscaler.start()
        if self.membership.dropped:
            dropped = sorted(self.membership.dropped)
            log.warning("pool %s started with %d of %d nodes (min_nodes=%d); left out: nodes %s", self.pool_id,
                        spec.nodes - len(dropped), spec.nodes, self.membership.min_nodes, ", ".join(map(str, dropped)))
        self.open = True

    async def _start_node(self, node: NodeActor, handle: NodeHandle, failed: dict[int, str]) -> None:
        node.handle = handle
        try:
            await node.run(handle)  # (in this starter task: it returns once the node is ready)
        except Exception as group:
            exc = _first_error(group)
            why = f"{type(exc).__name__}: {exc}"
            if node.state is not NodeState.FAILED:  # say at which stage it failed
                why = f"failed while {node.state.value}: {why}"
            if self.membership.may_drop():  # min_nodes: the pool goes on without it
                await self.membership.drop(node, why)
                return
            if node.state not in (NodeState.FAILED, NodeState.TERMINATING, NodeState.TERMINATED):
                node.move(NodeState.FAILED, detail=why)
            if self.membership.dropped and len(self.membership.dropped) >= self.membership.allowance:
                # one failure more than min_nodes allows: name them all
                failed[node.index] = why
                raise self.membership.too_few(failed) from exc
            raise
        except BaseException as exc:
            if node.state not in (NodeState.FAILED, NodeState.TERMINATING, NodeState.TERMINATED):
                node.move(NodeState.FAILED, detail=f"{type(exc).__name__}: {exc}")
            raise

    def _spawn(self, fn: Any, *args: Any) -> None:
        if self.tg is not None:
            self.tg.start_soon(fn, *args)

    async def _heartbeats(self) -> None:
        """The pool's one heartbeat clock: every `heartbeat_interval`, each node pings its workers and
        declares lost any that was silent past `heartbeat_timeout` (`NodeActor.heartbeat`). One task
        for the pool, not a task with a timer per worker; it yields every few hundred nodes so a
        tick of a 10,000-node pool does not hold the loop.

        Silence is counted only over time this client was listening. A tick that wakes late by more
        than the interval means our own loop was not running (a synchronous call in the user's async
        code, a long pickle, a debugger stop, the process stopped): nothing was read and no ping was
        sent meanwhile, so that stall is not the workers' silence — each node is told how long it was
        (`stalled`) and discounts it. A stalled client loses no worker; a worker that really stopped
        is still declared lost once we listened to it for `heartbeat_timeout`."""
        interval = self.settings.heartbeat_interval
        mark = time.monotonic()
        while True:
            await anyio.sleep(interval)
            now = time.monotonic()
            stalled = max(0.0, now - mark - interval)  # how late this tick woke: our loop stood still
            for i, node in enumerate(list(self.nodes)):
                node.heartbeat(now, stalled)
                if i % 500 == 499:
                    await anyio.sleep(0)
            self.heartbeat_ticks += 1
            mark = time.monotonic()

    def _worker_setup(self) -> WorkerSetup | None:
        if not self.plugins:  # (a pool without plugins does not import them: every plugin factory's module)
            return None
        from ...plugins.api import AppHook, TaskHook

        hooks = [p for p in self.plugins if isinstance(p, (AppHook, TaskHook))]
        for plugin in hooks:  # a plugin class from the user's own code travels by value, like functions
            register_user_code(type(plugin))
        return WorkerSetup(hooks, {}) if hooks else None

    async def _setup_worker(self, channel: WorkerChannel) -> None:
        # the setup object travels as the task's "function": the worker's `_setup` takes it as such
        await self.call_on(channel, self.setup, (), {}, kind="setup", fn_name="plugin setup")

    # ---- scheduling --------------------------------------------------------------------------------

    def slots_changed(self) -> None:
        self._slots_changed.set()
        self._slots_changed = asyncio.Event()

    def slots_event(self) -> asyncio.Event:
        """Set at the next change of the pool's task slots (`slots_changed`)."""
        return self._slots_changed

    def _check_open(self) -> None:
        if not self.open:
            raise PoolClosed(f"pool {self.pool_id} is not open (status: {self.log.state.status})")

    def members(self) -> list[NodeActor]:
        """The nodes the pool has: less any left out at start (`min_nodes`), starting or given back (elastic)."""
        dropped, outside = self.membership.dropped, self.membership.outside
        if outside:
            return [n for n in self.nodes if n.index not in dropped and n.index not in outside]
        return [n for n in self.nodes if n.index not in dropped] if dropped else self.nodes

    def live_nodes(self) -> list[NodeActor]:
        return [n for n in self.members() if n.state is NodeState.READY]

    def pick_nowait(self) -> WorkerChannel | None:
        """The least busy usable worker, or None if none is usable now.

        The scan starts at the node of the idle worker picked last and stops at the first idle
        worker: a pool with idle workers answers in O(1) instead of reading every node's workers
        (O(nodes) per call: a run() on a 10,000-node pool), and calls one at a time keep going to
        the same warm worker process (round-robin woke a process idle since the call before, its
        caches cold; the bench's floor picks this way too). Calls in flight together still spread:
        a busy worker is passed over for an idle one.
        """
        last = self._last
        if last is not None and last.usable and not last.calls and not self.membership.dropped \
                and not self.membership.outside:
            return last  # (an idle worker, as the scan below would give: the same warm one again)
        nodes = self.members()
        count = len(nodes)
        if not count:
            return None
        start = self._rr % count
        best: WorkerChannel | None = None
        for i in range(count):
            node = nodes[(start + i) % count]
            for c in node.channels:
                if c is not None and c.usable:
                    if not c.calls:
                        self._rr = start + i
                        self._last = c
                        return c
                    if best is None or len(c.calls) < len(best.calls):
                        best = c
        if best is not None and self.autoscaler is not None and len(best.calls) >= self.context.task_threads:
            return None  # an elastic pool queues a call rather than stack it on a busy worker
        return best

    async def pick(self) -> WorkerChannel:
        """The least busy usable worker; waits (bounded) while workers restart."""
        self._check_open()
        best = self.pick_nowait()
        if best is not None:
            return best
        if self.autoscaler is not None and self.live_nodes():  # queued: the autoscaler sees it waiting
            best = await self.autoscaler.wait_for_slot()
            if best is not None:
                return best
        began = anyio.current_time()
        with anyio.CancelScope(deadline=began + self.settings.wait_for_worker) as scope:
            while True:
                best = self.pick_nowait()
                if best is not None:
                    return best
                if not self.live_nodes():
                    if not self.loss_policy.replacing():
                        break
                    # nothing else to run on: wait for the replacement as long as a pool's start
                    scope.deadline = max(scope.deadline, began + self.settings.start_timeout)
                await self._slots_changed.wait()
                self._check_open()
        raise WorkerLost(f"no worker of pool {self.pool_id} is available ({self._describe_members()})",
                         node=-1) from next((n.failure for n in self.nodes if n.failure is not None), None)

    def _describe_members(self, shown: int = 20) -> str:
        """Each node's state (and why, if failed) — past `shown` nodes, the count per state and the
        first `shown` failed nodes (a 10,000-node pool's error named every node)."""
        states = self.log.state.nodes
        members = self.members()

        def one(n: NodeActor) -> str:
            detail = states[n.index].detail if n.state is NodeState.FAILED else ""
            return f"node {n.index}: {n.state.value}" + (f" ({detail})" if detail else "")

        if len(members) <= shown:
            return ", ".join(one(n) for n in members)
        counts: dict[str, int] = {}
        for n in members:
            counts[n.state.value] = counts.get(n.state.value, 0) + 1
        failed = [n for n in members if n.state is NodeState.FAILED]
        text = ", ".join(f"{count} {state}" for state, count in sorted(counts.items(), key=lambda kv: -kv[1]))
        if failed:
            text += "; " + ", ".join(one(n) for n in failed[:shown])
            if len(failed) > shown:
                text += f", and {len(failed) - shown} more failed (skyhive events {self.pool_id})"
        return text

    def _all_channels_nowait(self) -> list[WorkerChannel] | None:
        channels: list[WorkerChannel] = []
        for n in self.members():
            state = n.state  # (read once: each read looks the node up in the event log)
            if state is not NodeState.READY and self.loss_policy.replacing(n.index):
                return None  # a node is being replaced: wait for it
            if state is not NodeState.READY:
                detail = self.log.state.nodes[n.index].detail
                raise WorkerLost(f"node {n.index} of pool {self.pool_id} is {state.value}"
                                 + (f" ({detail})" if detail else ""), node=n.index) from n.failure
            for c in n.rank_channels():
                if c is None or not c.usable:
                    return None
                channels.append(c)
        return channels

    def replace_node(self, index: int, reason: str) -> bool:
        """Replace node `index` now, as if its worker had been lost (`Pool(replace_failed=True)` only):
        its machine is going — the provider took it, or it had an interruption notice — whatever its
        link says yet. What ran there fails with `WorkerLost`; calls wait for the replacement. False
        when the pool does not replace nodes or is closing; True when the replacement is under way."""
        if not (self.open and self.replace_failed and 0 <= index < len(self.nodes)):
            return False
        return self.loss_policy.take_over(self.nodes[index], 0, reason, None)

    async def all_channels(self) -> list[WorkerChannel]:
        """Every worker in rank order, waiting (bounded) for any that is restarting."""
        self._check_open()
        channels = self._all_channels_nowait()
        if channels is not None:
            return channels
        began = anyio.current_time()
        with anyio.CancelScope(deadline=began + self.settings.wait_for_worker) as scope:
            while True:
                if self.loss_policy.replacing():  # a fresh node takes as long as a pool's start
                    scope.deadline = max(scope.deadline, began + self.settings.start_timeout)
                await self._slots_changed.wait()
                self._check_open()
                channels = self._all_channels_nowait()
                if channels is not None:
                    return channels
        raise WorkerLost(f"workers of pool {self.pool_id} did not come back within "
                         f"{scope.deadline - began:g} s", node=-1)

    # ---- close -------------------------------------------------------------------------------------

    async def detach(self) -> None:
        """Leave a kept pool: close the links to its workers and leave them running (`PoolDetached`).
        Shielded from cancellation, bounded in time. Only nodes whose workers are detached daemons
        can (`LocalCluster`)."""
        if self.log.state.status in ("stopped", "detached"):
            return
        self.open = False
        self.slots_changed()
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(self.settings.stop_timeout + 10):
                async with anyio.create_task_group() as tg:
                    for node in self.nodes:
                        tg.start_soon(node.detach)
            self.log.emit(PoolDetached, pid=os.getpid())
            self.router.close()
            self.log.close()
            if self.tg is not None:
                self.tg.cancel_scope.cancel()

    async def close(self, error: str = "") -> None:
        """Drain and tear down: shielded from cancellation, bounded in time. Idempotent."""
        if self.log.state.status in ("stopped", "leaking", "detached"):
            return
        self.open = False
        self.slots_changed()
        cleaned = False  # the provider's cleanup (what `prepare` made) confirmed
        with anyio.CancelScope(shield=True):
            if self.autoscaler is not None:  # a node starting stops; one being given back is waited for
                await self.autoscaler.aclose()
            await self.loss_policy.aclose()  # a replacement under way stops; its node is in self.nodes
            with anyio.move_on_after(self.settings.stop_timeout + 10) as scope:
                # every node drained in this task, then released (`teardown.py`): no task per node
                # to stop, and none per node to terminate when the provider can do it in bulk
                await stop_nodes(self.nodes, self.settings.stop_timeout)
                errors = await release_nodes(self.nodes, self.provider)
                self.teardown_errors += errors
                error = error or "; ".join(errors)
                try:
                    if self._launching or self.launching:  # a launch never answered (or wrongly): what did it make?
                        leftover = await self.provider.list_owned(self.pool_id)
                        if leftover:
                            await self.provider.terminate(leftover)
                    await with_retries(self.provider, "cleanup", lambda: self.provider.cleanup(self.pool_id))
                    cleaned = True
                except Exception as exc:
                    log.error("pool %s: cleaning up the provider's resources failed: %s", self.pool_id, exc)
                    error = error or f"cleanup failed: {exc}"
                    self.teardown_errors.append(f"cleanup failed: {exc}")
            if scope.cancelled_caught:
                log.error("pool %s: teardown did not finish in time", self.pool_id)
                error = error or f"teardown did not finish within {self.settings.stop_timeout + 10:g} s"
                self.teardown_errors.append(f"teardown did not finish within {self.settings.stop_timeout + 10:g} s")
            # what the provider did not confirm gone: the pool is `leaking` until `skyhive down` finishes it
            leaked = [n.handle.provider_id or f"node {n.index}" for n in self.nodes
                      if n.handle is not None and n.state is not NodeState.TERMINATED]
            if not cleaned:
                leaked.append("shared resources")
            self.log.emit(PoolStopped, error=error, leaked=tuple(leaked))
            if self.memfds is not None:
                self.memfds.close()
            self.router.close()
            self.log.close()
            if self.tg is not None:
                self.tg.cancel_scope.cancel()

    def leak_error(self, cause: str = "") -> TeardownIncomplete | None:
        """The error a caller gets for a pool that closed `leaking` (None if it did not): what may still
        run, why, and how to finish it; `cause` is the error the pool closed for, if any."""
        state = self.log.state
        if state.status != "leaking":
            return None
        return TeardownIncomplete(
            f"pool {self.pool_id}: teardown did not finish; the {self.provider.name} provider did not confirm "
            f"gone: {', '.join(state.leaked)} (they may still run, and cost); `skyhive down {self.pool_id}` "
            f"retries until it does. Why: {'; '.join(self.teardown_errors) or 'unknown'}"
            + (f". The pool closed because of: {cause}" if cause else ""),
            pool_id=self.pool_id, leaked=state.leaked)


def _name_the_event_loop() -> None:
    """Say, in this context, which event loop runs the pool, for the callbacks its transports run.

    A worker's pipe closing is seen in a protocol callback, which starts a task in the pool's task
    group (`NodeActor._worker_closed`). anyio finds its backend through sniffio, which outside any
    task knows the loop only if `current_async_library_cvar` says so: `anyio.run` (and so the
    blocking `with sky.Pool`) sets it, plain `asyncio.run` does not — there each worker's `stopped`
    at the close was lost to a `NoEventLoopError` printed on stderr. Callbacks run in a copy of the
    context their transport was made in, which inherits this one."""
    try:
        import sniffio
    except ImportError:  # anyio then takes any running asyncio loop for asyncio: nothing to say
        return
    if sniffio.current_async_library_cvar.get() is None:
        sniffio.current_async_library_cvar.set(sniffio.current_async_library())
