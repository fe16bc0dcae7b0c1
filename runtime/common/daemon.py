"""The one skeleton of a detached daemon of this machine (standard library only: the node side uses it).

A daemon is `python -m MODULE ARGS` that holds the `flock` of its lock file while it works, with its pid
written in that file, detached from whoever started it (its own session, no terminal, its output in its
log). Four run this way: a named pool's queue agent (`commands/agent.py`), a managed job's controller
(`managed/controller.py`), the autostop watchdog (`worker/watchdog.py`, which runs `clusters/autostop.py`
once the pool is idle) and the worker server (`worker/server.py`, which uses `daemonize` alone).

- `ensure(module, *args, lock_path=, what=)`: start the daemon unless its lock is held; its pid.
- `start(module, *args, what=)`: start it (a second one finds the lock held and says so); its report.
- `serve(lock_path, log_path, body, ...)`: what the daemon's `main` runs: take the lock (or answer
  `{"already": true, "pid": N}` and return 0), detach (`daemonize`), write the pid, tell the starter
  `{"pid": N}`, set up logging and SIGTERM, run `body(lease)`, and empty the pid file when it returns.
- `holder(lock_path)`: who holds a daemon's lock (its pid, -1 while one is starting or leaving, None).
- `argument(argv, module, what)`: the daemon's single command-line argument, or None (usage written).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["daemonize", "emit", "holder", "ensure", "start", "serve", "Lease", "argument"]


def daemonize(log_path: str) -> tuple[int, int]:
    """Fork into the background. Returns (write end of the ready pipe, 0) in the child; the parent
    prints what the child reports and exits."""
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(w)
        chunks = []
        while chunk := os.read(r, 4096):
            chunks.append(chunk)
        report = b"".join(chunks).decode(errors="replace").strip()
        os.waitpid(pid, os.WNOHANG)
        if report.startswith("{"):
            emit(sys.stdout, report)
            os._exit(0)
        emit(sys.stderr, report or f"the process exited before it was ready (see {log_path})")
        os._exit(1)
    os.close(r)
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    logfd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(logfd, 1)
    os.dup2(logfd, 2)
    os.close(logfd)
    return w, 0


def emit(stream: TextIO, line: str) -> None:
    """The one line this command answers with (JSON on stdout, read by the SSH transport), or why not."""
    stream.write(line + "\n")
    stream.flush()


def holder(lock_path: str) -> int | None:
    """Who holds the `flock` of the daemon's lock file at `lock_path`: its pid, -1 while one is starting or
    leaving (locked, no pid yet), or None when nobody holds it."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return _pid_in(fd)
        return None
    finally:
        os.close(fd)


def _pid_in(fd: int) -> int:
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else -1


def start(module: str, *args: str, what: str, timeout: float = 60.0) -> dict[str, Any]:
    """Run `python -m module args` (which detaches, `serve`) and return the JSON line it answers with
    (`{"pid": N}`, or `{"already": true, ...}`). Raises RuntimeError naming `what` when it did not start."""
    out = subprocess.run([sys.executable, "-m", module, *args], stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, timeout=timeout)
    said = (out.stderr or out.stdout).strip()[-2000:]
    if out.returncode != 0:
        raise RuntimeError(f"{what} did not start: {said}")
    try:
        report = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RuntimeError(f"{what} did not start: {said}") from None
    if not isinstance(report, dict):
        raise RuntimeError(f"{what} did not start: {said}")
    return report


def ensure(module: str, *args: str, lock_path: str, what: str, timeout: float = 60.0) -> int | None:
    """Start the daemon `python -m module args` unless its lock at `lock_path` is held; the pid of the
    one that runs (-1: one is starting or leaving; None: it said neither)."""
    pid = holder(lock_path)
    if pid is not None:
        return pid
    report = start(module, *args, what=what, timeout=timeout)
    pid = report.get("pid")
    return pid if isinstance(pid, int) else holder(lock_path)


class Lease:
    """A running daemon's hold on its lock file, which names its pid while it works."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.held = True

    def show(self) -> None:
        """Write this process's pid in the lock file."""
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, str(os.getpid()).encode(), 0)

    def release(self) -> None:
        """Empty the pid and let the lock go (a daemon leaving: another may start at once)."""
        os.ftruncate(self.fd, 0)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        self.held = False

    def retake(self) -> bool:
        """Take the lock again after `release`, without waiting; False when another daemon holds it."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.held = True
        self.show()
        return True


def _take(fd: int, patience: float) -> bool:
    """Take the lock on `fd`; False when another daemon holds it. With `patience`, a holder that wrote no
    pid is not a daemon at work (`holder()` probing the lock, or a daemon leaving: it empties the file,
    then unlocks): it is waited for, up to `patience` seconds, rather than left to be nobody."""
    deadline = time.monotonic() + patience
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if os.pread(fd, 32, 0).strip() or time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


def serve(lock_path: str, log_path: str, body: Callable[[Lease], int], *, patience: float = 0.0,
          started: Callable[[], None] | None = None, log_name: str | None = None,
          on_term: Callable[[], None] | None = None) -> int:
    """A daemon's `main`: take the lock at `lock_path` (waiting up to `patience` seconds for a holder that
    wrote no pid, `_take`) or answer
    `{"already": true, "pid": N}` and return 0; detach into `log_path` (the lock is inherited); write the
    pid; run `started` (what must be recorded before the starter hears of it); answer `{"pid": N}`; with
    `log_name`, log warnings to the log as "log_name[PID] time message"; with `on_term`, SIGTERM runs it
    instead of ending the process; then `body(lease)`, its exit status. The pid file is emptied when the
    body returns or raises (unless it let the lock go)."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    if not _take(fd, patience):
        pid = _pid_in(fd)
        emit(sys.stdout, json.dumps({"already": True, "pid": pid if pid > 0 else None}))
        os.close(fd)
        return 0
    ready_fd, _ = daemonize(log_path)
    lease = Lease(fd)
    lease.show()
    if started is not None:
        started()
    os.write(ready_fd, json.dumps({"pid": os.getpid()}).encode())
    os.close(ready_fd)
    if log_name is not None:
        logging.basicConfig(level=logging.WARNING, format=f"{log_name}[{os.getpid()}] %(asctime)s %(message)s")
    if on_term is not None:
        signal.signal(signal.SIGTERM, lambda *_: on_term())
    try:
        return body(lease)
    finally:
        if lease.held:
            os.ftruncate(fd, 0)


def argument(argv: list[str] | None, module: str, what: str, check: Callable[[str], bool] = bool) -> str | None:
    """The daemon's one command-line argument (`argv`, default `sys.argv[1:]`) when there is exactly one
    and `check` accepts it; else None, the usage (`python -m module WHAT`) written to stderr."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 1 and check(args[0]):
        return args[0]
    sys.stderr.write(f"usage: python -m {module} {what}\n")
    return None
