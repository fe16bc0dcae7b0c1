"""Where the Slurm provider runs Slurm's commands (`sbatch`, `squeue`, `scontrol`, `scancel`).

Mode 1 (`LocalRunner`): this machine is a login node; the commands run here as subprocesses.
Mode 2 (`SSHRunner`): `login="user@host"`; the commands run on that login node over one SSH connection
opened with the SSH provider's code (`providers.ssh.connect_ssh`: isolated client, host key checked
against `known_hosts` or pinned on first contact for the provider's lifetime).

Either way a command is an argv (quoted for the remote shell), bounded by a timeout; cancelling or
timing out ends it (the local process group is killed; the SSH channel is closed, which ends the remote
command).
"""

from __future__ import annotations

import abc
import asyncio
import getpass
import logging
import os
import shlex
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from ..errors import SlurmError, SlurmUnreachable

__all__ = ["Completed", "CommandRunner", "LocalRunner", "SSHRunner", "SlurmError", "SlurmUnreachable"]

log = logging.getLogger("skyhive.providers.slurm")


#: What Slurm's commands print when the controller cannot be reached right now.
_UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out", "Connection refused",
                "Zero Bytes were transmitted or received", "Slurm backup controller in standby mode")


@dataclass(frozen=True, slots=True)
class Completed:
    argv: tuple[str, ...]
    status: int
    stdout: str
    stderr: str

    def check(self, where: str) -> Completed:
        """Self if the command succeeded; else a `SlurmError` (or `SlurmUnreachable`)
        quoting it and Slurm's message."""
        if self.status == 0:
            return self
        said = (self.stderr.strip() or self.stdout.strip())[-2000:] or "(no message)"
        cls = SlurmUnreachable if any(m in said for m in _UNREACHABLE) else SlurmError
        raise cls(f"{where}: `{shlex.join(self.argv)}` failed (exit {self.status}): {said}")


class CommandRunner(abc.ABC):
    """Runs Slurm's client commands somewhere (this machine, or a login node over SSH)."""

    #: Shown in messages: "this machine" or "user@login".
    where: str = ""

    @abc.abstractmethod
    async def run(self, argv: Sequence[str], *, timeout: float) -> Completed:
        """Run `argv`; its status and output. Raises `TimeoutError` after `timeout` s (the command is
        ended), `SlurmError` if it cannot be started at all."""

    async def ready(self, *, timeout: float) -> None:
        """Reach where the commands run (a login node: connected, its host key checked) without running
        one; raises as `run` would. Nothing to reach on this machine."""

    async def close(self) -> None:
        """Release connections (idempotent)."""


class LocalRunner(CommandRunner):
    """The commands run on this machine (it is a login node of the cluster)."""

    where = "this machine"

    async def run(self, argv: Sequence[str], *, timeout: float) -> Completed:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True,
            )
        except FileNotFoundError:
            raise SlurmError(f"{argv[0]} not found on this machine: is the Slurm client installed "
                                    "(or use Slurm(login='user@login-node'))?") from None
        try:
            with anyio.fail_after(timeout):
                out, err = await proc.communicate()
        except BaseException:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            with anyio.CancelScope(shield=True):
                await proc.wait()
            raise
        return Completed(tuple(argv), proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))


class SSHRunner(CommandRunner):
    """The commands run on a login node over SSH. The host key is checked against `known_hosts` when
    given, else pinned on first contact (`host_key`) and required on every later connection."""

    def __init__(self, login: str, *, key: str | None = None, known_hosts: str | None = None,
                 host_key: str | None = None, connect_timeout: float = 10.0) -> None:
        from .ssh import parse_host

        user, self.host, self.port = parse_host(login)
        self.user = user or getpass.getuser()
        self.key = key
        self.known_hosts = known_hosts
        self.host_key = host_key
        self.connect_timeout = connect_timeout
        self.where = f"{self.user}@{self.host}" + (f":{self.port}" if self.port != 22 else "")
        self._conn: Any = None
        self._lock = asyncio.Lock()

    async def connect(self) -> Any:
        """The open connection (opened, or opened again, when needed)."""
        async with self._lock:
            conn = self._conn
            if conn is not None and not conn.is_closed():
                return conn
            from .ssh import connect_ssh

            conn = await connect_ssh(host=self.host, port=self.port, user=self.user, key=self.key,
                                     known_hosts=self._known_hosts(), use_agent=False,
                                     connect_timeout=self.connect_timeout, key_source=self._key_source(),
                                     keepalive_interval=5, keepalive_count_max=4)
            if self.host_key is None and not self.known_hosts:
                self.host_key = conn.get_server_host_key().export_public_key().decode().strip()
            self._conn = conn
            return conn

    def _known_hosts(self) -> Any:
        """What asyncssh checks the login node's key against: the `known_hosts` file, else the key
        pinned on first contact, else nothing yet (first contact: accepted, then pinned)."""
        if self.known_hosts:
            return os.path.expanduser(self.known_hosts)
        if self.host_key is None:
            return None
        from .sshlib import asyncssh
        name = self.host if self.port == 22 else f"[{self.host}]:{self.port}"
        return asyncssh.import_known_hosts(f"{name} {self.host_key}\n")

    def _key_source(self) -> str:
        if self.known_hosts:
            return f"known_hosts {self.known_hosts}"
        return "the key it showed on first contact"

    async def ready(self, *, timeout: float) -> None:
        with anyio.fail_after(timeout):
            await self.connect()

    async def run(self, argv: Sequence[str], *, timeout: float) -> Completed:
        from .sshlib import asyncssh
        with anyio.fail_after(timeout):
            conn = await self.connect()
            try:
                proc = await conn.create_process(shlex.join(argv), encoding="utf-8", errors="replace")
            except (OSError, asyncssh.Error) as exc:
                self._conn = None
                raise SlurmError(f"{self.where}: cannot run {argv[0]} over SSH: {exc}") from None
            try:
                proc.stdin.write_eof()
                result = await proc.wait()
            except BaseException:
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    proc.close()  # closing the channel ends the remote command
                    await proc.wait_closed()
                raise
        status = result.exit_status if result.exit_status is not None else -1
        if status == 127:
            raise SlurmError(f"{self.where}: {argv[0]} not found on the login node "
                                    f"({str(result.stderr or '').strip()[-300:]})")
        return Completed(tuple(argv), status, str(result.stdout or ""), str(result.stderr or ""))

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with anyio.move_on_after(5, shield=True):
                await conn.wait_closed()
