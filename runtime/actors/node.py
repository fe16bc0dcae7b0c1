"""The node actor: walks one node through its lifecycle and supervises its worker processes.

Lifecycle, per node, driven through the provider's phases (`providers.base.Provider`):
requested -> provisioning (the pool's one `launch` request) -> running (`wait_running`; the provider's
own states are recorded as `NodeProgress`) -> connecting (the transport that the registry gives this
node's reach kind; `NodeUnreachable` retried for the provider's `connect_retry` seconds) ->
bootstrapping (the kind's bootstrap) -> ready (workers started once every node's address is known).
Provider calls that fail with a transient error are retried with the provider's backoff. On close
each node drains its workers and is terminated on its own (`terminate([handle])`).

Supervision, in the manner of an OTP supervisor with a one-for-one strategy: each worker process is
watched (pipe closed, process exited, heartbeats missed — the pool's one heartbeat ticker calls
`heartbeat` on every node) and, when it is lost, the tasks that were on it fail with `WorkerLost` and
a new one is started after a backoff. More than `max_restarts` losses within `restart_window` seconds
and the node gives up: it is marked failed and the pool routes work to the nodes that are left. No
task runs per node once it is ready: a worker's loss is a callback from its channel, and only then
does a task (in the pool's task group, `NodeContext.spawn`) restart it.

The node sees its pool only through a `NodeContext` (what it needs, nothing more).
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Sequence
from typing import Any

import anyio
from anyio.abc import TaskStatus

from ...errors import WorkerRestarted
from ...protocol.info import ENV_VAR, RESTART_ENV
from ...providers.base import NodeHandle, ProvisionError
from ..events.types import NodeProgress, NodeStateChanged, WorkerStateChanged
from ..collections.store import ENV_VAR as COLLECTIONS_ENV
from ..collections.store import collections_env
from ..onnode.setup import TASK_THREADS_ENV, python_version, skyhive_version
from ..nodes.transport import Transport, WorkerProcess
from ..nodes.registry import transport_kind
from .channel import WorkerChannel
from .worker_argv import WORKER_ARGV
from ..nodes.context import NodeContext
from ..events.lifecycle import NodeState, check_transition
from .provisioning import connect_with_retry, with_retries

_STATE_OF: dict[str, NodeState] = {state.value: state for state in NodeState}

log = logging.getLogger("skyhive.node")

__all__ = ["NodeActor", "describe_exit", "final_cause", "first_error", "stop_nodes"]


#: Seconds a killed worker is waited for when a node stops.
KILL_WAIT = 2.0


#: Errors a worker's start-up raises that a restart cannot cure (a restarted rank is refused by its
#: framework plugin every time): the node is given up at once, with this as the cause.
FINAL_START_ERRORS: tuple[type[BaseException], ...] = (WorkerRestarted,)


def final_cause(exc: BaseException | None) -> BaseException | None:
    """The error in `exc`'s chain of causes that no restart can cure, if any."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, FINAL_START_ERRORS):
            return exc
        exc, seen = exc.__cause__, seen + 1
    return None


