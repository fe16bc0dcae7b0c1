"""The workers of a named pool's SSH node (`kinds.ssh.cluster.KeptSSHReach`): started on a socket
whose path depends only on the pool, node and rank, marked with `SKYHIVE_CLUSTER` (so `skyhive down`
finds them and whatever their jobs started), and — when the client attaches to a running pool — taken
over (`Hello(takeover=True)`: the worker keeps its process and starts a new session with this client).
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio

from ....errors import ProvisionError
from .cluster import KeptSSHReach, hold_script, socket_path
from ...onnode.setup import python_version, skyhive_version
from ...nodes.transport import Receiver
from ..local.detached import CLUSTER_ENV, SERVER_MODULE
from ...nodes.resumable import ResumableLink, connect_detached

#: Makes the transport's worker object: (link, pid, socket path) -> the worker (`SSHWorker`).
MakeWorker = Callable[[ResumableLink, int, str], Any]

log = logging.getLogger("skyhive.transport.ssh")

__all__ = ["start_kept_worker", "remote_server_pid", "AttachHold"]

SOCKET_PATH_MAX = 100

#: Prints the pid of the live worker serving "$1" (its command line says `--socket "$1"`), if any. Not
#: merely a process whose arguments include "$1" and "$2": this script's own do (it found itself whenever
#: its /proc entry came first in the glob's text order, e.g. pid 10000 before 9999, or no worker ran).
_FIND = r"""
for d in /proc/[0-9]*; do
  [ -O "$d" ] || continue
  if tr '\0' '\n' < "$d/cmdline" 2>/dev/null | grep -A1 -xF -- --socket | grep -qxF -- "$1"; then
    if tr '\0' '\n' < "$d/cmdline" 2>/dev/null | grep -qF -- "$2"; then
      case $(sed 's/^.*) //' "$d/stat" 2>/dev/null) in Z*|X*|"") ;; *) echo "${d#/proc/}"; exit 0 ;; esac
    fi
  fi
done
exit 0
"""


async def remote_server_pid(transport: Any, sock: str) -> int | None:
    """The pid of the detached worker serving `sock` on the transport's host, or None. Never connects
    to the socket (that would take the worker from its current client)."""
    command = f"sh -c {shlex.quote(_FIND)} find {shlex.quote(sock)} {shlex.quote(SERVER_MODULE)}"
    result = await transport.run(command, timeout=30)
    text = result.stdout.strip()
    return int(text) if text.isdigit() else None


HOLD_TIMEOUT = 60.0


class AttachHold:
    """The client's hold on a named pool's attach lock on one host (`kinds.ssh.cluster.ATTACH_LOCK`),
    taken before its first worker there is taken over: a remote process keeps a shared lock for as long
    as the SSH connection lives (closing the transport, or losing the client, ends it), so the host's
    autostop does not stop the pool while this client attaches. Taken once per transport; waits while
    the autostop runs, then raises `ProvisionError` if it stopped the pool."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self.state: str | None = None  # "held", "gone", or what the host said
        self.process: Any = None

    async def take(self, transport: Any, sock_dir: str, mark: str, pool: str) -> None:
        async with self._lock:
            if self.state is not None:
                return
            conn = await transport.connect()
            process = await conn.create_process(hold_script(sock_dir, mark), encoding="utf-8", errors="replace")
            try:
                with anyio.fail_after(HOLD_TIMEOUT):
                    said = (await process.stdout.readline()).strip()
            except BaseException:
                process.close()
                raise
            self.state = said or "gone"
            if said == "held":
                self.process = process
                return
            process.close()
            if said == "stopped":
                raise ProvisionError(f"pool {pool!r} was stopped by autostop on {transport.where} while this client "
                                     f"attached (it was idle past its limit): `skyhive launch -c {pool} TASK.yaml` "
                                     f"starts it again", node=transport.node)
            # gone (or a host whose shell could not run it): the takeover says which worker is missing


async def start_kept_worker(transport: Any, node_env: Any, argv: Sequence[str], env: Mapping[str, str],
                            receiver: Receiver, *, label: str, make_worker: MakeWorker) -> Any:
    """Start worker `rank` (from the node actor's `label`, "node N worker R") of the named pool's node on
    its socket, or take the running one over when the client attaches. Raises `ProvisionError` naming
    the pool, node and host when an attached pool's worker is gone. `transport` is the node's
    `SSHTransport` (its `NodeEnv` prepared by bootstrap), `make_worker` makes its worker object."""
    reach = transport.reach
    assert isinstance(reach, KeptSSHReach)
    rank = int(label.rsplit(" ", 1)[-1])
    run_dir = node_env.run_dir if node_env.run_dir.startswith("/") else f"/tmp/skyhive-{transport.user}"
    sock = socket_path(run_dir, reach.cluster, transport.node, rank)
    if len(sock.encode()) > SOCKET_PATH_MAX:  # sun_path holds 108 bytes: a shorter path, as deterministic
        sock = socket_path(f"/tmp/skyhive-{transport.user}", reach.cluster, transport.node, rank)
    takeover = reach.attach and rank not in transport._attached
    if takeover:
        transport._attached.add(rank)
        if transport.attach_hold is None:
            transport.attach_hold = AttachHold()
        sock_dir = posixpath.dirname(sock)  # (the autostop mark is beside it: runtime/kinds/ssh/keep.py)
        await transport.attach_hold.take(transport, sock_dir, f"{posixpath.dirname(sock_dir)}/{reach.cluster}.autostop",
                                         reach.pool)
        pid = await remote_server_pid(transport, sock)
        if pid is None:
            raise ProvisionError(f"pool {reach.pool}: node {transport.node} worker {rank} on {transport.where} is gone "
                                 f"(nobody serves {sock}); `skyhive down {reach.pool}` cleans up",
                                 node=transport.node)
    else:
        pid = await _start(transport, node_env, env, sock, reach)

    async def opener(factory: Callable[[], Any]) -> tuple[Any, Any]:
        return await transport._open_unix(factory, sock)

    def new_link() -> ResumableLink:
        return ResumableLink(receiver, opener, label=f"{label} ({transport.where})",
                             reconnect_timeout=transport.reconnect_timeout, skyhive_version=skyhive_version(),
                             python_version=python_version(), takeover=takeover)

    return await connect_detached(new_link, lambda link: make_worker(link, pid, sock), takeover=takeover,
                                  timeout=transport.settings.start_timeout)


async def _start(transport: Any, node_env: Any, env: Mapping[str, str], sock: str,
                 reach: KeptSSHReach) -> int:
    """Start the detached worker on `sock` (its directory 0700, made by the server); its pid."""
    full_env = {**env, CLUSTER_ENV: posixpath.dirname(sock)}  # everything of the pool carries it (`skyhive down`)
    return int(await transport.start_server(node_env, full_env, sock, idle_timeout="inf",
                                            what=f"the worker of pool {reach.pool}"))
