"""Local transport: worker processes on this machine, over pipes.

The protocol pipes are our own (`os.pipe`), attached to the loop with `connect_read_pipe` /
`connect_write_pipe`: bytes reach the channel in the same loop iteration that reads them (asyncio's
subprocess transport would defer each read by one more iteration). The worker's stderr — its own
diagnostics, never task output — is logged line by line.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ....providers.base import LocalReach, NodeHandle
from ....providers.local_early import F_SETPIPE_SZ as _F_SETPIPE_SZ
from ....providers.local_early import PIPE_SIZE, EarlyWorker
from ....providers.local_early import pipe as _pipe
from ...nodes.shell import NodeEnv, Shell
from ...nodes.transport import CollectionsReach, CommandResult, Receiver, Transport, WorkerProcess
from ...common.shm import ENV_VAR as SHM_ENV_VAR
from ...common.shm import socket_pair

if TYPE_CHECKING:
    from ...nodes.context import NodeContext

__all__ = ["LocalTransport", "LocalWorker", "PIPE_SIZE", "local_transport"]

log = logging.getLogger("skyhive.transport.local")
_HIGH_WATER = 4 << 20
#: Bytes asked of one pipe read. asyncio's default (256 KiB) is past glibc's mmap threshold, so
#: every read, however small the frame, would mmap and unmap a fresh buffer.
READ_SIZE = 64 * 1024


class _Reader(asyncio.Protocol):
    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        self.closed = asyncio.get_running_loop().create_future()
        # the receiver's own method in this instance's place: the loop calls it directly, one call
        # fewer per read (every Result of every call comes this way)
        self.data_received = receiver.data_received  # type: ignore[method-assign]

    def data_received(self, data: bytes) -> None:
        self.receiver.data_received(data)

    def eof_received(self) -> bool:
        self.receiver.eof_received()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


class _Writer(asyncio.Protocol):
    def __init__(self) -> None:
        self.can_write = asyncio.Event()
        self.can_write.set()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.can_write.set()  # nobody waits forever on a closed pipe


class _StderrLogger(asyncio.Protocol):
    """The worker's own diagnostics (never task output), logged line by line, secrets redacted."""

    def __init__(self, label: str, redact: Callable[[str], str]) -> None:
        self.label = label
        self.redact = redact
        self.rest = b""

    def data_received(self, data: bytes) -> None:
        *lines, self.rest = (self.rest + data).split(b"\n")
        for line in lines:
            log.warning("%s: %s", self.label, self.redact(line.decode(errors="replace")))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.rest:
            log.warning("%s: %s", self.label, self.redact(self.rest.decode(errors="replace")))


class _PipeLink:
    def __init__(self, writer: asyncio.WriteTransport, wproto: _Writer, reader: asyncio.ReadTransport,
                 fd_socket: socket.socket | None = None) -> None:
        self.fd_socket = fd_socket
        self._w = writer
        self._wproto = wproto
        self._r = reader
        self._fd = writer.get_extra_info("pipe").fileno()
        self._direct = asyncio.Lock()
        self._held: list[bytes | memoryview] | None = None
        writer.set_write_buffer_limits(high=_HIGH_WATER)

    def write(self, data: bytes | memoryview) -> None:
        if self._held is not None:  # a direct write is under way: this frame follows it
            self._held.append(data)
            return
        w = self._w
        if w.is_closing():
            return
        if not w.get_write_buffer_size():
            # nothing waits in asyncio's buffer: the pipe takes the frame now, as asyncio's write would
            # try first, without its checks (every call's Submit goes this way); what the pipe does not
            # take, or an error, goes to asyncio's write, which buffers the rest or closes the pipe
            try:
                n = os.write(self._fd, data)
            except OSError:
                n = 0
            if n == len(data):
                return
            data = memoryview(data)[n:]
        w.write(data)

    def writelines(self, pieces: Sequence[bytes | memoryview]) -> None:
        # one write() each: WriteTransport.writelines joins its pieces, copying a 1 MiB chunk
        for piece in pieces:
            self.write(piece)

    async def write_direct(self, pieces: Sequence[bytes | memoryview]) -> None:
        """Write one frame's pieces straight to the pipe as it takes them, not through asyncio's
        buffer (which copies whatever the pipe does not take at once, then shifts it as it drains:
        for a 100 MiB argument that was most of the client's CPU). Frames written meanwhile by
        others wait in order, so every frame stays whole."""
        async with self._direct:
            if self._w.is_closing():
                return
            await self._until_flushed()
            self._held = []
            try:
                views = [memoryview(p).cast("B") for p in pieces]
                while views:
                    try:
                        n = os.writev(self._fd, views)
                    except BlockingIOError:
                        n = 0
                    while views and n >= len(views[0]):
                        n -= len(views[0])
                        views.pop(0)
                    if views:
                        if n:
                            views[0] = views[0][n:]
                        await self._writable()
            finally:
                held, self._held = self._held, None
                for data in held:
                    if not self._w.is_closing():
                        self._w.write(data)

    async def _until_flushed(self) -> None:
        if self._w.get_write_buffer_size():
            self._w.set_write_buffer_limits(high=0, low=0)  # pause_writing now, resume when empty
            try:
                await self._wproto.can_write.wait()
            finally:
                self._w.set_write_buffer_limits(high=_HIGH_WATER)

    async def _writable(self) -> None:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        loop.add_writer(self._fd, lambda: fut.done() or fut.set_result(None))
        try:
            await fut
        finally:
            loop.remove_writer(self._fd)

    async def drain(self) -> None:
        if not self._wproto.can_write.is_set():
            await self._wproto.can_write.wait()

    def pause_reading(self) -> None:
        if self._r.is_reading():
            self._r.pause_reading()

    def resume_reading(self) -> None:
        if not self._r.is_closing() and not self._r.is_reading():
            self._r.resume_reading()

    def close(self) -> None:
        self._w.close()

    def close_all(self) -> None:
        self._w.close()
        self._r.close()
        if self.fd_socket is not None:
            self.fd_socket.close()


