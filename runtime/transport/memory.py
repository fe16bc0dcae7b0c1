"""In-memory transport and in-process worker for simulated nodes (a FAKE node, named so: see
`providers/simulated.py`).

The worker is the real worker-side logic — a protocol `Connection` of the worker role, the shared task
core (`onnode/taskcore.py`: unpickle, run, build the `Result`), `instance_info`, output and heartbeats —
run in the client's event loop: no pipes, sockets or threads per node. Bytes each way are handed over
with `loop.call_soon`, so neither side is re-entered from inside its own write.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...errors import BootstrapError
from ...protocol import (Cancel, Connection, Hello, Message, Missing, Output, Ping, Pong, Role, Shutdown, Submit,
                         Welcome)
from ...protocol.info import ENV_VAR, InstanceInfo
from ...protocol.messages import PROTOCOL_VERSION, STDERR, STDOUT
from ...providers.base import NodeHandle
from ...providers.simulated import SimulatedReach, connect_failure
from ..onnode.context import set_instance_info
from ..onnode.setup import python_version, skyhive_version
from ..onnode.taskcore import cancelled_result, invoke, load_function, result_message
from ..serialize import load_value
from .base import CommandResult, Receiver, Transport, WorkerProcess

__all__ = ["MemoryTransport", "InProcessWorker", "live_workers"]

_LIVE: set[InProcessWorker] = set()


def live_workers() -> int:
    """How many in-process workers have started and not exited (tests: nothing left after a pool)."""
    return len(_LIVE)


@functools.cache
def _versions() -> tuple[str, str]:
    """This process's Python and skyhive versions (read once: the metadata lookup is slow)."""
    return python_version(), skyhive_version()


_peers_cache: tuple[str, tuple[Any, ...]] = ("", ())


def _parse_info(text: str) -> InstanceInfo:
    """`InstanceInfo.from_json`, with the peers list (the same text for every node of a pool)
    parsed once: parsing it per node made a pool's start-up O(n^2)."""
    global _peers_cache
    cut = text.rfind(',"peers":')
    if cut < 0:
        return InstanceInfo.from_json(text)
    peers_text = text[cut + 9 : -1]
    if _peers_cache[0] != peers_text:
        _peers_cache = (peers_text, InstanceInfo.from_json('{"node":0,"total_nodes":1,"head_addr":"","head_port":0,'
                                                           '"pool_id":"","peers":' + peers_text + "}").peers)
    return replace(InstanceInfo.from_json(text[:cut] + "}"), peers=_peers_cache[1])


class _Stream(io.TextIOBase):
    """What a task prints on a simulated node: `Output` frames, as the daemon's streams send."""

    def __init__(self, worker: InProcessWorker, stream: int) -> None:
        self.worker, self.stream = worker, stream

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if text:
            self.worker.send(Output(task_id=self.worker.current or 0, stream=self.stream, data=text))
        return len(text)


