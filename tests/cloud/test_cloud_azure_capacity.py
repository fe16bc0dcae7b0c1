"""Azure's late capacity (issue 38, point 3): ARM answers a VM's PUT with 201 and reports AllocationFailed /
ZonalAllocationFailed later as provisioningState Failed (FakeARM rule A7). The pool reads it: the next zone
within a few polls, then the next offer; nothing left behind."""

from __future__ import annotations

import anyio
import pytest

from skyhive.providers.base import ClusterSpec, ProvisionError
from skyhive.providers.cloud.azure import Azure
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.fallback import Fallback
from tests.cloud.fake_arm import FakeARM
from tests.cloud.fake_http import install_fakes

pytestmark = [pytest.mark.loopback_only]

SUB = "99999999"
# `running` is long on purpose: before, a failed allocation was waited for until it ran out
SLOW_TO_GIVE_UP = CloudTimeouts(poll=0.01, running=120, terminate=10, cleanup=10)


def _azure(region: str = "eastus", **kw) -> Azure:
    from libcloud.compute.drivers.azure_arm import AzureNodeDriver

    provider = Azure(region=region, ssh_cidr="192.0.2.1/32", timeouts=SLOW_TO_GIVE_UP, **kw)
    provider._driver = AzureNodeDriver("77777777-7777-7777-7777-777777777777", SUB,
                                       "55555555-5555-5555-5555-555555555555", "p4ssw0rd", region=region)
    return provider


@pytest.fixture
def arm(monkeypatch):
    fake = FakeARM(SUB)
    install_fakes(monkeypatch, fake)
    return fake


def _views(arm: FakeARM, name: str) -> int:
    return sum(1 for m, p, _, _ in arm.requests if m == "GET" and p.lower().endswith(f"/{name}/instanceview"))


def test_a_zone_that_fails_allocation_after_the_201_moves_to_the_next_zone(arm):
    arm.full_zones.add("1")
    provider = _azure(zones=["1", "2", "3"])
    (handle,) = anyio.run(provider.create, ClusterSpec(pool_id="p-late", nodes=1))
    puts = [b for m, p, b, _ in arm.requests if m == "PUT" and p.endswith("/node-0")]
    assert [b["zones"] for b in puts] == [["1"], ["2"]]  # zone 3 never needed
    assert len(arm.failed) == 1 and "zone '1'" in arm.failed[0]
    assert handle.state == "running"
    # the failed VM was read a few times (create_polls), then deleted before zone 2 was asked
    first_put = next(i for i, (m, p, _, _) in enumerate(arm.requests) if m == "PUT" and p.endswith("/node-0"))
    second_put = max(i for i, (m, p, _, _) in enumerate(arm.requests) if m == "PUT" and p.endswith("/node-0"))
    between = arm.requests[first_put:second_put]
    assert sum(1 for m, p, _, _ in between if p.lower().endswith("/node-0/instanceview")) <= 2 * arm.create_polls
    assert any(m == "DELETE" and p.endswith("/node-0") for m, p, _, _ in between)
    anyio.run(provider.down, "p-late")
    assert arm.resources == {}


def test_every_zone_full_is_capacity_and_a_fallback_takes_the_next_offer(arm):
    arm.full_zones |= {"1", "2"}
    east, west = _azure(zones=["1", "2"]), _azure(region="westus2", zones=["3"])
    fallback = Fallback([east, west])
    spec = ClusterSpec(pool_id="p-full", nodes=1)
    handles = anyio.run(fallback.launch, spec, [0])
    assert fallback.chosen is west and len(handles) == 1
    (skipped,) = fallback.skipped
    assert skipped.startswith("azure eastus: capacity") and "ZonalAllocationFailed" in skipped
    anyio.run(fallback.down, "p-full")
    assert arm.resources == {}


def test_a_region_without_zones_that_fails_allocation_is_capacity(arm):
    arm.full_zones.add(None)  # a VM without zones: ARM's AllocationFailed
    with pytest.raises(ProvisionError, match="AllocationFailed") as err:
        anyio.run(_azure().create, ClusterSpec(pool_id="p-region", nodes=1))
    assert err.value.kind == "capacity"
    assert arm.resources == {}
