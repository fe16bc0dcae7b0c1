"""SSH transport: one asyncssh connection per node; commands, SFTP uploads and detached workers over it.

- **Isolated client**: only the key given (else the default identity files), no agent, no
  `~/.ssh/config`, no `~/.ssh/known_hosts` unless passed as `known_hosts=`. Fast ciphers first
  (AES-GCM), keepalives on.
- **Host keys pinned**: by `known_hosts=` or `host_key=` when given; otherwise the key seen on first
  contact is pinned for this transport's (the pool's) lifetime, so a reconnect to a different key is
  refused (`HostKeyChanged`, naming the host).
- **Commands** (`run`; the host as bootstrap's `Shell`, with SFTP for files: `shell.py`): the environment travels on the command's stdin, read and exported by the remote
  shell before the command runs (`env_stdin`) — never on a command line, which every user of the host
  can read in `ps` (sshd rarely accepts env requests); cancelling or timing out closes the channel,
  which ends the remote command. Commands run with `lifeline=True` also watch their stdin and kill
  their process group when it closes.
- **Workers** (`start_worker`): `python -m skyhive.runtime.worker.server` detaches on the node and
  serves a Unix socket (0600 in a 0700 directory) itself — one process, no relay; the client reaches
  it by stream-local forwarding through this connection, over a `ResumableLink` that reconnects and
  resumes when the connection drops.
- **Collections** (`sky.dict` & co.): the client's store forwarded to a private socket on the host
  through this connection, made again after each reconnect (`ssh_collections.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import itertools
import json
import logging
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
from ....providers.sshlib import asyncssh
from ....errors import AuthenticationFailed, HostKeyChanged, SSHError
from ....providers.base import NodeHandle, SSHReach
from ....providers.ssh import connect_ssh
from .cluster import KeptSSHReach
from ...onnode.setup import python_version, skyhive_version
from ...common.settings import Settings
from ...nodes.shell import NodeEnv, Shell
from .shell import SSHShell, register_secrets
from ...nodes.transport import CollectionsReach, CommandResult, Receiver, Transport, WorkerProcess
from .collections import CollectionsForward
from ...nodes.resumable import ResumableLink, WorkerGone

if TYPE_CHECKING:
    from ...nodes.context import NodeContext

log = logging.getLogger("skyhive.transport.ssh")

__all__ = ["SSHTransport", "SSHWorker", "NodeEnv", "env_stdin", "register_secrets", "FAST_CIPHERS", "ssh_transport"]

FAST_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
                "aes128-ctr", "aes256-ctr")
_SOCKET_PATH_MAX = 100
_WORKER_IDS = itertools.count(1)  # sun_path holds 108 bytes on Linux (104 on macOS); keep a margin


#: Reads the byte count, then exactly that many bytes of `export K='v'` lines, from stdin, and runs them.
_READ_ENV = 'IFS= read -r _skyhive_n && eval "$(head -c "$_skyhive_n")" && '


def env_stdin(env: Mapping[str, str] | None) -> tuple[str, str]:
    """(shell prefix for the command, text to write first on its stdin) that give the command `env`
    without putting a value on any command line. ('', '') without variables. Raises `ValueError`
    naming a variable whose name the shell cannot export."""
    if not env:
        return "", ""
    bad = [k for k in env if not k.isidentifier() or not k.isascii()]
    if bad:
        raise ValueError(f"environment variable names must be shell identifiers: {', '.join(map(repr, bad))}")
    block = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    return _READ_ENV, f"{len(block.encode())}\n{block}"


class _Client(asyncssh.SSHClient):
    """asyncssh client callbacks: note when the connection goes away."""

    def __init__(self, transport: SSHTransport) -> None:
        self.transport = transport
        self.conn: Any = None

    def connection_made(self, conn: Any) -> None:
        self.conn = conn

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport._conn is self.conn:
            self.transport._conn = None


class SSHTransport(Transport):
    """How a node actor reaches one SSH host. See the module docstring."""

    can_resume = True

    def __init__(self, reach: SSHReach, *, pool_id: str, settings: Settings | None = None, node: int = 0) -> None:
        self.reach = reach
        self.node = node
        self.pool_id = pool_id
        self.settings = settings or Settings()
        self.user = reach.user or getpass.getuser()
        self.where = f"{self.user}@{reach.host}" + (f":{reach.port}" if reach.port != 22 else "")
        self.connect_timeout = reach.connect_timeout
        self.idle_timeout = reach.idle_timeout
        self.reconnect_timeout = reach.reconnect_timeout
        self.use_agent = reach.use_agent
        self.node_env: NodeEnv | None = None
        self._conn: Any = None
        self._pinned: Any = None  # the host key seen first, when none was given
        self._jump: Any = None  # the connection to the jump host (ssh_config's ProxyJump), when there is one
        self._jump_pinned: Any = None  # the jump host's key seen first, when no known_hosts was given
        self.host_key_seen: Any = None  # the key the host showed (a named pool records it, pinned later)
        self._attached: set[int] = set()  # a named pool's ranks taken over already (a restart starts anew)
        self.attach_hold: Any = None  # a named pool's `ssh_kept.AttachHold` on this host, once attaching
        self._lock = asyncio.Lock()
        self.connects = 0
        self.collections = CollectionsForward(self)  # sky.dict & co. on this host (ssh_collections.py)

    def __repr__(self) -> str:
        return f"<SSHTransport {self.where} {'connected' if self._conn is not None else 'idle'}>"

    def describe(self) -> dict[str, Any]:
        return {"transport": "ssh", "host": self.reach.host, "port": self.reach.port, "user": self.user}

    # ---- the connection ----------------------------------------------------------------------------

    def _known_hosts(self) -> Any:
        reach = self.reach
        if reach.known_hosts:
            return os.path.expanduser(reach.known_hosts)
        key = reach.host_key
        if key is None and self._pinned is not None:
            key = self._pinned.export_public_key().decode().strip()
        if key is None:
            return None  # first contact: pinned right after
        name = reach.host if reach.port == 22 else f"[{reach.host}]:{reach.port}"
        return asyncssh.import_known_hosts(f"{name} {key}\n")

    def worker_python(self) -> str:
        return self.reach.python or "python3"

    def shell(self) -> Shell:
        """The host over this connection: bootstrap builds the Image there (`runtime/bootstrap/remote.py`)."""
        return SSHShell(self)

    async def connect(self) -> Any:
        """The live connection, opened (again) if needed. Raises `SSHError` subclasses naming the host
        (`HostUnreachable`, a `NodeUnreachable`, when it does not answer)."""
        conn = self._conn
        if conn is not None:
            return conn
        async with self._lock:
            if self._conn is not None:
                return self._conn
            conn = self._conn = await self._open()
            await self.collections.after_reconnect(conn)  # the forward lives as long as its connection
            return conn

    async def _open_jump(self) -> Any:
        """The connection to the jump host (`reach.proxy_jump`), opened (again) if needed: the same key
        and host-key checks as the host's (the pool's known_hosts, else its key pinned on first contact)."""
        from ....providers.ssh import parse_host

        if self._jump is not None and not self._jump.is_closed():
            return self._jump
        reach = self.reach
        assert reach.proxy_jump is not None
        user, host, port = parse_host(reach.proxy_jump)
        if reach.known_hosts:
            known: Any = os.path.expanduser(reach.known_hosts)
        elif self._jump_pinned is not None:
            name = host if port == 22 else f"[{host}]:{port}"
            known = asyncssh.import_known_hosts(f"{name} {self._jump_pinned.export_public_key().decode().strip()}\n")
        else:
            known = None  # first contact: pinned right after
        self._jump = await connect_ssh(
            host=host, port=port, user=user or self.user, key=reach.key, known_hosts=known, use_agent=self.use_agent,
            connect_timeout=self.connect_timeout, key_source=f"the jump host {reach.proxy_jump}'s "
            + (f"known_hosts {reach.known_hosts}" if reach.known_hosts else "key on first contact"),
            keepalive_interval=5, keepalive_count_max=4)
        if self._jump_pinned is None and not reach.known_hosts:
            self._jump_pinned = self._jump.get_server_host_key()
        return self._jump

    async def _open(self) -> Any:
        reach = self.reach
        client = _Client(self)
        source = (f"known_hosts {reach.known_hosts}" if reach.known_hosts else
                  "the key given for it" if reach.host_key else "the key it showed on first contact in this pool")
        via = {"tunnel": await self._open_jump()} if reach.proxy_jump else {}
        conn = await connect_ssh(
            host=reach.host, port=reach.port, user=self.user, key=reach.key, known_hosts=self._known_hosts(),
            use_agent=self.use_agent, connect_timeout=self.connect_timeout, key_source=source,
            encryption_algs=list(FAST_CIPHERS), keepalive_interval=5, keepalive_count_max=4,
            client_factory=lambda: client, **via,
        )
        if self._pinned is None and reach.host_key is None and not reach.known_hosts:
            self._pinned = conn.get_server_host_key()
        self.host_key_seen = conn.get_server_host_key()
        self.connects += 1
        return conn

    async def close(self) -> None:
        """Close the connection; with `keep_env=False` first remove the environment bootstrap built."""
        await self.collections.close()
        env = self.node_env
        if self._conn is not None and env is not None and env.env_dir and not self.reach.keep_env:
            try:
                await self.run(f"rm -rf {shlex.quote(env.env_dir)} {shlex.quote(env.env_dir + '.lock')}", timeout=30)
            except Exception as exc:  # noqa: BLE001 - the pool is closing: report, go on
                log.warning("host %s: could not remove %s: %s", self.where, env.env_dir, exc)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with anyio.move_on_after(5, shield=True):
                await conn.wait_closed()
        jump, self._jump = self._jump, None
        if jump is not None:
            jump.close()

    # ---- commands ----------------------------------------------------------------------------------

    async def run(self, command: str, *, env: Mapping[str, str] | None = None, timeout: float | None = None,
                  on_line: Callable[[str, str], None] | None = None, lifeline: bool = False,
                  input: str | None = None) -> CommandResult:
        """Run `command` in the user's shell on the node; its exit status and output.

        `on_line(stream, line)` gets output lines as they come ("stdout"/"stderr"). With `lifeline`,
        stdin stays open while the command runs (the command can watch it to die with us). Cancelling
        or `timeout` (raises `TimeoutError`) closes the channel, which ends the remote command.
        """
        conn = await self.connect()
        prefix, env_text = env_stdin(env)
        proc = await conn.create_process(prefix + command, encoding="utf-8", errors="replace")
        out: list[str] = []
        err: list[str] = []

        async def pump(stream: Any, name: str, sink: list[str]) -> None:
            async for line in stream:
                sink.append(line)
                if on_line is not None:
                    on_line(name, line.rstrip("\n"))

        try:
            with anyio.fail_after(timeout) if timeout is not None else contextlib.nullcontext():
                if env_text:
                    proc.stdin.write(env_text)  # read by the shell before the command starts
                if input is not None:
                    proc.stdin.write(input)
                if not lifeline:
                    proc.stdin.write_eof()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(pump, proc.stdout, "stdout", out)
                    tg.start_soon(pump, proc.stderr, "stderr", err)
                result = await proc.wait()
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                proc.close()
                await proc.wait_closed()
            raise
        finally:
            if lifeline and not proc.stdin.is_closing():
                proc.stdin.close()
        status = result.exit_status if result.exit_status is not None else -1
        return CommandResult(command, status, "".join(out), "".join(err))

    # ---- workers -----------------------------------------------------------------------------------

    async def reach_collections(self, client_path: str) -> CollectionsReach | str:
        """Forwarded through this connection to a private socket on the host (`ssh_collections.py`)."""
        return await self.collections.reach(client_path)

    def host_key_text(self) -> str:
        """The host's public key as a known_hosts entry's key part ("ssh-ed25519 AAAA..."), "" before
        the first connection."""
        key = self.host_key_seen
        return key.export_public_key().decode().strip() if key is not None else ""

    def _socket_path(self, env: NodeEnv) -> str:
        # unique among this client's workers: hosts may share one home (NFS), so the host is not enough
        name = f"{self.pool_id}-{os.getpid() % 100000}-{next(_WORKER_IDS)}.sock"
        path = f"{env.run_dir}/{name}"
        if len(path.encode()) > _SOCKET_PATH_MAX:
            path = f"/tmp/skyhive-{self.user}/{name}"
        return path

    async def start_server(self, node_env: NodeEnv, env: Mapping[str, str], sock: str, *, idle_timeout: str,
                           what: str = "the worker") -> int:
        """Start the detached socket-serving worker on `sock` with the interpreter and paths bootstrap
        prepared (`node_env`); its pid. Raises `SSHError` naming the host (and `what` did not start)."""
        full_env = dict(env)
        if node_env.pythonpath:
            full_env["PYTHONPATH"] = ":".join(node_env.pythonpath)
        cd = f"cd {shlex.quote(node_env.cwd)} && " if node_env.cwd else ""
        command = (f"{cd}exec {shlex.quote(node_env.python)} -m skyhive.runtime.worker.server "
                   f"--socket {shlex.quote(sock)} --idle-timeout {idle_timeout}")
        with anyio.fail_after(self.settings.start_timeout):
            result = await self.run(command, env=full_env, timeout=self.settings.start_timeout)
        if result.exit_status != 0:
            raise SSHError(f"host {self.where}: {what} did not start (exit {result.exit_status}): "
                           f"{(result.stderr or result.stdout).strip()[-2000:]}", host=self.reach.host)
        try:
            return int(json.loads(result.stdout.strip().splitlines()[-1])["pid"])
        except (ValueError, KeyError, IndexError):
            raise SSHError(f"host {self.where}: the worker server printed {result.stdout!r}, not its pid",
                           host=self.reach.host) from None

    async def start_worker(self, argv: Sequence[str], env: Mapping[str, str], receiver: Receiver, *,
                           label: str) -> SSHWorker:
        """Start a detached worker on the node and connect to it. `argv[0]` (the interpreter) is
        replaced by the one bootstrap prepared; the worker is the socket-serving variant."""
        node_env = self.node_env or NodeEnv(python=argv[0], home="~", run_dir="~/.skyhive/run")
        if isinstance(self.reach, KeptSSHReach):  # a named pool: a known socket, maybe a takeover
            from .kept import start_kept_worker

            return await start_kept_worker(self, node_env, argv, env, receiver, label=label,
                                           make_worker=lambda link, pid, sock: SSHWorker(self, link, pid, sock))
        sock = self._socket_path(node_env)
        pid = await self.start_server(node_env, env, sock, idle_timeout=f"{self.idle_timeout:g}")

        async def opener(factory: Callable[[], Any]) -> tuple[Any, Any]:
            return await self._open_unix(factory, sock)

        link = ResumableLink(receiver, opener, label=f"{label} ({self.where})", reconnect_timeout=self.reconnect_timeout,
                             skyhive_version=skyhive_version(), python_version=python_version())
        worker = SSHWorker(self, link, pid, sock)
        try:
            with anyio.fail_after(self.settings.start_timeout):
                await link.connect()
        except BaseException:
            worker.kill()
            with anyio.move_on_after(5, shield=True):
                await worker.wait()
            raise
        return worker

    async def _open_unix(self, factory: Callable[[], Any], sock: str) -> tuple[Any, Any]:
        try:
            conn = await self.connect()
        except (HostKeyChanged, AuthenticationFailed) as exc:
            raise WorkerGone(str(exc)) from None  # retrying cannot help
        try:
            return await conn.create_unix_connection(factory, sock)
        except asyncssh.ChannelOpenError as exc:
            probe = await self.run(f"test -S {shlex.quote(sock)} && echo alive || cat {shlex.quote(sock + '.exit')}",
                                   timeout=10)
            text = probe.stdout.strip()
            if text != "alive":
                code = int(text) if text.lstrip("-").isdigit() else None
                raise WorkerGone(f"the worker on {self.where} is gone (its socket {sock} no longer exists)",
                                 exit_status=code) from None
            raise ConnectionError(f"cannot open {sock} on {self.where}: {exc}") from None

    async def kill_group(self, pid: int, sock: str) -> None:
        """SIGKILL the detached worker's process group (the worker leads it), if it is still ours."""
        check = f"grep -q skyhive.runtime.worker.server /proc/{pid}/cmdline 2>/dev/null"
        command = f"{check} && kill -KILL -- -{pid} 2>/dev/null; rm -f {shlex.quote(sock)}; true"
        try:
            with anyio.fail_after(10):
                await self.run(command, timeout=10)
        except Exception as exc:  # noqa: BLE001 - best effort: the daemon also exits when idle
            log.warning("host %s: could not kill worker %d: %s (it exits by itself after %g s idle)",
                        self.where, pid, exc, self.idle_timeout)


