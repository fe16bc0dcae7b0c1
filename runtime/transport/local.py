"""Local transport: worker processes on this machine, over subprocess pipes."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence

from .base import CommandResult, Receiver, Transport, WorkerProcess

__all__ = ["LocalTransport", "LocalWorker", "PIPE_SIZE"]

log = logging.getLogger("skyhive.transport.local")
#: Pipes are enlarged from the 64 KiB default: a 1 MiB chunk then moves in one write.
PIPE_SIZE = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_HIGH_WATER = 4 << 20


def _grow_pipe(transport: asyncio.BaseTransport | None) -> None:
    pipe = transport.get_extra_info("pipe") if transport is not None else None
    if pipe is None:
        return
    try:
        fcntl.fcntl(pipe.fileno(), _F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:
        pass  # capped by /proc/sys/fs/pipe-max-size: the default still works, only slower


class _Protocol(asyncio.SubprocessProtocol):
    def __init__(self, receiver: Receiver, label: str) -> None:
        self.receiver = receiver
        self.label = label
        self.exited = asyncio.get_running_loop().create_future()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._stderr = b""

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self.receiver.data_received(data)
        else:
            self._stderr += data
            *lines, self._stderr = self._stderr.split(b"\n")
            for line in lines:
                log.warning("%s: %s", self.label, line.decode(errors="replace"))

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self.receiver.eof_received()
        elif fd == 2 and self._stderr:
            log.warning("%s: %s", self.label, self._stderr.decode(errors="replace"))
            self._stderr = b""

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()


class _PipeLink:
    def __init__(self, transport: asyncio.SubprocessTransport, protocol: _Protocol) -> None:
        self._stdin = transport.get_pipe_transport(0)
        self._stdout = transport.get_pipe_transport(1)
        self._protocol = protocol
        assert isinstance(self._stdin, asyncio.WriteTransport)
        self._stdin.set_write_buffer_limits(high=_HIGH_WATER)

    def write(self, data: bytes | memoryview) -> None:
        if not self._stdin.is_closing():
            self._stdin.write(data)

    def writelines(self, pieces: Sequence[bytes | memoryview]) -> None:
        if not self._stdin.is_closing():
            self._stdin.writelines(pieces)

    async def drain(self) -> None:
        if not self._protocol._can_write.is_set():
            await self._protocol._can_write.wait()

    def pause_reading(self) -> None:
        self._stdout.pause_reading()  # type: ignore[union-attr]

    def resume_reading(self) -> None:
        self._stdout.resume_reading()  # type: ignore[union-attr]

    def close(self) -> None:
        self._stdin.close()


class LocalWorker(WorkerProcess):
    def __init__(self, transport: asyncio.SubprocessTransport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self.link = _PipeLink(transport, protocol)
        self.pid = transport.get_pid()

    async def wait(self) -> int | None:
        await asyncio.shield(self._protocol.exited)
        return self._transport.get_returncode()

    @property
    def returncode(self) -> int | None:
        return self._transport.get_returncode()

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)  # the worker leads its own process group
        except (ProcessLookupError, PermissionError):
            pass
        if self._transport.get_returncode() is None:
            try:
                self._transport.kill()
            except ProcessLookupError:
                pass

    def close_transport(self) -> None:
        self._transport.close()


class LocalTransport(Transport):
    """Runs workers and commands on this machine with this interpreter."""

    def __init__(self, python: str | None = None, cwd: str | None = None) -> None:
        self.python = python or sys.executable
        self.cwd = cwd

    async def start_worker(
        self, argv: Sequence[str], env: Mapping[str, str], receiver: Receiver, *, label: str
    ) -> LocalWorker:
        loop = asyncio.get_running_loop()
        full_env = {**os.environ, **env}
        transport, protocol = await loop.subprocess_exec(
            lambda: _Protocol(receiver, label),
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=full_env,
            cwd=self.cwd,
            start_new_session=True,
        )
        _grow_pipe(transport.get_pipe_transport(0))
        _grow_pipe(transport.get_pipe_transport(1))
        return LocalWorker(transport, protocol)

    async def run(self, command: str, *, env: Mapping[str, str] | None = None, timeout: float | None = None) -> CommandResult:
        proc = await asyncio.create_subprocess_shell(
            command,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **(env or {})},
            cwd=self.cwd,
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except BaseException:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await asyncio.shield(proc.wait())
            raise
        return CommandResult(command, proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))
