"""FAKE Azure Resource Manager and Entra ID token endpoint, in process, under `requests`.

No Azure emulator exists. `FakeARM` keeps one subscription's resource groups, networks and VMs in memory
and answers as ARM does, rule by rule; each rule names the reference it encodes:

- A1 power state: a VM's model (GET, and the resource-group list, "Virtual Machines - List") carries no
  instanceView; the power state (``PowerState/running``) comes only from "Virtual Machines - Instance View"
  (GET ``.../virtualMachines/{vm}/instanceView``). ``statusOnly`` is a parameter of "List All" (the
  subscription-wide list) only; the resource-group list ignores it
  (https://learn.microsoft.com/rest/api/compute/virtual-machines/list and .../list-all).
- A2 public IPs: Basic SKU public addresses are retired (no new ones since 30 September 2025:
  https://learn.microsoft.com/azure/virtual-network/ip-services/public-ip-basic-upgrade-guidance); an
  address without ``sku`` defaults to Basic and is refused. Standard needs static allocation.
- A3 sizes: a size is offered only in the regions the catalog lists it in (SkuNotAvailable otherwise),
  and a size that boots Hyper-V generation 2 only refuses a generation-1 image
  (https://learn.microsoft.com/azure/virtual-machines/generation-2). Sizes, regions and generations come
  from ``tests/cloud/catalogs/azure_gap.csv`` (a copy of shared/catalogs), never from skyhive's table.
- A8 retired sizes are refused (issue 38): NCv3 retired on 2025-09-30
  (https://learn.microsoft.com/azure/virtual-machines/sizes/retirement/ncv3-series-retirement).
- A4 asynchronous deletes: deleting a resource group answers 202 and the group is still found
  ("Deleting") for `group_delete_lag` reads; a VM's delete, by contrast, completes at once here (the case
  where the pool's young nodes must not block teardown).
- A6 availability zones are "1", "2", "3" (a VM's ``zones``)
  (https://learn.microsoft.com/azure/reliability/availability-zones-overview).
- A7 a VM is created asynchronously (issue 38): the PUT answers 201 with provisioningState ``Creating``;
  the state moves on only after `create_polls` reads (model or instance view), to ``Succeeded`` (instance
  view ``PowerState/running``), or, in a zone of `full_zones` (``None`` in it: a VM without a zone), to
  ``Failed`` with instance-view status ``ProvisioningState/failed/ZonalAllocationFailed`` (or
  ``AllocationFailed``) — the capacity error arrives *after* the 201
  (https://learn.microsoft.com/azure/virtual-machines/states-billing, provisioning states;
  https://learn.microsoft.com/troubleshoot/azure/virtual-machines/windows/allocation-failure).
- A5 every management call needs a bearer token the token endpoint issued (client-credentials grant).
- A9 managed disks (https://learn.microsoft.com/rest/api/compute/disks): a VM's ``dataDisks`` entry with
  ``createOption: Attach`` names an existing disk (404 NotFound otherwise) that no other VM holds (its
  ``managedBy``; 409 OperationNotAllowed "already attached"); deleting a VM — or its resource group —
  detaches its data disks whose ``deleteOption`` is Detach (the default) and deletes those marked Delete
  (https://learn.microsoft.com/azure/virtual-machines/delete); deleting a disk a VM holds is 409
  OperationNotAllowed.
- A10 a VM's auto-shutdown (issue 38): ``Microsoft.DevTestLab/schedules/{name}`` in a resource group
  (REST "Global Schedules - Create Or Update", api-version 2018-09-15:
  https://learn.microsoft.com/rest/api/dtl/global-schedules/create-or-update) takes ``location``,
  ``properties.taskType`` ``ComputeVmShutdownTask``, ``dailyRecurrence.time`` as ``HHmm``, a
  ``timeZoneId``, ``status`` Enabled/Disabled and a ``targetResourceId`` naming an existing VM (404
  otherwise); a VM's schedule must be named ``shutdown-computevm-<vm name>`` (anything else is a 400, as
  the portal's auto-shutdown requires: hashicorp/terraform-provider-azurerm#5536). `clock_reaches("HHmm")`
  is the fake's clock passing that time of day (UTC here): every Enabled schedule of that time deallocates its
  VM (power state ``deallocated``: https://learn.microsoft.com/azure/virtual-machines/auto-shutdown-vm).
  Nothing else in the fake keeps time.
- A11-A14 (issue 38, `fake_arm_identity.py`, each with its citation there): a VM's system-assigned managed
  identity; role assignments (403 ``AuthorizationFailed`` for a caller without
  ``Microsoft.Authorization/roleAssignments/write``: `caller_role`, default ``Contributor``; 400
  ``PrincipalNotFound`` for an identity not yet replicated unless ``principalType`` is given; assignments
  outlive their scope); the instance metadata service of a VM (`imds(vm)`: token, resource id); a VM
  identity's token may delete or deallocate (``POST .../deallocate``) only what its role assignments cover.
"""

