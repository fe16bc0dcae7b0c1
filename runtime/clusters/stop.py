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
from . import record as records
from .jobs import agent_pid
from .kept_pool import KeptPool
from .procs import alive, runs

__all__ = ["stop_pool", "stopped_by_shutdown"]

log = logging.getLogger("skyhive.clusters")

#: Seconds between SIGTERM and SIGKILL.
GRACE = 3.0
#: ... for a pool's workers that ran a cached bucket mount: they upload what it holds before they exit
#: (runtime/storage/node.py `flush_before_exit`, bounded by its EXIT_FLUSH_TIME, below this); one that
#: has nothing to upload exits at once.
WORKER_GRACE = 60.0


def _end(pids: list[int], send: Callable[[int, int], None], grace: float = GRACE) -> None:
    """SIGTERM `pids` (with `send`: `os.killpg` for group leaders, `os.kill` for single processes),
    then SIGKILL those still alive after `grace`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                send(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.05)


def stop_pool(name: str, *, why: str, watchdog: bool = True, host_keys: Mapping[int, str] | None = None,
              skip: Collection[int] = (), keep_machines: bool = False) -> int:
    """End every process of pool `name` (each leads its own process group: SIGTERM, then SIGKILL after
    `GRACE`), then what their jobs left (the kind that keeps the pool finds both: `KeepSupport.worker_groups`,
    `left_behind`), then what runs of it on its nodes elsewhere (`KeepSupport.stop`), and record the
    pool stopped in its log with `why`. `watchdog=False` spares the autostop watchdog (it is the one
    calling). `host_keys` and `skip` go to `KeepSupport.stop` (an SSH pool after a host-key change the
    user confirmed); `keep_machines` (`skyhive stop`) records it stopped without destroying what its
    provider holds, and keeps the jobs' working directories (what is on the disks stays). A cloud pool
    whose instances are stopped is not visited on them (nothing of it runs there). Returns how many
    processes were ended. Raises `PoolNotFound` naming the pool."""
    kept = KeptPool.load(name)
    rec = kept.rec
    keeper = kept.support  # the kind that keeps it: where its workers run, how they are stopped
    halted = kept.machines_stopped  # its machines are stopped: nothing of it runs on them
    pids = keeper.worker_groups(rec)  # its workers on this machine
    agent = agent_pid(name)  # the holder of the agent's lock (`common/daemon.py`): no other process holds it,
    if agent and agent > 0 and alive(agent):  # whatever its pid's age — the lock names the agent, not its module
        pids.append(agent)
    if watchdog and rec.watchdog_pid and runs(rec.watchdog_pid, "skyhive.runtime.worker.watchdog"):
        pids.append(rec.watchdog_pid)
    from ..storage.kept import mount_owners

    began = time.time()
    _end(pids, os.killpg, WORKER_GRACE if mount_owners() & set(pids) else GRACE)  # (a cached mount's last upload)
    _after_workers(name, began)
    left = keeper.left_behind(rec)  # what jobs started in sessions of their own (torchrun's)
    _end(left, os.kill)
    ended = len(pids) + len(left)
    if not halted:  # and on its nodes elsewhere (an SSH pool's hosts)
        result = keeper.stop(rec, host_keys=host_keys, skip=skip, keep_work=keep_machines)
        for line in result.done:
            log.info("pool %s: %s", name, line)
        if result.failures:
            raise SSHError(f"pool {name!r}: could not stop it everywhere: {'; '.join(result.failures)}; run `skyhive "
                           f"down {name}` again once the host answers (the record is kept until then)")
        ended += result.ended
    if not keep_machines:
        shutil.rmtree(work_root(name), ignore_errors=True)  # the jobs' working directories on this machine
    if kept.machines and not keep_machines:
        # a cloud pool's nodes are terminated by id (`cloud.terminate_instances`), which closes the log
        # once the provider confirms: recorded here, a failed termination would leave the log saying
        # `terminated` for instances that still run
        return ended
    from .closing import close_log

    close_log(name, why=why, destroy=not keep_machines)
    return ended


def _after_workers(name: str, began: float) -> None:
    """Once the pool's workers on this machine ended: the files their cached mounts could not upload
    (kept by them, runtime/storage/kept.py) named, and the multipart uploads they left unfinished
    aborted (runtime/storage/uploads.py)."""
    from ..storage.kept import kept_since
    from ..storage.uploads import abort_orphans

    for path, uri, count in kept_since(began):
        log.warning("pool %s: %d file(s) could not be uploaded to %s; kept in %s (see UNSENT.txt there)", name,
                    count, uri, path)
    try:
        abort_orphans()
    except Exception as exc:  # noqa: BLE001 - named; the pool is taken down all the same
        log.warning("pool %s: unfinished uploads could not be aborted: %s", name, exc)


def stopped_by_shutdown(rec: records.ClusterRecord) -> records.ClusterRecord:
    """The record of the cloud pool `rec`, marked stopped by autostop (and saved, its agent and a local
    watchdog ended, its log stopped) when the provider lists every one of its instances `stopped` while
    the record says it runs: the autostop watchdog on the instances shut them down, and they were made
    to stop on shutdown (`named.shutdown_on_autostop`). Any other pool's record is returned as it is,
    without asking anyone."""
    machines = KeptPool(rec).machines
    if not machines or rec.stopped or rec.leaking:
        return rec
    states = KeptPool(rec).machine_states()
    if states is None or not all(states.get(i) == "stopped" for i in machines):
        return rec
    log.info("pool %s: instances %s stopped themselves (autostop on them)", rec.name, ", ".join(machines))
    records.save(dataclasses.replace(rec, stopped="autostop"))  # nothing is reached on its instances now
    stop_pool(rec.name, why="autostop: its instances shut themselves down", keep_machines=True)
    rec = dataclasses.replace(rec, stopped="autostop", watchdog_pid=0)
    records.save(rec)
    return rec
