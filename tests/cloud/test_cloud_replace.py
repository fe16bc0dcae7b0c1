"""`Pool(replace_failed=True)` on a cloud provider (sky.AWS against moto, in a loopback-only namespace):
the lost node's instance is terminated and a new instance launched for the same index, tagged like the
others; nothing is left at the end. Instances are mapped to local workers by `LocalMappedAWS` (a
labelled fake reach: moto's addresses are invented and never connected to)."""

from __future__ import annotations

import os
import signal

import anyio
import pytest

import skyhive as sky
from tests.infra.moto_ec2 import count_pool
from tests.cloud.test_cloud_pool import provider

pytestmark = [pytest.mark.loopback_only, pytest.mark.anyio]


def where() -> tuple[int, int]:
    return sky.instance_info().node, os.getpid()


async def test_a_lost_cloud_node_is_terminated_and_a_new_instance_takes_its_index(moto_ec2):
    aws = provider(moto_ec2)
    async with sky.Pool(provider=aws, nodes=2, name="p-repl", replace_failed=True, output=None) as pool:
        rt = pool._runtime
        before = await pool.broadcast(where)
        old_id = rt.log.state.nodes[1].provider_id
        os.kill(before[1][1], signal.SIGKILL)
        with anyio.fail_after(60):
            while not (rt.log.state.nodes[1].replacements == 1 and rt.log.state.nodes[1].state == "ready"):
                await anyio.sleep(0.05)
        after = await pool.broadcast(where)
        assert [n for n, _ in after] == [0, 1] and after[1][1] != before[1][1]
        record = rt.log.state.nodes[1]
        assert record.replaced_ids == (old_id,) and record.provider_id not in ("", old_id)
        assert count_pool("p-repl")["instances"] == 2  # the lost one is gone, its replacement runs
        owned = {h.provider_id for h in await aws.list_owned("p-repl")}
        assert owned == {rt.log.state.nodes[0].provider_id, record.provider_id}
    assert count_pool("p-repl") == {"instances": 0, "groups": 0, "keys": 0}
