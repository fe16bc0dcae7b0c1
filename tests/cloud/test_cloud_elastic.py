"""An elastic sky.AWS pool (moto, in a loopback-only namespace; issue 40, done-when 2): `nodes=(1, 3)` creates
instances while tasks wait, never more than 3, terminates them once idle, and leaves nothing."""

from __future__ import annotations

import pathlib

import anyio
import pytest

import skyhive as sky
from skyhive.runtime.events.log import pool_log_path, read_log
from skyhive.runtime.events.types import NodeScaled
from tests.cloud.test_cloud_pool import provider
from tests.infra.moto_ec2 import count_pool
from tests.pool.test_elastic import held

pytestmark = [pytest.mark.loopback_only, pytest.mark.anyio]


async def test_an_elastic_aws_pool_creates_and_terminates_instances_within_its_range(moto_ec2, tmp_path: pathlib.Path):
    name = "p-elastic"
    peak = 0

    async def until(what: str, condition) -> None:
        nonlocal peak
        with anyio.fail_after(180):  # a loaded machine: generous, waited on a condition
            while True:
                peak = max(peak, count_pool(name)["instances"])
                if condition():
                    return
                await anyio.sleep(0.05)

    async with sky.Pool(provider=provider(moto_ec2), nodes=(1, 3), autoscale_idle_timeout=1, name=name,
                        output=None) as pool:
        assert count_pool(name)["instances"] == 1
        results: list[tuple[int, int]] = []

        async def one(i: int) -> None:
            results.append(await pool.run(held, i, str(tmp_path)))

        async with anyio.create_task_group() as tg:
            for i in range(4):  # one more than max: it waits in the queue for a node to be free
                tg.start_soon(one, i)
            await until("3 tasks running", lambda: len(list(tmp_path.glob("started-*"))) == 3)
            assert pool.current_nodes() == 3 and count_pool(name)["instances"] == 3
            (tmp_path / "release").write_text("")
        assert sorted(i for i, _ in results) == [0, 1, 2, 3]
        await until("back to 1 node", lambda: pool.current_nodes() == 1 and count_pool(name)["instances"] == 1)
        assert await pool.broadcast(sky.instance_info) and pool.current_nodes() == 1
    assert peak == 3
    assert count_pool(name) == {"instances": 0, "groups": 0, "keys": 0}
    changes = [(e.change, e.node) for e in read_log(pool_log_path(name)) if isinstance(e, NodeScaled)]
    assert sorted(changes) == [("grow", 1), ("grow", 2), ("shrink", 1), ("shrink", 2)], changes
