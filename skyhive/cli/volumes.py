"""`skyhive volumes ls [--json]` and `skyhive volumes delete NAME... [-y]` (`runtime/commands/volumes.py`)."""

from __future__ import annotations

import argparse
import dataclasses
import json

from .common import confirm, err, table


def cmd_volumes_ls(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.volumes import volume_rows

    rows = volume_rows()
    if args.json:
        for row in rows:
            print(json.dumps(dataclasses.asdict(row)))
        return 0
    if not rows:
        print("no volumes (a task's `volumes:` makes one on its first launch; docs/volumes.md)")
        return 0
    print("\n".join(table(("NAME", "CLOUD", "REGION", "ZONE", "ID", "SIZE", "STATE", "ATTACHED TO"),
                          [(r.name, r.cloud, r.region, r.zone, r.volume_id, f"{r.size_gb} GB", r.state,
                            r.attached_to or "-") for r in rows])))
    return 0


def cmd_volumes_delete(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.volumes import delete_volumes

    if not confirm(args, f"Delete volume{'s' if len(args.names) > 1 else ''} {', '.join(args.names)} and its data?"):
        err("aborted: nothing was deleted")
        return 1
    for line in delete_volumes(args.names):
        print(line)
    return 0


def add_volumes_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("volumes", help="persistent volumes: ls, delete (only `delete` ever deletes one)")
    vsub = p.add_subparsers(dest="volumes_command", metavar="COMMAND", required=True)
    ls = vsub.add_parser("ls", help="every volume made from this state directory, as its cloud lists it")
    ls.add_argument("--json", action="store_true", help="one JSON object per volume")
    ls.set_defaults(func=cmd_volumes_ls)
    rm = vsub.add_parser("delete", help="delete volumes and their data")
    rm.add_argument("names", nargs="+", metavar="NAME")
    rm.add_argument("-y", "--yes", action="store_true", help="do not ask")
    rm.set_defaults(func=cmd_volumes_delete)
