"""Commands on pools: the named pools' `exec`, `status`, `queue`, `cancel`, `stop`, `start` (docs/clusters.md), and `ls` and `down` for every pool the event logs know."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING

from .common import ask, confirm, err

if TYPE_CHECKING:
    from skyhive.runtime.events.inventory import PoolEntry


def cmd_exec(args: argparse.Namespace) -> int:
    from skyhive.runtime.control.pools import exec_task
    from skyhive.runtime.commands.taskflags import task_from_args

    return exec_task(task_from_args(args), args.name, detach_run=args.detach_run)


def cmd_status(args: argparse.Namespace) -> int:
    from skyhive.runtime.control.pools import print_status

    if args.ip:  # SkyPilot's `status --ip NAME`: the head node's address, alone on a line (for scripts)
        return _print_ip(args.names)
    if getattr(args, "endpoints", None):  # `status --endpoints NAME`: the pool's ports, reached from here
        from skyhive.runtime.clusters.ports import endpoints

        for e in endpoints(args.endpoints):
            print(f"{e['port']}: {e['how']}")
        return 0
    code = print_status(names=args.names, as_json=args.json)
    if args.names and not args.json:  # `status NAME`: also how to get onto its nodes (docs/access.md)
        from skyhive.runtime.commands.access import access_lines

        for name in args.names:
            print("\n".join(access_lines(name)))
    return code


def _print_ip(names: list[str]) -> int:
    from skyhive.runtime.clusters.kept_pool import KeptPool

    if len(names) != 1:
        err("error: --ip shows one pool's head address: `skyhive status --ip NAME`")
        return 2
    head = KeptPool.load(names[0]).access(0)  # PoolNotFound (a LookupError) names the pool
    ip = head.ip()
    if ip is None:
        err(f"error: pool {names[0]!r} has no address of its own ({head.describe()}): reach it with "
            f"`skyhive ssh {names[0]}`")
        return 1
    print(ip)
    return 0


def cmd_autostop(args: argparse.Namespace) -> int:
    """SkyPilot's `autostop NAME... [-i MIN] [--down] [--cancel]`: set, replace or cancel the autostop of
    running named pools (the default, 5 minutes idle, as SkyPilot's)."""
    from skyhive.runtime.clusters import record as records
    from skyhive.runtime.clusters.named import set_autostop

    if args.all == bool(args.names):
        err("error: give named pools, or --all")
        return 2
    if args.cancel and (args.idle_minutes is not None or args.down):
        err("error: --cancel takes no -i or --down (it removes the pool's autostop)")
        return 2
    names = records.names() if args.all else args.names
    if not names:
        print("no named pools")
        return 0
    minutes = None if args.cancel else (5.0 if args.idle_minutes is None else args.idle_minutes)
    code = 0
    for name in names:
        rec = records.load(name)  # PoolNotFound names the pool and the named pools there are
        if rec.stopped:
            err(f"error: pool {name} is stopped ({rec.stopped}): `skyhive start {name}` first")
            code = 1
            continue
        set_autostop(rec, minutes, args.down)
        if minutes is None:
            print(f"pool {name}: autostop cancelled")
        else:
            print(f"pool {name}: {'down' if args.down else 'stop'} after {minutes:g} min idle")
    return code


def cmd_queue(args: argparse.Namespace) -> int:
    from skyhive.runtime.control.queue import print_queue

    return print_queue(args.name, as_json=args.json)


def cmd_cancel(args: argparse.Namespace) -> int:
    from skyhive.runtime.control.queue import cancel_jobs

    return cancel_jobs(args.name, args.jobs, all_jobs=args.all)


def add_cluster_parsers(sub: argparse._SubParsersAction, launch: argparse.ArgumentParser) -> None:
    """The named-pool flags of `launch` and the commands on named pools, in one place."""
    from skyhive.runtime.commands.taskflags import add_task_flags, idle_minutes

    launch.add_argument("-c", "--cluster", metavar="NAME", help="a named pool: create it (or reuse it when it runs "
                        "with the same shape), run the task there as a job, leave it up")
    launch.add_argument("-d", "--detach-run", action="store_true", help="with -c: return once the job is queued")
    launch.add_argument("-i", "--idle-minutes-to-autostop", dest="idle_minutes", type=idle_minutes, metavar="MINUTES",
                        help="with -c: stop the pool's workers after this many idle minutes")
    launch.add_argument("--down", action="store_true", help="with -c: take the pool down when idle (autostop)")
    launch.add_argument("--detach-setup", action="store_true", help="SkyPilot's: setup runs as part of the job, "
                        "its output in the job's log (skyhive always runs it so)")

    p = sub.add_parser("exec", help="run a task's `run` on a named pool (no setup), as a queued job")
    p.add_argument("name", metavar="NAME")
    add_task_flags(p, launch=False)
    p.add_argument("-d", "--detach-run", "--async", action="store_true", help="return once the job is queued")
    p.set_defaults(func=cmd_exec)

    p = sub.add_parser("status", help="named pools: nodes, resources, state, idle time, autostop")
    p.add_argument("names", nargs="*", metavar="NAME", help="only these pools")
    p.add_argument("--json", action="store_true", help="one JSON object per pool")
    p.add_argument("-r", "--refresh", action="store_true", help="SkyPilot's: status always asks the workers "
                   "(and SSH hosts) as it prints")
    p.add_argument("--endpoints", metavar="NAME", help="only how each port of pool NAME is reached from here")
    p.add_argument("--ip", action="store_true", help="SkyPilot's: only the head node's address of pool NAME")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("autostop", help="set or cancel a named pool's autostop (SkyPilot's `sky autostop`)")
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument("-a", "--all", action="store_true", help="every named pool")
    p.add_argument("-i", "--idle-minutes", dest="idle_minutes", type=idle_minutes, metavar="MINUTES",
                   help="stop after this many idle minutes (default 5)")
    p.add_argument("--down", action="store_true", help="take the pool down instead of stopping it")
    p.add_argument("--cancel", action="store_true", help="remove the pool's autostop")
    p.add_argument("-y", "--yes", action="store_true", help="SkyPilot's: autostop asks nothing")
    p.set_defaults(func=cmd_autostop)

    p = sub.add_parser("queue", help="the jobs of a named pool")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--json", action="store_true", help="one JSON object per job")
    p.set_defaults(func=cmd_queue)

    p = sub.add_parser("cancel", help="cancel jobs of a named pool (default: the running one)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("jobs", nargs="*", type=int, metavar="JOB")
    p.add_argument("-a", "--all", action="store_true", help="every job not finished")
    p.add_argument("-y", "--yes", action="store_true", help="SkyPilot's: cancel asks nothing")
    p.set_defaults(func=cmd_cancel)


def cmd_stop(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.pause import stop_cluster

    if not confirm(args, f"Stop pool(s) {', '.join(args.names)} (its workers end, the machines and disks stay)?"):
        err("aborted: nothing was stopped")
        return 1
    for name in args.names:
        stop_cluster(name)
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.pause import start_cluster

    if not confirm(args, f"Start pool(s) {', '.join(args.names)} again?"):
        err("aborted: nothing was started")
        return 1
    for name in args.names:
        start_cluster(name)
    return 0


def add_stop_start_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stop", help="stop a named pool: its workers end; a cloud pool's instances stop, disks kept")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask")
    p.set_defaults(func=cmd_stop)

    p = sub.add_parser("start", help="start a stopped named pool again (a cloud pool: the same instances)")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask")
    p.set_defaults(func=cmd_start)


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _nodes(states: list[str], replaced: int = 0, dropped: int = 0) -> str:
    if not states:
        return "0"
    counts = Counter(states)
    return (f"{len(states)}: " + ", ".join(f"{n} {s}" for s, n in counts.most_common())
            + (f" ({replaced} replaced)" if replaced else "")
            + (f" ({dropped} left out at start: min_nodes)" if dropped else ""))


def cmd_ls(args: argparse.Namespace) -> int:
    from skyhive.runtime.events.inventory import owned_summary, scan

    entries = scan(include_stopped=args.all)
    owned = {e.pool_id: owned_summary(e) for e in entries}
    now = time.time()
    if args.json:
        for e in entries:
            print(json.dumps({
                "pool": e.pool_id, "provider": e.state.provider, "status": e.status, "client_pid": e.state.pid,
                "host": e.state.host, "started": e.state.started, "created": e.state.created or e.state.started,
                "stopped": e.state.stopped or None,
                "nodes": [n.state for n in e.state.nodes], "error": e.state.error, "log": str(e.path),
                "replaced": {str(n.node): list(n.replaced_ids) for n in e.state.nodes if n.replaced_ids} or None,
                "dropped": {str(n.node): n.dropped for n in e.state.nodes if n.dropped} or None,
                "provider_holds": owned[e.pool_id] or None,
                "machine": e.machine or None, "cost": e.cost(now),
                "leaked": list(e.state.leaked) or None,
                "elastic": [e.state.nodes_min, e.state.nodes_max] if e.state.nodes_max else None,  # status "leaking": what the provider did not confirm gone
            }))
        return 0
    if not entries:
        print("no pools" + ("" if args.all else " running (`skyhive ls -a` shows stopped ones too)"))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("POOL", "PROVIDER", "NODES", "STATUS", "AGE", "MACHINE", "COST"):
        table.add_column(column, no_wrap=True)
    for e in entries:
        status = e.status
        if e.status == "client gone":
            status = f"[yellow]client gone[/] (skyhive down {e.pool_id})"
        elif e.status == "leaking":
            status = f"[red]leaking[/]: {', '.join(e.state.leaked)} (skyhive down {e.pool_id})"
        elif e.state.error and e.status == "stopped":
            status = f"stopped: {e.state.error[:60]}"
        born = e.state.created or e.state.started  # a named pool's age counts from its first start
        age = _age(now - born) if born else "-"
        cost = e.cost(now)
        spent = f"${cost[0]:.4g}/h, ${cost[1]:.2f} so far" if cost else "-"
        provider = e.state.provider or "-"
        if owned[e.pool_id]:
            provider += f" ({owned[e.pool_id]})"
        nodes = _nodes([n.state for n in e.state.nodes], e.state.replacements, sum(1 for n in e.state.nodes if n.dropped))
        if e.state.nodes_max:  # an elastic pool: its range
            nodes += f" (elastic {e.state.nodes_min}..{e.state.nodes_max})"
        table.add_row(e.pool_id, provider, nodes, status, age,
                      e.machine or "-", spent)
    Console(width=None if sys.stdout.isatty() else 400, highlight=False).print(table)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from skyhive.runtime.events.inventory import find

    if args.all == bool(args.pools):
        err("error: give pool ids, or --all")
        return 2
    if args.all:
        return _down_all(args)
    from skyhive.runtime.control.queue import is_named

    named = [p for p in args.pools if is_named(p)]  # named pools: their workers, agent and record
    for name in named:
        _down_named(name, args)
    pools = [p for p in args.pools if p not in named]
    return _down_logged([find(p) for p in pools], args) if pools else 0


def _down_named(name: str, args: argparse.Namespace) -> None:
    from skyhive.runtime.control.pools import down_cluster

    down_cluster(name, force=args.force, accept_host_keys=args.accept_host_key or (),
                 ask=ask if args.force and sys.stdin.isatty() else None)


def _down_all(args: argparse.Namespace) -> int:
    """`down -a`, as SkyPilot's: every pool ends with nothing running and no record. A named pool is taken
    down as `down NAME` takes it (its workers, agent, watchdog, record); its log is never cleaned up on its
    own (its workers would end and its record stay: a broken pool). Then every other pool not stopped."""
    from skyhive.runtime.clusters import record as records
    from skyhive.runtime.events.inventory import scan

    named = records.names()
    others = [e for e in scan() if e.pool_id not in named]
    if not named and not others:
        print("no pools to clean up")
        return 0
    listed = [f"{n} (named)" for n in named] + [e.pool_id for e in others]
    if not confirm(args, f"Take down every pool: {', '.join(listed)}?"):
        err("aborted: nothing was taken down")
        return 1
    code = 0
    for name in named:
        try:
            _down_named(name, args)
        except Exception as exc:  # one pool's failure (an unreachable host) must not stop the others
            err(f"error: {name}: {exc}")
            code = 1
    return max(code, _down_logged(others, args))


def _down_logged(entries: list[PoolEntry], args: argparse.Namespace) -> int:
    """Clean up the pools of `entries` (from their logs): 1 when one could not be."""
    from skyhive.runtime.events.inventory import PoolInUse, down

    code = 0
    for entry in entries:
        try:
            report = down(entry, force=args.force)
        except PoolInUse as exc:
            err(str(exc))
            code = 1
            continue
        except Exception as exc:  # one pool's failure (an unreachable host) must not stop the others
            err(f"error: {entry.pool_id}: {exc}")
            code = 1
            continue
        if report.warning:
            err(f"warning: {report.pool_id}: {report.warning}")
        if report.already_stopped:
            print(f"{report.pool_id}: already stopped")
        else:
            print(f"{report.pool_id}: stopped ({report.killed} leftover processes killed, "
                  f"{report.destroyed} provider nodes destroyed)")
    return code


def add_inventory_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ls", help="list pools from their event logs")
    p.add_argument("-a", "--all", action="store_true", help="include stopped pools")
    p.add_argument("--json", action="store_true", help="one JSON object per pool")
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser("down", help="clean up pools whose client is gone")
    p.add_argument("pools", nargs="*", metavar="POOL")
    p.add_argument("-a", "--all", action="store_true", help="every pool: named ones taken down and forgotten "
                   "(as `down NAME`), and every other pool that is not stopped (asked first on a terminal)")
    p.add_argument("--force", action="store_true", help="also pools whose client still runs; a named SSH pool "
                   "whose host key changed: choose per host by fingerprint (asked on a terminal)")
    p.add_argument("--accept-host-key", action="append", metavar="FINGERPRINT",
                   help="with --force, after a host-key change: the host's new key's fingerprint (trust it, stop "
                        "the pool there) or the recorded one (its machine is gone: forget the host)")
    p.add_argument("-y", "--yes", action="store_true", help="SkyPilot's: down asks nothing")
    p.set_defaults(func=cmd_down)
