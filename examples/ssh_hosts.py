"""Run functions on your own machines over SSH.

    python examples/ssh_hosts.py --key ~/.ssh/id_ed25519 --known-hosts ~/.ssh/known_hosts me@10.0.0.2 me@10.0.0.3

Each host needs sshd and a Python of this client's major.minor version (python3.X on the PATH, or
--python). The first run ships skyhive to the hosts and builds the environment under ~/.skyhive; the
next one finds it there and starts in about a second.
"""

from __future__ import annotations

import argparse
import asyncio
import socket

import skyhive as sky


def where_am_i() -> tuple[str, int, str]:
    info = sky.instance_info()
    return socket.gethostname(), info.node, info.head_addr


def square(x: int) -> int:
    return x * x


async def main(argv: list[str] | None = None) -> list[tuple[str, int, str]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hosts", nargs="+", help="host, user@host or user@host:port")
    ap.add_argument("--key", help="private key file")
    ap.add_argument("--known-hosts", help="known_hosts file to check host keys against")
    ap.add_argument("--python", help="the Python on the hosts")
    args = ap.parse_args(argv)
    provider = sky.SSH(hosts=args.hosts, key=args.key, known_hosts=args.known_hosts, python=args.python)
    image = sky.Image(env={"GREETING": "hello from skyhive"})
    async with sky.Pool(provider=provider, nodes=len(args.hosts), image=image) as pool:
        places = await pool.broadcast(where_am_i)
        for host, node, head in places:
            print(f"node {node} runs on {host} (head: {head})")
        print("squares:", await pool.map(square, range(10)))
    return places


if __name__ == "__main__":
    asyncio.run(main())