class SSHWorker(WorkerProcess):
    """A detached worker on an SSH node, reached through a `ResumableLink`."""

    def __init__(self, transport: SSHTransport, link: ResumableLink, pid: int, sock: str) -> None:
        self.transport = transport
        self.link = link  # type: ignore[assignment]
        self.pid = pid
        self.socket = sock
        self._kill_task: asyncio.Task[None] | None = None

    def detach(self) -> None:
        """Leave the worker running (a named pool kept after its client leaves): close the link only."""
        self.link.close()

    def __repr__(self) -> str:
        return f"<SSHWorker pid={self.pid} on {self.transport.where} {self.link!r}>"

    @property
    def reconnecting(self) -> bool:
        """True while the link is reconnecting (the node actor does not count that as silence)."""
        return self.link.reconnecting

    async def wait(self) -> int | None:
        await self.link.finished.wait()
        if self._kill_task is not None:
            await asyncio.shield(self._kill_task)
        return self.returncode

    @property
    def returncode(self) -> int | None:
        if self.link.exit_status is not None:
            return self.link.exit_status
        if self._kill_task is not None and self._kill_task.done():
            return -9
        return None

    def kill(self) -> None:
        """Kill the worker's process group on the node (in the background) and close the link."""
        if self._kill_task is not None or self.link.exit_status is not None:
            self.link.close()
            return
        self.link.close()
        self._kill_task = asyncio.get_running_loop().create_task(self.transport.kill_group(self.pid, self.socket))



def ssh_transport(handle: NodeHandle, ctx: NodeContext) -> SSHTransport:
    """The registered factory for reach kind "ssh" (see `registry`)."""
    reach = handle.reach
    assert isinstance(reach, SSHReach)
    return SSHTransport(reach, pool_id=ctx.pool_id, settings=ctx.settings, node=handle.node)


# the bootstrap by name: imported when a node of this kind is first bootstrapped
