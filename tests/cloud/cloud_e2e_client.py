"""The client side of the end-to-end cloud test, run inside a namespace host that has no default route
(so no packet can reach moto's invented addresses): a sky.AWS pool on in-process moto whose instances
are mapped to the test's own sshd hosts; it broadcasts, runs DDP, leaves, and prints what it saw as JSON.

    python -m tests.cloud.cloud_e2e_client CONFIG_JSON
"""

from __future__ import annotations

import json
import os
import socket
import sys

import anyio

import skyhive as sky
from skyhive.providers.cloud.base import CloudTimeouts
from tests.cloud.cloud_fakes import HostMappedAWS
from tests.infra.moto_ec2 import count_pool, register_image
from tests.kinds.ssh.test_ssh_torch import LocalPackages, train_ddp


def routes() -> list[str]:
    """Destinations of this namespace's IPv4 routes (hex, as in /proc/net/route)."""
    with open("/proc/net/route") as fh:
        return [line.split()[1] for line in fh.read().splitlines()[1:] if line.strip()]


def where() -> tuple[str, int, int, str]:
    """Where it ran, the pool's counter as this node left it and the directory of the socket it reached
    it by (sky.dict & co. reach cloud nodes too: forwarded through their SSH connection)."""
    return (socket.gethostname(), sky.instance_info().node, sky.counter("placed").increment(),
            os.path.dirname(os.environ["SKYHIVE_COLLECTIONS"]))


def markers_after(seconds: float, marker_dir: str) -> list[str]:
    """A long task: sleeps, then says which nodes' watchdogs fired meanwhile (none should have)."""
    import time

    time.sleep(seconds)
    return sorted(os.listdir(marker_dir))


def provider(config: dict, **kw) -> HostMappedAWS:
    return HostMappedAWS(region="us-east-1", instance_type="t3.micro", image=register_image(),
                         ssh_cidr="10.0.0.0/8", timeouts=CloudTimeouts(poll=0.05),
                         hosts=[tuple(h) for h in config["hosts"]], key=config["key"],
                         known_hosts=config["known_hosts"], **kw)


async def watchdog(config: dict) -> None:
    """A pool whose nodes' watchdogs run `touch MARKER_DIR/<hostname>` after `idle` s without a client:
    a task three times as long as that runs with the client connected (no node may fire), then the
    client waits to be killed."""
    from moto import mock_aws

    with mock_aws():
        idle, marker_dir = config["idle"], config["marker_dir"]
        aws = provider(config, idle_timeout=idle, shutdown_command=f'touch "{marker_dir}/$(hostname)"',
                       boot_limit_off=f'touch "{config["lifted_dir"]}/$(hostname)"')
        async with sky.Pool(provider=aws, nodes=2, name="p-watchdog", start_timeout=900) as pool:
            print("FIRED DURING LONG TASK:", json.dumps(await pool.broadcast(markers_after, 3 * idle, marker_dir)), flush=True)
            await anyio.sleep(3600)


async def main(config: dict) -> dict:
    from moto import mock_aws

    with mock_aws():
        aws = provider(config, idle_timeout=None, ready_command=f'touch "{config["marker_dir"]}/ready-$(hostname)"')
        plugins = [sky.plugins.torch(version="2.13.0"), LocalPackages()]
        async with sky.Pool(provider=aws, nodes=2, name="p-e2e", plugins=plugins, start_timeout=900) as pool:
            inside = count_pool("p-e2e")
            placed = await pool.broadcast(where)
            trained = await pool.broadcast(train_ddp, 3, timeout=300)
        return {"inside": inside, "after": count_pool("p-e2e"), "placed": [p[:2] for p in placed],
                "counted": sorted(p[2] for p in placed), "collections": [p[3] for p in placed],
                "world": [t[0] for t in trained], "heads": [t[1] for t in trained],
                "same_params": trained[0][2] == trained[1][2]}


if __name__ == "__main__":
    if "00000000" in routes():
        sys.exit("refusing to run: this namespace has a default route (moto's addresses could be reached)")
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}.items():
        os.environ[key] = value
    config = json.loads(sys.argv[1])
    if config.get("mode") == "watchdog":
        anyio.run(watchdog, config)
    else:
        print(json.dumps(anyio.run(main, config)))
