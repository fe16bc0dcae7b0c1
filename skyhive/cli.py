"""The `skyhive` command.

    skyhive launch TASK.yaml [--nodes N] [--provider local|ssh|aws] [--gpus L4:2] [--cpus 8+] ... (docs/cli.md)
    skyhive show-gpus [NAME[:COUNT]] [--cloud aws]  accelerators, instance types and hourly prices
    skyhive check                            which clouds' credentials are found (offline)
    skyhive ls [-a] [--json]                 pools found in the event logs
    skyhive down POOL ... | --all [--force]  clean up pools whose client is gone
    skyhive logs POOL [--node N] [--follow]  the output the pool's tasks wrote
    skyhive launch -c NAME TASK.yaml [-d] [-i MIN] [--down]   a named pool that stays up (docs/clusters.md)
    skyhive exec NAME TASK.yaml [-d]  |  status  |  queue NAME  |  cancel NAME [JOB...]  |  logs NAME [JOB]
    skyhive events POOL [--follow]           the raw JSONL event log, for tools
    skyhive timeline POOL -o FILE.png|FILE.html
    skyhive dashboard [--port P] [--open]    pools, nodes, jobs and live logs in the browser (docs/dashboard.md)

The work is done in `skyhive.runtime` (taskfile, launch, inventory, timeline); this module parses
arguments and prints. Exit codes: 0 success, 1 failure, 2 bad usage or a malformed task file;
`launch` exits with the first failing node's code (130 after Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable

__all__ = ["main"]


def _err(text: str) -> None:
    print(f"skyhive: {text}", file=sys.stderr, flush=True)


# ---- launch ------------------------------------------------------------------------------------------


def cmd_launch(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.launch import run_launch
    from skyhive.runtime.commands.plan import plan_launch
    from skyhive.runtime.commands.taskflags import task_from_args

    task = task_from_args(args)
    for warning in task.warnings:
        _err(f"warning: {warning}")
    if not args.cluster and (args.detach_run or args.idle_minutes is not None or args.down):
        _err("error: -d, -i and --down apply to a named pool: add -c NAME")
        return 2
    plan = plan_launch(task)  # resources the provider cannot honour, or no machine that fits: an error here
    if args.dryrun:
        print("\n".join(plan.lines))
        print("dry run: nothing was created")
        return 0
    if not args.yes and not sys.stdin.isatty() and plan.plan.get("order") == "price":
        # no provider was named: the cloud was chosen here, by price — never create billed machines on a
        # cloud nobody named without a person's yes (a terminal's prompt) or an explicit -y
        _err("error: no provider was named, so the cheapest cloud would be chosen for you; with no terminal to "
             "ask on, pass -y to accept it or name one with --provider (see `skyhive launch --dryrun`)")
        return 2
    if not args.yes and sys.stdin.isatty():
        sys.stderr.write("\n".join(plan.lines) + "\nProceed? [Y/n] ")
        sys.stderr.flush()
        answer = sys.stdin.readline()  # "" is end of input (Ctrl-D): no; an empty line is the default, yes
        if not answer or answer.strip().lower() not in ("", "y", "yes"):
            _err("aborted: nothing was created")
            return 1
    if args.cluster:  # a named pool (docs/clusters.md)
        from skyhive.runtime.commands.clusters import launch_cluster

        if plan.plan.get("warning"):  # asked of a machine that lacks it (Local's GPUs): it runs without
            _err(f"warning: {plan.plan['warning']}")

        code = launch_cluster(plan.task, args.cluster, detach_run=args.detach_run, idle_minutes=args.idle_minutes,
                              down=args.down, provider=plan.provider)
        from skyhive.runtime.commands.access import offer_include_for

        offer_include_for(args.cluster)  # SSH or cloud nodes: `ssh NAME` from ~/.ssh/config, asked once
        return code
    return run_launch(plan.task, provider=plan.provider)


def cmd_show_gpus(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.gpus import gpu_rows

    if args.json:
        from skyhive.runtime.commands.gpus import gpu_records

        for record in gpu_records(args.accelerator, cloud=args.cloud, region=args.region, all_regions=args.all_regions):
            print(json.dumps(record))
        return 0
    rows = gpu_rows(args.accelerator, cloud=args.cloud, region=args.region, all_regions=args.all_regions)
    if not rows:
        print(f"no accelerator matches {args.accelerator!r}" if args.accelerator else "no accelerators known")
        return 1
    for line in _table(("GPU", "QTY", "CLOUD", "INSTANCE_TYPE", "vCPUs", "MEMORY", "$/h", "REGION"), rows):
        print(line)
    return 0


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in (header, *rows)]


# ---- named pools (docs/clusters.md) --------------------------------------------------------------------


def cmd_exec(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.clusters import exec_task
    from skyhive.runtime.commands.taskflags import task_from_args

    return exec_task(task_from_args(args), args.name, detach_run=args.detach_run)


def cmd_status(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.clusters import print_status

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


def cmd_queue(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.jobs import print_queue

    return print_queue(args.name, as_json=args.json)


def cmd_cancel(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.jobs import cancel_jobs

    return cancel_jobs(args.name, args.jobs, all_jobs=args.all)


def _add_cluster_parsers(sub: argparse._SubParsersAction, launch: argparse.ArgumentParser) -> None:
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
    p.add_argument("-d", "--detach-run", action="store_true", help="return once the job is queued")
    p.set_defaults(func=cmd_exec)

    p = sub.add_parser("status", help="named pools: nodes, resources, state, idle time, autostop")
    p.add_argument("names", nargs="*", metavar="NAME", help="only these pools")
    p.add_argument("--json", action="store_true", help="one JSON object per pool")
    p.add_argument("-r", "--refresh", action="store_true", help="SkyPilot's: status always asks the workers "
                   "(and SSH hosts) as it prints")
    p.add_argument("--endpoints", metavar="NAME", help="only how each port of pool NAME is reached from here")
    p.set_defaults(func=cmd_status)

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


# ---- managed jobs (docs/jobs.md) -----------------------------------------------------------------------


def cmd_jobs_launch(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.taskflags import task_from_args
    from skyhive.runtime.managed.commands import submit_job

    task = task_from_args(args)
    for warning in task.warnings:
        if "job_recovery" not in warning:  # managed jobs read it (max_restarts_on_errors)
            _err(f"warning: {warning}")
    if args.dryrun:
        print("dry run: nothing was submitted")
        return 0
    job_id = submit_job(task, name=None, max_restarts_on_errors=args.max_restarts_on_errors)
    print(f"managed job {job_id} submitted (`skyhive jobs queue`, `skyhive jobs logs {job_id}`)")
    return 0


def cmd_jobs_queue(args: argparse.Namespace) -> int:
    from skyhive.runtime.managed.commands import print_jobs

    return print_jobs(as_json=args.json)


def cmd_jobs_logs(args: argparse.Namespace) -> int:
    from skyhive.runtime.managed.commands import job_log

    return job_log(args.job, follow=args.follow)


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    from skyhive.runtime.managed.commands import cancel_managed

    if not args.jobs and not args.all:
        _err("error: name the jobs to cancel, or --all")
        return 2
    if args.all and not args.yes and sys.stdin.isatty():
        sys.stderr.write("Cancel every managed job not finished? [Y/n] ")
        sys.stderr.flush()
        answer = sys.stdin.readline()
        if not answer or answer.strip().lower() not in ("", "y", "yes"):
            _err("aborted: nothing was cancelled")
            return 1
    return cancel_managed(args.jobs, all_jobs=args.all)


def _add_jobs_parsers(sub: argparse._SubParsersAction) -> None:
    from skyhive.runtime.commands.taskflags import add_task_flags

    jobs = sub.add_parser("jobs", help="managed jobs: run without the client, recover lost nodes (docs/jobs.md)")
    jsub = jobs.add_subparsers(dest="jobs_command", metavar="COMMAND", required=True)
    p = jsub.add_parser("launch", help="submit a task file as a managed job; returns once it is submitted")
    add_task_flags(p)
    # -n/--name (the task's flags, SkyPilot's spelling) names the job too (default: the task's name)
    p.add_argument("--max-restarts-on-errors", type=int, metavar="N", help="restarts after the program fails "
                   "(overrides resources.job_recovery.max_restarts_on_errors; lost nodes are not counted)")
    p.set_defaults(func=cmd_jobs_launch)
    p = jsub.add_parser("queue", help="managed jobs: state, attempts, recoveries")
    p.add_argument("--json", action="store_true", help="one JSON object per job")
    p.set_defaults(func=cmd_jobs_queue)
    p = jsub.add_parser("logs", help="a managed job's log (every attempt, recoveries marked)")
    p.add_argument("job", type=int, metavar="JOB")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.set_defaults(func=cmd_jobs_logs)
    p = jsub.add_parser("cancel", help="cancel managed jobs (their nodes are torn down)")
    p.add_argument("jobs", nargs="*", type=int, metavar="JOB")
    p.add_argument("-a", "--all", action="store_true", help="every job not finished")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask")
    p.set_defaults(func=cmd_jobs_cancel)


# ---- onto a named pool's nodes (docs/access.md) ------------------------------------------------------


def cmd_ssh(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.access import ssh_session

    command, node = list(args.command_args), args.node
    while command[:1] and command[0].startswith("--node"):  # `skyhive ssh NAME --node 1 -- CMD`
        flag = command.pop(0)
        value = flag.partition("=")[2] or (command.pop(0) if command else "")
        if not value.isdigit():
            _err(f"error: --node wants a node number, not {value!r}")
            return 2
        node = int(value)
    if command[:1] == ["--"]:
        command = command[1:]
    return ssh_session(args.name, node=node, command=command or None)


def cmd_forward(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.access import forward

    return forward(args.name, args.ports, node=args.node)


def cmd_ssh_config(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.access import ssh_config

    return ssh_config(args.name, install=args.install, remove=args.remove, yes=args.yes)


def _confirm(args: argparse.Namespace, question: str) -> bool:
    """True with -y or off a terminal; else the user's answer (the default is yes, as SkyPilot's)."""
    if args.yes or not sys.stdin.isatty():
        return True
    sys.stderr.write(f"{question} [Y/n] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    return bool(answer) and answer.strip().lower() in ("", "y", "yes")


def cmd_stop(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.pause import stop_cluster

    if not _confirm(args, f"Stop pool(s) {', '.join(args.names)} (its workers end, the machines and disks stay)?"):
        _err("aborted: nothing was stopped")
        return 1
    for name in args.names:
        stop_cluster(name)
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.pause import start_cluster

    if not _confirm(args, f"Start pool(s) {', '.join(args.names)} again?"):
        _err("aborted: nothing was started")
        return 1
    for name in args.names:
        start_cluster(name)
    return 0


def _add_access_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stop", help="stop a named pool: its workers end; a cloud pool's instances stop, disks kept")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask")
    p.set_defaults(func=cmd_stop)

    p = sub.add_parser("start", help="start a stopped named pool again (a cloud pool: the same instances)")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask")
    p.set_defaults(func=cmd_start)

    p = sub.add_parser("ssh", help="a shell (or a command) on a node of a named pool, in its job's directory")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--node", type=int, default=0, help="which node (default: 0, the head)")
    p.add_argument("command_args", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="run this instead of a shell")
    p.set_defaults(func=cmd_ssh)

    p = sub.add_parser("forward", help="reach a port of a named pool's node from 127.0.0.1 here (through SSH)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("ports", metavar="REMOTE_PORT[:LOCAL_PORT]")
    p.add_argument("--node", type=int, default=0, help="which node (default: 0, the head)")
    p.set_defaults(func=cmd_forward)

    p = sub.add_parser("ssh-config", help="named pools' SSH entries; --install adds their Include to ~/.ssh/config")
    p.add_argument("name", nargs="?", metavar="NAME")
    p.add_argument("--install", action="store_true", help="add skyhive's Include line at the top of ~/.ssh/config")
    p.add_argument("--remove", action="store_true", help="take skyhive's Include line out of ~/.ssh/config")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask")
    p.set_defaults(func=cmd_ssh_config)


# ---- pools -------------------------------------------------------------------------------------------


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
                "host": e.state.host, "started": e.state.started, "stopped": e.state.stopped or None,
                "nodes": [n.state for n in e.state.nodes], "error": e.state.error, "log": str(e.path),
                "replaced": {str(n.node): list(n.replaced_ids) for n in e.state.nodes if n.replaced_ids} or None,
                "dropped": {str(n.node): n.dropped for n in e.state.nodes if n.dropped} or None,
                "provider_holds": owned[e.pool_id] or None,
                "machine": e.machine or None, "cost": e.cost(now),
                "leaked": list(e.state.leaked) or None,  # status "leaking": what the provider did not confirm gone
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
        age = _age(now - e.state.started) if e.state.started else "-"
        cost = e.cost(now)
        spent = f"${cost[0]:.4g}/h, ${cost[1]:.2f} so far" if cost else "-"
        provider = e.state.provider or "-"
        if owned[e.pool_id]:
            provider += f" ({owned[e.pool_id]})"
        table.add_row(e.pool_id, provider, _nodes([n.state for n in e.state.nodes], e.state.replacements,
                                                      sum(1 for n in e.state.nodes if n.dropped)), status, age,
                      e.machine or "-", spent)
    Console(width=None if sys.stdout.isatty() else 400, highlight=False).print(table)
    return 0


def _ask(prompt: str) -> str:
    sys.stderr.write(prompt)
    sys.stderr.flush()
    return sys.stdin.readline()


def cmd_down(args: argparse.Namespace) -> int:
    from skyhive.runtime.events.inventory import PoolInUse, down, find, scan

    if args.all == bool(args.pools):
        _err("error: give pool ids, or --all")
        return 2
    code = 0
    if not args.all:  # named pools: their workers, agent and record
        from skyhive.runtime.commands.clusters import down_cluster
        from skyhive.runtime.commands.jobs import is_named

        named = [p for p in args.pools if is_named(p)]
        for name in named:
            down_cluster(name, force=args.force, accept_host_keys=args.accept_host_key or (),
                         ask=_ask if args.force and sys.stdin.isatty() else None)
        args.pools = [p for p in args.pools if p not in named]
        if not args.pools:
            return 0
    entries = scan() if args.all else [find(p) for p in args.pools]
    for entry in entries:
        try:
            report = down(entry, force=args.force)
        except PoolInUse as exc:
            _err(str(exc))
            code = 1
            continue
        except Exception as exc:  # one pool's failure (an unreachable host) must not stop the others
            _err(f"error: {getattr(entry, 'pool_id', entry)}: {exc}")
            code = 1
            continue
        if report.warning:
            _err(f"warning: {report.pool_id}: {report.warning}")
        if report.already_stopped:
            print(f"{report.pool_id}: already stopped")
        else:
            print(f"{report.pool_id}: stopped ({report.killed} leftover processes killed, "
                  f"{report.destroyed} provider nodes destroyed)")
    if args.all and not entries:
        print("no pools to clean up")
    return code


def _follow(args: argparse.Namespace, on_lines: Callable[[list[str]], bool]) -> int:
    """Feed the pool log's complete lines to `on_lines` (True = the pool stopped); with --follow, keep at it."""
    from skyhive.runtime.events.inventory import LogTail, client_of, find

    entry = find(args.pool)
    tail = LogTail(entry.path)
    stopped = on_lines(tail.lines())
    quiet = 0.0
    try:
        while args.follow and not stopped:
            time.sleep(0.25)
            lines = tail.lines()
            stopped = on_lines(lines)
            quiet = 0.0 if lines else quiet + 0.25
            if quiet >= 2.0 and not stopped:  # nothing new for a while: is anyone still writing?
                quiet = 0.0
                entry = find(args.pool) if entry.started is None else entry
                if entry.started is not None and client_of(entry.started) == "gone":
                    _err(f"the client of pool {entry.pool_id} (pid {entry.started.pid}) is gone; "
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
    from skyhive.runtime.commands.jobs import is_named, job_logs
    from skyhive.runtime.events.types import OutputCapped, OutputChunk, PoolStopped, from_json

    if args.status or args.sync_down:  # SkyPilot's forms, for a named pool's jobs
        from skyhive.runtime.commands.jobs import job_status, sync_down

        return job_status(args.pool, args.job) if args.status else sync_down(args.pool, args.job)
    if is_named(args.pool) and (args.job is not None or _has_jobs(args.pool)):
        return job_logs(args.pool, args.job, follow=args.follow)
    if args.job is not None:
        _err(f"error: {args.pool} is not a named pool: it has no jobs (`skyhive logs {args.pool}` shows its output)")
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


def cmd_check(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.check import CLOUDS, report

    return report(sys.stdout, tuple(args.clouds) if args.clouds else CLOUDS)


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
        _err(f"error: {exc}")
        return 1


# ---- main --------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="skyhive",
                                     description="Run Python functions and tasks on a pool of machines.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    _add_log_flags(parser, default=None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from skyhive.runtime.commands.taskflags import add_task_flags

    p = sub.add_parser("launch", help="run a task file (SkyPilot-style YAML) on a new pool")
    add_task_flags(p)  # the task options SkyPilot users type (runtime/commands/taskflags.py)
    p.set_defaults(func=cmd_launch)
    _add_cluster_parsers(sub, p)
    _add_access_parsers(sub)

    p = sub.add_parser("show-gpus", help="accelerators the clouds offer: count, instance type, hourly price")
    p.add_argument("accelerator", nargs="?", metavar="NAME[:COUNT]", help="only this accelerator (e.g. A100, A100:8)")
    p.add_argument("--cloud", help="only this cloud")
    p.add_argument("--region", help="prices in this region (default: each cloud's default region)")
    p.add_argument("--all-regions", action="store_true", help="one row per region that offers it")
    p.add_argument("--json", action="store_true", help="one JSON object per row")
    p.set_defaults(func=cmd_show_gpus)

    p = sub.add_parser("ls", help="list pools from their event logs")
    p.add_argument("-a", "--all", action="store_true", help="include stopped pools")
    p.add_argument("--json", action="store_true", help="one JSON object per pool")
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser("down", help="clean up pools whose client is gone")
    p.add_argument("pools", nargs="*", metavar="POOL")
    p.add_argument("-a", "--all", action="store_true", help="every pool that is not stopped")
    p.add_argument("--force", action="store_true", help="also pools whose client still runs; a named SSH pool "
                   "whose host key changed: choose per host by fingerprint (asked on a terminal)")
    p.add_argument("--accept-host-key", action="append", metavar="FINGERPRINT",
                   help="with --force, after a host-key change: the host's new key's fingerprint (trust it, stop "
                        "the pool there) or the recorded one (its machine is gone: forget the host)")
    p.add_argument("-y", "--yes", action="store_true", help="SkyPilot's: down asks nothing")
    p.set_defaults(func=cmd_down)

    p = sub.add_parser("logs", help="the output a pool's tasks wrote (a named pool: a job's log)")
    p.add_argument("pool", metavar="POOL")
    p.add_argument("job", nargs="?", type=int, metavar="JOB", help="a named pool's job (default: the latest)")
    p.add_argument("--node", type=int, help="only this node's output (without prefixes)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the pool stops")
    p.add_argument("--status", action="store_true", help="a named pool's job: print its state, exit 0 "
                   "succeeded, 100 failed, 101 not finished, 102 no such job, 103 cancelled")
    p.add_argument("--sync-down", action="store_true", help="a named pool's job logs (all, or JOB) copied to "
                   "~/sky_logs/POOL/")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("events", help="the raw JSONL event log of a pool")
    p.add_argument("pool", metavar="POOL")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the pool stops")
    p.set_defaults(func=cmd_events)

    _add_jobs_parsers(sub)

    p = sub.add_parser("check", help="per cloud: credentials found? vCPU quotas (where the API says)")
    p.add_argument("clouds", nargs="*", metavar="CLOUD", help="aws, gcp, azure, digitalocean (default: all)")
    p.set_defaults(func=cmd_check)

    from skyhive.runtime.commands.storage import add_parser as add_storage_parser

    add_storage_parser(sub)  # `storage ls/delete` (runtime/commands/storage.py)

    p = sub.add_parser("timeline", help="draw a pool's per-node Gantt chart")
    p.add_argument("pool", metavar="POOL")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="FILE.png or FILE.html")
    p.set_defaults(func=cmd_timeline)
    p = sub.add_parser("dashboard", help="a local web dashboard: pools, nodes, jobs, live logs, the timeline")
    p.add_argument("--port", type=int, metavar="P", help="port on 127.0.0.1 (default 8765, or a free one; 0: any)")
    p.add_argument("--open", action="store_true", help="open it in the web browser")
    p.set_defaults(func=cmd_dashboard)

    for p in sub.choices.values():  # also after the command: `skyhive launch t.yaml -v`
        _add_log_flags(p, default=argparse.SUPPRESS)
    return parser


def _add_log_flags(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument("-v", "--verbose", action="count", default=default,
                        help="say more: -v shows skyhive's INFO log lines, -vv DEBUG")
    parser.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), type=str.upper, default=default,
                        help="the level of skyhive's log lines on stderr (default WARNING, or $SKYHIVE_LOG_LEVEL)")


def _log_level(args: argparse.Namespace) -> int:
    """--log-level, else -v/-vv, else $SKYHIVE_LOG_LEVEL, else WARNING."""
    import os

    if args.log_level:
        return int(getattr(logging, args.log_level))
    if args.verbose:
        return logging.INFO if args.verbose == 1 else logging.DEBUG
    env = os.environ.get("SKYHIVE_LOG_LEVEL", "").strip().upper()
    return int(getattr(logging, env)) if env in ("DEBUG", "INFO", "WARNING", "ERROR") else logging.WARNING


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.version:
        from skyhive import __version__

        print(__version__)
        return 0
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    logging.basicConfig(level=_log_level(args), format="skyhive: %(message)s")
    from skyhive.protocol.errors import SkyhiveError
    from skyhive.runtime.commands.taskfile import TaskFileError

    try:
        return int(args.func(args))
    except TaskFileError as exc:
        _err(f"error: {exc}")
        return 2
    except BrokenPipeError:
        return 0
    except (SkyhiveError, OSError, ValueError, RuntimeError, LookupError) as exc:
        _err(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130
