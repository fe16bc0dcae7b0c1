"""`skyhive ssh NAME`, `skyhive forward NAME PORT` and `skyhive ssh-config`: onto a named pool's nodes.

Each goes through the node's access, as the kind that keeps the pool declares it (`KeptPool.access`,
`runtime/nodes/keep.py`'s `NodeAccess`): SSH and cloud pools through OpenSSH (`ssh` on PATH) with the
pool's generated config (the pool's key, its pinned host keys, `StrictHostKeyChecking yes`); a Local
pool's nodes are this machine (a session is a local shell, a port is reached directly); another kind's
through its own exec.
"""

from __future__ import annotations

import contextlib
import errno
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import TextIO

import anyio
import anyio.abc

from ...errors import ProvisionError
from ..clusters import record as records
from ..clusters.access import session_argv
from ..clusters.kept_pool import KeptPool
from ..common import bridge
from ..clusters.record import ClusterRecord
from ..nodes.keep import node_name

__all__ = ["access_lines", "ssh_session", "forward", "parse_forward", "ssh_config", "offer_include", "offer_include_for",
           "relay"]


def ssh_session(name: str, *, node: int = 0, command: list[str] | None = None) -> int:
    """`skyhive ssh NAME [--node N] [-- COMMAND...]`: `command` (or, with None, an interactive shell)
    on node `node` of the named pool, in the job's working directory with the job's environment, through
    the node's access (`KeptPool.access`). Returns its exit code (128+N for a signal)."""
    kept = KeptPool.load(name)
    access = kept.access(node)
    return access.run(session_argv(kept, node, command), tty=command is None)


def parse_forward(spec: str) -> tuple[int, int]:
    """`REMOTE_PORT[:LOCAL_PORT]` -> (remote, local); the local port is the remote one unless given."""
    remote, _, local = str(spec).partition(":")
    try:
        ports = int(remote), int(local or remote)
    except ValueError:
        raise ValueError(f"forward {spec!r}: give REMOTE_PORT or REMOTE_PORT:LOCAL_PORT (numbers)") from None
    for port in ports:
        if not 0 < port < 65536:
            raise ValueError(f"forward {spec!r}: port {port} is out of range (1-65535)")
    return ports


def _bound(port: int) -> bool:
    """Whether something listens on 127.0.0.1:`port` (a bind there fails)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def forward(name: str, spec: str, *, node: int = 0, err: TextIO | None = None) -> int:
    """`skyhive forward NAME REMOTE_PORT[:LOCAL_PORT]`: 127.0.0.1:LOCAL on this machine reaches
    127.0.0.1:REMOTE on the node, each connection relayed through the node's access (`NodeAccess.connect`:
    the pool's SSH connection, another kind's exec), until Ctrl-C. A pool on this machine has its ports here
    already (a different local port is relayed). Returns 0 when stopped by Ctrl-C or SIGTERM."""
    err = err or sys.stderr
    remote, local = parse_forward(spec)
    kept = KeptPool.load(name)
    kept.check_node(node)
    if _bound(local):
        raise OSError(f"forward {spec}: 127.0.0.1:{local} is in use on this machine; pick another local port "
                      f"(`skyhive forward {name} {remote}:OTHER`)")
    if kept.here:
        if local == remote:
            err.write(f"skyhive: pool {name} runs on this machine: http://127.0.0.1:{remote} reaches its port "
                      "directly\n")
            err.flush()
            return 0
        return _relay(remote, local, name, err)
    access = kept.access(node)
    return relay(lambda: access.connect(remote), local, err,
                 f"skyhive: forwarding 127.0.0.1:{local} -> {node_name(name, node)}:{remote} "
                 f"(http://127.0.0.1:{local}; Ctrl-C stops)\n")


def _relay(remote: int, local: int, name: str, err: TextIO) -> int:
    """127.0.0.1:`local` relayed to 127.0.0.1:`remote` on this machine, until Ctrl-C or SIGTERM."""
    return relay(lambda: anyio.connect_tcp("127.0.0.1", remote), local, err,
                 f"skyhive: pool {name} runs on this machine: forwarding 127.0.0.1:{local} -> 127.0.0.1:{remote} "
                 "(Ctrl-C stops)\n")


def relay(connect: Callable[[], Awaitable[anyio.abc.ByteStream]], local: int, err: TextIO, said: str) -> int:
    """Listen on 127.0.0.1:`local` and relay each connection to a stream `connect()` opens, until Ctrl-C
    or SIGTERM; `said` is written to `err` once it listens. A connection whose stream cannot be opened
    is closed, saying why.

    The signals are the event loop's (a signal receiver), not a handler raising KeyboardInterrupt: one
    raised at an arbitrary point inside the loop was lost when it landed while a connection was closing,
    and the relay then outlived its SIGTERM (CI's stop 33). Stopping cancels every open connection."""

    async def pump(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError):
            async for chunk in source:
                await sink.send(chunk)
        with contextlib.suppress(Exception):
            await sink.send_eof()

    async def serve(client: anyio.abc.SocketStream) -> None:
        async with client:
            try:
                upstream = await connect()
            except Exception as exc:  # noqa: BLE001 - this connection ends, saying why; the relay goes on
                err.write(f"skyhive: forward: could not reach the node's port: {exc}\n")
                err.flush()
                return
            async with upstream, anyio.create_task_group() as tg:
                tg.start_soon(pump, client, upstream)
                tg.start_soon(pump, upstream, client)

    async def main() -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=local)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with listener, anyio.create_task_group() as tg:
                tg.start_soon(listener.serve, serve)
                err.write(said)
                err.flush()
                async for _ in signals:
                    break
                tg.cancel_scope.cancel()

    try:
        bridge.run(main)
    except KeyboardInterrupt:  # a Ctrl-C before the receiver was installed
        pass
    return 0