class _EarlyProcess:
    """An early worker's process (`subprocess.Popen`, started before the event loop) with the face of
    asyncio's: `pid`, `returncode`, `await wait()` — its exit seen through a pidfd on the loop."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        self._exited: asyncio.Future[None] | None = None

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    def kill(self) -> None:
        if self._popen.poll() is None:
            self._popen.kill()

    async def wait(self) -> int:
        if self._popen.poll() is None:
            if self._exited is None:
                loop = asyncio.get_running_loop()
                self._exited = exited = loop.create_future()
                try:
                    fd = os.pidfd_open(self.pid)
                except ProcessLookupError:  # reaped meanwhile
                    exited.set_result(None)
                else:
                    def ready() -> None:
                        loop.remove_reader(fd)
                        os.close(fd)
                        self._popen.poll()  # reaped now, even if the wait that asked was cancelled
                        if not exited.done():
                            exited.set_result(None)

                    loop.add_reader(fd, ready)
            await asyncio.shield(self._exited)
        return self._popen.wait()


class LocalWorker(WorkerProcess):
    def __init__(self, proc: asyncio.subprocess.Process | _EarlyProcess, link: _PipeLink,
                 stderr: asyncio.ReadTransport | None) -> None:
        self._proc = proc
        self.link = link
        self.pid = proc.pid
        self._stderr = stderr

    async def wait(self) -> int | None:
        return await asyncio.shield(self._proc.wait())

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)  # the worker leads its own process group
        except (ProcessLookupError, PermissionError):
            pass
        if self._proc.returncode is None:
            try:
                self._proc.kill()
            except ProcessLookupError:
                pass

    def close_transport(self) -> None:
        self.link.close_all()
        if self._stderr is not None:
            self._stderr.close()


async def _kill_and_reap(proc: asyncio.subprocess.Process | _EarlyProcess) -> None:
    """Kill a process we started and its process group, and wait for it (no zombie), shielded."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    await asyncio.shield(proc.wait())


