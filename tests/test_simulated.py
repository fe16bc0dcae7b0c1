"""sky.Simulated: fake nodes whose workers run the real worker-side logic in the client's loop."""

from __future__ import annotations

import pytest

import skyhive as sky
from skyhive.providers.simulated import SimulatedReach
from skyhive.runtime.transport.memory import live_workers

pytestmark = pytest.mark.anyio


def whoami(tag):
    info = sky.instance_info()
    return info.node, info.total_nodes, tag


def double(x):
    return 2 * x


async def test_a_thousand_node_pool_up_broadcast_map_teardown():
    async with sky.Pool(provider=sky.Simulated(), nodes=1000) as pool:
        results = await pool.broadcast(whoami, "t")
        assert results == [(i, 1000, "t") for i in range(1000)]
        out = await pool.map(double, range(100_000))
        assert out == [2 * x for x in range(100_000)]
        assert live_workers() == 1000
    assert live_workers() == 0  # nothing left: every in-process worker has exited


async def test_a_task_error_on_a_simulated_node_comes_back_with_its_type():
    def boom():
        raise KeyError("nope")

    async with sky.Pool(provider=sky.Simulated(), nodes=3) as pool:
        with pytest.raises(KeyError, match="nope"):
            await pool.run(boom)


def test_bad_configuration_is_refused_naming_it():
    with pytest.raises(ValueError, match="stage 'later' is not one of"):
        sky.Simulated(fail={3: "later"})
    with pytest.raises(ValueError, match="delay"):
        sky.Simulated(delay=-1)
    assert SimulatedReach.kind == "simulated"


async def test_a_worker_that_dies_mid_broadcast_raises_worker_lost_naming_its_node():
    async with sky.Pool(provider=sky.Simulated(die_at={7: 0}), nodes=20) as pool:
        with pytest.raises(sky.WorkerLost) as info:
            await pool.broadcast(whoami, "t")
        assert "7" in str(info.value)


async def test_a_node_failing_at_launch_fails_the_pool_naming_it():
    with pytest.raises(sky.ProvisionError, match="simulated node 4 failed at launch"):
        async with sky.Pool(provider=sky.Simulated(fail={4: "launch"}), nodes=10):
            pass
