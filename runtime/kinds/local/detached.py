"""Local nodes of a named pool: detached workers on this machine, reached over their Unix sockets.

The worker is the same detached daemon SSH nodes run (`python -m skyhive.runtime.worker.server`): it
forks into its own session, serves a 0600 Unix socket in a 0700 directory (no TCP port) and speaks
the resume layer. Here the client starts it as a local subprocess instead of over SSH and connects
to the socket directly (`loop.create_unix_connection`), through the same `ResumableLink` the SSH
transport uses. So the workers outlive the client: leaving a kept pool only closes the links
(`detach`), and another process attaches later by opening the sockets again with
`Hello(takeover=True)`, which starts a new session on each worker.

Each worker's socket is `<socket_dir>/n<node>-w<rank>.sock`, so a client that attaches finds it from
the pool's record without asking anyone; its pid by its command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ....errors import ProvisionError
from ....providers.base import DetachedLocalReach, NodeHandle
from ...common.procfs import proc_stat
from ...onnode.setup import python_version, skyhive_version
from ...nodes.transport import Receiver, WorkerProcess
from .transport import LocalTransport
from ...nodes.resumable import ResumableLink, WorkerGone, connect_detached

if TYPE_CHECKING:
    from ...nodes.context import NodeContext

log = logging.getLogger("skyhive.transport.local")

__all__ = ["DetachedLocalTransport", "DetachedWorker", "CLUSTER_ENV", "socket_path", "server_pid", "is_worker_server",
           "local_detached_transport"]

#: Marks the workers of a named pool and everything their jobs start (the value is the pool's socket
#: directory: unique per state directory and name, where the pool's name alone is not).
CLUSTER_ENV = "SKYHIVE_CLUSTER"
#: A local socket does not drop the way an SSH channel does: a closed one means the worker is gone.
RECONNECT_TIMEOUT = 5.0
SERVER_MODULE = "skyhive.runtime.worker.server"


def socket_path(socket_dir: str, node: int, rank: int) -> str:
    """Where worker `rank` of node `node` of a named pool listens."""
    return os.path.join(socket_dir, f"n{node}-w{rank}.sock")


def server_pid(path: str) -> int | None:
    """The pid of the live detached worker serving `path` (found by its command line: the socket's
    peer credentials name the process that bound it, which exited when the server detached), or None.
    Never connects: a connection would take the socket from the worker's current client."""
    if not os.path.exists(path):
        return None
    want = f"\0--socket\0{path}\0".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if want in cmdline and SERVER_MODULE.encode() in cmdline and is_worker_server(int(entry)):
            return int(entry)
    return None


def is_worker_server(pid: int) -> bool:
    """True if `pid` runs (not a zombie) and is a detached skyhive worker (so killing it is ours to do)."""
    stat = proc_stat(pid)
    if stat is None or stat[0] == "Z":
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return SERVER_MODULE.encode() in fh.read()
    except OSError:
        return False


class _Protocol(asyncio.Protocol):
    """asyncio's callbacks for a Unix stream, handed to the link's session (asyncssh's shape)."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def data_received(self, data: bytes) -> None:
        self.session.data_received(data, None)

    def eof_received(self) -> bool:
        return bool(self.session.eof_received())

    def connection_lost(self, exc: Exception | None) -> None:
        self.session.connection_lost(exc)

    def pause_writing(self) -> None:
        self.session.pause_writing()

    def resume_writing(self) -> None:
        self.session.resume_writing()


class DetachedWorker(WorkerProcess):
    """A detached worker on this machine, reached through a `ResumableLink` over its socket."""

    def __init__(self, link: ResumableLink, pid: int, sock: str) -> None:
        self.link = link  # type: ignore[assignment]
        self.pid = pid
        self.socket = sock
        self.killed = False

    def __repr__(self) -> str:
        return f"<DetachedWorker pid={self.pid} {self.socket} {self.link!r}>"

    @property
    def reconnecting(self) -> bool:
        return self.link.reconnecting

    async def wait(self) -> int | None:
        await self.link.finished.wait()
        for _ in range(100):  # the worker exits right after its Goodbye is acknowledged
            if not is_worker_server(self.pid):
                break
            await asyncio.sleep(0.02)
        return self.returncode

    @property
    def returncode(self) -> int | None:
        if self.link.exit_status is not None:
            return self.link.exit_status
        if self.killed and not is_worker_server(self.pid):
            return -9
        return None

    def kill(self) -> None:
        """Kill the worker's process group (it leads one) and close the link. Idempotent."""
        self.link.close()
        if is_worker_server(self.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)
        self.killed = True

    def detach(self) -> None:
        """Leave the worker running (a kept pool): close the link only; the worker waits for a client."""
        self.link.close()