def first_error(exc: BaseException) -> BaseException:
    """The first `Exception` inside (nested) exception groups; `exc` itself if there is none."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = first_error(inner)
            if isinstance(found, Exception) and not isinstance(found, BaseExceptionGroup):
                return found
    return exc


def describe_exit(code: int | None) -> str:
    if code is None:
        return "the worker stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the worker process was killed by {name}"
    return f"the worker process exited with status {code}"


class NodeActor:
    """One node of a pool. Its state lives in the pool's event log (`ctx.log.state.nodes[i]`)."""

    def __init__(self, ctx: NodeContext, index: int) -> None:
        self.ctx = ctx
        self.index = index
        self.handle: NodeHandle | None = None  # from `launch`; with addresses once running
        self.transport: Transport | None = None
        self.ranks = ppn = ctx.spec.processes_per_node
        # worker i serves local rank i % ppn; the first ppn are the ranks themselves, the others
        # extra task slots (`sky.Worker(concurrency=N)`): tasks, but no broadcast, no plugin setup
        total = ppn * ctx.concurrency
        self.channels: list[WorkerChannel | None] = [None] * total
        self.processes: list[WorkerProcess | None] = [None] * total
        self.starts = [0] * total  # worker processes started per index (restarts = starts - 1)
        self.stopping = False
        self.detaching = False  # leaving a kept pool: the workers stay
        self.failure: BaseException | None = None  # why the node was given up (raised from by callers)
        self.losses: dict[int, list[float]] | None = None  # worker index -> when it was lost (restart limit)

    def __repr__(self) -> str:
        return f"<NodeActor {self.index} {self.state.value} workers={sum(c is not None and c.usable for c in self.channels)}>"

    @property
    def state(self) -> NodeState:
        nodes = self.ctx.log.nodes
        # (the member by its value: `NodeState(value)` goes through EnumMeta.__call__, and every
        # broadcast reads each node's state)
        return _STATE_OF[nodes[self.index].state] if self.index < len(nodes) else NodeState.REQUESTED

    def move(self, new: NodeState, **detail: Any) -> None:
        """Record a lifecycle transition (an illegal one raises: it is a bug)."""
        check_transition(self.index, self.state, new)
        self.ctx.log.emit(NodeStateChanged, node=self.index, state=new.value, **detail)

    def progress(self, detail: str = "", provider_state: str = "") -> None:
        """Record progress within the current state (the provider's own state, a retry)."""
        self.ctx.log.emit(NodeProgress, node=self.index, detail=detail, provider_state=provider_state)

    # ---- lifecycle ---------------------------------------------------------------------------------

    async def run(self, handle: NodeHandle, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """From a launched node to ready: wait until it runs, connect, bootstrap, start the workers;
        report started and return when ready (its workers are then watched without a task). Raises
        `ProvisionError` naming the node."""
        ctx = self.ctx
        self.handle = handle
        handle = await self._wait_running(handle)
        self.handle = handle
        self.move(NodeState.RUNNING, addr=handle.private_addr, provider_id=handle.provider_id)
        ctx.node_running(handle)
        self.move(NodeState.CONNECTING)
        kind = transport_kind(handle)
        self.transport = transport = kind.make_transport(handle, ctx)
        await connect_with_retry(transport.connect, bound=ctx.provider.connect_retry,
                                 where=handle.public_addr or handle.private_addr or handle.provider_id,
                                 on_retry=self.progress)
        self.move(NodeState.BOOTSTRAPPING)
        from ..bootstrap.node import bootstrap_node  # skyhive's bootstrap over a shell (`BOOTSTRAP_OVER_SHELL`)

        detail = await kind.bootstrap_node(ctx, self.index, transport, over_shell=bootstrap_node)
        await with_retries(ctx.provider, f"node {self.index}: bootstrapped", lambda: ctx.provider.bootstrapped(handle))
        await ctx.wait_addresses(self.index)  # workers need every peer's address
        if len(self.channels) == 1:
            await self._start_worker(0)  # the common case: no task group, no task
        else:
            failures: list[BaseException] = []
            with anyio.fail_after(ctx.settings.start_timeout):
                async with anyio.create_task_group() as tg:
                    for rank in range(len(self.channels)):
                        tg.start_soon(self._first_start, rank, failures)
            if failures:
                raise failures[0]
        self.move(NodeState.READY, detail=detail)
        for rank, channel in enumerate(self.channels):
            if channel is not None:
                self._watch(rank, channel)
        task_status.started()

    async def _first_start(self, rank: int, failures: list[BaseException]) -> None:
        try:
            await self._start_worker(rank)
        except Exception as exc:
            failures.append(exc)

    async def _wait_running(self, handle: NodeHandle) -> NodeHandle:
        """`provider.wait_running` with the provider's retry policy; its states recorded as progress.
        A state the provider maps to "failed" or "terminated" fails the node."""
        provider = self.ctx.provider
        seen: list[str] = []

        def report(state: str) -> None:
            if seen and seen[-1] == state:
                return
            seen.append(state)
            mapped = provider.lifecycle_state(state)
            self.progress(provider_state=state, detail=f"{provider.name}: {state}" + (f" ({mapped})" if mapped else ""))
            if mapped in ("failed", "terminated"):
                raise ProvisionError(f"node {self.index}: the {provider.name} provider reports it {state!r} "
                                     f"({handle.provider_id})", node=self.index)

        running = await with_retries(provider, f"node {self.index}: waiting until it runs",
                                     lambda: provider.wait_running(handle, report), on_retry=self.progress)
        if running.node != self.index:
            raise ProvisionError(f"node {self.index}: the {provider.name} provider's wait_running returned the "
                                 f"handle of node {running.node}", node=self.index)
        return running

    async def terminate(self) -> str:
        """Give the node back to the provider (after `stop`): terminating -> terminated once the
        provider confirms. Returns an error text ('' if none); never raises for the provider's failure
        (close goes on): the node then stays terminating, and its pool closes `leaking`."""
        error = ""
        handle = self.begin_terminate()
        if handle is not None:
            provider = self.ctx.provider
            try:
                await with_retries(provider, f"node {self.index}: terminate", lambda: provider.terminate([handle]))
            except Exception as exc:
                log.error("pool %s: terminating node %d (%s) failed: %s", self.ctx.pool_id, self.index,
                          handle.provider_id, exc)
                error = f"terminate node {self.index} failed: {exc}"
        self.end_terminate(error)
        return error

    def begin_terminate(self) -> NodeHandle | None:
        """The first half of `terminate`: the node is terminating; its handle, if it has one."""
        if self.state not in (NodeState.TERMINATED, NodeState.TERMINATING):
            self.move(NodeState.TERMINATING)
        return self.handle

    def end_terminate(self, error: str) -> None:
        """The second half of `terminate`, once the provider answered (`error`: why it failed, or ''):
        terminated only when it did not fail — a node is gone when the provider says so, never before."""
        if self.state is not NodeState.TERMINATING:
            return
        if error:
            self.progress(detail=error)  # still terminating: the pool's close names it as leaked
        else:
            self.move(NodeState.TERMINATED)

    # ---- supervision -------------------------------------------------------------------------------
    # No task waits per worker: a watched channel calls `_worker_closed` when it closes, the pool's
    # one heartbeat ticker calls `heartbeat` (`pool_actor.py`), and only a lost worker gets a task
    # (`_lost` / `_recover`) while it is restarted. A parked task per node, with a timer and a cancel
    # scope re-armed every heartbeat, was ~30 of the ~100 objects per node that the collector walks.

    def _watch(self, rank: int, channel: WorkerChannel) -> None:
        """Supervise a started worker: its loss (or clean stop) is handled when its channel closes."""
        channel.on_closed = self._worker_closed
        if channel.closed:  # it closed before we looked
            channel.on_closed = None
            self._worker_closed(channel)

    def heartbeat(self, now: float, stalled: float = 0.0) -> None:
        """One tick of the pool's heartbeat clock: ping each watched worker, and declare one lost
        (killed, then handled as closed) that was silent longer than `heartbeat_timeout` while we
        listened. `stalled`: how long the client's own loop stood still since the last tick (the
        clock woke that late) — silence of ours, not the worker's, so it does not count."""
        timeout = self.ctx.settings.heartbeat_timeout
        for rank, channel in enumerate(self.channels):
            if channel is None or channel.on_closed is None:  # not watched (yet), or already handled
                continue
            proc = self.processes[rank]
            assert proc is not None
            if proc.reconnecting:
                channel.last_seen = now  # a resumable link is reconnecting: not silence
                continue
            if stalled > 0.0:  # we were not reading: a late answer is no missed heartbeat
                channel.last_seen = min(now, channel.last_seen + stalled)
            silent = now - channel.last_seen
            if silent > timeout:
                channel.lost_reason = f"no heartbeat for {silent:.1f} s"
                channel.on_closed = None
                proc.kill()
                self._worker_closed(channel)
            else:
                channel.ping()

    def _worker_closed(self, channel: WorkerChannel) -> None:
        """A watched worker's channel closed (or it was declared silent): record how it ended; a
        lost one is restarted (or taken over by the loss policy) in a task of its own."""
        channel.on_closed = None
        rank = next((r for r, c in enumerate(self.channels) if c is channel), -1)
        proc = self.processes[rank] if rank >= 0 else None
        if proc is None:
            return
        if self.detaching:  # the client left a kept pool: the worker goes on without us
            self.ctx.log.emit(WorkerStateChanged, node=self.index, local_rank=rank, state="detached", pid=channel.pid)
            return
        if proc.returncode is None:  # its exit status comes in a moment: wait for it in a task
            self.ctx.spawn(self._lost, rank, channel)
            return
        reason = self._settle(rank, channel, proc.returncode)
        if reason is not None:
            self.ctx.spawn(self._recover, rank, reason, None)

    async def _lost(self, rank: int, channel: WorkerChannel) -> None:
        proc = self.processes[rank]
        assert proc is not None
        with anyio.move_on_after(1.0, shield=True):
            await proc.wait()
        code = proc.returncode
        if code is None:
            proc.kill()
            with anyio.move_on_after(1.0, shield=True):
                await proc.wait()
        reason = self._settle(rank, channel, code)
        if reason is not None:
            await self._recover(rank, reason, None)

    def _settle(self, rank: int, channel: WorkerChannel, code: int | None) -> str | None:
        """Record how a closed worker ended: stopped cleanly (None), or lost (why; its calls fail)."""
        if channel.shutting_down and not channel.calls and (code == 0 or self.stopping):
            self.ctx.log.emit(WorkerStateChanged, node=self.index, local_rank=rank, state="stopped",
                               pid=channel.pid)
            return None
        reason = channel.lost_reason or describe_exit(code)
        channel.fail_all(reason + self.ctx.loss_policy.note(self))
        self.channels[rank] = None
        self.ctx.log.emit(WorkerStateChanged, node=self.index, local_rank=rank, state="lost", detail=reason)
        self.ctx.flush_output(self.index, rank)
        self.ctx.slots_changed()
        if self.stopping:
            return None
        return reason

    async def _recover(self, rank: int, reason: str, cause: BaseException | None) -> None:
        """A worker was lost: restart it with backoff (one-for-one), unless the loss policy takes the
        node over; more than `max_restarts` losses within `restart_window` and the node is given up."""
        settings = self.ctx.settings
        if self.losses is None:
            self.losses = {}
        losses = self.losses.setdefault(rank, [])  # (a deque is 760 bytes empty)
        while True:
            if self.ctx.loss_policy.take_over(self, rank, reason, cause):  # e.g. the pool replaces the node
                return
            now = time.monotonic()
            losses.append(now)
            while losses and losses[0] < now - settings.restart_window:
                losses.pop(0)
            if len(losses) > settings.max_restarts:
                self._give_up(rank, f"{reason} ({len(losses)} worker losses within {settings.restart_window:.0f} s)",
                              final_cause(cause) or cause)
                return
            await anyio.sleep(min(settings.restart_backoff * 2 ** (len(losses) - 1), 5.0))
            if self.stopping:
                return
            try:
                channel = await self._start_worker(rank)
            except Exception as exc:
                if self.stopping:  # the pool closed while this worker restarted: stop() ended it
                    return
                reason = f"restart failed: {exc}"
                log.error("node %d worker %d: %s", self.index, rank, reason)
                cause = exc
                final = final_cause(exc)
                if final is not None:  # the same refusal would come back at every restart
                    self._give_up(rank, f"it cannot be restarted: {type(final).__name__}: {final}", final)
                    return
                continue
            self._watch(rank, channel)
            return

    def _give_up(self, rank: int, why: str, cause: BaseException | None = None) -> None:
        log.error("node %d: giving up on worker %d (%s); the node is marked failed", self.index, rank, why)
        self.failure = self.failure or cause
        if self.state not in (NodeState.FAILED, NodeState.TERMINATING, NodeState.TERMINATED):
            self.move(NodeState.FAILED, detail=f"worker {rank}: {why}")
        self.ctx.slots_changed()

    async def _start_worker(self, rank: int) -> WorkerChannel:
        ctx = self.ctx
        assert self.transport is not None
        info = ctx.infos[(self.index, rank % self.ranks)]
        ctx.log.emit(WorkerStateChanged, node=self.index, local_rank=rank, state="starting")
        channel = WorkerChannel(node=self.index, local_rank=rank % self.ranks, log_=ctx.log,
                                on_output=ctx.deliver_output, cache_bytes=ctx.settings.cache_bytes,
                                cache_min=ctx.settings.cache_min, memfds=ctx.memfds)
        env = {**ctx.worker_env, ENV_VAR: self.transport.worker_info_env(info)}
        # how often this worker was restarted: plugins that form process groups refuse to re-join one
        env[RESTART_ENV] = str(self.starts[rank])
        if ctx.task_threads > 1:  # the thread executor's slots (runtime/worker/threaded.py)
            env[TASK_THREADS_ENV] = str(ctx.task_threads)
        if COLLECTIONS_ENV in env:  # sky.dict & co., as this node reaches them (runtime/collections/)
            env.update(collections_env(await self.transport.reach_collections(env[COLLECTIONS_ENV])))
        self.starts[rank] += 1
        python = self.transport.worker_python()
        proc = await self.transport.start_worker(
            [python, *WORKER_ARGV], env, channel, label=f"node {self.index} worker {rank}"
        )
        self.processes[rank] = proc
        channel.attach(proc.link)
        channel.kill = proc.kill
        try:
            with anyio.fail_after(ctx.settings.start_timeout):
                await channel.handshake(skyhive_version=skyhive_version(), python_version=python_version())
                if ctx.setup_worker is not None and rank < self.ranks:
                    await ctx.setup_worker(channel)
        except BaseException as exc:
            proc.kill()
            with anyio.move_on_after(2, shield=True):
                await proc.wait()
            code = proc.returncode
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if isinstance(exc, TimeoutError):
                why = f"no handshake within {ctx.settings.start_timeout} s"
            ctx.log.emit(WorkerStateChanged, node=self.index, local_rank=rank, state="lost", detail=why)
            if isinstance(exc, Exception):
                raise ProvisionError(
                    f"node {self.index}: worker {rank} did not start: {why} ({describe_exit(code)})",
                    node=self.index,
                ) from exc
            raise
        self.channels[rank] = channel
        ctx.log.emit(WorkerStateChanged, node=self.index, local_rank=rank, state="ready", pid=channel.pid)
        ctx.slots_changed()
        return channel

    # ---- stopping ----------------------------------------------------------------------------------

    async def stop(self, timeout: float) -> None:
        """Drain: ask every worker to shut down (plugin teardown runs), then kill what remains."""
        await stop_nodes([self], timeout)
        await self.close_transport()

    def begin_stop(self) -> None:
        """Draining: every worker is asked to shut down; one still starting is killed."""
        self.stopping = True
        if self.state is NodeState.READY:
            self.move(NodeState.DRAINING)
        for rank, channel in enumerate(self.channels):
            proc = self.processes[rank]
            if channel is not None:
                channel.shutdown()
            elif proc is not None and proc.returncode is None:
                # a worker still starting (a restart under way) has no task and would not hear a
                # Shutdown: end it now rather than wait `timeout` for it
                proc.kill()

    async def wait_workers(self) -> None:
        """Wait until every worker process has exited (bounded by the caller)."""
        for proc in self.processes:
            if proc is not None and proc.returncode is None:
                await proc.wait()

    def kill_workers(self) -> None:
        """Kill every worker, exited or not: killing an exited one still ends what its tasks started
        (a local worker's process group)."""
        for proc in self.processes:
            if proc is not None:
                proc.kill()

    def release_workers(self) -> None:
        """The workers have exited (or were killed): release their pipes; calls still on them fail."""
        for rank, proc in enumerate(self.processes):
            if proc is not None:
                proc.close_transport()
                channel = self.channels[rank]
                if channel is not None and channel.calls:
                    channel.fail_all("the pool closed")

    async def close_transport(self) -> None:
        if self.transport is not None:
            await self.transport.close()

    async def detach(self) -> None:
        """Leave the node's workers running (a kept pool): close the links, not the workers. Calls
        still in flight fail with `WorkerLost`."""
        self.stopping = True
        self.detaching = True
        for proc in self.processes:
            if proc is not None:
                proc.detach()
        for channel in self.channels:
            if channel is not None and channel.calls:
                channel.fail_all("the client detached from the pool")
        if self.transport is not None:
            await self.transport.close()

    def rank_channels(self) -> list[WorkerChannel | None]:
        """The workers of the node's local ranks (what a broadcast reaches), in rank order."""
        return self.channels[: self.ranks]

    def usable_channels(self) -> list[WorkerChannel]:
        return [c for c in self.channels if c is not None and c.usable]


async def stop_nodes(nodes: Sequence[NodeActor], timeout: float) -> None:
    """`NodeActor.stop` for every node in `nodes`, less closing its transport (`release_nodes` does):
    workers that have not exited `timeout` seconds after being asked to are killed."""
    for node in nodes:
        node.begin_stop()
    with anyio.move_on_after(timeout):
        for node in nodes:  # one deadline for all: each wait returns at once for a worker already gone
            await node.wait_workers()
    for node in nodes:
        node.kill_workers()
    with anyio.move_on_after(KILL_WAIT):
        for node in nodes:
            await node.wait_workers()
    for node in nodes:
        node.release_workers()
