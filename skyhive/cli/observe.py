"""What a pool did and does: `skyhive logs`, `events`, `timeline`, `dashboard`."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from .common import err


def _follow(args: argparse.Namespace, on_lines: Callable[[list[str]], bool]) -> int:
    """Feed the pool log's complete lines to `on_lines` (True = the pool stopped); with --follow, keep at it."""
    from skyhive.runtime.events.inventory import LogTail, client_of, find

    entry = find(args.pool)
    tail = LogTail(entry.path)
    stopped = on_lines(tail.lines())
    quiet = 0.0
    try:
        while args.follow and not stopped:  # (None, neither flag: a pool's log is printed once)
            time.sleep(0.25)
            lines = tail.lines()
            stopped = on_lines(lines)
            quiet = 0.0 if lines else quiet + 0.25
            if quiet >= 2.0 and not stopped:  # nothing new for a while: is anyone still writing?
                quiet = 0.0
                entry = find(args.pool) if entry.started is None else entry
                if entry.started is not None and client_of(entry.started) == "gone":
                    err(f"the client of pool {entry.pool_id} (pid {entry.started.pid}) is gone; "
                         f"`skyhive down {entry.pool_id}` cleans up")
                    return 1
    except KeyboardInterrupt:
        return 130
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    def show(lines: list[str]) -> bool:
        for line in lines:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return any('"type":"pool_stopped"' in line for line in lines)

    return _follow(args, show)


def cmd_logs(args: argparse.Namespace) -> int:
    from skyhive.runtime.control.queue import is_named, job_logs
    from skyhive.runtime.events.types import OutputCapped, OutputChunk, PoolStopped, from_json

    if args.sync_down:  # SkyPilot's form: several JOBs, or globs ('*'), allowed here
        from skyhive.runtime.control.queue import sync_down

        return sync_down(args.pool, args.job or None)
    if len(args.job) > 1:
        err(f"error: cannot stream logs of multiple jobs (IDs: {', '.join(args.job)}): pass -s/--sync-down to "
            "download them instead")
        return 2
    if args.job and not args.job[0].isdigit():
        err(f"error: invalid job ID {args.job[0]!r}: a job ID is a whole number (a glob needs -s/--sync-down)")
        return 2
    args.job = int(args.job[0]) if args.job else None
    if args.status:  # SkyPilot's form, for a named pool's jobs
        from skyhive.runtime.control.queue import job_status

        return job_status(args.pool, args.job)
    if is_named(args.pool) and (args.job is not None or _has_jobs(args.pool)):
        # a named pool's job log follows until the job ends unless --no-follow (SkyPilot's `sky logs`)
        return job_logs(args.pool, args.job, follow=args.follow is not False)
    if args.job is not None:
        err(f"error: {args.pool} is not a named pool: it has no jobs (`skyhive logs {args.pool}` shows its output)")
        return 2

    partial: dict[tuple[int, int, str], str] = {}
    prefix = args.node is None

    def emit(ev: OutputChunk, text: str) -> None:
        out = sys.stderr if ev.stream == "stderr" else sys.stdout
        if prefix:
            text = "".join(f"[node {ev.node}] {line}" for line in text.splitlines(keepends=True))
        out.write(text)

    def show(lines: list[str]) -> bool:
        stopped = False
        for line in lines:
            try:
                ev = from_json(line)
            except ValueError:
                continue
            if isinstance(ev, PoolStopped):
                stopped = True
            if isinstance(ev, OutputCapped):
                for (node, _, stream), rest in sorted(partial.items()):
                    out = sys.stderr if stream == "stderr" else sys.stdout
                    out.write(f"[node {node}] {rest}\n" if prefix else rest + "\n")
                partial.clear()
                sys.stderr.write(f"[skyhive] the log holds only the first {ev.limit} characters of this pool's "
                                 "output (log_output_limit); the rest went to the terminal and pool.output()\n")
                continue
            if not isinstance(ev, OutputChunk) or (args.node is not None and ev.node != args.node):
                continue
            key = (ev.node, ev.local_rank, ev.stream)
            text = partial.pop(key, "") + ev.text
            complete, sep, rest = text.rpartition("\n")
            if rest:
                partial[key] = rest
            if sep:
                emit(ev, complete + "\n")
        if stopped:
            for (node, rank, stream), rest in partial.items():
                emit(OutputChunk(pool_id="", seq=0, ts=0, task=0, node=node, local_rank=rank, stream=stream,
                                 text=""), rest + "\n")
            partial.clear()
        sys.stdout.flush()
        sys.stderr.flush()
        return stopped

    return _follow(args, show)


def _has_jobs(name: str) -> bool:
    from skyhive.runtime.clusters.jobs import list_jobs

    return bool(list_jobs(name))


def cmd_timeline(args: argparse.Namespace) -> int:
    from skyhive.runtime.events.inventory import LogTail, find
    from skyhive.runtime.events.timeline import write
    from skyhive.runtime.events.timeline_groups import group

    entry = find(args.pool)
    lay = write(LogTail(entry.path).events(), args.output, arrange=group)
    print(f"wrote {args.output} ({lay.width}x{lay.height})")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from skyhive.runtime.dashboard.server import serve

    try:
        return serve(args.port, open_browser=args.open)
    except ImportError as exc:  # the dashboard extra is not installed: say what to install
        err(f"error: {exc}")
        return 1


def add_log_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("logs", help="the output a pool's tasks wrote (a named pool: a job's log)")
    p.add_argument("pool", metavar="POOL")
    p.add_argument("job", nargs="*", metavar="JOB", help="a named pool's job (default: the latest); with "
                   "--sync-down several, or globs ('*': every job)")
    p.add_argument("--node", type=int, help="only this node's output (without prefixes)")
    p.add_argument("-f", "--follow", action="store_true", default=None, help="keep printing until the pool stops "
                   "(a named pool's job log follows by default, as SkyPilot's)")
    p.add_argument("--no-follow", dest="follow", action="store_false", help="print what is there now and return")
    p.add_argument("--status", action="store_true", help="a named pool's job: print its state, exit 0 "
                   "succeeded, 100 failed, 101 not finished, 102 no such job, 103 cancelled")
    p.add_argument("-s", "--sync-down", action="store_true", help="a named pool's job logs (all, or JOB) copied to "
                   "~/sky_logs/sky-TIME/run.log, one folder per job")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("events", help="the raw JSONL event log of a pool")
    p.add_argument("pool", metavar="POOL")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the pool stops")
    p.set_defaults(func=cmd_events)


def add_view_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("timeline", help="draw a pool's per-node Gantt chart")
    p.add_argument("pool", metavar="POOL")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="FILE.png or FILE.html")
    p.set_defaults(func=cmd_timeline)
    p = sub.add_parser("dashboard", help="a local web dashboard: pools, nodes, jobs, live logs, the timeline")
    p.add_argument("--port", type=int, metavar="P", help="port on 127.0.0.1 (default 8765, or a free one; 0: any)")
    p.add_argument("--open", action="store_true", help="open it in the web browser")
    p.set_defaults(func=cmd_dashboard)
