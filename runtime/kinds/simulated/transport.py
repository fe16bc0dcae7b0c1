"""The "simulated" reach kind: an in-memory transport and an in-process worker — a simulation.

Each simulated node's worker is the worker daemon itself, `WorkerDaemon` (the protocol `Connection` of the worker
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
import functools
import logging
import os
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ....errors import BootstrapError, NodeUnreachable
from ....protocol import ProtocolError
from ....protocol.info import ENV_VAR, RESTART_ENV, InstanceInfo
from ....protocol.messages import STDERR, STDOUT
from ....providers.simulated import SimulatedReach
from ...onnode import instance as onnode_instance
from ...worker.capture import TaskStream
from ...worker.daemon import WorkerDaemon
from ...nodes.transport import CollectionsReach, CommandResult, Receiver, Transport, WorkerProcess
from .link import SimLink

if TYPE_CHECKING:
    from ....providers.base import NodeHandle
    from ...nodes.context import NodeContext

__all__ = ["SimulatedTransport", "SimulatedWorker", "simulated_transport", "bootstrap_simulated"]

log = logging.getLogger("skyhive.transport.simulated")
_LOCAL_RANK = re.compile(r'"local_rank":(\d+)')


class _Queue(list):  # type: ignore[type-arg]
    """The submitted tasks of one simulated worker (a deque is 760 bytes empty; one thread uses it)."""

    __slots__ = ()

    def popleft(self) -> Any:
        return self.pop(0)


class _SharedOutput:
    """The stdout/stderr pair that the simulated workers of one thread share, routed to the worker
    whose task runs. Their tasks run one at a time in that thread (the event loop's), each to its
    end in one callback, and the end of a task flushes both streams: so one pair per thread does
    what a pair per worker did (two `TaskStream`s, each with its queue, lock and decoder: ~2.5 KB
    per simulated node)."""

    def __init__(self) -> None:
        self.worker: SimulatedWorker | None = None
        self.stdout = TaskStream(STDOUT, self._sink, "<skyhive stdout>")
        self.stderr = TaskStream(STDERR, self._sink, "<skyhive stderr>")
        self.streams = (self.stdout, self.stderr)

    def _sink(self, stream: int, text: str) -> None:
        worker = self.worker
        if worker is not None:
            worker.write_output(stream, text)
        else:  # written after its task ended, by a thread the task left running: no task to own it
            log.warning("simulated workers: %d characters of output written outside any task were dropped",
                        len(text))


_per_thread = threading.local()


def _shared_output() -> _SharedOutput:
    shared: _SharedOutput | None = getattr(_per_thread, "output", None)
    if shared is None:
        shared = _per_thread.output = _SharedOutput()
    return shared


class SimulatedWorker(WorkerDaemon, WorkerProcess):
    """The worker daemon (`WorkerDaemon`), run in the client's event loop; also its own `WorkerProcess` handle.

    The worker process's own parts (`WorkerDaemon._open_process`) are stand-ins here: one thread runs
    every simulated worker's tasks, so no locks; output goes through the thread's shared pair of
    streams (`_SharedOutput`); the plugins' exit stack is made when a plugin needs one; no file
    descriptor is read.
    """

    READ_BUFFER = 0
    fd_in = fd_out = -1
    fds = None  # no shared memory with the client: buffers travel in the frames
    write_lock = contextlib.nullcontext()  # one thread writes
    _writing = 0
    _cancel_deferred = False
    main_ident = 0  # never signalled: a task runs to its end within one loop callback

    def __init__(self, link: SimLink, info: InstanceInfo | None, reach: SimulatedReach, *,
                 restarted: bool = False) -> None:
        super().__init__(-1, -1)
        self.link = link  # type: ignore[assignment]
        self.info = info
        # a fault strikes the node's first worker process; one restarted after it is a fresh process
        self.faults = (0, 0) if restarted else (reach.die_at, reach.hang_at)
        self.tasks = 0
        self.hung = False
        self._returncode: int | None = None
        self._exited: asyncio.Event | None = None
        link.worker = self

    def _open_process(self, fd_in: int, fd_out: int) -> None:
        self.pending = _Queue()  # type: ignore[assignment]

    @property
    def pid(self) -> int:  # type: ignore[override]
        return os.getpid()

    @property
    def stdout(self) -> TaskStream:  # type: ignore[override]
        return _shared_output().stdout

    @property
    def stderr(self) -> TaskStream:  # type: ignore[override]
        return _shared_output().stderr

    @property
    def _streams(self) -> tuple[TaskStream, TaskStream]:  # type: ignore[override]
        return _shared_output().streams

    @functools.cached_property
    def app_stack(self) -> contextlib.ExitStack:  # type: ignore[override]
        """Made on first use: most pools have no plugin with `around_app`."""
        return contextlib.ExitStack()

    # ---- the edges WorkerDaemon leaves to us --------------------------------------------------------

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
                stack = self.__dict__.get("app_stack")  # (made only if a plugin entered it)
                try:
                    if stack is not None:
                        stack.close()
                except Exception:
                    log.exception("plugin teardown failed")
                self.finish(0)
                return
            if sub.options.get("kind") != "setup":
                self.tasks += 1
                die_at, hang_at = self.faults
                if self.tasks == die_at:
                    log.info("simulated worker %s dies at task %d (injected)", self._label(), self.tasks)
                    self.finish(-9)
                    return
                if self.tasks == hang_at:
                    log.info("simulated worker %s hangs at task %d (injected)", self._label(), self.tasks)
                    self.hung = True
                    return
            self._execute_here(sub)

    def _execute_here(self, sub: Any) -> None:
        saved = onnode_instance.current_instance_info()
        onnode_instance.set_instance_info(self.info)
        output = _shared_output()
        running, output.worker = output.worker, self
        try:
            with contextlib.redirect_stdout(output.stdout), contextlib.redirect_stderr(output.stderr):
                self.execute(sub)  # (flushes both streams when the task ends)
        finally:
            output.worker = running
            onnode_instance.set_instance_info(saved)

    def _label(self) -> str:
        return f"node {self.info.node}" if self.info is not None else "?"

    def finish(self, code: int) -> None:
        """The simulated process ends with `code`: its pipe closes (`wait` returns once the channel
        has read the end of it)."""
        if self._returncode is not None:
            return
        self._returncode = code
        self.pending.clear()
        self.link.end()

    def pipe_closed(self) -> None:
        """The channel has read everything, and the end of file: the process is gone."""
        if self._exited is not None:
            self._exited.set()

    # ---- WorkerProcess --------------------------------------------------------------------------

    async def wait(self) -> int | None:
        """Until the worker ended and its channel saw the end of the pipe (so that how it ended is
        recorded when this returns, as a process reaped after its pipe closed)."""
        if not self.link.eof_sent:
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

    async def reach_collections(self, client_path: str) -> CollectionsReach | str:
        """A simulated worker runs in the client's process: the client's socket itself."""
        return CollectionsReach(client_path)

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
        return SimulatedWorker(SimLink(receiver), info, self.reach, restarted=restarted)

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


