"""The "simulated" reach kind: an in-memory transport and an in-process worker — a simulation.

Each simulated node's worker is the daemon's own `Worker` (the protocol `Connection` of the worker
role, the same unpickle/run/result path, `instance_info`, output, `Pong` for heartbeats) with only
its edges replaced: frames go to the client's channel as bytes through a callback instead of a pipe,
bytes from the client are parsed in a loop callback instead of a reader thread, and "the process
ends" closes the in-memory pipe instead of exiting. No pipes, sockets, threads or processes per node:
tasks run on the client's event loop, one at a time per worker, so this serves the control plane's
tests and benchmarks (trivial tasks), not real work.

Injected faults come with the node's `SimulatedReach`: refusing the connection, a failing bootstrap,
a worker that dies (pipe closed, exit -9) or hangs (silent, heartbeats unanswered) at its n-th task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import BootstrapError, NodeUnreachable
from ...protocol import ProtocolError
from ...protocol.info import ENV_VAR, RESTART_ENV, InstanceInfo
from ...providers.simulated import SimulatedReach
from ..onnode import context as onnode_context
from ..worker.daemon import Worker
from .base import CommandResult, Receiver, Transport, WorkerProcess
from .registry import register_transport

if TYPE_CHECKING:
    from ...providers.base import NodeHandle
    from ..actors.context import NodeContext

__all__ = ["SimulatedTransport", "SimulatedWorker", "simulated_transport", "bootstrap_simulated"]

log = logging.getLogger("skyhive.transport.simulated")
_LOCAL_RANK = re.compile(r'"local_rank":(\d+)')


class _SimLink:
    """The client's end of the in-memory pipe to one simulated worker (`Link`)."""

    fd_socket = None  # no shared memory: buffers travel in the frames
    __slots__ = ("worker", "receiver", "inbox", "outbox", "paused", "scheduled", "closed", "loop")

    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        self.worker: SimulatedWorker | None = None
        self.inbox: list[bytes] = []
        self.outbox: list[bytes] = []
        self.paused = False
        self.scheduled = False
        self.closed = False
        self.loop = asyncio.get_running_loop()

    # client -> worker: queued, handled in a loop callback (never inside the channel's own call)
    def write(self, data: bytes | memoryview) -> None:
        if self.closed:
            return
        self.inbox.append(bytes(data))
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self._pump)

    def writelines(self, pieces: Sequence[bytes | memoryview]) -> None:
        for piece in pieces:
            self.write(piece)

    async def drain(self) -> None:
        return None

    async def write_direct(self, pieces: Sequence[bytes | memoryview]) -> None:
        self.writelines(pieces)

    def _pump(self) -> None:
        self.scheduled = False
        if self.worker is not None and self.inbox:
            data, self.inbox = b"".join(self.inbox), []
            self.worker.feed(data)

    # worker -> client
    def deliver(self, data: bytes) -> None:
        if self.closed:
            return
        if self.paused or self.outbox:
            self.outbox.append(data)
        else:
            self.receiver.data_received(data)

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False
        if self.outbox:
            self.loop.call_soon(self._flush_out)

    def _flush_out(self) -> None:
        while self.outbox and not self.paused and not self.closed:
            self.receiver.data_received(self.outbox.pop(0))

    def close(self) -> None:
        """The client closes its end: the worker sees end of input and stops, like the daemon."""
        if self.worker is not None and self.worker.returncode is None:
            self.loop.call_soon(self.worker.finish, 0)

    def end(self) -> None:
        """The worker's end closed: the channel sees end of file (in a loop callback)."""
        if not self.closed:
            self.closed = True
            self.inbox.clear()
            self.loop.call_soon(self.receiver.eof_received)