from __future__ import annotations

import csv
import itertools
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.cloud.fake_arm_identity import IdentityRules
from tests.cloud.fake_http import load_state, save_state

def _catalog() -> tuple[dict[str, set[str]], dict[str, str]]:
    """(size -> regions, size -> Hyper-V generations) from tests/cloud/catalogs/azure_gap.csv."""
    sizes: dict[str, set[str]] = {}
    generations: dict[str, str] = {}
    with (Path(__file__).parent / "catalogs" / "azure_gap.csv").open(newline="") as fh:
        for row in csv.DictReader(fh):
            sizes.setdefault(row["InstanceType"], set()).add(row["Region"])
            generations[row["InstanceType"]] = row["Generation"].replace(" ", "")
    return sizes, generations


SIZES, GENERATIONS = _catalog()
#: A8: retired sizes (the page in the module docstring)
RETIRED = {size: "NCv3 retired on 2025-09-30" for size in ("Standard_NC6s_v3", "Standard_NC12s_v3",
                                                          "Standard_NC24s_v3", "Standard_NC24rs_v3")}
GEN1_SKUS = {"22_04-lts"}  # Canonical's generation-1 Ubuntu 22.04 SKU; "-gen2" SKUs are generation 2


def _error(status: int, code: str, message: str) -> tuple[int, dict]:
    return status, {"error": {"code": code, "message": message}}


