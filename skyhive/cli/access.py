"""Onto a named pool's nodes: `skyhive ssh`, `forward`, `ssh-config` (docs/access.md)."""

from __future__ import annotations

import argparse

from .common import err


def cmd_ssh(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.access import ssh_session

    command, node = list(args.command_args), args.node
    while command[:1] and command[0].startswith("--node"):  # `skyhive ssh NAME --node 1 -- CMD`
        flag = command.pop(0)
        value = flag.partition("=")[2] or (command.pop(0) if command else "")
        if not value.isdigit():
            err(f"error: --node wants a node number, not {value!r}")
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


def add_access_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ssh", help="a shell (or a command) on a node of a named pool, in its job's directory")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--node", type=int, default=0, help="which node (default: 0, the head)")
    p.add_argument("command_args", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="run this instead of a shell")
    p.set_defaults(func=cmd_ssh)

    p = sub.add_parser("forward", help="reach a port of a named pool's node from 127.0.0.1 here (through the node's "
                                       "access: SSH, another kind's exec)")
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
