"""GCP GPU pools in their DEFAULT configuration against the stricter `FakeGCE` (issue 38, point 1): the boot
disk type each machine series takes (G10), the consumption models it is sold with (G11), a current image
family (G12). Each pool is made the way a pool makes it (plan, prepare, launch, wait until it runs with an
address: the next stage of a pool is `connecting`), then destroyed, leaving nothing."""

from __future__ import annotations

import anyio
import pytest

from skyhive.providers.base import ClusterSpec, ProvisionError
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.cloud.gcp import GCP

from tests.cloud.fake_gce import FakeGCE

pytestmark = [pytest.mark.loopback_only]

FAST = CloudTimeouts(poll=0.01, running=30, terminate=30, cleanup=30, visibility_grace=1)


@pytest.mark.parametrize(("accelerator", "spot", "machine", "disk"), [
    ("L4:1", False, "g2-standard-4", "pd-balanced"),
    ("H100:1", True, "a3-highgpu-1g", "pd-balanced"),
    ("A100:1", False, "a2-ultragpu-1g", "pd-balanced"),  # "A100": any A100; the 80 GB one is cheaper here
    ("T4:1", False, "n1-standard-8", "pd-balanced"),
])
def test_default_gpu_pools_come_up_on_the_stricter_fake(gce, accelerator, spot, machine, disk):
    provider = GCP(region="us-central1", timeouts=FAST)
    spec = ClusterSpec(pool_id="p-gpu", nodes=1, accelerator=accelerator, spot=spot)
    (handle,) = anyio.run(provider.create, spec)
    assert handle.state == "running" and handle.public_addr and handle.accelerators == 1
    assert gce.refused == []
    body = gce.inserts[-1]
    assert body["machineType"].endswith(f"/machineTypes/{machine}")
    params = body["disks"][0]["initializeParams"]
    assert params["diskType"].endswith(f"/diskTypes/{disk}")
    assert params["sourceImage"].endswith("/family/common-cu128-ubuntu-2204-nvidia-570")
    assert body["scheduling"].get("provisioningModel", "STANDARD") == ("SPOT" if spot else "STANDARD")
    anyio.run(provider.down, "p-gpu")
    assert gce.instances == {} and gce.firewalls == {}


def test_a_hyperdisk_only_machine_gets_a_hyperdisk(gce):
    provider = GCP(region="us-central1", machine_type="a3-megagpu-8g", timeouts=FAST)
    spec = ClusterSpec(pool_id="p-mega", nodes=1, accelerator="H100-MEGA:8")
    assert provider.create_request(spec, 0, "us-central1-a")["disks"][0]["initializeParams"]["diskType"] == \
        "zones/us-central1-a/diskTypes/hyperdisk-balanced"


def test_the_fake_refuses_what_gce_refuses_for_gpu_machines(gce):
    """The fake's rules G10-G12 themselves: the old request (no diskType: pd-standard, the Debian 11
    family, a3-highgpu-1g on demand) is refused, each with GCE's reason."""
    from skyhive.errors import CloudAPIError

    provider = GCP(project="proj-1", region="us-central1", timeouts=FAST)
    body = provider.create_request(ClusterSpec(pool_id="p-old", nodes=1, accelerator="L4:1"), 0, "us-central1-a")
    del body["disks"][0]["initializeParams"]["diskType"]
    with pytest.raises(CloudAPIError, match=r"\[pd-standard\] disk type is not supported by machine type g2-") as err:
        provider.client.request("POST", "zones/us-central1-a/instances", body)
    assert err.value.code == "badRequest"
    body = provider.create_request(ClusterSpec(pool_id="p-old", nodes=1, accelerator="L4:1"), 0, "us-central1-a")
    body["disks"][0]["initializeParams"]["sourceImage"] = \
        "projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11-py310"
    with pytest.raises(CloudAPIError, match="common-cu124-debian-11-py310' was not found"):
        provider.client.request("POST", "zones/us-central1-a/instances", body)
    spot = provider.create_request(ClusterSpec(pool_id="p-old-h100", nodes=1, accelerator="H100:1", spot=True), 0,
                                   "us-central1-a")
    assert spot["machineType"].endswith("/a3-highgpu-1g") and spot["scheduling"]["provisioningModel"] == "SPOT"
    del spot["scheduling"]["provisioningModel"]
    with pytest.raises(CloudAPIError, match="only available with the SPOT or FLEX_START provisioning model"):
        provider.client.request("POST", "zones/us-central1-a/instances", spot)
    assert gce.instances == {}


def test_on_demand_for_a_machine_sold_only_as_spot_is_refused_before_any_call(gce):
    provider = GCP(region="us-central1", machine_type="a3-highgpu-1g", timeouts=FAST)
    with pytest.raises(ProvisionError, match=r"a3-highgpu-1g is not sold on-demand \(only spot, flex-start\): "
                                             r"ask for spot, or take .*a3-highgpu-8g \(8x H100\)") as err:
        anyio.run(provider.create, ClusterSpec(pool_id="p-od", nodes=1, accelerator="H100:1"))
    with pytest.raises(ProvisionError, match="a3-highgpu-1g is not sold on-demand") as err:  # what a Fallback asks
        GCP(region="us-central1", machine_type="a3-highgpu-1g").plan(
            ClusterSpec(pool_id="p-od", nodes=1, accelerator="H100:1"))
    assert err.value.kind == "unavailable"  # a Fallback's next offer is tried
    # without a named machine: the on-demand H100 machine is the 8-GPU one; exactly one GPU is refused, named
    plain = GCP(region="us-central1", timeouts=FAST)
    plan = plain.plan(ClusterSpec(pool_id="p-od", nodes=1, accelerator="H100"))
    assert plan["accelerators"] == 8 and plan["instance_type"] in ("a3-highgpu-8g", "a3-edgegpu-8g")
    with pytest.raises(ProvisionError, match="a3-highgpu-1g is not sold on-demand"):
        plain.plan(ClusterSpec(pool_id="p-od2", nodes=1, accelerator="H100:1"))
    assert gce.inserts == [] and gce.firewalls == {} and gce.tokens == set()  # no call at all
