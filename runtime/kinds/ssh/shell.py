"""An SSH host as a `Shell`: commands and files over the transport's one connection (host key pinned),
with the facts its reach gives bootstrap (the Python it names, a cloud machine's first-boot command, the
idle watchdog)."""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any, Protocol

from ....providers.sshlib import asyncssh
from ....providers.base import SSHReach
from ...nodes.shell import CommandResult, Shell

__all__ = ["SSHShell", "register_secrets"]


class _RedactSecrets(logging.Filter):
    """asyncssh logs every command line at INFO: mask secret values, should one ever be part of one."""

    def __init__(self) -> None:
        super().__init__()
        self.values: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.values:
            text = record.getMessage()
            masked = text
            for value in sorted(self.values, key=len, reverse=True):
                masked = masked.replace(shlex.quote(value), "***").replace(value, "***")
            if masked != text:
                record.msg, record.args = masked, ()
        return True


_redactor = _RedactSecrets()
logging.getLogger("asyncssh").addFilter(_redactor)


def register_secrets(values: frozenset[str] | set[str]) -> None:
    """Values that must never appear in a log line."""
    _redactor.values.update(v for v in values if v)



class _Connection(Protocol):
    """What the shell uses of its `SSHTransport` (declared here: transport.py imports this module)."""

    reach: SSHReach
    where: str

    async def connect(self) -> Any: ...
    async def run(self, command: str, *, env: Mapping[str, str] | None = None, timeout: float | None = None,
                  on_line: Callable[[str, str], None] | None = None, lifeline: bool = False) -> CommandResult: ...


class SSHShell(Shell):
    """Commands and files on one SSH host, through its `SSHTransport`'s connection."""

    python_option = "SSH(python=...)"

    def __init__(self, transport: _Connection) -> None:
        reach = transport.reach
        self.transport = transport
        self.where = f"host {transport.where}"
        self.label = transport.where
        self.host = reach.host
        self.python = reach.python
        self.ready_command = reach.ready_command or None
        self.idle_shutdown = reach.idle_shutdown
        self.shutdown_command = reach.shutdown_command
        self.boot_limit_off = reach.boot_limit_off

    async def run(self, command: str, *, env: Mapping[str, str] | None = None, timeout: float | None = None,
                  on_line: Callable[[str, str], None] | None = None, lifeline: bool = False) -> CommandResult:
        """In the user's shell on the host; `env` on the command's stdin (`env_stdin`), never its command line."""
        return await self.transport.run(command, env=env, timeout=timeout, on_line=on_line, lifeline=lifeline)

    async def put(self, source: bytes | str | os.PathLike[str], dest: str) -> None:
        """By SFTP, its parent directory created 0700; a directory recursively, times and modes kept."""
        conn = await self.transport.connect()
        async with conn.start_sftp_client() as sftp:
            parent = str(PurePosixPath(dest).parent)
            await sftp.makedirs(parent, attrs=asyncssh.SFTPAttrs(permissions=0o700), exist_ok=True)
            if isinstance(source, bytes):
                async with sftp.open(dest, "wb") as fh:
                    await fh.write(source)
            else:
                await sftp.put(os.fspath(source), dest, recurse=True, preserve=True)

    def keep_secret(self, values: Iterable[str]) -> None:
        """asyncssh logs command lines: its log masks these values."""
        register_secrets(set(values))
