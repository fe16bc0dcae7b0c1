"""What a named pool's autostop watchdog runs once the pool has had no client for its idle time:

    python -m skyhive.runtime.clusters.autostop NAME

The watchdog (`runtime/worker/watchdog.py --unix-dir`) counts the connections to the pool's worker
sockets: a job running or a Python client attached holds one per worker. With none for `-i MINUTES`
it runs this, which stops the pool's processes (`stop.stop_pool`) and either records the pool as
stopped by autostop (`skyhive status` shows it; the next `launch -c` starts it again) or, with
`--down`, forgets it. A cloud pool's instances are terminated (by their recorded ids) and the pool
forgotten either way: its instances terminate on shutdown, so there is no stopped state to keep, and
this runs on the client's machine, which has the cloud credentials (the nodes have none).
"""

from __future__ import annotations

import dataclasses
import sys

from . import record as records
from .stop import stop_pool

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m skyhive.runtime.clusters.autostop NAME\n")
        return 2
    name = records.check_name(args[0])
    rec = records.load(name)
    what = "autodown" if rec.autostop_down else "autostop"
    stop_pool(name, why=f"{what}: no client for {rec.autostop_minutes:g} min", watchdog=False)
    if rec.instances:  # a cloud pool: nothing to keep stopped (instances terminate on shutdown): down
        from .cloud import terminate_instances

        terminate_instances(rec)
        records.remove(name)
    elif rec.autostop_down:
        records.remove(name)
    else:
        records.save(dataclasses.replace(rec, stopped=what, watchdog_pid=0))
    sys.stdout.write(f"pool {name}: {what}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
