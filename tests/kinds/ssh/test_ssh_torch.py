"""DDP with the torch plugin across two namespace hosts (gloo over their own addresses)."""

from __future__ import annotations

import importlib.util

import pytest

import skyhive as sky
from tests.kinds.ssh.test_ssh_pool import ssh_for

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                       reason="torch is not installed in the client venv (pip install torch==2.13.0)"),
]

#: What this machine's root pip configuration points at; the test user does not get it (TESTBED.md).
LOCAL_INDEX = "file:///opt/pypi/simple"
LOCAL_WHEELS = "/opt/wheels"


class LocalPackages:
    """A plugin that installs from this machine's package index and wheel directory only."""

    def transform(self, image, pool):
        return image.replace(pip_indexes=[LOCAL_INDEX], find_links=[LOCAL_WHEELS])


def train_ddp(steps: int):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    info = sky.instance_info()
    torch.manual_seed(100 + info.rank)  # different initial weights: DDP has to make them equal
    model = torch.nn.Linear(8, 2)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(info.rank)  # and different data on each rank
    for _ in range(steps):
        x, y = torch.randn(16, 8, generator=gen), torch.randn(16, 2, generator=gen)
        opt.zero_grad()
        ((ddp(x) - y) ** 2).mean().backward()
        opt.step()
    return dist.get_world_size(), info.head_addr, [p.detach().tolist() for p in model.parameters()]


async def test_ddp_across_two_namespace_hosts_ends_with_identical_parameters(make_netns_hosts):
    # one home for both hosts (the system one): the torch environment is built once, under a lock,
    # and kept for the next run (a warm host)
    hosts = make_netns_hosts(2, per_host_home=False)
    plugins = [sky.plugins.torch(version="2.13.0"), LocalPackages()]
    async with sky.Pool(provider=ssh_for(hosts), nodes=2, plugins=plugins, start_timeout=900) as pool:
        results = await pool.broadcast(train_ddp, 5, timeout=300)
    (w0, head0, p0), (w1, head1, p1) = results
    assert w0 == w1 == 2 and head0 == head1 == hosts[0].address
    assert p0 == p1