class SimulatedWorker(Worker, WorkerProcess):
    """The daemon's `Worker`, run in the client's event loop; also its own `WorkerProcess` handle."""

    READ_BUFFER = 0

    def __init__(self, link: _SimLink, info: InstanceInfo | None, reach: SimulatedReach, *,
                 restarted: bool = False) -> None:
        super().__init__(-1, -1)
        self.link = link  # type: ignore[assignment]
        self.pid = os.getpid()
        self.info = info
        # a fault strikes the node's first worker process; one restarted after it is a fresh process
        self.die_at = 0 if restarted else reach.die_at
        self.hang_at = 0 if restarted else reach.hang_at
        self.tasks = 0
        self.hung = False
        self._returncode: int | None = None
        self._exited: asyncio.Event | None = None
        link.worker = self

    # ---- the edges the daemon's Worker leaves to us ---------------------------------------------

    def _write(self, data: bytes | list[Any]) -> None:
        self.link.deliver(b"".join(data) if isinstance(data, list) else bytes(data))

    def abandon(self, code: int = 0) -> None:
        self.finish(code)

    def _apply_env(self, env: dict[str, str]) -> None:
        """A simulated worker shares the client's process: its environment is left alone."""

    def feed(self, data: bytes) -> None:
        """Bytes from the client: parse, answer (`Pong`, `Welcome`), run what was submitted."""
        if self._returncode is not None or self.hung:
            return
        try:
            for msg in self.conn.receive_data(data):
                self.dispatch(msg)
        except ProtocolError as exc:
            log.error("simulated worker %s: protocol error from the client: %s", self._label(), exc)
            self.finish(1)
            return
        while self.pending and self._returncode is None and not self.hung:
            sub = self.pending.popleft()
            if sub is None:  # Shutdown
                try:
                    self.app_stack.close()
                except Exception:
                    log.exception("plugin teardown failed")
                self.finish(0)
                return
            if sub.options.get("kind") != "setup":
                self.tasks += 1
                if self.tasks == self.die_at:
                    log.info("simulated worker %s dies at task %d (injected)", self._label(), self.tasks)
                    self.finish(-9)
                    return
                if self.tasks == self.hang_at:
                    log.info("simulated worker %s hangs at task %d (injected)", self._label(), self.tasks)
                    self.hung = True
                    return
            self._execute_here(sub)

    def _execute_here(self, sub: Any) -> None:
        saved = onnode_context._current
        onnode_context.set_instance_info(self.info)
        try:
            with contextlib.redirect_stdout(self.stdout), contextlib.redirect_stderr(self.stderr):
                self.execute(sub)
        finally:
            onnode_context.set_instance_info(saved)

    def _label(self) -> str:
        return f"node {self.info.node}" if self.info is not None else "?"

    def finish(self, code: int) -> None:
        """The simulated process ends with `code`: its pipe closes."""
        if self._returncode is not None:
            return
        self._returncode = code
        self.pending.clear()
        self.link.end()
        if self._exited is not None:
            self._exited.set()

    # ---- WorkerProcess --------------------------------------------------------------------------

    async def wait(self) -> int | None:
        if self._returncode is None:
            if self._exited is None:
                self._exited = asyncio.Event()
            await self._exited.wait()
        return self._returncode

    def kill(self) -> None:
        self.finish(-9)

    @property
    def returncode(self) -> int | None:
        return self._returncode


class SimulatedTransport(Transport):
    """Reaches a simulated node: workers are `SimulatedWorker`s in this process."""

    def __init__(self, handle: NodeHandle, ctx: NodeContext | None = None) -> None:
        assert isinstance(handle.reach, SimulatedReach)
        self.ctx = ctx
        self.node = handle.node
        self.reach = handle.reach

    async def connect(self) -> None:
        if self.reach.fail_stage == "connecting":
            raise NodeUnreachable(f"node {self.node}: simulated node refuses connections (injected failure)",
                                  node=self.node)

    def worker_info_env(self, info: Any) -> str:
        """Only which worker this is: the worker takes the pool's own `InstanceInfo` object from the
        node context. The whole info's JSON (every peer) per worker was quadratic in time and memory."""
        return f'{{"node":{info.node},"local_rank":{info.local_rank}}}'

    def worker_python(self) -> str:
        return sys.executable

    async def start_worker(self, argv: Sequence[str], env: Mapping[str, str], receiver: Receiver, *,
                           label: str) -> WorkerProcess:
        text = env.get(ENV_VAR)
        info: InstanceInfo | None = None
        rank = _LOCAL_RANK.search(text[:512]) if text else None
        if rank is not None and self.ctx is not None:
            # the pool's own InstanceInfo object (its peers tuple shared by every worker): parsing
            # the JSON per worker would hold one copy of every peer per node
            info = self.ctx.infos.get((self.node, int(rank.group(1))))
        if info is None and text:
            info = InstanceInfo.from_json(text)
        restarted = env.get(RESTART_ENV, "0") != "0"
        return SimulatedWorker(_SimLink(receiver), info, self.reach, restarted=restarted)

    async def run(self, command: str, *, env: Mapping[str, str] | None = None,
                  timeout: float | None = None) -> CommandResult:
        return CommandResult(command, 127, "", f"node {self.node}: a simulated node has no shell to run {command!r}")

    def describe(self) -> dict[str, Any]:
        return {"kind": "simulated", "node": self.node}


def simulated_transport(handle: NodeHandle, ctx: NodeContext) -> SimulatedTransport:
    """The registry's factory for reach kind "simulated"."""
    return SimulatedTransport(handle, ctx)


async def bootstrap_simulated(ctx: NodeContext, node: int, transport: Transport) -> str:
    """Nothing to prepare, unless the node was told to fail here."""
    if isinstance(transport, SimulatedTransport) and transport.reach.fail_stage == "bootstrapping":
        raise BootstrapError(f"node {node}: simulated bootstrap failed (injected failure)", node=node)
    return ""


register_transport("simulated", simulated_transport, bootstrap=bootstrap_simulated)
