"""The pool's collections (`sky.dict` & co., runtime/collections/) on an SSH host (or a cloud node,
SSH underneath): reached through the node's own SSH connection, no TCP port anywhere.

The client serves the collections on its private Unix socket; the host's sshd listens on a socket of
the pool's own (`<run dir>/coll-<pool>-<digest of the client's socket path>-n<node>/s.sock`, `<pool>`
a digest of the pool's key (`providers.ssh.collections_prefix`) so that the pool's cleanup sweep finds
it (`skyhive down` after a client killed outright: the sweep leaves one a live forward serves), its directory
0700, the socket 0600 by sshd's `StreamLocalBindMask`) and forwards each connection to it (OpenSSH's
`streamlocal-forward`; sshd's `AllowStreamLocalForwarding`, on by default). Only the pool's user can
open it. A host whose sshd refuses the forward still runs the pool: its tasks' calls say why.

The forward lives as long as the SSH connection: when the connection drops and the transport
reconnects (`SSHTransport.connect`), the forward is made again on the new connection at the same path
(the stale socket file the killed session left is removed first: sshd does not replace one), so the
workers' variable stays right; their sessions resume (runtime/collections/sessions.py). When the pool
ends, the forward is cancelled and the directory removed.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shlex
from typing import Any, Protocol

from ....errors import SSHError
from ....providers.ssh_sweep import collections_prefix
from .cluster import KeptSSHReach
from ...nodes.transport import CollectionsReach, CommandResult

__all__ = ["CollectionsForward", "directory_name"]

log = logging.getLogger("skyhive.transport.ssh")

_SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes on Linux (104 on macOS); keep a margin


def directory_name(pool_key: str, client_path: str, node: int) -> str:
    """The name of node `node`'s directory of the collections' socket on its host, for the pool whose
    key is `pool_key` (a named pool's socket directory, else the pool id: what its cleanup sweep
    matches) and the client's socket `client_path` (see `CollectionsForward._directory`)."""
    return f"{collections_prefix(pool_key)}-{hashlib.sha256(client_path.encode()).hexdigest()[:12]}-n{node}"


class _Host(Protocol):
    """What the forward needs of its `SSHTransport` (declared here: ssh.py imports this module)."""

    pool_id: str
    node: int
    node_env: Any  # ssh.NodeEnv, once bootstrapped
    user: str
    where: str
    reach: Any  # providers.base.SSHReach
    reconnect_timeout: float

    async def connect(self) -> Any: ...
    async def run(self, command: str, *, timeout: float | None = None) -> CommandResult: ...


class CollectionsForward:
    """One SSH host's way to the client's collections (see the module docstring)."""

    def __init__(self, transport: _Host) -> None:
        self.transport = transport
        self.client_path: str | None = None  # the client's socket, once a worker needs it
        self.directory = ""
        self._listener: Any = None
        self._conn: Any = None  # the connection the forward is on
        self._lock = asyncio.Lock()

    @property
    def socket(self) -> str:
        return f"{self.directory}/s.sock"

    def _directory(self, client_path: str) -> str:
        # named by the pool's key (so its cleanup sweep finds it) and the client's socket, which names the
        # pool and the client's state directory: two clients' pools of one name never share it, and it is
        # the same after a named pool is attached again (its workers know the path); short, so that a
        # socket path fits (sun_path)
        t = self.transport
        key = t.reach.cluster if isinstance(t.reach, KeptSSHReach) else t.pool_id
        name = directory_name(key, client_path, t.node)
        run_dir = t.node_env.run_dir if t.node_env is not None else ""
        path = f"{run_dir}/{name}"
        if not run_dir.startswith("/") or len(f"{path}/s.sock".encode()) > _SOCKET_PATH_MAX:
            path = f"/tmp/skyhive-{t.user}/{name}"
        return path

    async def reach(self, client_path: str) -> CollectionsReach | str:
        """Forward the client's socket `client_path` to the host (once per connection); where workers
        there reach it, or why they cannot (a host whose sshd refuses the forward still runs the pool's
        tasks: only their calls of `sky.dict` & co. fail, saying why)."""
        self.client_path = client_path
        conn = await self.transport.connect()  # (unreachable: the worker cannot start either)
        try:
            await self.ensure(conn)
        except SSHError as exc:
            self.client_path = None
            log.warning("%s", exc)
            return f"this node cannot reach the pool's distributed collections: {exc} (docs/collections.md)"
        return CollectionsReach(self.socket, resume=self.transport.reconnect_timeout)

    async def ensure(self, conn: Any) -> None:
        """The forward on `conn` (the transport's connection, new after a reconnect). Raises `SSHError`
        naming the host when sshd refuses it."""
        async with self._lock:
            client = self.client_path
            if client is None or (self._conn is conn and self._listener is not None):
                return
            self.directory = self.directory or self._directory(client)
            d, sock = shlex.quote(self.directory), shlex.quote(self.socket)
            parent = shlex.quote(self.directory.rsplit("/", 1)[0])
            # ours and private, and its parent ours (a directory another user made is refused: they could
            # swap ours), and no stale socket in the way
            result = await conn.run(f"umask 077 && mkdir -p {d} && test -O {parent} && test ! -L {parent} && "
                                    f"chmod 700 {parent} {d} && test -O {d} && test ! -L {d} && rm -f {sock}",
                                    timeout=30)
            if result.exit_status != 0:
                raise SSHError(f"host {self.transport.where}: cannot make the collections' directory {self.directory}: "
                               f"{str(result.stderr or result.stdout).strip()[-500:]}", host=self.transport.reach.host)
            try:
                self._listener = await conn.forward_remote_path(self.socket, client)
            except Exception as exc:  # noqa: BLE001 - asyncssh's ChannelListenError and the like
                await conn.run(f"rm -rf {d}", timeout=30)  # nothing of it left on the host
                raise SSHError(f"host {self.transport.where}: sshd refused to forward {self.socket} to the pool's "
                               f"collections ({exc}; is AllowStreamLocalForwarding off?)",
                               host=self.transport.reach.host) from None
            self._conn = conn
            log.debug("host %s: collections forwarded at %s", self.transport.where, self.socket)

    async def after_reconnect(self, conn: Any) -> None:
        """The transport reconnected: the forward again, on the new connection (a failure is logged: the
        workers' own link must resume regardless; their tasks see the store unreachable)."""
        if self.client_path is None:
            return
        try:
            await self.ensure(conn)
        except Exception as exc:  # noqa: BLE001
            log.warning("host %s: the collections are not forwarded after the reconnect: %s", self.transport.where, exc)

    async def close(self) -> None:
        """The pool ends: the forward cancelled, its directory removed from the host."""
        client, self.client_path = self.client_path, None
        listener, self._listener, self._conn = self._listener, None, None
        if client is None:
            return
        if listener is not None:
            listener.close()
        try:
            result = await self.transport.run(f"rm -rf {shlex.quote(self.directory)}", timeout=15)
            if result.exit_status != 0:
                raise SSHError(result.stderr.strip() or f"exit {result.exit_status}")
        except Exception as exc:  # noqa: BLE001 - the pool is closing: report, go on
            log.warning("host %s: could not remove the collections' socket %s: %s", self.transport.where,
                        self.directory, exc)
