"""The node actor: walks one node through its lifecycle and supervises its worker processes.

Supervision, in the manner of an OTP supervisor with a one-for-one strategy: each worker process has a
supervisor loop that starts it, watches it (pipe closed, process exited, heartbeats missed) and, when
it is lost, fails the tasks that were on it with `WorkerLost` and starts a new one after a backoff.
More than `max_restarts` losses within `restart_window` seconds and it gives up: the node is marked
failed and the pool routes work to the nodes that are left.
"""

from __future__ import annotations

import logging
import signal
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus

from ...protocol.info import ENV_VAR
from ...providers.base import NodeHandle, ProvisionError
from .channel import WorkerChannel

from ..events.types import NodeStateChanged, WorkerStateChanged
from .lifecycle import NodeState, check_transition
from ..transport.base import Transport, WorkerProcess
from ..worker.daemon import WorkerSetup, python_version, skyhive_version

if TYPE_CHECKING:
    from ..pool import PoolRuntime

log = logging.getLogger("skyhive.node")

__all__ = ["NodeActor", "describe_exit"]

WORKER_ARGV = ("-m", "skyhive.runtime.worker")


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
    """One node of a pool. Its state lives in the pool's event log (`pool.log.state.nodes[i]`)."""

    def __init__(self, pool: PoolRuntime, index: int) -> None:
        self.pool = pool
        self.index = index
        self.handle: NodeHandle | None = None
        self.transport: Transport | None = None
        ppn = pool.spec.processes_per_node
        self.channels: list[WorkerChannel | None] = [None] * ppn
        self.processes: list[WorkerProcess | None] = [None] * ppn
        self.starts = [0] * ppn  # worker processes started per local rank (restarts = starts - 1)
        self.stopping = False

    def __repr__(self) -> str:
        return f"<NodeActor {self.index} {self.state.value} workers={sum(c is not None and c.usable for c in self.channels)}>"

    @property
    def state(self) -> NodeState:
        nodes = self.pool.log.state.nodes
        return NodeState(nodes[self.index].state) if self.index < len(nodes) else NodeState.REQUESTED

    def move(self, new: NodeState, **detail: Any) -> None:
        """Record a lifecycle transition (an illegal one raises: it is a bug)."""
        check_transition(self.index, self.state, new)
        self.pool.log.emit(NodeStateChanged, node=self.index, state=new.value, **detail)

    # ---- lifecycle ---------------------------------------------------------------------------------

    async def run(self, handle: NodeHandle, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect, bootstrap, start the workers; report started when ready; supervise until stopped."""
        self.handle = handle
        self.move(NodeState.CONNECTING)
        self.transport = self.pool.make_transport(handle)
        self.move(NodeState.BOOTSTRAPPING)
        await self.pool.bootstrap(self, self.transport)
        async with anyio.create_task_group() as tg:
            ready = [anyio.Event() for _ in self.channels]
            failures: list[BaseException] = []
            for rank in range(len(self.channels)):
                tg.start_soon(self._supervise, rank, ready[rank], failures)
            with anyio.fail_after(self.pool.settings.start_timeout):
                for event in ready:
                    await event.wait()
            if failures:
                raise failures[0]
            self.move(NodeState.READY, detail=getattr(self, "bootstrap_detail", ""))
            task_status.started()

    async def _supervise(self, rank: int, ready: anyio.Event, failures: list[BaseException]) -> None:
        settings = self.pool.settings
        losses: deque[float] = deque()
        first = True
        while not self.stopping:
            try:
                channel = await self._start_worker(rank)
            except Exception as exc:
                if first:
                    failures.append(exc)
                    ready.set()
                    return
                reason = f"restart failed: {exc}"
                log.error("node %d worker %d: %s", self.index, rank, reason)
                channel = None
            if first:
                first = False
                ready.set()
            if channel is not None:
                reason = await self._watch(rank, channel)
                if reason is None:  # clean shutdown
                    return
            now = time.monotonic()
            losses.append(now)
            while losses and losses[0] < now - settings.restart_window:
                losses.popleft()
            if len(losses) > settings.max_restarts:
                self._give_up(rank, f"{len(losses)} worker losses within {settings.restart_window:.0f} s")
                return
            await anyio.sleep(min(settings.restart_backoff * 2 ** (len(losses) - 1), 5.0))

    def _give_up(self, rank: int, why: str) -> None:
        log.error("node %d: giving up on worker %d (%s); the node is marked failed", self.index, rank, why)
        if self.state not in (NodeState.FAILED, NodeState.TERMINATING, NodeState.TERMINATED):
            self.move(NodeState.FAILED, detail=f"worker {rank}: {why}")
        self.pool.slots_changed()

    async def _start_worker(self, rank: int) -> WorkerChannel:
        pool = self.pool
        assert self.transport is not None
        info = pool.infos[(self.index, rank)]
        pool.log.emit(WorkerStateChanged, node=self.index, local_rank=rank, state="starting")
        channel = WorkerChannel(node=self.index, local_rank=rank, log_=pool.log, on_output=pool.router.deliver)
        env = {**pool.worker_env, ENV_VAR: info.to_json()}
        # how often this worker was restarted: plugins that form process groups refuse to re-join one
        env["SKYHIVE_WORKER_RESTARTS"] = str(self.starts[rank])
        self.starts[rank] += 1
        python = pool.python_for(self.handle)
        proc = await self.transport.start_worker(
            [python, *WORKER_ARGV], env, channel, label=f"node {self.index} worker {rank}"
        )
        self.processes[rank] = proc
        channel.attach(proc.link)
        channel.kill = proc.kill
        try:
            with anyio.fail_after(pool.settings.start_timeout):
                await channel.handshake(skyhive_version=skyhive_version(), python_version=python_version())
                if pool.setup is not None:
                    await self._setup(channel, pool.setup)
        except BaseException as exc:
            proc.kill()
            with anyio.move_on_after(2, shield=True):
                await proc.wait()
            code = proc.returncode
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if isinstance(exc, TimeoutError):
                why = f"no handshake within {pool.settings.start_timeout} s"
            pool.log.emit(WorkerStateChanged, node=self.index, local_rank=rank, state="lost", detail=why)
            if isinstance(exc, Exception):
                raise ProvisionError(
                    f"node {self.index}: worker {rank} did not start: {why} ({describe_exit(code)})",
                    node=self.index,
                ) from exc
            raise
        self.channels[rank] = channel
        pool.log.emit(WorkerStateChanged, node=self.index, local_rank=rank, state="ready", pid=channel.pid)
        pool.slots_changed()
        return channel

    async def _setup(self, channel: WorkerChannel, setup: WorkerSetup) -> None:
        # the setup object travels as the task's "function": the worker's `_setup` takes it as such
        result = await self.pool.call_on(channel, setup, (), {}, kind="setup", fn_name="plugin setup")
        del result

    async def _watch(self, rank: int, channel: WorkerChannel) -> str | None:
        """Wait until the worker is lost (returns why) or shut down cleanly (returns None)."""
        settings = self.pool.settings
        proc = self.processes[rank]
        assert proc is not None
        while True:
            with anyio.move_on_after(settings.heartbeat_interval):
                await channel.closed.wait()
            if channel.closed.is_set():
                break
            silent = time.monotonic() - channel.last_seen
            if getattr(proc, "reconnecting", False):
                channel.last_seen = time.monotonic()  # a resumable link is reconnecting: not silence
            elif silent > settings.heartbeat_timeout:
                channel.lost_reason = f"no heartbeat for {silent:.1f} s"
                proc.kill()
                break
            channel.ping()
        # the pipe is closed: collect the exit status (a moment) and tell the callers
        with anyio.move_on_after(1.0, shield=True):
            await proc.wait()
        code = proc.returncode
        if code is None:
            proc.kill()
            with anyio.move_on_after(1.0, shield=True):
                await proc.wait()
        if channel.shutting_down and not channel.calls and (code == 0 or self.stopping):
            self.pool.log.emit(WorkerStateChanged, node=self.index, local_rank=rank, state="stopped",
                               pid=channel.pid)
            return None
        reason = channel.lost_reason or describe_exit(code)
        channel.fail_all(reason)
        self.channels[rank] = None
        self.pool.log.emit(WorkerStateChanged, node=self.index, local_rank=rank, state="lost", detail=reason)
        self.pool.router.flush(self.index, rank)
        self.pool.slots_changed()
        if self.stopping:
            return None
        return reason

    # ---- stopping ----------------------------------------------------------------------------------

    async def stop(self, timeout: float) -> None:
        """Drain: ask every worker to shut down (plugin teardown runs), then kill what remains."""
        self.stopping = True
        if self.state is NodeState.READY:
            self.move(NodeState.DRAINING)
        for channel in self.channels:
            if channel is not None:
                channel.shutdown()
        with anyio.move_on_after(timeout):
            for proc in self.processes:
                if proc is not None:
                    await proc.wait()
        for proc in self.processes:
            if proc is not None:
                proc.kill()
        with anyio.move_on_after(2):
            for proc in self.processes:
                if proc is not None:
                    await proc.wait()
        for rank, proc in enumerate(self.processes):
            if proc is not None:
                close = getattr(proc, "close_transport", None)
                if close is not None:
                    close()
                channel = self.channels[rank]
                if channel is not None and channel.calls:
                    channel.fail_all("the pool closed")
        if self.transport is not None:
            await self.transport.close()

    def usable_channels(self) -> list[WorkerChannel]:
        return [c for c in self.channels if c is not None and c.usable]
