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
arguments and prints (a module per group of commands). Exit codes: 0 success, 1 failure, 2 bad usage or a malformed task file;
`launch` exits with the first failing node's code (130 after Ctrl-C).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import NoReturn

from . import access, cost, jobs, launch, observe, pools, volumes
from .common import err

__all__ = ["main"]


#: SkyPilot verbs skyhive spells otherwise: (the skyhive command to suggest, or None) and a note
SKYPILOT_VERBS: dict[str, tuple[str | None, str]] = {
    "spot": ("jobs", "SkyPilot's managed spot jobs are `skyhive jobs launch|queue|logs|cancel`"),
    "gpunode": ("launch -c NAME --gpus NAME:COUNT", ""), "cpunode": ("launch -c NAME", ""),
    "tpunode": ("launch -c NAME", ""),
    "serve": (None, "skyhive has no serving: it runs tasks and functions (`skyhive launch`, `skyhive jobs launch`)"),
    "api": (None, "skyhive has no API server: every command runs here, on this machine"),
}


class _Parser(argparse.ArgumentParser):
    """argparse, whose unknown sub-command names the nearest spelling (argparse's own error is a bare
    "invalid choice" and the list of every command)."""

    #: `--hosts` was on the command line: a missing task is most likely a command it took as hosts
    hosts_given = False

    def error(self, message: str) -> NoReturn:
        if self.hosts_given and "required: TASK.yaml|COMMAND" in message:
            message += (" (--hosts takes every word up to the next option: write the task before --hosts, or "
                        "end the hosts with `--`: `--hosts H1 H2 -- COMMAND`)")
        super().error(message)

    def _check_value(self, action: argparse.Action, value: object) -> None:
        if isinstance(action, argparse._SubParsersAction) and value not in (action.choices or {}):
            raise argparse.ArgumentError(None, unknown_command(self.prog, str(value), list(action.choices or {})))
        super()._check_value(action, value)


def unknown_command(prog: str, text: str, choices: list[str]) -> str:
    """The error for `prog TEXT` where TEXT is no command: the nearest spelling (or what SkyPilot's verb
    is here), then where the list is."""
    import difflib

    suggest, note = SKYPILOT_VERBS.get(text, (None, "")) if prog == "skyhive" else (None, "")
    if suggest is None and not note:
        near = difflib.get_close_matches(text, choices, n=1, cutoff=0.5)
        suggest = near[0] if near else next((c for c in choices if c.startswith(text[:3])), None) if text[:3] else None
    said = f"unknown command {text!r}"
    if suggest is not None:
        said += f"; did you mean `{prog} {suggest}`?"
    if note:
        said += f" ({note})" if suggest is not None else f": {note}"
    return said + f" (`{prog} --help` lists the commands)"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="skyhive",
                                     description="Run Python functions and tasks on a pool of machines.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    _add_log_flags(parser, default=None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # the order of `skyhive --help`
    launch_parser = launch.add_launch_parser(sub)
    pools.add_cluster_parsers(sub, launch_parser)
    pools.add_stop_start_parsers(sub)
    access.add_access_parsers(sub)
    launch.add_show_gpus_parser(sub)
    pools.add_inventory_parsers(sub)
    observe.add_log_parsers(sub)
    jobs.add_jobs_parsers(sub)
    launch.add_check_parser(sub)
    cost.add_cost_parser(sub)  # `cost-report` (runtime/commands/cost.py)
    volumes.add_volumes_parsers(sub)  # `volumes ls/delete` (runtime/commands/volumes.py)

    from skyhive.runtime.commands.storage import add_parser as add_storage_parser

    add_storage_parser(sub)  # `storage ls/delete` (runtime/commands/storage.py)
    observe.add_view_parsers(sub)

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
    from skyhive.runtime.commands.taskflags import task_before_hosts

    argv = task_before_hosts(sys.argv[1:] if argv is None else list(argv))
    _Parser.hosts_given = "--hosts" in argv
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
        err(f"error: {exc}")
        return 2
    except BrokenPipeError:
        return 0
    except (SkyhiveError, OSError, ValueError, RuntimeError, LookupError) as exc:
        err(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130
