"""How a user reaches a node of a kept SSH pool (`SSHAccess`, what `SSHKeep.access` hands out): OpenSSH
(`ssh` on PATH) with the pool's generated config (`keep_files.py`): the pool's key, its pinned host keys,
`StrictHostKeyChecking yes`. A cloud's instances kept as SSH nodes are reached the same way: their
addresses are in the record as an SSH pool's hosts are.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Sequence

import anyio
import anyio.abc

from ....errors import NoSSH
from ...common.foreground import foreground
from ...nodes.keep import KeptRecord, NodeAccess, ProcessStream
from .keep_files import alias, host_block, node_addresses, write_config

__all__ = ["SSHAccess", "need_ssh"]


def need_ssh() -> str:
    """The OpenSSH client's path; `FileNotFoundError` saying what to install when there is none."""
    ssh = shutil.which("ssh")
    if ssh is None:
        raise FileNotFoundError("OpenSSH's `ssh` is not on PATH: install the OpenSSH client (openssh-client) to "
                                "reach a pool's SSH nodes")
    return ssh


class SSHAccess(NodeAccess):
    """Node `node` of the kept pool `rec` on SSH hosts (its address and pinned key from the record)."""

    def __init__(self, rec: KeptRecord, node: int) -> None:
        addresses = node_addresses(rec)
        if node >= len(addresses):
            raise NoSSH(f"pool {rec.name!r} names no SSH host for node {node} (its record lists "
                        f"{len(addresses)})")
        self.rec = rec
        self.node = node
        self.address = addresses[node]

    def describe(self) -> str:
        a = self.address
        return f"{a.user}@{a.host}:{a.port}  ssh alias {a.alias}"

    def ip(self) -> str | None:
        return self.address.host

    def _config(self) -> str:
        path = write_config(self.rec)  # from the record, before each login: the pinned keys as recorded
        assert path is not None  # (the node has an address: __init__)
        return str(path)

    def run(self, argv: Sequence[str] | None, *, tty: bool) -> int:
        command = [need_ssh(), "-F", self._config(), "-t" if tty else "-T", alias(self.rec.name, self.node)]
        if argv is not None:
            command.append(shlex.join(argv))  # one line for the login shell there (ssh joins its words so)
        return foreground(command)

    async def connect(self, port: int) -> anyio.abc.ByteStream:
        command = [need_ssh(), "-F", self._config(), "-T", "-o", "ExitOnForwardFailure=yes", "-W",
                   f"127.0.0.1:{int(port)}", alias(self.rec.name, self.node)]
        process = await anyio.open_process(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None)
        return ProcessStream(process)

    def ssh_config(self) -> str | None:
        self._config()  # the files its lines name (the pool's known_hosts) are written with them
        return host_block(self.rec, self.address)
