"""What a named pool's autostop watchdog runs once the pool has had no client for its idle time:

    python -m skyhive.runtime.clusters.autostop NAME

The watchdog (`runtime/worker/watchdog.py --unix-dir`) counts the connections to the pool's worker
sockets: a job running or a Python client attached holds one per worker. With none for `-i MINUTES`
it runs this, which stops the pool's processes (`stop.stop_pool`) and either records the pool as
stopped by autostop (`skyhive status` shows it; the next `launch -c` starts it again) or, with
`--down`, forgets it. `resources.autostop.wait_for` (SkyPilot's) says what keeps the pool up:
`jobs_and_ssh` (the default) a job or an attached client, `jobs` a job only (an attached client's pool
is stopped under it), `none` nothing: the pool stops `-i MINUTES` after autostop was set, its jobs
cancelled (a hard limit). A cloud pool's instances are stopped through the provider's API (disks kept;
`skyhive start NAME` starts them again), or with `--down` (or on a cloud that cannot stop machines)
terminated by their recorded ids and the pool forgotten: this runs on the client's machine, which has
the cloud credentials. (The watchdog on a cloud instance reached over SSH has none: it shuts the
instance's OS down, and the instance was made to stop or terminate on that: `named.shutdown_on_autostop`.)

A client may attach at the very moment the watchdog fires (it has taken the pool's attach lock but
not connected yet, or a job was just queued and its agent is starting). So the stop happens only
under the pool's attach lock, taken without waiting: when a client holds it, or a job is queued or
running, this gives up and exits with `KEEP_WATCHING` (the watchdog then watches on). A
client that attaches after the stop finds the record marked stopped (`named.refuse_stopped`) and
is refused, saying so, instead of taking over workers that are gone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
import time

from ..common import daemon
from . import jobs as jobq
from . import record as records
from .kept_pool import KeptPool
from .procs import alive
from .stop import stop_pool

__all__ = ["main", "autostop", "KEEP_WATCHING", "wait_for_of", "cancel_jobs", "SETTINGS_FILE"]

#: "Not now": the watchdog watches on (`worker/watchdog.py`'s own KEEP_WATCHING; the client side does
#: not import the worker's modules).
KEEP_WATCHING = 75
#: seconds a hard limit (`wait_for: none`) waits for the agent to end the running jobs it cancelled
CANCEL_WAIT = 60.0
#: seconds between two looks for a worker restarted by the client of a pool stopped under it
HOLD_DOWN_POLL = 0.2
#: a pool's autostop settings besides its record (`control/autostop_hook.save_hook` writes it): the hook,
#: the command the watchdog runs (`runner`) and `wait_for`
SETTINGS_FILE = "autostop-hook.json"


def wait_for_of(name: str) -> str:
    """Pool `name`'s `resources.autostop.wait_for` (SkyPilot's): what keeps it from being idle —
    "jobs_and_ssh" (a job queued or running, or a client attached: the default), "jobs" or "none"."""
    try:
        value = json.loads((records.cluster_dir(name) / SETTINGS_FILE).read_text()).get("wait_for")
    except (FileNotFoundError, ValueError, AttributeError):
        return "jobs_and_ssh"
    return value if value in ("jobs", "none") else "jobs_and_ssh"


def cancel_jobs(name: str, wait: float = CANCEL_WAIT) -> list[int]:
    """Cancel every queued or running job of pool `name` (`wait_for: none`: a hard limit) and wait, at most
    `wait` seconds, for its agent to end the running ones (SIGTERM, then SIGKILL: they end CANCELLED);
    their ids."""
    ids = [j.id for j in jobq.list_jobs(name, setup_only=True) if j.state in (jobq.PENDING, jobq.RUNNING)]
    for job_id in ids:
        jobq.request_cancel(name, job_id)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and any(jobq.load_job(name, i).state == jobq.RUNNING for i in ids):
        time.sleep(0.2)
    return ids


def _holder(name: str) -> int | None:
    """The pid of the process holding pool `name`'s attach lock (`record.AttachLock` writes "pid N ...")."""
    try:
        words = (records.cluster_dir(name) / "attach.lock").read_text().split()
        return int(words[1]) if len(words) > 1 and words[0] == "pid" else None
    except (OSError, ValueError):
        return None


def _hold_down(kept: KeptPool, client: int) -> None:
    """A pool stopped under its attached client (`wait_for: jobs|none`): that client restarts the workers it
    loses (in place, until it gives their node up); each one is ended as it comes, until the client leaves,
    so that nothing of the stopped pool runs on after it."""
    while alive(client):
        for group in kept.support.worker_groups(kept.rec):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        time.sleep(HOLD_DOWN_POLL)
    for group in kept.support.worker_groups(kept.rec):  # (one started as the client left)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)


def autostop(name: str) -> str:
    """Stop (or, autodown, take down) the idle pool `name` unless a client holds it; what happened:
    "autostop", "autodown", or why it was left running (a client is attached, a job waits)."""
    wait_for = wait_for_of(name)
    lock = records.AttachLock(name, who="autostop")
    client = None  # (`jobs`, `none`: the pool is stopped under its attached client)
    if not lock.try_acquire():
        if wait_for == "jobs_and_ssh":
            return f"busy: {lock.busy()}"
        client = _holder(name)
    try:
        # (read from the job files: probing the agent's lock could make an agent starting now think
        # another one runs)
        waiting = [j.id for j in jobq.list_jobs(name, setup_only=True) if j.state in (jobq.PENDING, jobq.RUNNING)]
        if waiting and wait_for != "none":
            return f"busy: pool {name!r} has a job queued or running (job {', '.join(map(str, waiting))})"
        if waiting:  # a hard limit: its jobs end with the pool, CANCELLED
            cancel_jobs(name)
        rec = records.load(name)
        what = "autodown" if rec.autostop_down else "autostop"
        idle = "its idle time" if rec.autostop_minutes is None else f"{rec.autostop_minutes:g} min"
        idle = {"jobs_and_ssh": f"no client for {idle}", "jobs": f"no job for {idle} (wait_for: jobs)",
                "none": f"{idle} up (wait_for: none, a hard limit)"}[wait_for]
        kept = KeptPool(rec)
        # (asked first: a pool kept "stopped" has its log closed now; one taken down, only once its
        # provider confirmed the termination)
        stops = not rec.autostop_down and kept.can_stop_machines()
        stop_pool(name, why=f"{what}: {idle}", watchdog=False, keep_machines=stops)
        if stops and kept.stop_machines():  # a cloud pool's instances stopped, their disks kept
            records.save(dataclasses.replace(rec, stopped=what, watchdog_pid=0))
        elif kept.machines:  # autodown, or a cloud that cannot stop its machines: terminated
            kept.terminate_machines(why=f"{what}: {idle}")
            records.remove(name)
        elif rec.autostop_down:
            records.remove(name)
        else:
            records.save(dataclasses.replace(rec, stopped=what, watchdog_pid=0))
        if client is not None:
            _hold_down(kept, client)
        return what
    finally:
        lock.release()  # (autodown removed the lock file with the pool: the descriptor still holds it)


def main(argv: list[str] | None = None) -> int:
    arg = daemon.argument(argv, "skyhive.runtime.clusters.autostop", "NAME")
    if arg is None:
        return 2
    name = records.check_name(arg)
    outcome = autostop(name)
    sys.stdout.write(f"pool {name}: {outcome}\n")
    return KEEP_WATCHING if outcome.startswith("busy") else 0


if __name__ == "__main__":
    sys.exit(main())
