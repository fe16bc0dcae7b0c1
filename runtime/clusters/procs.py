"""Is a named pool's process still running, and is it the one we think (pids are reused)."""

from __future__ import annotations

from ..common.daemon import holder as lock_holder  # who holds a detached daemon's lock (its pid)
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
