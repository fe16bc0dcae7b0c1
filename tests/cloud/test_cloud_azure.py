"""sky.Azure offline: the ARM requests it builds, and a whole create -> down cycle through the cloud base.

FAKE: no Azure emulator exists. `FakeARM` (tests/cloud/fake_arm.py) answers ARM and the token endpoint under
`requests`, refusing what ARM refuses (no power state in a list, Basic public IPs, sizes a region lacks,
Gen1 images on Gen2-only sizes) and deleting a VM at once. It proves what is sent and that the base's
policy drives a default pool to running and back to nothing left; not that Azure accepts the requests.
"""

from __future__ import annotations

import anyio
import pytest

from skyhive.providers.base import ClusterSpec, ProvisionError
from skyhive.providers.cloud.azure import Azure
from skyhive.providers.cloud.base import CloudTimeouts, ErrorKind
from skyhive.providers.cloud.keys import pool_key
from tests.cloud.fake_arm import FakeARM
from tests.cloud.fake_http import install_fakes

pytestmark = [pytest.mark.loopback_only]

SUB = "99999999"
# the default visibility grace (60 s): a node deleted at once must not hold teardown for it
FAST = CloudTimeouts(poll=0.01, running=5, terminate=5, cleanup=10)


@pytest.fixture
def azure(monkeypatch):
    """sky.Azure (default configuration: region eastus, no size, no image) on libcloud's ARM driver,
    whose HTTP goes to `FakeARM` (tests/cloud/fake_arm.py) through the fake `requests` transport."""
    from libcloud.compute.drivers.azure_arm import AzureNodeDriver

    arm = FakeARM(SUB)
    install_fakes(monkeypatch, arm)
    provider = Azure(ssh_cidr="192.0.2.1/32", spot=True, disk_gb=64, timeouts=FAST)
    provider._driver = AzureNodeDriver("77777777-7777-7777-7777-777777777777", SUB,
                                       "55555555-5555-5555-5555-555555555555", "p4ssw0rd", region="eastus")
    return provider, arm


def test_prepare_makes_a_tagged_group_an_ssh_rule_and_a_subnet_behind_it(azure):
    provider, arm = azure
    provider.prepare_sync(ClusterSpec(pool_id="p-az", nodes=2))
    group = next(b for m, p, b, _ in arm.requests if m == "PUT" and p.endswith("/resourceGroups/skyhive-p-az"))
    assert group == {"location": "eastus", "tags": {"skyhive-pool": "p-az"}}
    nsg = next(b for m, p, b, _ in arm.requests if p.endswith("networkSecurityGroups/skyhive"))
    (rule,) = nsg["properties"]["securityRules"]
    assert rule["properties"]["sourceAddressPrefix"] == "192.0.2.1/32"
    assert rule["properties"]["destinationPortRange"] == "22" and rule["properties"]["access"] == "Allow"
    vnet = next(b for m, p, b, _ in arm.requests if p.endswith("virtualNetworks/skyhive"))
    (subnet,) = vnet["properties"]["subnets"]
    assert subnet["properties"]["networkSecurityGroup"]["id"].endswith("networkSecurityGroups/skyhive")


def test_a_vm_is_spot_tagged_keyed_and_deletes_its_parts_with_it(azure):
    provider, _ = azure
    path, body = provider.vm_request(ClusterSpec(pool_id="p-az", nodes=2), 1)
    assert path.endswith("/resourceGroups/skyhive-p-az/providers/Microsoft.Compute/virtualMachines/node-1")
    assert body["tags"] == {"skyhive-pool": "p-az", "skyhive-node": "1"}
    props = body["properties"]
    assert (props["priority"], props["evictionPolicy"]) == ("Spot", "Delete")
    assert props["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"][0]["keyData"] == pool_key("p-az")[1]
    assert props["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"] is True
    assert props["storageProfile"]["osDisk"] == {"createOption": "FromImage", "diskSizeGB": 64, "deleteOption": "Delete"}
    nic = props["networkProfile"]["networkInterfaceConfigurations"][0]
    assert nic["properties"]["deleteOption"] == "Delete"
    ip = nic["properties"]["ipConfigurations"][0]["properties"]["publicIPAddressConfiguration"]
    assert ip["properties"]["deleteOption"] == "Delete"