class LocalTransport(Transport):
    """Runs workers and commands on this machine with this interpreter. Large buffers to and from
    its workers travel in shared memory (`shm`), passed over a socket pair made with each worker."""

    share_memory = True

    def __init__(self, python: str | None = None, cwd: str | None = None,
                 redact: Callable[[str], str] | None = None, build_env: bool = False,
                 early: Sequence[EarlyWorker] = ()) -> None:
        self.python = python or sys.executable
        self.cwd = cwd
        self.redact = redact or (lambda text: text)
        self.build_env = build_env
        self.worker_env: dict[str, str] = {}  # set by the bootstrap when workers run in a built env
        self.early = list(early)  # workers started before the pool knew them (`providers/local_early.py`)

    def worker_python(self) -> str:
        return self.python

    def shell(self) -> Shell:
        """This machine: bootstrap checks the Image against this Python, or builds it here (`build_env`)."""
        from .shell import LocalShell

        return LocalShell(cwd=self.cwd, build_env=self.build_env)

    async def use_env(self, env: NodeEnv) -> None:
        """Workers run the interpreter and path bootstrap prepared (`python -P`: its runtime first)."""
        self.node_env = env
        self.python = env.python
        if env.pythonpath:
            self.worker_env = {"PYTHONPATH": os.pathsep.join(env.pythonpath)}
        if env.cwd:
            self.cwd = env.cwd

    async def reach_collections(self, client_path: str) -> CollectionsReach | str:
        """Workers on this machine reach the client's socket itself."""
        return CollectionsReach(client_path)

    def _take_early(self, argv: Sequence[str]) -> EarlyWorker | None:
        """A worker started early that runs what `argv` asks, if one is left (else None); those that
        cannot serve (another interpreter or folder: a built environment) are ended now."""
        while self.early:
            worker = self.early.pop(0)
            if (not self.worker_env and list(argv) == worker.argv
                    and (self.cwd or os.getcwd()) == worker.cwd and worker.popen.poll() is None):
                worker.taken = True
                return worker
            worker.discard()
        return None

    async def close(self) -> None:
        for worker in self.early:  # started early, never taken (a node that failed before its workers)
            worker.discard()
        self.early = []
        await super().close()

    async def start_worker(
        self, argv: Sequence[str], env: Mapping[str, str], receiver: Receiver, *, label: str
    ) -> LocalWorker:
        early = self._take_early(argv) if self.early else None
        if early is not None:
            return await self._adopt(early, env, receiver, label=label)
        loop = asyncio.get_running_loop()
        if self.worker_env:  # a built environment: its runtime first, not a `skyhive/` folder in cwd
            argv = [argv[0], "-P", *argv[1:]]
        to_child_r, to_child_w = _pipe()
        from_child_r, from_child_w = _pipe()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        mine, theirs = socket_pair() if self.share_memory else (None, None)
        extra = {SHM_ENV_VAR: str(theirs.fileno())} if theirs is not None else {}
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=to_child_r, stdout=from_child_w, stderr=err_w,
                env={**os.environ, **self.worker_env, **env, **extra}, cwd=self.cwd, start_new_session=True,
                pass_fds=(theirs.fileno(),) if theirs is not None else (),
            )
        except BaseException:
            # (a cancellation here can leave a started child behind only if asyncio itself does;
            # its own handling kills the child it could not hand over)
            for fd in (to_child_r, to_child_w, from_child_r, from_child_w, err_r, err_w):
                os.close(fd)
            for sock in (mine, theirs):
                if sock is not None:
                    sock.close()
            raise
        for fd in (to_child_r, from_child_w, err_w):
            os.close(fd)
        if theirs is not None:
            theirs.close()
        return await self._connect(proc, mine, from_child_r, to_child_w, err_r, receiver, label=label)

    async def _adopt(self, early: EarlyWorker, env: Mapping[str, str], receiver: Receiver, *,
                     label: str) -> LocalWorker:
        """Take a worker started early: send its environment (what `start_worker` would have given it
        at spawn beyond this process's own), then speak the protocol on its pipes."""
        proc = _EarlyProcess(early.popen)
        try:
            early.send_env(env)
        except BaseException:
            for fd in (early.from_child, early.to_child, early.stderr):
                os.close(fd)
            early.shm.close()
            await _kill_and_reap(proc)
            raise
        return await self._connect(proc, early.shm, early.from_child, early.to_child, early.stderr, receiver,
                                   label=label)

    async def _connect(self, proc: asyncio.subprocess.Process | _EarlyProcess, mine: socket.socket | None,
                       from_child_r: int, to_child_w: int, err_r: int, receiver: Receiver, *,
                       label: str) -> LocalWorker:
        loop = asyncio.get_running_loop()
        files = [open(from_child_r, "rb", 0), open(to_child_w, "wb", 0), open(err_r, "rb", 0)]
        transports: list[asyncio.BaseTransport] = []
        try:
            reader, _ = await loop.connect_read_pipe(lambda: _Reader(receiver), files[0])
            transports.append(reader)
            if hasattr(reader, "max_size"):
                reader.max_size = READ_SIZE  # type: ignore[attr-defined]
            wproto = _Writer()
            writer, _ = await loop.connect_write_pipe(lambda: wproto, files[1])
            transports.append(writer)
            err, _ = await loop.connect_read_pipe(lambda: _StderrLogger(label, self.redact), files[2])
        except BaseException:
            # cancelled (or failed) between spawning and handing the worker over: nobody else
            # knows this process, so end it here
            for t in transports:
                t.close()
            for f in files:
                f.close()
            if mine is not None:
                mine.close()
            await _kill_and_reap(proc)
            raise
        return LocalWorker(proc, _PipeLink(writer, wproto, reader, mine), err)

    async def run(self, command: str, *, env: Mapping[str, str] | None = None, timeout: float | None = None) -> CommandResult:
        proc = await asyncio.create_subprocess_shell(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
            cwd=self.cwd,
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except BaseException:
            await _kill_and_reap(proc)
            raise
        return CommandResult(command, proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))


def local_transport(handle: NodeHandle, ctx: NodeContext) -> LocalTransport:
    """The registered factory for reach kind "local" (see `registry`)."""
    reach = handle.reach
    assert isinstance(reach, LocalReach)
    return LocalTransport(cwd=reach.cwd, redact=ctx.log.redact, build_env=reach.build_env, early=reach.early)


# the bootstrap by name: imported when a node of this kind is first bootstrapped
