"""Is a named pool's process still running, and is it the one we think (pids are reused)."""

from __future__ import annotations

from ..common.procfs import proc_stat

__all__ = ["alive", "runs", "lock_holder"]


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie does not)."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] != "Z"


def runs(pid: int, module: str) -> bool:
    """True if `pid` runs `python -m module` (so that ending it is ours to do: pids are reused)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return module.encode() in fh.read() and alive(pid)
    except OSError:
        return False


def lock_holder(path: str) -> int | None:
    """Who holds the `flock` of the file at `path` (a detached process's lock, its pid written in it): the
    pid, -1 while one is starting or leaving (locked, no pid yet), or None when nobody holds it."""
    import fcntl
    import os

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode().strip()
            return int(text) if text.isdigit() else -1
        return None
    finally:
        os.close(fd)
