"""Local workers started early: spawned when a plain Local pool is entered, before the client imports
its runtime, so that their own start (Python, cloudpickle, msgpack, the worker's modules: ~70 ms) runs
beside the client's (issue 41, docs/startup.md).

The pool gives the worker's command line and a first environment (`runtime/worker/early.py`: the mark
that makes the worker wait for the rest, and its pool's id). What a worker needs that the client does
not know yet (its `COMPUTE_POOL` info, the collections' socket, its restart count) comes in a first
frame on its stdin (`send_env`), read by the worker after its imports, before the protocol's first
byte: a 4-byte big-endian length, then `KEY=VALUE` entries separated by NUL. Everything else is as a
worker spawned by the Local transport: pipes (enlarged), stderr pipe, process group, shared-memory socket.

A worker started early and not taken (a node that failed, a pool that did not start) is ended by
`EarlyWorker.discard`: its stdin closed, its process group killed, the process waited for. This module
imports nothing of the runtime: it runs before the runtime is imported.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence

log = logging.getLogger("skyhive.local")

__all__ = ["F_SETPIPE_SZ", "PIPE_SIZE", "EarlyWorker", "pipe", "start_early"]

#: Pipes are enlarged from the 64 KiB default: a 1 MiB chunk then moves in one write.
PIPE_SIZE = 1 << 20
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_SHM_ENV = "SKYHIVE_SHM_FD"  # runtime/common/shm.py's ENV_VAR (not imported: that is the runtime)


def pipe() -> tuple[int, int]:
    """A close-on-exec pipe, enlarged to `PIPE_SIZE` where the system allows."""
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        fcntl.fcntl(w, F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:
        pass  # capped by /proc/sys/fs/pipe-max-size: the default still works, only slower
    return r, w


class EarlyWorker:
    """A worker process started before its pool knew its environment; taken by the Local transport
    (`runtime/kinds/local/transport.py`), which sends the environment and speaks the protocol on its
    pipes. `argv`/`cwd`: what it was started with (the transport takes it only when they match)."""

    def __init__(self, popen: subprocess.Popen[bytes], argv: list[str], cwd: str, to_child: int, from_child: int,
                 stderr: int, shm: socket.socket) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.argv = argv
        self.cwd = cwd
        self.to_child, self.from_child, self.stderr = to_child, from_child, stderr
        self.shm = shm  # the client's end of the shared-memory socket pair
        self.taken = False

    def __repr__(self) -> str:
        return f"<EarlyWorker pid={self.pid}{' taken' if self.taken else ''}>"

    def send_env(self, env: Mapping[str, str]) -> None:
        """Write the first frame: `env`, added to the worker's environment before it serves. Raises
        `OSError` when the worker is gone (its pipe closed)."""
        body = b"\0".join(os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items())
        frame = len(body).to_bytes(4, "big") + body
        view = memoryview(frame)
        while view:  # (a blocking pipe of 1 MiB: an environment goes in one write)
            view = view[os.write(self.to_child, view):]

    def discard(self) -> None:
        """End a worker nobody took: close its pipes, kill its process group, wait for it (no zombie)."""
        if self.taken:
            return
        self.taken = True
        for fd in (self.to_child, self.from_child, self.stderr):
            os.close(fd)
        self.shm.close()
        try:
            os.killpg(self.pid, signal.SIGKILL)  # it leads its own process group
        except (ProcessLookupError, PermissionError):
            pass
        self.popen.wait()

    def reap(self) -> None:
        """At its pool's end, a worker a transport took: ended by then (its transport killed it), it is
        waited for here if nothing did — a start cut short (the pool's `start_timeout`, a failure) can
        cancel the transport's wait before it reaped the process. One still running is killed first."""
        if self.popen.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.popen.wait()


def start_early(count: int, cwd: str, argv: Sequence[str], env: Mapping[str, str]) -> list[EarlyWorker]:
    """Spawn `count` workers running `argv` in `cwd`, this process's environment and `env` theirs, that
    wait for the rest of it (`EarlyWorker.send_env`). A spawn that fails ends those already started and
    raises (the caller then starts its workers the usual way)."""
    started: list[EarlyWorker] = []
    try:
        for _ in range(count):
            started.append(_spawn(list(argv), cwd, env))
    except BaseException:
        for worker in started:
            worker.discard()
        raise
    log.debug("started %d workers early: %s", len(started), [w.pid for w in started])
    return started


def _spawn(argv: list[str], cwd: str, env: Mapping[str, str]) -> EarlyWorker:
    fds: list[int] = []
    to_child_r, to_child_w = pipe()
    fds += (to_child_r, to_child_w)
    try:
        from_child_r, from_child_w = pipe()
        fds += (from_child_r, from_child_w)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        fds += (err_r, err_w)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    try:
        popen = subprocess.Popen(
            argv, stdin=to_child_r, stdout=from_child_w, stderr=err_w, cwd=cwd,
            env={**os.environ, **env, _SHM_ENV: str(theirs.fileno())}, start_new_session=True,
            pass_fds=(theirs.fileno(),),
        )
    except BaseException:
        for fd in fds:
            os.close(fd)
        mine.close()
        raise
    finally:
        theirs.close()
    for fd in (to_child_r, from_child_w, err_w):
        os.close(fd)
    return EarlyWorker(popen, argv, cwd, to_child_w, from_child_r, err_r, mine)
