"""Process-table helpers for leak checks (zombies count as leaks)."""

from __future__ import annotations

import os
import time


def state_of(pid: int) -> str | None:
    """The process state letter from /proc (R, S, Z, ...), or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def alive(pid: int) -> bool:
    """True while `pid` exists, zombies included."""
    return state_of(pid) is not None


def worker_pids(pool_id: str | None = None) -> set[int]:
    """PIDs of skyhive worker processes on this machine (any state), of one pool if `pool_id` is given
    (read from the worker's environment, so an orphaned worker is found too)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if b"skyhive.runtime.worker" not in cmd:
            continue
        if pool_id is not None:
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if f'"pool_id":"{pool_id}"'.encode() not in fh.read():
                        continue
            except OSError:
                continue
        pids.add(int(entry))
    return pids


def wait_gone(pids: set[int], timeout: float = 5.0) -> set[int]:
    """Wait until none of `pids` exists; returns those still there (with zombies) after `timeout`."""
    deadline = time.monotonic() + timeout
    left = {p for p in pids if alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = {p for p in left if alive(p)}
    return left
