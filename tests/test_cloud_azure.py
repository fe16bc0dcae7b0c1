"""sky.Azure offline: the ARM requests it builds, and a whole create -> down cycle through the cloud base.

FAKE: no Azure emulator exists. `FakeARM` answers the ARM calls sky.Azure makes from an in-memory
dict (resource group, network, VMs with their NIC and public address), behind libcloud's own Azure
test kit (`AzureMockHttp`, whose canned OAuth token answer the driver's login uses). It proves what is
sent and that the base's policy (list by tag, terminate then confirm, cleanup retried while the group
is being deleted) drives it to nothing left; not that Azure accepts the requests.
"""

from __future__ import annotations

import json
import sys
import types
from urllib.parse import urlparse

import anyio
import pytest

from skyhive.providers.base import ClusterSpec
from skyhive.providers.cloud.azure import Azure
from skyhive.providers.cloud.base import CloudTimeouts, ErrorKind
from skyhive.providers.cloud.keys import pool_key

pytestmark = [pytest.mark.loopback_only]

SUB = "99999999"


class FakeARM:
    """FAKE Azure Resource Manager: the few resources sky.Azure uses, in memory."""

    def __init__(self) -> None:
        self.resources: dict[str, dict] = {}  # lower-case path -> body
        self.requests: list[tuple[str, str, dict | None]] = []
        self.group_deletes_pending = 0  # GETs of a deleted group that still find it (ARM is asynchronous)

    def answer(self, method: str, url: str, body: str | None) -> tuple[int, str]:
        path = urlparse(url).path
        data = json.loads(body) if body else None
        self.requests.append((method, path, data))
        key = path.lower()
        if method == "PUT":
            name = path.rsplit("/", 1)[-1]
            stored = {"id": path, "name": name, **(data or {})}
            stored.setdefault("properties", {})["provisioningState"] = "Succeeded"
            if "/virtualmachines/" in key:
                stored["properties"]["instanceView"] = {"statuses": [{"code": "PowerState/running"}]}
                n = len([k for k in self.resources if "/networkinterfaces/" in k])
                group = path.split("/providers/")[0]
                ip = f"{group}/providers/Microsoft.Network/publicIPAddresses/{name}-ip"
                self.resources[ip.lower()] = {"id": ip, "properties": {"ipAddress": f"198.51.100.{n + 10}"}}
                nic = f"{group}/providers/Microsoft.Network/networkInterfaces/{name}-nic"
                self.resources[nic.lower()] = {"id": nic, "properties": {"virtualMachine": {"id": path},
                                               "ipConfigurations": [{"properties": {
                                                   "privateIPAddress": f"10.42.0.{n + 4}",
                                                   "publicIPAddress": {"id": ip}}}]}}
            self.resources[key] = stored
            return 200, json.dumps(stored)
        if method == "DELETE":
            gone = [k for k in self.resources if k == key or k.startswith(key + "/")]
            if "/virtualmachines/" in key:  # deleteOption: Delete takes its NIC and address along
                name = key.rsplit("/", 1)[-1]
                gone += [k for k in self.resources if k.endswith((f"/{name}-nic", f"/{name}-ip"))]
            if key.endswith(tuple(f"/resourcegroups/{g}" for g in self._groups())):
                self.group_deletes_pending = 1
            for k in gone:
                self.resources.pop(k, None)
            return (202 if gone else 204), ""
        if key in self.resources:  # GET one
            return 200, json.dumps(self.resources[key])
        if "/resourcegroups/" in key and key.count("/") == 4 and self.group_deletes_pending:  # the group itself
            self.group_deletes_pending -= 1
            return 200, json.dumps({"id": path, "properties": {"provisioningState": "Deleting"}})
        items = [v for k, v in self.resources.items() if k.startswith(key + "/") and k.count("/") == key.count("/") + 1]
        if items or any(k.startswith(key.split("/providers/")[0] + "/") for k in self.resources):
            return 200, json.dumps({"value": items})
        return 404, json.dumps({"error": {"code": "ResourceGroupNotFound", "message": f"{path} not found"}})

    def _groups(self) -> set[str]:
        return {k.split("/")[4] for k in self.resources if k.count("/") >= 4}


@pytest.fixture
def azure(monkeypatch):
    pytest.importorskip("requests_mock", reason="libcloud's test kit needs requests-mock (dev extra)")
    monkeypatch.setitem(sys.modules, "libcloud.test.secrets", types.ModuleType("libcloud.test.secrets"))
    from libcloud.compute.drivers.azure_arm import AzureNodeDriver
    from libcloud.test import httplib
    from libcloud.test.compute.test_azure_arm import AzureMockHttp

    arm = FakeARM()

    class FakeARMHttp(AzureMockHttp):
        """FAKE: libcloud's Azure mock for the login; `FakeARM` for everything else."""

        def __getattr__(self, name):
            if name.endswith("_oauth2_token"):
                return super().__getattr__(name)

            def fn(method, url, body, headers):
                status, text = arm.answer(method, url, body)
                return status, text, {"content-type": "application/json"}, httplib.responses[status]

            return fn

    monkeypatch.setattr(AzureNodeDriver.connectionCls, "conn_class", FakeARMHttp)
    provider = Azure(region="eastus", ssh_cidr="192.0.2.1/32", spot=True, disk_gb=64,
                     timeouts=CloudTimeouts(poll=0.01, visibility_grace=1))
    provider._driver = AzureNodeDriver("77777777-7777-7777-7777-777777777777", SUB,
                                       "55555555-5555-5555-5555-555555555555", "p4ssw0rd", region="eastus")
    return provider, arm


def test_prepare_makes_a_tagged_group_an_ssh_rule_and_a_subnet_behind_it(azure):
    provider, arm = azure
    provider.prepare_sync(ClusterSpec(pool_id="p-az", nodes=2))
    group = next(b for m, p, b in arm.requests if m == "PUT" and p.endswith("/resourceGroups/skyhive-p-az"))
    assert group == {"location": "eastus", "tags": {"skyhive-pool": "p-az"}}
    nsg = next(b for m, p, b in arm.requests if p.endswith("networkSecurityGroups/skyhive"))
    (rule,) = nsg["properties"]["securityRules"]
    assert rule["properties"]["sourceAddressPrefix"] == "192.0.2.1/32"
    assert rule["properties"]["destinationPortRange"] == "22" and rule["properties"]["access"] == "Allow"
    vnet = next(b for m, p, b in arm.requests if p.endswith("virtualNetworks/skyhive"))
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
    group_deletes = [r for r in arm.requests if r == ("DELETE", f"/subscriptions/{SUB}/resourceGroups/skyhive-p-az", None)]
    assert len(group_deletes) == 2  # still "Deleting" at the first look: retried, then gone
    assert anyio.run(provider.list_owned, "p-az") == []


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
    from skyhive.providers.base import ProvisionError

    _, arm = azure
    provider = Azure(region="eastus", vm_size="Standard_NC6s_v3")
    provider._driver = azure[0]._driver
    spec = ClusterSpec(pool_id="p-bad", nodes=1, accelerator="T4")
    with pytest.raises(ProvisionError, match="Standard_NC6s_v3 does not satisfy the pool: it has V100, not T4"):
        provider.prepare_sync(spec)
    assert arm.requests == []
