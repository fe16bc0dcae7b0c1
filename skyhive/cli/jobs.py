"""`skyhive jobs launch|queue|logs|cancel`: managed jobs (docs/jobs.md)."""

from __future__ import annotations

import argparse
import sys

from .common import err


def cmd_jobs_launch(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.taskflags import task_from_args
    from skyhive.runtime.control.managed.commands import submit_job

    task = task_from_args(args)
    for warning in task.warnings:
        if "job_recovery" not in warning:  # managed jobs read it (max_restarts_on_errors)
            err(f"warning: {warning}")
    if args.dryrun:
        print("dry run: nothing was submitted")
        return 0
    job_id = submit_job(task, name=None, max_restarts_on_errors=args.max_restarts_on_errors)
    print(f"managed job {job_id} submitted (`skyhive jobs queue`, `skyhive jobs logs {job_id}`)")
    return 0


def cmd_jobs_queue(args: argparse.Namespace) -> int:
    from skyhive.runtime.control.managed.commands import print_jobs

    return print_jobs(as_json=args.json)


def cmd_jobs_logs(args: argparse.Namespace) -> int:
    from skyhive.runtime.control.managed.commands import job_log

    return job_log(args.job, follow=args.follow)  # following by default, as SkyPilot's `sky jobs logs`


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    from skyhive.runtime.control.managed.commands import cancel_managed

    if not args.jobs and not args.all:
        err("error: name the jobs to cancel, or --all")
        return 2
    if args.all and not args.yes and sys.stdin.isatty():
        sys.stderr.write("Cancel every managed job not finished? [Y/n] ")
        sys.stderr.flush()
        answer = sys.stdin.readline()
        if not answer or answer.strip().lower() not in ("", "y", "yes"):
            err("aborted: nothing was cancelled")
            return 1
    return cancel_managed(args.jobs, all_jobs=args.all)


def add_jobs_parsers(sub: argparse._SubParsersAction) -> None:
    from skyhive.runtime.commands.taskflags import add_task_flags

    jobs = sub.add_parser("jobs", help="managed jobs: run without the client, recover lost nodes (docs/jobs.md)")
    jsub = jobs.add_subparsers(dest="jobs_command", metavar="COMMAND", required=True)
    p = jsub.add_parser("launch", help="submit a task file as a managed job; returns once it is submitted")
    add_task_flags(p)
    # -n/--name (the task's flags, SkyPilot's spelling) names the job too (default: the task's name)
    p.add_argument("--async", dest="async_submit", action="store_true", help="SkyPilot's: submit without "
                   "tailing the log (what `skyhive jobs launch` always does)")
    p.add_argument("--max-restarts-on-errors", type=int, metavar="N", help="restarts after the program fails "
                   "(overrides resources.job_recovery.max_restarts_on_errors; lost nodes are not counted)")
    p.set_defaults(func=cmd_jobs_launch)
    p = jsub.add_parser("queue", help="managed jobs: state, attempts, recoveries")
    p.add_argument("--json", action="store_true", help="one JSON object per job")
    p.set_defaults(func=cmd_jobs_queue)
    p = jsub.add_parser("logs", help="a managed job's log (every attempt, recoveries marked)")
    p.add_argument("job", type=int, metavar="JOB")
    p.add_argument("-f", "--follow", action="store_true", default=True, help="keep printing until the job ends "
                   "(the default, as SkyPilot's)")
    p.add_argument("--no-follow", dest="follow", action="store_false", help="print what is there now and return")
    p.set_defaults(func=cmd_jobs_logs)
    p = jsub.add_parser("cancel", help="cancel managed jobs (their nodes are torn down)")
    p.add_argument("jobs", nargs="*", type=int, metavar="JOB")
    p.add_argument("-a", "--all", action="store_true", help="every job not finished")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask")
    p.set_defaults(func=cmd_jobs_cancel)
