"""Issue 40, point 4: a fractional accelerator in Python (`sky.accelerators.L4(count=0.5)`) means what the
task file's `T4:0.5` means: a share of one device; the node under it has one whole device."""

from __future__ import annotations

import pytest

import skyhive as sky
from skyhive.runtime.commands.values import parse_accelerators


def test_a_share_of_a_gpu_in_python_is_the_task_files_share():
    half = sky.accelerators.L4(count=0.5)  # the program: `sky.accelerators.L4(count=0.5)`
    assert half.count == 0.5 and half.fractional and half.devices == 1 and str(half) == "L4:0.5"
    assert str(sky.accelerators.parse("L4:0.5")) == str(half) and half == "L4:0.5"  # as a task file spells it
    assert (half.per_node().name, half.per_node().count) == parse_accelerators("L4:0.5")  # ("L4", 1)
    assert sky.accelerators.A100(count=2.0).count == 2  # a whole float is that many devices
    pool = sky.Pool(provider=sky.Simulated(), accelerator=half)
    assert pool.accelerator == half


def test_a_cloud_prices_a_share_as_one_whole_device():
    aws = sky.AWS(region="us-east-1")
    one = sky.ComputePool(sky.Spec(provider=aws, accelerator=sky.accelerators.L4()), selection="cheapest")
    half = sky.ComputePool(sky.Spec(provider=aws, accelerator=sky.accelerators.L4(count=0.5)), selection="cheapest")
    assert half.accelerator.count == 0.5 and one.accelerator.count == 1
    from skyhive.providers.base import ClusterSpec

    asked = ClusterSpec(pool_id="plan", nodes=1, **{"accelerator": half.resources["accelerator"]})
    assert asked.accelerator == "L4" and aws.plan(asked)["price_per_hour"] > 0


def test_a_local_pool_runs_under_a_share_and_warns_of_the_missing_device():
    # the node is asked for one whole L4 (a share of one device needs one on the node)
    with pytest.warns(sky.AcceleratorWarning, match=r"accelerator='L4' was asked for"):
        with sky.Pool(provider=sky.Local(), nodes=1, accelerator=sky.accelerators.L4(count=0.5),
                      output=None) as pool:
            assert pool.run(sum, [1, 2]) == 3


@pytest.mark.parametrize("count", [0, -0.5, 1.5, True, "half"])
def test_a_count_that_is_neither_whole_nor_a_share_is_refused(count):
    with pytest.raises(ValueError, match=rf"accelerator L4 count={count!r}: need a whole number of devices"):
        sky.accelerators.L4(count=count)


def test_a_fractional_string_over_one_is_refused():
    with pytest.raises(ValueError, match=r"a fractional count must be under 1"):
        sky.accelerators.parse("L4:1.5")