def ssh_config(name: str | None, *, install: bool = False, remove: bool = False, yes: bool = False,
               out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`skyhive ssh-config [NAME] [--install | --remove]`: with `--install`, skyhive's `Include` line at the
    top of ~/.ssh/config (asked first on a terminal unless `-y`); `--remove` takes it out; with NAME, the
    pool's entries and what in ~/.ssh/config keeps them from working."""
    from ..clusters import sshconfig

    out, err = out or sys.stdout, err or sys.stderr
    user = sshconfig.user_config()
    if install and remove:
        raise ValueError("ssh-config: --install or --remove, not both")
    if remove:
        changed = sshconfig.uninstall(user)
        sshconfig.set_consent("no")
        out.write(f"removed skyhive's Include line from {user}\n" if changed else f"{user} had no skyhive Include line\n")
    elif install:
        if not sshconfig.installed(user) and not yes and sys.stdin.isatty():
            err.write(f"Add `{sshconfig.include_line()}` at the top of {user}, so that `ssh NAME` reaches named "
                      "pools? [y/N] ")
            err.flush()
            if sys.stdin.readline().strip().lower() not in ("y", "yes"):
                sshconfig.set_consent("no")
                err.write("skyhive: nothing changed\n")
                return 1
        changed = sshconfig.install(user)
        sshconfig.set_consent("yes")
        out.write(f"added `{sshconfig.include_line()}` to {user}\n" if changed else f"{user} includes skyhive's entries "
                  "already\n")
    code = 0
    for pool in ([name] if name else records.names()):
        kept = KeptPool.load(pool)
        if not kept.ssh_entries():
            where = "runs on this machine" if kept.here else "its nodes are not reached over SSH"
            out.write(f"{pool}: {where} (no SSH entries; `skyhive ssh {pool}` opens a shell on its nodes)\n")
            continue
        out.write(f"{pool}: {sshconfig.entries_path(pool)} "
                  f"({', '.join(node_name(pool, n) for n in range(kept.rec.nodes))})\n")
        for problem in sshconfig.problems(kept.rec, user):
            err.write(f"skyhive: warning: {problem}\n")
            code = 1
    return code


def offer_include_for(name: str) -> None:
    """`offer_include` for the named pool `name` when it has a record (nothing otherwise)."""
    from ...errors import PoolNotFound

    try:
        rec = records.load(name)
    except (PoolNotFound, ValueError):
        return
    offer_include(rec)


def offer_include(rec: ClusterRecord, err: TextIO | None = None) -> None:
    """After a pool on SSH hosts is created: on a terminal, ask once whether to add skyhive's `Include`
    line to ~/.ssh/config (the answer is kept); elsewhere, say how."""
    from ..clusters import sshconfig

    err = err or sys.stderr
    if sshconfig.installed() or sshconfig.consent() or not KeptPool(rec).ssh_entries():
        return
    if not sys.stdin.isatty():
        err.write(f"skyhive: `skyhive ssh {rec.name}` reaches the pool; `skyhive ssh-config --install` makes "
                  f"`ssh {rec.name}` (and scp, rsync, editors) reach it too\n")
        return
    err.write(f"Add `{sshconfig.include_line()}` at the top of {sshconfig.user_config()}, so that `ssh "
              f"{rec.name}` reaches the pool (asked once)? [y/N] ")
    err.flush()
    if sys.stdin.readline().strip().lower() in ("y", "yes"):
        sshconfig.install()
        sshconfig.set_consent("yes")
    else:
        sshconfig.set_consent("no")


def access_lines(name: str) -> list[str]:
    """How to get onto pool `name`, for `skyhive status NAME`: each node as its access describes it (an
    SSH node's address and alias), and the endpoints of its ports."""
    from ..clusters import sshconfig
    from ..clusters.ports import endpoints

    kept = KeptPool.load(name)
    lines = []
    for n in range(kept.rec.nodes):
        try:
            said = kept.access(n).describe()
        except ProvisionError as exc:
            said = f"cannot be reached ({exc})"
        lines.append(f"node {n}: {said}  (`skyhive ssh {name}{'' if n == 0 else f' --node {n}'}`)")
    if kept.ssh_entries():
        lines.append(f"ssh config: {sshconfig.entries_path(name)}")
    for e in endpoints(name):
        lines.append(f"port {e['port']}: {e['how']}")
    return lines