class InProcessWorker(WorkerProcess):
    """One simulated node's worker: the worker role of the protocol, in the client's event loop."""

    pid = 0

    def __init__(self, receiver: Receiver, info: InstanceInfo | None, reach: SimulatedReach) -> None:
        self.loop = asyncio.get_running_loop()
        self.receiver = receiver
        self.info = info
        self.reach = reach
        self.conn = Connection(Role.WORKER)
        self.fns: dict[bytes, Any] = {}
        self.tasks_seen = 0
        self.current: int | None = None
        self.hung = False
        self.cancelled: set[int] = set()
        self._code: int | None = None
        self._exited = asyncio.Event()
        self.link = _MemoryLink(self)
        _LIVE.add(self)

    # ---- WorkerProcess -----------------------------------------------------------------------------
    async def wait(self) -> int | None:
        await self._exited.wait()
        return self._code

    def kill(self) -> None:
        self._exit(-9)

    @property
    def returncode(self) -> int | None:
        return self._code

    def _exit(self, code: int) -> None:
        if self._code is None:
            self._code = code
            _LIVE.discard(self)
            self._exited.set()
            self.loop.call_soon(self.receiver.eof_received)

    # ---- protocol ----------------------------------------------------------------------------------
    def send(self, msg: Message) -> None:
        if self._code is not None:
            return
        data = self.conn.send(msg)
        self.loop.call_soon(self._deliver, data if isinstance(data, bytes) else b"".join(data))

    def _deliver(self, data: bytes) -> None:
        if self._code is None:
            self.receiver.data_received(data)

    def feed(self, data: bytes) -> None:
        if self._code is not None or self.hung:
            return
        for msg in self.conn.receive_data(data):
            self.dispatch(msg)

    def dispatch(self, msg: Message) -> None:
        if isinstance(msg, Hello):
            self.send(Welcome(protocol_version=PROTOCOL_VERSION, python_version=_versions()[0],
                              skyhive_version=_versions()[1], max_frame=self.conn.max_frame, pid=os.getpid()))
        elif isinstance(msg, Ping):
            self.send(Pong(nonce=msg.nonce))
        elif isinstance(msg, Submit):
            self.execute(msg)
        elif isinstance(msg, Cancel):
            self.cancelled.add(msg.task_id)
        elif isinstance(msg, Missing):
            self.send(msg)
        elif isinstance(msg, Shutdown):
            self._exit(0)

    def execute(self, sub: Submit) -> None:
        if sub.options.get("kind") == "setup":
            self.send(result_message(sub.task_id, True, None)[0])  # plugins' app hooks: not simulated
            return
        n, self.tasks_seen = self.tasks_seen, self.tasks_seen + 1
        if n == self.reach.die_at_task:
            self._exit(1)
            return
        if n == self.reach.hang_at_task:
            self.hung = True
            return
        if sub.task_id in self.cancelled:
            self.cancelled.discard(sub.task_id)
            self.send(cancelled_result(sub.task_id, "cancelled before it started"))
            return
        self.current = sub.task_id
        set_instance_info(self.info)
        try:
            with contextlib.redirect_stdout(_Stream(self, STDOUT)), contextlib.redirect_stderr(_Stream(self, STDERR)):
                fn, buffers = load_function(self.fns, sub)
                value = invoke(fn, load_value(sub.args, buffers), sub.batch,
                               sub.task_id if sub.options.get("stream") else None, self.send)
            ok = True
        except Exception as exc:  # noqa: BLE001 - everything a task raises goes back to the caller
            ok, value = False, exc
        finally:
            set_instance_info(None)
            self.current = None
        msg, buffers = result_message(sub.task_id, ok, value)
        self.send(msg)
        for header, piece in self.conn.send_buffers(msg.task_id, buffers):
            self.loop.call_soon(self._deliver, bytes(header) + bytes(piece))


class _MemoryLink:
    """The client's end of a simulated node's pipe."""

    fd_socket = None

    def __init__(self, worker: InProcessWorker) -> None:
        self.worker = worker

    def write(self, data: bytes | memoryview) -> None:
        self.worker.loop.call_soon(self.worker.feed, bytes(data))

    def writelines(self, pieces: Sequence[bytes | memoryview]) -> None:
        self.write(b"".join(bytes(p) for p in pieces))

    async def drain(self) -> None:
        return None

    async def write_direct(self, pieces: Sequence[bytes | memoryview]) -> None:
        self.writelines(pieces)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.worker._exit(0)


class MemoryTransport(Transport):
    """Reaches a simulated node: its workers are `InProcessWorker`s (a fake transport, see module doc)."""

    def __init__(self, handle: NodeHandle) -> None:
        assert isinstance(handle.reach, SimulatedReach)
        self.handle, self.reach = handle, handle.reach

    async def connect(self) -> None:
        if self.reach.fail_stage == "connecting":
            raise connect_failure(self.handle.node)

    async def start_worker(self, argv: Sequence[str], env: Mapping[str, str], receiver: Receiver, *,
                           label: str) -> InProcessWorker:
        text = env.get(ENV_VAR)
        return InProcessWorker(receiver, _parse_info(text) if text else None, self.reach)

    async def run(self, command: str, *, env: Mapping[str, str] | None = None,
                  timeout: float | None = None) -> CommandResult:
        raise BootstrapError(f"simulated node {self.handle.node} runs no shell commands ({command!r})",
                             node=self.handle.node)

    def describe(self) -> dict[str, Any]:
        return {"simulated": self.handle.node}


def make_transport(handle: NodeHandle, ctx: Any) -> MemoryTransport:
    """Registry factory for reach kind "simulated"."""
    return MemoryTransport(handle)


async def bootstrap(ctx: Any, node: int, transport: Transport) -> str:
    """Nothing to install on a simulated node; one set to fail at "bootstrapping" raises."""
    assert isinstance(transport, MemoryTransport)
    if transport.reach.fail_stage == "bootstrapping":
        raise BootstrapError(f"simulated node {node} failed at bootstrapping (Simulated(fail=...))", node=node)
    return "simulated"
