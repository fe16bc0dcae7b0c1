"""The detached worker: the worker daemon itself, serving a Unix socket, resumable across dropped SSH connections.

    python -m skyhive.runtime.worker.server --socket PATH [--idle-timeout S] [--replay-limit BYTES]

It creates the socket's directory (0700, ours) and listens on the Unix socket `PATH` (0600), forks
into the background (its own session and process group, stdin from /dev/null, its diagnostics to
`PATH.log`), prints one JSON line — `{"pid": ..., "worker_pid": ..., "socket": ...}` (one process:
both are the worker's pid) — from the foreground process, which exits, and runs the worker daemon
(`socket_worker.SocketWorker`) in the background process. The client reaches the socket through SSH
stream-local forwarding: no TCP port is opened, and no process sits between the socket and the
worker.

The worker speaks the resume layer (`protocol.resume`) on the socket itself: its frames are numbered
and kept until the client acknowledges them; when the connection drops, tasks go on, and a client
that connects again with `Hello(resume_from=N)` gets every frame after N, then the stream goes on.
With no client for `--idle-timeout` seconds the worker exits (killing what its tasks started). After
`Shutdown` it tells the client (`Goodbye`) and waits until the client has acknowledged every frame
(or the idle timeout). On the way out it writes its exit status to `PATH.exit`, removes the socket
and kills its process group.

This module imports only the standard library and `skyhive.protocol` until it has reported ready;
the worker (cloudpickle and the rest) is imported after, while the client connects.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import stat
import sys
import time

from ..common.daemon import daemonize as _daemonize
from ..common.daemon import emit as _emit
from .leave import leave

__all__ = ["main", "prepare_socket"]

_log_fd = 2  # a copy of the log file's descriptor once detached (the worker captures fd 2 for tasks)


def _log(msg: str) -> None:
    try:
        os.write(_log_fd, f"skyhive-worker-server[{os.getpid()}] {time.strftime('%H:%M:%S')} {msg}\n".encode())
    except OSError:
        pass


def prepare_socket(path: str) -> socket.socket:
    """A listening Unix socket at `path` (0600) in a directory only we can open (0700, ours).

    Raises `OSError`/`RuntimeError` naming the problem (a directory owned by someone else, a live
    daemon already on that path).
    """
    directory = os.path.dirname(os.path.abspath(path))
    old = os.umask(0o077)  # the directories above it too (`~/.skyhive/run`): makedirs' mode is the leaf's only
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    finally:
        os.umask(old)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise RuntimeError(f"{directory} is not a directory owned by uid {os.getuid()}")
    if st.st_mode & 0o077:
        os.chmod(directory, 0o700)
    if os.path.lexists(path):
        probe = socket.socket(socket.AF_UNIX)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # a socket nobody listens on: left by a daemon that died
        else:
            raise RuntimeError(f"a worker is already listening on {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(8)
    return sock


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m skyhive.runtime.worker.server")
    ap.add_argument("--socket", required=True, help="Unix socket path (its directory becomes 0700)")
    ap.add_argument("--idle-timeout", type=float, default=600.0, help="exit after this long without a client")
    ap.add_argument("--replay-limit", type=int, default=64 << 20, help="bytes of unacknowledged frames kept")
    ap.add_argument("--foreground", action="store_true", help="do not fork (for debugging)")
    args = ap.parse_args(argv)
    path = args.socket
    try:
        listener = prepare_socket(path)
    except (OSError, RuntimeError) as exc:
        _emit(sys.stderr, f"cannot listen on {path}: {exc}")
        return 1
    global _log_fd
    ready_fd = -1
    if not args.foreground:
        ready_fd, _ = _daemonize(path + ".log")
    _log_fd = os.dup(2)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: _leave(path, -signum))
    # Ready as soon as the socket listens: the client's connection waits in the backlog while the
    # worker imports what it needs, so that time overlaps the client's SSH round trips.
    report = json.dumps({"pid": os.getpid(), "worker_pid": os.getpid(), "socket": path})
    if ready_fd >= 0:
        os.write(ready_fd, report.encode())
        os.close(ready_fd)
    else:
        _emit(sys.stdout, report)
    code = 1
    try:
        from .serve import serve
        from .socket_worker import SocketWorker

        worker: list[SocketWorker] = []

        from .threaded import task_threads, threaded_class

        cls = SocketWorker if task_threads() == 1 else threaded_class(SocketWorker)

        def make_worker() -> SocketWorker:
            worker.append(cls(listener, path, idle_timeout=args.idle_timeout,
                              replay_limit=args.replay_limit))
            return worker[0]

        code = serve(make_worker=make_worker)  # returns only if the worker crashed
    except BaseException as exc:  # noqa: BLE001 - reported in the log
        _log(f"worker failed: {type(exc).__name__}: {exc}")
    _leave(path, code)
    return code


def _leave(path: str, code: int) -> None:
    """Exit without the worker (see `leave`)."""
    leave(path, code, _log)


if __name__ == "__main__":
    os._exit(main())