class FakeARM(IdentityRules):
    """FAKE ARM for one subscription (see the module docstring)."""

    hosts = ("management.azure.com", "login.microsoftonline.com")

    def __init__(self, subscription: str = "99999999-0000-0000-0000-000000000000") -> None:
        self.subscription = subscription
        self.resources: dict[str, dict] = {}  # lower-case path -> body
        self.requests: list[tuple[str, str, dict | None, dict]] = []  # method, path, body, query
        self.group_delete_lag = 1
        self._deleting: dict[str, int] = {}
        self.tokens: set[str] = set()
        self.refused: list[str] = []
        self.full_zones: set[str | None] = set()  # zones (None: no zone) whose VMs fail allocation after the 201
        self.create_polls = 2  # reads of a new VM before its provisioning state leaves Creating (A7)
        self.failed: list[str] = []  # every allocation failure reported (A7)
        self._ids = itertools.count(1)
        self._identity_init()

    def save(self, path: Any) -> None:
        """The subscription's state to `path` (replaced whole): a test hands it from a process it kills to the next."""
        save_state(path, {k: v for k, v in vars(self).items() if k not in ("_ids", "_serial")})

    @classmethod
    def load(cls, path: Any) -> FakeARM:
        """The subscription `save` wrote (its tokens still valid), new ids after its own."""
        fake = cls()
        vars(fake).update(load_state(path))
        fake._ids = itertools.count(10_000)
        return fake

    def answer(self, method: str, url: str, headers: Any, body: bytes | None) -> tuple[int, Any]:
        parsed = urlparse(url)
        if parsed.hostname == "login.microsoftonline.com":
            form = {k: v[0] for k, v in parse_qs((body or b"").decode()).items()}
            if form.get("grant_type") != "client_credentials" or form.get("client_secret") != "p4ssw0rd":
                return 401, {"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret"}
            token = f"eyJ0.fake-{next(self._ids)}"
            self.tokens.add(token)
            return 200, {"access_token": token, "expires_on": "9999999999", "token_type": "Bearer"}
        token = headers.get("Authorization", "").removeprefix("Bearer ")
        if token not in self.tokens and token not in self.vm_tokens:  # A5
            return _error(401, "AuthenticationFailed", "Authentication failed.")
        query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
        data = json.loads(body) if body else None
        self.requests.append((method, parsed.path, data, query))
        status, payload = self._authorized(token, method, parsed.path) or self._route(method, parsed.path, data, query)
        if status >= 400:
            self.refused.append(payload["error"]["message"])
        return status, payload

    # ---- routing -----------------------------------------------------------------------------------

    def _route(self, method: str, path: str, data: Any, query: dict) -> tuple[int, Any]:
        key = path.lower().rstrip("/")
        parts = key.split("/")
        if len(parts) < 5 or parts[3] != "resourcegroups":
            return _error(400, "InvalidRequestUri", f"FAKE ARM does not implement {method} {path}")
        group = "/".join(parts[:5])
        if "/providers/microsoft.authorization/roleassignments" in key:  # A12
            return self._assignments(method, path.rstrip("/"), data)
        if method == "POST" and key.endswith("/deallocate") and key.removesuffix("/deallocate") in self.resources:
            self.resources[key.removesuffix("/deallocate")]["_power"] = "deallocated"  # A14
            return 202, None
        if method == "PUT":
            if key != group and group not in self.resources:
                return _error(404, "ResourceGroupNotFound", f"Resource group '{parts[4]}' could not be found.")
            if group in self._deleting:
                return _error(409, "ResourceGroupBeingDeleted", f"The resource group '{parts[4]}' is in deprovisioning state")
            if "/virtualmachines/" in key:
                return self._put_vm(path, key, data)
            if "/providers/microsoft.devtestlab/schedules/" in key:
                refused = self._schedule_refusal(parts[-1], data or {})
                if refused:
                    return refused
            if "/disks/" in key and self.resources.get(key, {}).get("managedBy"):
                return _error(409, "OperationNotAllowed", f"Disk {parts[-1]} is attached to VM "
                                                          f"{self.resources[key]['managedBy']}.")
            stored = {"id": path, "name": path.rsplit("/", 1)[-1], **(data or {})}
            stored.setdefault("properties", {})["provisioningState"] = "Succeeded"
            self.resources[key] = stored
            return 200, stored
        if method == "DELETE":
            if key == group:
                if group not in self.resources:
                    return 204, None
                self._deleting.setdefault(group, self.group_delete_lag)  # asked again: the same deletion
                for k in [k for k in self.resources if k == group or k.startswith(group + "/")]:
                    if k != group:
                        self._release_disks(k)  # A9
                        self.resources.pop(k, None)
                        self._identity_gone(k)  # A11
                return 202, None
            if "/disks/" in key and self.resources.get(key, {}).get("managedBy"):  # A9
                return _error(409, "OperationNotAllowed", f"Disk {parts[-1]} is attached to VM "
                                                          f"{self.resources[key]['managedBy']}.")
            gone = [k for k in self.resources if k == key or k.startswith(key + "/")]
            for k in gone:
                self._release_disks(k)
            if "/virtualmachines/" in key:  # deleteOption: Delete takes the NIC, address and disk along
                name = key.rsplit("/", 1)[-1]
                gone += [k for k in self.resources if k.endswith((f"/{name}-nic", f"/{name}-ip"))]
            for k in gone:
                self.resources.pop(k, None)
                self._identity_gone(k)  # A11
            return (200 if gone else 204), None
        # GET
        if key == group:
            if group in self._deleting:
                if self._deleting[group] <= 0:
                    self._deleting.pop(group)
                    self.resources.pop(group, None)
                else:
                    self._deleting[group] -= 1
                    return 200, {"id": path, "properties": {"provisioningState": "Deleting"}}
            if group in self.resources:
                return 200, self.resources[group]
            return _error(404, "ResourceGroupNotFound", f"Resource group '{parts[4]}' could not be found.")
        if group not in self.resources or group in self._deleting:
            return _error(404, "ResourceGroupNotFound", f"Resource group '{parts[4]}' could not be found.")
        if key.endswith("/instanceview") and "/virtualmachines/" in key:  # A1
            vm = self.resources.get(key.removesuffix("/instanceview"))
            if vm is None:
                return _error(404, "ResourceNotFound", f"The Resource '{path}' was not found.")
            return 200, {"statuses": self._vm_statuses(vm)}
        if key in self.resources:
            if "/virtualmachines/" in key:
                self._advance(self.resources[key])
            return 200, self._public(self.resources[key])
        if len(parts) == 8:  # a collection: /subscriptions/S/resourceGroups/G/providers/<ns>/<type>
            items = [self._public(self._advance(v)) for k, v in self.resources.items()
                     if k.startswith(key + "/") and k.count("/") == key.count("/") + 1]
            return 200, {"value": items}
        return _error(404, "ResourceNotFound", f"The Resource '{path}' was not found.")

    def _schedule_refusal(self, name: str, data: dict) -> tuple[int, dict] | None:
        """A10: what ARM refuses in a VM's auto-shutdown schedule, or None."""
        props = data.get("properties") or {}
        target = str(props.get("targetResourceId") or "")
        if not data.get("location"):
            return _error(400, "LocationRequired", "The location property is required for this definition.")
        if props.get("taskType") != "ComputeVmShutdownTask":
            return _error(400, "InvalidScheduleTaskType", f"Task type {props.get('taskType')!r} is not valid here.")
        if not re.fullmatch(r"([01]\d|2[0-3])[0-5]\d", str((props.get("dailyRecurrence") or {}).get("time", ""))):
            return _error(400, "InvalidScheduleTime", "dailyRecurrence.time must be HHmm.")
        if not props.get("timeZoneId") or props.get("status") not in ("Enabled", "Disabled"):
            return _error(400, "InvalidSchedule", "timeZoneId and status (Enabled or Disabled) are required.")
        if target.lower() not in self.resources or "/virtualmachines/" not in target.lower():
            return _error(404, "ResourceNotFound", f"The target resource '{target}' was not found.")
        if name != f"shutdown-computevm-{target.rsplit('/', 1)[-1].lower()}":
            return _error(400, "InvalidScheduleName", f"The schedule of VM {target.rsplit('/', 1)[-1]} must be named "
                                                      f"shutdown-computevm-{target.rsplit('/', 1)[-1]}.")
        return None

    def clock_reaches(self, hhmm: str) -> list[str]:
        """A10: the time of day passes `hhmm`: each Enabled schedule of that time deallocates its VM; their names."""
        done = []
        for key, schedule in list(self.resources.items()):
            props = schedule.get("properties") or {}
            if ("/providers/microsoft.devtestlab/schedules/" in key and props.get("status") == "Enabled"
                    and (props.get("dailyRecurrence") or {}).get("time") == hhmm):
                vm = self.resources.get(str(props.get("targetResourceId")).lower())
                if vm is not None:
                    vm["_power"] = "deallocated"
                    done.append(vm["name"])
        return done

    def _release_disks(self, key: str) -> None:
        """A9: a VM that goes lets go of its data disks (Detach) or takes them along (Delete)."""
        vm = self.resources.get(key)
        if vm is None or "/virtualmachines/" not in key:
            return
        for disk in ((vm.get("properties") or {}).get("storageProfile") or {}).get("dataDisks") or []:
            disk_key = str((disk.get("managedDisk") or {}).get("id", "")).lower()
            if disk_key in self.resources:
                if disk.get("deleteOption") == "Delete":
                    self.resources.pop(disk_key)
                else:
                    self.resources[disk_key].pop("managedBy", None)

    def _advance(self, stored: dict) -> dict:
        """One read of a resource: a VM being created moves on after `create_polls` reads (A7)."""
        if "_reads" not in stored or stored["properties"].get("provisioningState") != "Creating":
            return stored
        stored["_reads"] -= 1
        if stored["_reads"] > 0:
            return stored
        zones = stored.get("zones") or [None]
        if zones[0] in self.full_zones:
            code = "ZonalAllocationFailed" if zones[0] else "AllocationFailed"
            message = (f"Allocation failed. We do not have sufficient capacity for the requested VM size in "
                       f"{'zone ' + repr(zones[0]) if zones[0] else 'this region'}. Read more about improving "
                       f"likelihood of allocation success at http://aka.ms/allocation-guidance")
            stored["properties"]["provisioningState"] = "Failed"
            stored["_failure"] = (code, message)
            self.failed.append(message)
        else:
            stored["properties"]["provisioningState"] = "Succeeded"
            stored["_power"] = "running"
        return stored

    def _vm_statuses(self, vm: dict) -> list[dict]:
        self._advance(vm)
        state = vm["properties"]["provisioningState"]
        if state == "Failed":
            code, message = vm["_failure"]
            return [{"code": f"ProvisioningState/failed/{code}", "level": "Error",
                     "displayStatus": "Provisioning failed", "message": message}]
        if state == "Creating":
            return [{"code": "ProvisioningState/creating", "level": "Info", "displayStatus": "Creating"}]
        return [{"code": "ProvisioningState/succeeded"}, {"code": f"PowerState/{vm['_power']}"}]

    def _public(self, stored: dict) -> dict:
        """A resource as ARM shows it: a VM's model without its instance view (A1)."""
        return {k: v for k, v in stored.items() if not k.startswith("_")}

    def _put_vm(self, path: str, key: str, data: dict) -> tuple[int, Any]:
        props = data.get("properties") or {}
        size = (props.get("hardwareProfile") or {}).get("vmSize", "")
        region = data.get("location", "")
        if size in RETIRED:  # A8
            return _error(409, "SkuNotAvailable", f"The requested VM size {size} has been retired: {RETIRED[size]}")
        if size.startswith("Standard_N") and region not in SIZES.get(size, ()):  # A3
            return _error(409, "SkuNotAvailable", f"The requested VM size {size} is not available in location "
                                                  f"'{region}'.")
        sku = ((props.get("storageProfile") or {}).get("imageReference") or {}).get("sku", "")
        if GENERATIONS.get(size) == "V2" and sku in GEN1_SKUS:  # A3
            return _error(400, "BadRequest", f"The selected VM size '{size}' cannot boot Hypervisor Generation "
                                             f"'1'. Use an image of generation 2.")
        for zone in data.get("zones") or []:  # A6
            if zone not in ("1", "2", "3"):
                return _error(400, "InvalidParameter", f"The zone(s) '{zone}' for resource '{path}' is not supported.")
        nics = (props.get("networkProfile") or {}).get("networkInterfaceConfigurations") or []
        for nic in nics:
            for conf in nic["properties"]["ipConfigurations"]:
                ip = conf["properties"].get("publicIPAddressConfiguration")
                if ip is None:
                    continue
                sku_name = (ip.get("sku") or {}).get("name", "Basic")
                if sku_name != "Standard":  # A2
                    return _error(400, "BasicSkuPublicIpRetired", "Basic SKU public IP addresses can no longer be "
                                                                  "created; use the Standard SKU.")
                if ip["properties"].get("publicIPAllocationMethod", "Static") != "Static":
                    return _error(400, "StandardSkuPublicIPAddressesMustBeStatic",
                                  "Standard sku publicIp must have AllocationMethod set to Static.")
        attach = [str((d.get("managedDisk") or {}).get("id", "")) for d in
                  (props.get("storageProfile") or {}).get("dataDisks") or [] if d.get("createOption") == "Attach"]
        for disk in attach:  # A9
            held = self.resources.get(disk.lower())
            if held is None:
                return _error(404, "NotFound", f"Disk {disk.rsplit('/', 1)[-1]} is not found.")
            if held.get("managedBy") and held["managedBy"].lower() != key:
                return _error(409, "OperationNotAllowed", f"Disk {disk.rsplit('/', 1)[-1]} is already attached to "
                                                          f"VM {held['managedBy']}.")
        for disk in attach:
            self.resources[disk.lower()]["managedBy"] = path
        name = path.rsplit("/", 1)[-1]
        group = path.split("/providers/")[0]
        n = next(self._ids)
        ip = f"{group}/providers/Microsoft.Network/publicIPAddresses/{name}-ip"
        self.resources[ip.lower()] = {"id": ip, "properties": {"ipAddress": f"198.51.100.{n % 250 + 2}"}}
        nic = f"{group}/providers/Microsoft.Network/networkInterfaces/{name}-nic"
        self.resources[nic.lower()] = {"id": nic, "properties": {"virtualMachine": {"id": path}, "ipConfigurations": [
            {"properties": {"privateIPAddress": f"10.42.0.{n % 250 + 4}", "publicIPAddress": {"id": ip}}}]}}
        stored = {"id": path, "name": name, **data, "_power": "starting", "_reads": self.create_polls}
        stored["properties"] = {**props, "provisioningState": "Creating"}  # A7
        identity = (self.resources.get(key) or {}).get("identity") or self._identity_of(data)  # A11 (kept on a re-PUT)
        if identity is None:
            stored.pop("identity", None)
        else:
            stored["identity"] = identity
        self.resources[key] = stored
        self._identity_created(key, stored)
        return 201, self._public(stored)
