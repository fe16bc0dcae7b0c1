"""Several worker processes per node: ranks, local ranks, every process a slot, and DDP across them."""

from __future__ import annotations

import hashlib
import os

import pytest

import skyhive as sky

pytestmark = pytest.mark.anyio


def where():
    info = sky.instance_info()
    return (info.node, info.local_rank, info.rank, info.world_size, info.processes_per_node, os.getpid())


def slot(_):
    info = sky.instance_info()
    return (info.node, info.local_rank)


async def test_each_process_has_its_rank_and_every_process_is_a_slot():
    async with sky.Pool(provider=sky.Local(), nodes=2, processes_per_node=2) as pool:
        seen = await pool.broadcast(where)
        used = set(await pool.map(slot, range(64), chunksize=1))
    assert [s[:5] for s in seen] == [(0, 0, 0, 4, 2), (0, 1, 1, 4, 2), (1, 0, 2, 4, 2), (1, 1, 3, 4, 2)]
    assert len({s[5] for s in seen}) == 4  # four processes
    assert used == {(0, 0), (0, 1), (1, 0), (1, 1)}


def ddp_step():
    """Two DDP steps on data that differs per rank; returns this rank's view and a parameter hash."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = dist.get_rank()
    torch.manual_seed(rank)  # different initial weights: DDP must broadcast rank 0's
    model = DDP(torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        x = torch.randn(16, 8) + rank  # different data on every rank
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    params = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    names = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")
    return {"rank": rank, "world": dist.get_world_size(), "env": tuple(os.environ[n] for n in names),
            "params": hashlib.sha256(params).hexdigest()}


@pytest.mark.slow
async def test_ddp_on_two_nodes_of_two_processes():
    pytest.importorskip("torch")
    async with sky.Pool(provider=sky.Local(), nodes=2, processes_per_node=2,
                        plugins=[sky.plugins.torch()]) as pool:
        results = await pool.broadcast(ddp_step)
    assert [(r["rank"], r["world"]) for r in results] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    # (WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK) per process, in rank order
    assert [r["env"] for r in results] == [
        ("4", "0", "0", "2", "0"), ("4", "1", "1", "2", "0"), ("4", "2", "0", "2", "1"), ("4", "3", "1", "2", "1"),
    ]
    assert len({r["params"] for r in results}) == 1
