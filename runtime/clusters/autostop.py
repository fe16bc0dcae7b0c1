"""What a named pool's autostop watchdog runs once the pool has had no client for its idle time:

    python -m skyhive.runtime.clusters.autostop NAME

The watchdog (`runtime/worker/watchdog.py --unix-dir`) counts the connections to the pool's worker
sockets: a job running or a Python client attached holds one per worker. With none for `-i MINUTES`
it runs this, which stops the pool's processes (`stop.stop_pool`) and either records the pool as
stopped by autostop (`skyhive status` shows it; the next `launch -c` starts it again) or, with
`--down`, forgets it. A cloud pool's instances are stopped through the provider's API (disks kept;
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

import dataclasses
import sys

from ..common import daemon
from . import jobs as jobq
from . import record as records
from .kept_pool import KeptPool
from .stop import stop_pool

__all__ = ["main", "autostop", "KEEP_WATCHING"]

#: "Not now": the watchdog watches on (`worker/watchdog.py`'s own KEEP_WATCHING; the client side does
#: not import the worker's modules).
KEEP_WATCHING = 75


def autostop(name: str) -> str:
    """Stop (or, autodown, take down) the idle pool `name` unless a client holds it; what happened:
    "autostop", "autodown", or why it was left running (a client is attached, a job waits)."""
    lock = records.AttachLock(name, who="autostop")
    if not lock.try_acquire():
        return f"busy: {lock.busy()}"
    try:
        # (read from the job files: probing the agent's lock could make an agent starting now think
        # another one runs)
        waiting = [j.id for j in jobq.list_jobs(name, setup_only=True) if j.state in (jobq.PENDING, jobq.RUNNING)]
        if waiting:
            return f"busy: pool {name!r} has a job queued or running (job {', '.join(map(str, waiting))})"
        rec = records.load(name)
        what = "autodown" if rec.autostop_down else "autostop"
        idle = "its idle time" if rec.autostop_minutes is None else f"{rec.autostop_minutes:g} min"
        kept = KeptPool(rec)
        # (asked first: a pool kept "stopped" has its log closed now; one taken down, only once its
        # provider confirmed the termination)
        stops = not rec.autostop_down and kept.can_stop_machines()
        stop_pool(name, why=f"{what}: no client for {idle}", watchdog=False, keep_machines=stops)
        if stops and kept.stop_machines():  # a cloud pool's instances stopped, their disks kept
            records.save(dataclasses.replace(rec, stopped=what, watchdog_pid=0))
        elif kept.machines:  # autodown, or a cloud that cannot stop its machines: terminated
            kept.terminate_machines(why=f"{what}: no client for {idle}")
            records.remove(name)
        elif rec.autostop_down:
            records.remove(name)
        else:
            records.save(dataclasses.replace(rec, stopped=what, watchdog_pid=0))
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
