"""Skyward's names (issue 26, point 12): `f() >> sky` / `f() @ sky` / `f() > sky` inside a `with pool:`
block (the active pool), `sky.PendingCompute`, `Image(skyward_source=...)`, `sky.Spec` multi-provider
pools with `selection=`, and accelerator names made from the accelerator tables."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import skyhive as sky
from skyhive.providers.base import ProvisionError


@sky.function
def where(x):
    return (x, sky.instance_info().node)


def test_operators_on_the_skyhive_module_use_the_active_pool():
    with sky.ComputePool(provider=sky.Local(), nodes=2, output=None) as pool:
        assert where(3) >> sky == (3, (where(3) >> pool)[1]) or (where(3) >> sky)[0] == 3
        assert sorted(n for _, n in where(1) @ sky) == [0, 1]  # every worker of the active pool
        assert (where(5) > sky).result()[0] == 5
        assert [x for x, _ in sky.gather(where(1), where(2)) >> sky] == [1, 2]
        assert (where(7) >> sky.sky)[0] == 7  # Skyward's singleton too
        assert isinstance(where(1), sky.PendingCompute) and sky.PendingFunction is sky.PendingCompute
    with pytest.raises(RuntimeError, match=r"need an active pool: use them inside `with sky.Pool"):
        where(1) >> sky  # the block is over: no active pool


def test_nested_pools_resolve_to_the_innermost_and_the_outer_one_comes_back():
    with sky.Pool(provider=sky.Simulated(), nodes=1, output=None) as outer:
        with sky.Pool(provider=sky.Simulated(), nodes=3, output=None):
            assert len(where(0) @ sky) == 3
        assert len(where(0) @ sky) == 1
        assert sky.sky.__repr__().startswith("<sky: active pool") and outer is not None
    assert repr(sky.sky) == "<sky: no active pool>"


@pytest.mark.anyio
async def test_an_async_pool_is_active_in_its_block():
    async with sky.Pool(provider=sky.Simulated(), nodes=2, output=None):
        assert (await (where(4) >> sky))[0] == 4
        assert len(await (where(0) @ sky)) == 2
    with pytest.raises(RuntimeError, match="need an active pool"):
        where(1) >> sky


def test_image_skyward_source():
    plain = sky.Image(pip=["numpy"])
    for value in ("auto", "local", "github", "pypi"):
        image = sky.Image(pip=["numpy"], skyward_source=value)
        assert image.skyward_source == value
        assert image.content_hash() == plain.content_hash()  # the node's environment is the same
    with pytest.raises(ValueError, match=r"Image.skyward_source must be one of 'auto', 'local', 'github', 'pypi', got 'pip'"):
        sky.Image(skyward_source="pip")


def test_accelerator_names_come_from_the_tables():
    acc = sky.accelerators
    assert acc.RTX_A4000().name == "RTX_A4000" and acc.RTX_A4000().memory_gb == 16
    assert str(acc.H100_NVL(count=2)) == "H100_NVL:2" and str(acc.TPUv5p_8()) == "TPUv5p_8"
    assert acc.RTX_4090().memory_gb == 24 and acc.MI300X().manufacturer == "AMD"
    table = Path(sky.accelerators.__file__).parent / "cloud" / "data" / "accelerators.json"
    models = json.loads(table.read_text())["models"]
    assert len(models) > 100
    for model, _, _ in models:  # every model of the table has its factory
        name = "".join(c if c.isalnum() else "_" for c in model).strip("_")
        while "__" in name:
            name = name.replace("__", "_")
        assert callable(getattr(acc, name)), model
    assert all(n.isidentifier() for n in acc.NAMES)
    assert sky.Pool(provider=sky.Simulated(), accelerator=acc.RTX_A4000(count=2)).accelerator.count == 2


def test_spec_pools_order_providers_by_price_or_as_given():
    gpu = sky.accelerators.A100(count=8)  # (one V100 or T4 costs the same on both: $3.06, $0.526)
    aws, azure = sky.AWS(region="us-east-1"), sky.Azure(region="eastus")
    prices = {p.name: p.plan(_spec(gpu))["price_per_hour"] for p in (aws, azure)}
    assert len(set(prices.values())) == 2 and all(prices.values())
    for given in ((aws, azure), (azure, aws)):  # whatever order they are given in
        cheapest = sky.ComputePool(*(sky.Spec(provider=p, accelerator=gpu) for p in given), selection="cheapest")
        assert [p.name for p in cheapest.provider.providers] == sorted(prices, key=prices.get)
    first = sky.ComputePool(sky.Spec(provider=azure, accelerator=gpu), sky.Spec(provider=aws, accelerator=gpu),
                            selection="first")
    assert [p.name for p in first.provider.providers] == ["azure", "aws"]
    assert str(first.accelerator) == "A100:8"
    # a cap below the price leaves the spec out; machines that exist already cost nothing more
    capped = sky.ComputePool(sky.Spec(provider=aws, accelerator=gpu, max_hourly_cost=0.5),
                             sky.Spec(provider=azure, accelerator=gpu, max_hourly_cost=0.5),
                             sky.Spec(provider=sky.Local(), accelerator=gpu))
    assert isinstance(capped.provider, sky.Local)
    with pytest.raises(ProvisionError, match=r"no Spec can be used: <AWS.*over max_hourly_cost \$0.5/h"):
        sky.ComputePool(sky.Spec(provider=aws, accelerator=gpu, max_hourly_cost=0.5))
    local = sky.ComputePool(sky.Spec(provider=sky.Local(), nodes=2))
    assert isinstance(local.provider, sky.Local) and local.nodes == 2


def _spec(gpu):
    from skyhive.providers.base import ClusterSpec

    return ClusterSpec(pool_id="plan", nodes=1, accelerator=str(gpu))


def test_spec_errors_name_the_field():
    with pytest.raises(ValueError, match=r"Spec\(region='us-east-1'\): not supported on a Spec: give the region "
                                         r"to the provider"):
        sky.Spec(provider=sky.AWS(), region="us-east-1")
    with pytest.raises(ValueError, match="must agree on nodes"):
        sky.ComputePool(sky.Spec(provider=sky.Local(), nodes=2), sky.Spec(provider=sky.Simulated(), nodes=3))
    with pytest.raises(TypeError, match="accelerator belong in each Spec"):
        sky.ComputePool(sky.Spec(provider=sky.Local()), accelerator="T4")
    with pytest.raises(ValueError, match="selection='best'"):
        sky.ComputePool(sky.Spec(provider=sky.Local()), selection="best")
    with pytest.raises(TypeError, match="needs a skyhive provider"):
        sky.Spec(provider="aws")


def test_a_spec_pool_runs(tmp_path):
    with sky.Compute(sky.Spec(provider=sky.Local(), nodes=2), sky.Spec(provider=sky.Simulated(), nodes=2),
                     selection="first", output=None) as pool:
        assert sorted(n for _, n in where(0) @ pool) == [0, 1]
        assert os.getpid() not in {pid for pid in pool.broadcast(os.getpid)}  # Local: real worker processes