def test_create_then_down_leaves_nothing_in_the_fake_arm(azure):
    provider, arm = azure
    handles = anyio.run(provider.create, ClusterSpec(pool_id="p-az", nodes=2))
    assert [(h.node, h.state) for h in handles] == [(0, "running"), (1, "running")]
    assert all(h.private_addr.startswith("10.42.0.") and h.public_addr.startswith("198.51.100.") for h in handles)
    assert handles[0].reach.host == handles[0].public_addr
    found = anyio.run(provider.down, "p-az")
    assert sorted(h.node for h in found) == [0, 1]
    assert arm.resources == {}
    group_deletes = [r for r in arm.requests if r[:2] == ("DELETE", f"/subscriptions/{SUB}/resourceGroups/skyhive-p-az")]
    assert len(group_deletes) == 2  # still "Deleting" at the first look: retried, then gone
    assert anyio.run(provider.list_owned, "p-az") == []
    # the power state came from each VM's instance view; no list was sent statusOnly
    assert any(p.endswith("/virtualMachines/node-0/instanceView") for _, p, _, _ in arm.requests)
    assert not any("statusOnly" in q for *_, q in arm.requests)
    # only the look-ups confirming it is gone, and the VMs' role assignments (the fake's caller is a Contributor:
    # no idle watchdog, test_cloud_azure_end.py)
    assert all("could not be found" in r or "'Microsoft.Authorization/roleAssignments/write'" in r for r in arm.refused)


def test_a_vm_has_a_standard_static_public_ip_and_uv_at_boot(azure):
    import base64

    provider, _ = azure
    _, body = provider.vm_request(ClusterSpec(pool_id="p-az", nodes=1), 0)
    ip = body["properties"]["networkProfile"]["networkInterfaceConfigurations"][0]["properties"][
        "ipConfigurations"][0]["properties"]["publicIPAddressConfiguration"]
    assert ip["sku"] == {"name": "Standard", "tier": "Regional"}
    assert ip["properties"]["publicIPAllocationMethod"] == "Static"
    assert "astral.sh/uv" in base64.b64decode(body["properties"]["osProfile"]["customData"]).decode()
    assert body["properties"]["storageProfile"]["imageReference"]["sku"] == "22_04-lts-gen2"


def test_the_fake_refuses_a_basic_public_ip(azure):
    provider, arm = azure
    provider.prepare_sync(ClusterSpec(pool_id="p-basic", nodes=1))
    path, body = provider.vm_request(ClusterSpec(pool_id="p-basic", nodes=1), 0)
    conf = body["properties"]["networkProfile"]["networkInterfaceConfigurations"][0]["properties"][
        "ipConfigurations"][0]["properties"]["publicIPAddressConfiguration"]
    del conf["sku"]  # what was sent before: ARM defaults it to Basic
    with pytest.raises(Exception, match="BasicSkuPublicIpRetired"):
        provider._arm(path, "2023-03-01", "PUT", body)


def test_a_gpu_pool_gets_a_current_size_the_hpc_image_and_checks_the_driver(azure):
    provider, arm = azure
    provider.spot = False
    spec = ClusterSpec(pool_id="p-h100", nodes=1, accelerator="H100:1")
    assert provider.plan(spec)["instance_type"] == "Standard_NC40ads_H100_v5"
    (handle,) = anyio.run(provider.create, spec)
    assert "nvidia-smi" in handle.reach.ready_command and handle.accelerators == 1
    put = next(b for m, p, b, _ in arm.requests if m == "PUT" and p.endswith("/node-0"))
    assert put["properties"]["storageProfile"]["imageReference"]["offer"] == "ubuntu-hpc"
    anyio.run(provider.down, "p-h100")
    assert arm.resources == {}
    # a Gen1 image on a Gen2-only size is refused before anything is sent
    gen1 = Azure(image=("Canonical", "0001-com-ubuntu-server-jammy", "22_04-lts", "latest"))
    gen1._driver = provider._driver
    with pytest.raises(ProvisionError, match="boots Hyper-V generation 2 images only"):
        gen1.vm_request(spec, 0)


