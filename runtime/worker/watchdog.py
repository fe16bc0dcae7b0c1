"""Runs ON A CLOUD NODE: the idle watchdog, the last line of defence against a machine billed forever.

    python -m skyhive.runtime.worker.watchdog --idle SECONDS --command 'sudo shutdown -h now' --state-dir DIR

Started detached by bootstrap on nodes whose reach asks for it (`SSHReach.idle_shutdown`), and by a
named pool with autostop on this machine (`--unix-dir`: its workers' socket directory). Every
`--interval` seconds it counts the ESTABLISHED TCP connections to the node's local port `--port` (22)
in ``/proc/net/tcp`` and ``/proc/net/tcp6``. The client holds one SSH connection per node for the whole
life of its pool, so a connected client keeps the node however long a job runs; when the client is gone
(killed, crashed, its network lost) the connection goes too, and after `--idle` seconds with none the
watchdog runs `--command` through ``/bin/sh`` and exits (unless the command exits with
`KEEP_WATCHING`, 75: then it watches on). Cloud instances are created to terminate on
shutdown, so the default command ends the billing.

`--wait-for` (a named pool's `resources.autostop.wait_for`, SkyPilot's) changes what is not idle:
`jobs_and_ssh` (the default) a connection, as above; `jobs` a job PENDING or RUNNING in `--jobs-dir` (the
pool's queue on this machine: a client's connection does not count); `none` nothing (`--command` runs
`--idle` seconds after the start: a hard limit).

One watchdog per node (its lock, pid and log are named by hostname in the state directory): a second
one finds the lock held and reports the first.
It prints one JSON line, ``{"pid": N}`` (``"already": true`` when one ran), then detaches. Only the
standard library is used (and the runtime's daemon skeleton, `common/daemon.py`).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

from ..common import daemon

#: TCP state "established" in /proc/net/tcp
_ESTABLISHED = "01"
#: socket state SS_CONNECTED in /proc/net/unix (a listener is 01, SS_UNCONNECTED)
_CONNECTED = "03"
#: The exit status (EX_TEMPFAIL) by which `--command` says "not now": the watchdog watches on, as if a
#: client had just left (a named pool's autostop finds a client attaching at that very moment).
KEEP_WATCHING = 75


def _say(stream, text: str) -> None:
    """One line of this command's own output (it runs as a process on the node, not as a library)."""
    stream.write(text + "\n")
    stream.flush()


def established(port: int) -> int:
    """How many ESTABLISHED TCP connections have `port` as their local port (IPv4 and IPv6)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == _ESTABLISHED and int(fields[1].rsplit(":", 1)[1], 16) == port:
                count += 1
    return count


def connected_unix(directory: str) -> int:
    """How many connected Unix stream sockets are bound to a path in `directory` (in
    ``/proc/net/unix`` an accepted connection carries its listener's path; the listener is not
    connected)."""
    prefix = directory.rstrip("/") + "/"
    count = 0
    try:
        with open("/proc/net/unix") as fh:
            lines = fh.read().splitlines()[1:]
    except OSError:
        return 0
    for line in lines:
        fields = line.split()
        if len(fields) >= 8 and fields[5] == _CONNECTED and fields[7].startswith(prefix):
            count += 1
    return count


def jobs_in_progress(jobs_dir: str) -> int:
    """How many jobs of a named pool's queue (`jobs_dir`: its `<id>.json` files) are PENDING or RUNNING."""
    count = 0
    try:
        names = [n for n in os.listdir(jobs_dir) if n.endswith(".json")]
    except OSError:
        return 0
    for name in names:
        try:
            with open(os.path.join(jobs_dir, name), encoding="utf-8") as fh:
                state = json.load(fh).get("state")
        except (OSError, ValueError, AttributeError):
            continue
        count += state in ("PENDING", "RUNNING")
    return count


def watch(idle: float, command: str, port: int, interval: float, unix_dir: str | None = None,
          wait_for: str = "jobs_and_ssh", jobs_dir: str | None = None) -> int:
    """Loop until no connection was seen for `idle` seconds; then run `command`; its exit status.
    A connection is one to the TCP `port`, or with `unix_dir` one to a Unix socket in that directory
    (a named pool's detached workers on this machine: a client is attached, or a job runs).
    `wait_for` (SkyPilot's `resources.autostop.wait_for`) says what is not idle: "jobs_and_ssh" a
    connection, "jobs" a job queued or running in `jobs_dir` (a client's connection does not count),
    "none" nothing: `command` runs `idle` seconds after the start (a hard limit)."""
    last_seen = time.monotonic()
    where = {"jobs": f"job queued or running in {jobs_dir}", "none": "a hard limit: wait_for none"}.get(
        wait_for, f"client on socket in {unix_dir}" if unix_dir else f"client on port {port}")
    while True:
        if wait_for == "none":
            busy = False
        elif wait_for == "jobs":
            busy = bool(jobs_dir and jobs_in_progress(jobs_dir))
        else:
            busy = bool(connected_unix(unix_dir) if unix_dir else established(port))
        if busy:
            last_seen = time.monotonic()
        elif time.monotonic() - last_seen >= idle:
            _say(sys.stdout, f"watchdog: no {where} for {idle:g} s: running {command!r}" if wait_for != "none"
                 else f"watchdog: {idle:g} s ({where}): running {command!r}")
            code = subprocess.call(["/bin/sh", "-c", command])
            if code != KEEP_WATCHING:
                return code
            _say(sys.stdout, f"watchdog: the command exited {KEEP_WATCHING} (not now): watching on")
            last_seen = time.monotonic()
        time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m skyhive.runtime.worker.watchdog")
    ap.add_argument("--idle", type=float, required=True, help="seconds without a client before shutting down")
    ap.add_argument("--command", default="sudo shutdown -h now", help="what shuts the node down")
    ap.add_argument("--port", type=int, default=22, help="the SSH port whose connections mean 'a client'")
    ap.add_argument("--unix-dir", help="count connections to the Unix sockets in this directory instead")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between checks")
    ap.add_argument("--wait-for", choices=("jobs_and_ssh", "jobs", "none"), default="jobs_and_ssh",
                    help="what is not idle: a connection (default), a job in --jobs-dir, nothing (a hard limit)")
    ap.add_argument("--jobs-dir", help="a named pool's job queue (its <id>.json files), for --wait-for jobs")
    ap.add_argument("--state-dir", required=True, help="holds the lock, the pid and the log (0700)")
    args = ap.parse_args(argv)
    if args.idle <= 0 or args.interval <= 0:
        _say(sys.stderr, "watchdog: --idle and --interval must be positive")
        return 2
    if args.wait_for == "jobs" and not args.jobs_dir:
        _say(sys.stderr, "watchdog: --wait-for jobs needs --jobs-dir")
        return 2
    os.umask(0o077)  # its state directory (and any above it), lock and log: private
    os.makedirs(args.state_dir, mode=0o700, exist_ok=True)
    # named by host: a home shared between nodes (NFS) still gets one watchdog per node
    name = f"watchdog-{socket.gethostname()}"
    return daemon.serve(os.path.join(args.state_dir, f"{name}.lock"), os.path.join(args.state_dir, f"{name}.log"),
                        lambda _: watch(args.idle, args.command, args.port, args.interval, args.unix_dir,
                                                        args.wait_for, args.jobs_dir))


if __name__ == "__main__":
    sys.exit(main())
