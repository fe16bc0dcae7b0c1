"""srun over SSH (the Slurm provider's Mode 2): the client reaches the cluster through a login node.

`SrunSSHTransport` holds an SSH transport to the login node (the same connection code, host key pinned by
the provider on first contact and carried in the reach) and differs in its workers: a worker is not a
detached daemon on the login node but a job step, `srun --jobid J -w NODE ... python -m skyhive.runtime.worker`,
started in an SSH exec channel whose stdin/stdout are srun's, and so the worker's protocol pipe
(`SSHPipeWorker`). Closing the channel ends srun, which ends the step; cancelling the job ends all.

Bootstrap runs over the login node's shell (`shell()`): the environment it builds in the login user's
home is what the nodes run, as Slurm clusters share home directories between login and compute nodes.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ....providers.sshlib import asyncssh
from ....providers.slurm import SlurmReach
from ...common.settings import Settings
from ...nodes.shell import Shell
from ...nodes.transport import CollectionsReach, CommandResult, Receiver, Transport, WorkerProcess
from .srun import SLURM_COLLECTIONS, srun_argv
from ..ssh.transport import NodeEnv, SSHTransport, env_stdin

__all__ = ["SrunSSHTransport", "SSHPipeWorker"]

log = logging.getLogger("skyhive.transport.srun")


class _PipeSession(asyncssh.SSHClientSession):  # type: ignore[misc]
    """asyncssh callbacks of one worker's exec channel: stdout to the receiver, stderr to the log."""

    def __init__(self, receiver: Receiver, label: str) -> None:
        self.receiver = receiver
        self.label = label
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.closed = asyncio.Event()
        self.exit_status: int | None = None
        self._err = b""

    def data_received(self, data: bytes, datatype: Any) -> None:
        if datatype == asyncssh.EXTENDED_DATA_STDERR:
            *lines, self._err = (self._err + data).split(b"\n")
            for line in lines:
                log.warning("%s: %s", self.label, line.decode(errors="replace"))
        else:
            self.receiver.data_received(data)

    def eof_received(self) -> bool:
        self.receiver.eof_received()
        return False

    def exit_status_received(self, status: int) -> None:
        self.exit_status = status

    def exit_signal_received(self, signal: str, core_dumped: bool, msg: str, lang: str) -> None:
        self.exit_status = -9 if signal == "KILL" else -15

    def connection_lost(self, exc: Exception | None) -> None:
        self.can_write.set()
        self.closed.set()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()


class _ChannelLink:
    fd_socket = None  # a worker on another machine: no shared memory
    """A `Link` over one SSH exec channel."""

    def __init__(self, chan: Any, session: _PipeSession) -> None:
        self._chan = chan
        self._session = session

    def write(self, data: bytes | memoryview) -> None:
        if not self._session.closed.is_set():
            self._chan.write(bytes(data))

    def writelines(self, pieces: Sequence[bytes | memoryview]) -> None:
        for piece in pieces:
            self.write(piece)

    async def drain(self) -> None:
        await self._session.can_write.wait()

    def pause_reading(self) -> None:
        self._chan.pause_reading()

    def resume_reading(self) -> None:
        if not self._session.closed.is_set():
            self._chan.resume_reading()

    async def write_direct(self, pieces: Sequence[bytes | memoryview]) -> None:
        for piece in pieces:
            self.write(piece)
        await self.drain()

    def close(self) -> None:
        """End the worker's input (it exits when its stdin closes)."""
        if not self._session.closed.is_set():
            self._chan.write_eof()


class SSHPipeWorker(WorkerProcess):
    """A worker whose pipe is an SSH exec channel running srun on the login node."""

    def __init__(self, chan: Any, session: _PipeSession, label: str) -> None:
        self._chan = chan
        self._session = session
        self.link = _ChannelLink(chan, session)  # type: ignore[assignment]
        self.pid = 0  # the worker's pid is on a compute node; the Welcome carries it
        self.label = label

    def __repr__(self) -> str:
        return f"<SSHPipeWorker {self.label} {'closed' if self._session.closed.is_set() else 'open'}>"

    async def wait(self) -> int | None:
        await self._session.closed.wait()
        return self.returncode

    @property
    def returncode(self) -> int | None:
        if self._session.exit_status is not None:
            return self._session.exit_status
        return -9 if self._session.closed.is_set() else None

    def kill(self) -> None:
        """Close the channel: srun on the login node gets SIGHUP/EOF and ends the step."""
        self._chan.close()

    def close_transport(self) -> None:
        self._chan.close()


class SrunSSHTransport(Transport):
    """Mode 2: Slurm's `srun` on the login node over SSH. See the module docstring."""

    def __init__(self, reach: SlurmReach, *, pool_id: str, settings: Settings | None = None) -> None:
        assert reach.login is not None
        self.login = SSHTransport(reach.login, pool_id=pool_id, settings=settings)
        self.slurm = reach

    @property
    def where(self) -> str:
        return self.login.where

    def describe(self) -> dict[str, Any]:
        return {"transport": "srun-ssh", "login": self.where, "job_id": self.slurm.job_id,
                "node": self.slurm.node_name}

    def worker_python(self) -> str:
        return self.login.worker_python()

    async def connect(self) -> Any:
        """The connection to the login node (see `SSHTransport.connect`)."""
        return await self.login.connect()

    def shell(self) -> Shell:
        """The login node's: bootstrap builds the Image in its home, which the compute nodes share."""
        return self.login.shell()

    async def run(self, command: str, *, env: Mapping[str, str] | None = None,
                  timeout: float | None = None) -> CommandResult:
        """On the login node."""
        return await self.login.run(command, env=env, timeout=timeout)

    async def close(self) -> None:
        """Close the login node's connection (removing the environment bootstrap built, unless kept)."""
        self.login.node_env = self.node_env
        await self.login.close()

    async def reach_collections(self, client_path: str) -> CollectionsReach | str:
        """Not on Slurm nodes: see `SLURM_COLLECTIONS`."""
        return SLURM_COLLECTIONS

    async def start_worker(self, argv: Sequence[str], env: Mapping[str, str], receiver: Receiver, *,
                           label: str) -> SSHPipeWorker:
        """Start the worker as a job step from the login node; its pipe is the SSH channel."""
        node_env = self.node_env or NodeEnv(python=argv[0], home="~")
        full_env = dict(env)
        if node_env.pythonpath:
            full_env["PYTHONPATH"] = ":".join(node_env.pythonpath)
        step = srun_argv(self.slurm, [node_env.python, *argv[1:]], env)
        cd = f"cd {shlex.quote(node_env.cwd)} && " if node_env.cwd else ""
        # The variables (secrets among them) go first on the channel's stdin: the login node's shell reads
        # exactly their bytes and exports them, srun hands its environment to the step, and the rest of
        # stdin is the worker's protocol pipe. Never on the command line, which `ps` shows every user.
        prefix, env_text = env_stdin(full_env)
        command = f"{prefix}{cd}exec {shlex.join(step)}"
        where = f"{label} ({self.slurm.node_name} via {self.where})"
        conn = await self.connect()
        chan, session = await conn.create_session(lambda: _PipeSession(receiver, where), command, encoding=None)
        if env_text:
            chan.write(env_text.encode())
        return SSHPipeWorker(chan, session, where)
