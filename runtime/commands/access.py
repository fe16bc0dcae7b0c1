"""`skyhive ssh NAME`, `skyhive forward NAME PORT` and `skyhive ssh-config`: onto a named pool's nodes.

SSH and cloud pools are reached through OpenSSH (`ssh` on PATH) with the pool's generated config
(`clusters/access.py`): the pool's key, its pinned host keys, `StrictHostKeyChecking yes`. A Local
pool's nodes are this machine: a session is a local shell in the node's working directory, a port is
reached directly.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import TextIO

from ..clusters import record as records
from ..common import bridge
from ..clusters.access import check_node, local_dir, session_env, ssh_argv
from ..clusters.sshfiles import alias, config_path, write_config
from ..clusters.record import ClusterRecord

__all__ = ["access_lines", "ssh_session", "forward", "parse_forward", "ssh_config", "offer_include", "offer_include_for"]


def _need_ssh() -> str:
    ssh = shutil.which("ssh")
    if ssh is None:
        raise FileNotFoundError("OpenSSH's `ssh` is not on PATH: install the OpenSSH client (openssh-client) to "
                                "reach a pool's SSH nodes")
    return ssh


def _wait(proc: subprocess.Popen) -> int:
    """Wait for `proc` as a shell waits for a foreground command: Ctrl-C and Ctrl-\\ go to it (the
    terminal's process group), not to us; a SIGTERM to us is passed on to it. Its exit code, or 128+N
    when signal N ended it."""
    def pass_on(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    handled = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)
    old = [signal.signal(s, signal.SIG_IGN if s != signal.SIGTERM else pass_on) for s in handled]
    try:
        code = proc.wait()
    finally:
        for s, handler in zip(handled, old):
            signal.signal(s, handler)
    return 128 - code if code < 0 else code


def ssh_session(name: str, *, node: int = 0, command: list[str] | None = None) -> int:
    """`skyhive ssh NAME [--node N] [-- COMMAND...]`: `command` (or, with None, an interactive shell)
    on node `node` of the named pool, in the job's working directory with the job's environment.
    Returns its exit code (128+N for a signal)."""
    rec = records.load(name)
    check_node(rec, node)
    if not rec.on_hosts:  # this machine: a local shell
        shell = os.environ.get("SHELL") or "/bin/sh"
        argv = [shell, "-c", " ".join(command)] if command else [shell, "-i"]
        env = {**os.environ, **session_env(rec, node)}
        return _wait(subprocess.Popen(argv, cwd=local_dir(rec, node), env=env))
    argv = ssh_argv(rec, node, command)
    argv[0] = _need_ssh()
    return _wait(subprocess.Popen(argv))


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
    127.0.0.1:REMOTE on the node, through the pool's SSH connection, until Ctrl-C. A Local pool's port is
    this machine's already (a different local port is relayed). Returns 0 when stopped by Ctrl-C."""
    err = err or sys.stderr
    remote, local = parse_forward(spec)
    rec = records.load(name)
    check_node(rec, node)
    if _bound(local):
        raise OSError(f"forward {spec}: 127.0.0.1:{local} is in use on this machine; pick another local port "
                      f"(`skyhive forward {name} {remote}:OTHER`)")
    if not rec.on_hosts:
        if local == remote:
            err.write(f"skyhive: pool {name} runs on this machine: http://127.0.0.1:{remote} reaches its port "
                      "directly\n")
            err.flush()
            return 0
        return _relay(remote, local, name, err)
    write_config(rec)
    argv = [_need_ssh(), "-F", str(config_path(name)), "-N", "-o", "ExitOnForwardFailure=yes",
            "-L", f"127.0.0.1:{local}:127.0.0.1:{remote}", alias(name, node)]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    old = signal.signal(signal.SIGTERM, _interrupt)  # a SIGTERM ends the forward as Ctrl-C does: ssh with it
    try:
        while proc.poll() is None and not _bound(local):
            time.sleep(0.05)
        if proc.poll() is not None:
            return proc.returncode or 1
        err.write(f"skyhive: forwarding 127.0.0.1:{local} -> {alias(name, node)}:{remote} "
                  f"(http://127.0.0.1:{local}; Ctrl-C stops)\n")
        err.flush()
        code = proc.wait()
    except KeyboardInterrupt:
        code = 0
    finally:
        signal.signal(signal.SIGTERM, old)
        if proc.poll() is None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return 0 if code in (0, -signal.SIGTERM, -signal.SIGINT) else code


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _relay(remote: int, local: int, name: str, err: TextIO) -> int:
    """127.0.0.1:`local` relayed to 127.0.0.1:`remote` on this machine, until Ctrl-C or SIGTERM.

    The signals are the event loop's (`add_signal_handler`), not a handler raising KeyboardInterrupt:
    one raised at an arbitrary point inside the loop was lost when it landed while a connection was
    closing, and the relay then outlived its SIGTERM (CI's stop 33)."""
    import asyncio

    writers: set[asyncio.StreamWriter] = set()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(OSError):
                writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ends = {writer}
        writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", remote)
            ends.add(up_writer)
            writers.add(up_writer)
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)
        except OSError:
            pass
        finally:
            writers.difference_update(ends)
            for end in ends:
                end.close()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = loop.create_future()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
        server = await asyncio.start_server(serve, "127.0.0.1", local)
        err.write(f"skyhive: pool {name} runs on this machine: forwarding 127.0.0.1:{local} -> 127.0.0.1:{remote} "
                  f"(Ctrl-C stops)\n")
        err.flush()
        try:
            await stop
        finally:
            server.close()
            for writer in list(writers):  # the open connections end now, not when their peers close
                writer.transport.abort()

    bridge.run(main)
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
        rec = records.load(pool)
        path = write_config(rec)
        if path is None:
            out.write(f"{pool}: runs on this machine (no SSH entries; `skyhive ssh {pool}` opens a local shell)\n")
            continue
        out.write(f"{pool}: {path} ({', '.join(alias(pool, n) for n in range(rec.nodes))})\n")
        for problem in sshconfig.problems(rec, user):
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
    if not rec.on_hosts or sshconfig.installed() or sshconfig.consent():
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
    """How to get onto pool `name`, for `skyhive status NAME`: each node's address and SSH alias, and
    the endpoints of its ports."""
    from ..clusters.sshfiles import node_addresses
    from ..clusters.ports import endpoints

    rec = records.load(name)
    lines = []
    addresses = node_addresses(rec)
    if addresses:
        for a in addresses:
            lines.append(f"node {a.node}: {a.user}@{a.host}:{a.port}  ssh alias {a.alias}  (`skyhive ssh {name}"
                         f"{'' if a.node == 0 else f' --node {a.node}'}`)")
        lines.append(f"ssh config: {config_path(name)}")
    else:
        lines += [f"node {n}: this machine ({local_dir(rec, n)})  (`skyhive ssh {name}"
                  f"{'' if n == 0 else f' --node {n}'}`)" for n in range(rec.nodes)]
    for e in endpoints(name):
        lines.append(f"port {e['port']}: {e['how']}")
    return lines
