"""`skyhive launch` (a task on a new pool, or a named one with -c), `show-gpus` and `check`."""

from __future__ import annotations

import argparse
import json
import sys

from .common import err, table


def cmd_launch(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.launch import run_launch
    from skyhive.runtime.commands.plan import plan_launch
    from skyhive.runtime.commands.taskflags import task_from_args

    if args.cluster is not None:  # `-c ''` too is refused, naming the rule: never an unnamed pool instead
        from skyhive.runtime.clusters.record import check_name

        check_name(args.cluster)
    task = task_from_args(args)
    for warning in task.warnings:
        err(f"warning: {warning}")
    if args.cluster is None and (args.detach_run or args.idle_minutes is not None or args.down):
        err("error: -d, -i and --down apply to a named pool: add -c NAME")
        return 2
    plan = plan_launch(task)  # resources the provider cannot honour, or no machine that fits: an error here
    if args.dryrun:
        print("\n".join(plan.lines))
        print("dry run: nothing was created")
        return 0
    if not args.yes and not sys.stdin.isatty() and plan.plan.get("order") == "price":
        # no provider was named: the cloud was chosen here, by price — never create billed machines on a
        # cloud nobody named without a person's yes (a terminal's prompt) or an explicit -y
        err("error: no provider was named, so the cheapest cloud would be chosen for you; with no terminal to "
             "ask on, pass -y to accept it or name one with --provider (see `skyhive launch --dryrun`)")
        return 2
    if not args.yes and sys.stdin.isatty():
        sys.stderr.write("\n".join(plan.lines) + "\nProceed? [Y/n] ")
        sys.stderr.flush()
        answer = sys.stdin.readline()  # "" is end of input (Ctrl-D): no; an empty line is the default, yes
        if not answer or answer.strip().lower() not in ("", "y", "yes"):
            err("aborted: nothing was created")
            return 1
    if args.cluster is not None:  # a named pool (docs/clusters.md)
        from skyhive.runtime.commands.clusters import launch_cluster

        if plan.plan.get("warning"):  # asked of a machine that lacks it (Local's GPUs): it runs without
            err(f"warning: {plan.plan['warning']}")

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
    for line in table(("GPU", "QTY", "CLOUD", "INSTANCE_TYPE", "vCPUs", "MEMORY", "$/h", "REGION"), rows):
        print(line)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.check import CHECKED, report

    return report(sys.stdout, tuple(args.clouds) if args.clouds else CHECKED)


def add_launch_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`launch` (its named-pool flags are added by `pools.add_cluster_parsers`)."""
    from skyhive.runtime.commands.taskflags import add_task_flags

    p = sub.add_parser("launch", help="run a task file (SkyPilot-style YAML) on a new pool")
    add_task_flags(p)  # the task options SkyPilot users type (runtime/commands/taskflags.py)
    p.set_defaults(func=cmd_launch)
    return p


def add_show_gpus_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("show-gpus", help="accelerators the clouds offer: count, instance type, hourly price")
    p.add_argument("accelerator", nargs="?", metavar="NAME[:COUNT]", help="only this accelerator (e.g. A100, A100:8)")
    p.add_argument("--cloud", help="only this cloud")
    p.add_argument("--region", help="prices in this region (default: each cloud's default region)")
    p.add_argument("--all-regions", action="store_true", help="one row per region that offers it")
    p.add_argument("--json", action="store_true", help="one JSON object per row")
    p.set_defaults(func=cmd_show_gpus)


def add_check_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="per cloud: credentials found? vCPU quotas (where the API says)")
    p.add_argument("clouds", nargs="*", metavar="CLOUD", help="aws, gcp, azure, digitalocean (default: all)")
    p.set_defaults(func=cmd_check)
