"""Stopping a named pool's processes: its workers, its job agent, its autostop watchdog, and what their
jobs left; the pool's log records it stopped. Used by `skyhive down NAME` and by autostop."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from ...errors import PoolNotFound
from ..onnode.procfs import proc_stat
from ..transport.local_detached import is_worker_server
from . import record as records
from .agent import agent_pid

__all__ = ["stop_pool", "alive", "runs"]

#: Seconds between SIGTERM and SIGKILL.
GRACE = 3.0


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


def stop_pool(name: str, *, why: str, watchdog: bool = True) -> int:
    """End every process of pool `name` (each leads its own process group: SIGTERM, then SIGKILL after
    `GRACE`), then what their jobs left (found by the pool id in their environment), and record the
    pool stopped in its log with `why`. `watchdog=False` spares the autostop watchdog (it is the one
    calling). Returns how many processes were ended. Raises `PoolNotFound` naming the pool."""
    rec = records.load(name)
    pids = [w.pid for w in rec.workers if is_worker_server(w.pid)]
    agent = agent_pid(name)
    if agent and agent > 0 and runs(agent, "skyhive.runtime.clusters.agent"):
        pids.append(agent)
    if watchdog and rec.watchdog_pid and runs(rec.watchdog_pid, "skyhive.runtime.worker.watchdog"):
        pids.append(rec.watchdog_pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)
        deadline = time.monotonic() + GRACE
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.05)
    ended = len(pids)
    from ..commands.inventory import down, find

    with contextlib.suppress(PoolNotFound):
        entry = find(name)
        if entry.pool_id == name and entry.needs_down:
            ended += down(entry, force=True, why=why).killed
    return ended