def test_arm_errors_are_classified_by_code(azure):
    from libcloud.common.exceptions import BaseHTTPError

    provider, _ = azure
    assert provider.classify(BaseHTTPError(409, "[SkuNotAvailable] The requested size is not available")) is ErrorKind.CAPACITY
    assert provider.classify(BaseHTTPError(409, "[OperationNotAllowed] exceeds regional cores quota")) is ErrorKind.QUOTA
    assert provider.classify(BaseHTTPError(429, "[TooManyRequests] slow down")) is ErrorKind.TRANSIENT
    assert provider.classify(BaseHTTPError(404, "[ResourceGroupNotFound] gone")) is ErrorKind.NOT_FOUND
    assert provider.classify(BaseHTTPError(400, "[InvalidParameter] no")) is ErrorKind.FATAL


def test_an_accelerator_chooses_the_gpu_size_and_the_plan_prices_it(azure):
    provider = Azure(region="westus2")  # the region whose prices list the T4 sizes
    provider._driver = azure[0]._driver
    spec = ClusterSpec(pool_id="p-gpu", nodes=3, accelerator="T4")
    plan = provider.plan(spec)
    assert (plan["instance_type"], plan["accelerator"], plan["accelerators"]) == ("Standard_NC4as_T4_v3", "T4", 1)
    assert plan["price_per_hour"] > 0 and plan["cost_per_hour"] == pytest.approx(3 * plan["price_per_hour"])
    _, body = provider.vm_request(spec, 0)
    assert body["properties"]["hardwareProfile"]["vmSize"] == "Standard_NC4as_T4_v3"
    # without an accelerator: the configured (default) size, price unknown
    _, body = provider.vm_request(ClusterSpec(pool_id="p-cpu", nodes=1), 0)
    assert body["properties"]["hardwareProfile"]["vmSize"] == "Standard_D2s_v5"


def test_a_vm_size_that_lacks_the_accelerator_is_refused_before_anything_is_created(azure):
    _, arm = azure
    provider = Azure(region="eastus", vm_size="Standard_NC24ads_A100_v4")
    provider._driver = azure[0]._driver
    spec = ClusterSpec(pool_id="p-bad", nodes=1, accelerator="T4")
    with pytest.raises(ProvisionError, match="Standard_NC24ads_A100_v4 does not satisfy the pool: it has A100-80GB, not T4"):
        provider.prepare_sync(spec)
    assert arm.requests == []


def test_young_nodes_deleted_at_once_do_not_hold_teardown_and_the_group_goes(azure):
    """ARM deletes a VM at once here: a node younger than the visibility grace (60 s) that the cloud took
    the delete of and no longer lists is gone; teardown must not retry it until its cap and leave the
    resource group behind."""
    provider, arm = azure
    spec = ClusterSpec(pool_id="p-young", nodes=2)
    provider.prepare_sync(spec)
    handles = provider.launch_sync(spec, [0, 1], "eastus")  # fresh: launched_at is now
    anyio.run(provider.terminate, handles)  # raised "still not terminated after 5 s" before
    anyio.run(provider.cleanup, "p-young")
    assert arm.resources == {}


def test_zones_are_tried_in_order_and_a_full_zone_moves_on(azure):
    provider, arm = azure
    provider.zones = ["1", "2"]
    arm.full_zones.add("1")
    (handle,) = anyio.run(provider.create, ClusterSpec(pool_id="p-zone", nodes=1))
    puts = [b for m, p, b, _ in arm.requests if m == "PUT" and p.endswith("/node-0")]
    assert [b["zones"] for b in puts] == [["1"], ["2"]]
    assert any("capacity for the requested VM size in zone '1'" in r for r in arm.failed)  # after the 201 (A7)
    anyio.run(provider.down, "p-zone")
    assert arm.resources == {}
    with pytest.raises(ValueError, match="availability zones are '1', '2' or '3'"):
        Azure(zones=["eastus-1"])
