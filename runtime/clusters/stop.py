"""Stopping a named pool's processes: its workers, its job agent, its autostop watchdog, and what their
jobs left; the pool's log records it stopped. Used by `skyhive down NAME` and by autostop."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable, Collection, Mapping

from ...errors import SSHError
from ..onnode.nodecmd import work_root
from ..kinds.local.detached import CLUSTER_ENV, is_worker_server, server_pid
from . import record as records
from .jobs import agent_pid
from .procs import alive, runs

__all__ = ["stop_pool", "marked", "stopped_by_shutdown"]

log = logging.getLogger("skyhive.clusters")

#: Seconds between SIGTERM and SIGKILL.
GRACE = 3.0


def _end(pids: list[int], send: Callable[[int, int], None]) -> None:
    """SIGTERM `pids` (with `send`: `os.killpg` for group leaders, `os.kill` for single processes),
    then SIGKILL those still alive after `GRACE`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                send(pid, sig)
        deadline = time.monotonic() + GRACE
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.05)


def stop_pool(name: str, *, why: str, watchdog: bool = True, host_keys: Mapping[int, str] | None = None,
              skip: Collection[int] = (), keep_machines: bool = False) -> int:
    """End every process of pool `name` (each leads its own process group: SIGTERM, then SIGKILL after
    `GRACE`), then what their jobs left (found by `marked`), and record the
    pool stopped in its log with `why`. `watchdog=False` spares the autostop watchdog (it is the one
    calling). `host_keys` and `skip` go to `remote.stop_remote` (an SSH pool after a host-key change the
    user confirmed); `keep_machines` (`skyhive stop`) records it stopped without destroying what its
    provider holds, and keeps the jobs' working directories (what is on the disks stays). A cloud pool
    whose instances are stopped is not visited on them (nothing of it runs there). Returns how many
    processes were ended. Raises `PoolNotFound` naming the pool."""
    rec = records.load(name)
    remote = rec.on_hosts  # its workers are on its hosts: stopped there, below
    halted = bool(rec.instances and rec.stopped)  # its instances are stopped: nothing of it runs on them
    workers = set() if remote else {w.pid for w in rec.workers if is_worker_server(w.pid)}
    if not remote:
        workers |= {pid for w in rec.workers if (pid := server_pid(w.socket)) is not None}  # restarted since
    pids = sorted(workers)
    agent = agent_pid(name)
    if agent and agent > 0 and runs(agent, "skyhive.runtime.commands.agent"):
        pids.append(agent)
    if watchdog and rec.watchdog_pid and runs(rec.watchdog_pid, "skyhive.runtime.worker.watchdog"):
        pids.append(rec.watchdog_pid)
    _end(pids, os.killpg)
    left = [] if remote else marked(rec.socket_dir)  # what jobs started in sessions of their own (torchrun's)
    _end(left, os.kill)
    ended = len(pids) + len(left)
    if remote and not halted:
        from .remote import stop_remote

        done, failures = stop_remote(rec, host_keys=host_keys, skip=skip, keep_work=keep_machines)
        for line in done:
            log.info("pool %s: %s", name, line)
        if failures:
            raise SSHError(f"pool {name!r}: could not stop it everywhere: {'; '.join(failures)}; run `skyhive down "
                           f"{name}` again once the host answers (the record is kept until then)")
        ended += sum(line.count(",") + 1 for line in done if "stopped [" in line)
    if not keep_machines:
        shutil.rmtree(work_root(name), ignore_errors=True)  # the jobs' working directories on this machine
    if rec.instances and not keep_machines:
        # a cloud pool's nodes are terminated by id (`cloud.terminate_instances`), which closes the log
        # once the provider confirms: recorded here, a failed termination would leave the log saying
        # `terminated` for instances that still run
        return ended
    from .closing import close_log

    close_log(name, why=why, destroy=not keep_machines)
    return ended


def marked(socket_dir: str) -> list[int]:
    """Live processes of our user started under the named pool whose socket directory is
    `socket_dir` (they carry it in `SKYHIVE_CLUSTER`). A pool's name may be used by another state
    directory on this machine, so processes are never matched by the name."""
    needle = f"{CLUSTER_ENV}={socket_dir}\0".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != os.getuid():
                continue
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = fh.read() + b"\0"
        except OSError:
            continue
        if needle in environ and alive(int(entry)):
            found.append(int(entry))
    return found


def stopped_by_shutdown(rec: records.ClusterRecord) -> records.ClusterRecord:
    """The record of the cloud pool `rec`, marked stopped by autostop (and saved, its agent and a local
    watchdog ended, its log stopped) when the provider lists every one of its instances `stopped` while
    the record says it runs: the autostop watchdog on the instances shut them down, and they were made
    to stop on shutdown (`named.shutdown_on_autostop`). Any other pool's record is returned as it is,
    without asking anyone."""
    if not rec.instances or rec.stopped or rec.leaking:
        return rec
    from .cloud import instance_states

    states = instance_states(rec)
    if states is None or not all(states.get(i) == "stopped" for i in rec.instances):
        return rec
    log.info("pool %s: instances %s stopped themselves (autostop on them)", rec.name, ", ".join(rec.instances))
    records.save(dataclasses.replace(rec, stopped="autostop"))  # nothing is reached on its instances now
    stop_pool(rec.name, why="autostop: its instances shut themselves down", keep_machines=True)
    rec = dataclasses.replace(rec, stopped="autostop", watchdog_pid=0)
    records.save(rec)
    return rec