class DetachedLocalTransport(LocalTransport):
    """Starts (or, with `reach.attach`, takes over) detached workers on this machine. See the module
    docstring."""

    share_memory = False  # the socket is not a pipe pair made with the worker: no memfds passed

    def __init__(self, reach: DetachedLocalReach, *, node: int, pool_id: str, start_timeout: float,
                 redact: Callable[[str], str] | None = None) -> None:
        super().__init__(cwd=reach.cwd, redact=redact, build_env=reach.build_env)
        self.reach = reach
        self.node = node
        self.pool_id = pool_id
        self.start_timeout = start_timeout
        self._attached: set[int] = set()  # ranks taken over already: a restart starts a new worker

    def describe(self) -> dict[str, Any]:
        return {"transport": "local_detached", "socket_dir": self.reach.socket_dir}

    async def start_worker(self, argv: Sequence[str], env: Mapping[str, str], receiver: Receiver, *,
                           label: str) -> DetachedWorker:
        rank = int(label.rsplit(" ", 1)[-1])  # the node actor's label: "node N worker R"
        path = socket_path(self.reach.socket_dir, self.node, rank)
        takeover = self.reach.attach and rank not in self._attached
        if takeover:
            self._attached.add(rank)
            pid = server_pid(path)
            if pid is None:
                raise ProvisionError(f"pool {self.pool_id}: node {self.node} worker {rank} is gone (nobody listens "
                                     f"on {path}); `skyhive down {self.pool_id}` cleans up", node=self.node)
        else:
            pid = await self._start_server(argv, env, path)

        async def opener(factory: Callable[[], Any]) -> tuple[Any, Any]:
            session = factory()
            try:
                chan, _ = await asyncio.get_running_loop().create_unix_connection(lambda: _Protocol(session), path)
            except (FileNotFoundError, ConnectionRefusedError):
                raise WorkerGone(f"the worker of {label} is gone (its socket {path} no longer answers)",
                                 exit_status=_exit_status(path)) from None
            return chan, session

        def new_link() -> ResumableLink:
            return ResumableLink(receiver, opener, label=label, reconnect_timeout=RECONNECT_TIMEOUT,
                                 skyhive_version=skyhive_version(), python_version=python_version(),
                                 takeover=takeover)

        return await connect_detached(new_link, lambda link: DetachedWorker(link, pid, path), takeover=takeover,
                                      timeout=self.start_timeout)

    async def _start_server(self, argv: Sequence[str], env: Mapping[str, str], path: str) -> int:
        """Start the detached worker on `path`; its pid (the server forks, reports, and its parent exits)."""
        python = argv[0]
        flags = ["-P"] if self.worker_env else []  # a built environment: its runtime, not a skyhive/ in cwd
        idle = self.reach.idle_timeout
        proc = await asyncio.create_subprocess_exec(
            python, *flags, "-m", SERVER_MODULE, "--socket", path, "--idle-timeout", f"{idle:g}",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **self.worker_env, **env, CLUSTER_ENV: self.reach.socket_dir}, cwd=self.cwd,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.start_timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with anyio.CancelScope(shield=True):
                await proc.wait()
            raise
        try:
            return int(json.loads(out.decode().strip().splitlines()[-1])["pid"])
        except (ValueError, KeyError, IndexError):
            raise ProvisionError(f"pool {self.pool_id}: the worker on {path} did not start (exit {proc.returncode}): "
                                 f"{self.redact((err or out).decode(errors='replace').strip()[-2000:])}",
                                 node=self.node) from None


def _exit_status(path: str) -> int | None:
    try:
        with open(path + ".exit") as fh:
            text = fh.read().strip()
    except OSError:
        return None
    return int(text) if text.lstrip("-").isdigit() else None


def local_detached_transport(handle: NodeHandle, ctx: NodeContext) -> DetachedLocalTransport:
    """The registered factory for reach kind "local_detached" (see `registry`)."""
    reach = handle.reach
    assert isinstance(reach, DetachedLocalReach)
    return DetachedLocalTransport(reach, node=handle.node, pool_id=ctx.pool_id,
                                  start_timeout=ctx.settings.start_timeout, redact=ctx.log.redact)


