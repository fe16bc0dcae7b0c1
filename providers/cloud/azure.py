"""Azure virtual machines through apache-libcloud's ARM connection: `sky.Azure(region=..., vm_size=...)`.

The phases are implemented once in `providers.cloud.base.LibcloudProvider` (see `providers.base.Provider`
for each contract); this module holds what is Azure's own. libcloud's ARM driver cannot create resource
groups, security rules or spot VMs, so this module sends those ARM requests itself over the driver's
authenticated connection (`_arm`). Layout, per pool: one resource group ``skyhive-<pool>`` (tagged
``skyhive-pool``) holding a network security group (SSH from `ssh_cidr`; Azure's default rules already
admit all traffic within the virtual network), a virtual network with one subnet, and one VM per node
tagged ``skyhive-pool``/``skyhive-node`` at creation, whose NIC, public address and OS disk are deleted
with it (``deleteOption: Delete``). `cleanup` deletes the resource group and re-reads it until it is
gone. Spot is Azure's ``priority: Spot`` with eviction by deletion. ARM answers a VM's PUT with 201 and
reports a failed allocation (``AllocationFailed``, ``ZonalAllocationFailed``) later, as provisioningState
``Failed``: `launch_sync` reads each new VM's instance view until ARM has placed it, so a full zone moves
on to the next zone (`zones`), then a `Fallback`'s next offer, instead of waiting for a VM that never runs.

Sizes: without an accelerator the pool gets `vm_size` (default ``Standard_D2s_v5``). With one
(``Pool(accelerator="V100:2")``) the cheapest GPU size of the region that has it is chosen from the shipped
table ``data/azure.json`` (see `providers.cloud.data.generate`); a `vm_size` given as well is checked
against the request instead. The choice and its price are the pool's `plan`.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ...errors import CloudAPIError
from ..features import Feature, Features
from ..base import ClusterSpec, NodeHandle, ProvisionError, SSHReach
from ..volumes import mounts_of
from . import azure_end, azure_shutdown, azure_volumes, catalog
from .base import ACTIVE_STATES, CloudTimeouts, ErrorKind, LibcloudProvider
from .boot import BOOT_LIMIT, check_limit, ready_command, shown, warn_off
from .keys import pool_key, remove_pool_key

__all__ = ["Azure", "AZURE_ERRORS"]

log = logging.getLogger(__name__)

#: The size of a pool that asks for no accelerator and names no `vm_size`.
DEFAULT_VM_SIZE = "Standard_D2s_v5"

DEFAULT_IMAGE = ("Canonical", "0001-com-ubuntu-server-jammy", "22_04-lts-gen2", "latest")
#: Microsoft's Ubuntu 22.04 HPC image (Gen2, with the NVIDIA driver and CUDA), for GPU sizes
DEFAULT_GPU_IMAGE = ("microsoft-dsvm", "ubuntu-hpc", "2204", "latest")

RESOURCES_API, NETWORK_API, COMPUTE_API = "2021-04-01", "2023-05-01", "2023-03-01"
POOL_TAG, NODE_TAG = "skyhive-pool", "skyhive-node"

#: ARM error codes -> kinds
AZURE_ERRORS: Mapping[str, ErrorKind] = {
    "SkuNotAvailable": ErrorKind.CAPACITY,
    "AllocationFailed": ErrorKind.CAPACITY,
    "ZonalAllocationFailed": ErrorKind.CAPACITY,
    "OverconstrainedAllocationRequest": ErrorKind.CAPACITY,
    "QuotaExceeded": ErrorKind.QUOTA,
    "OperationNotAllowed": ErrorKind.QUOTA,  # how ARM words "exceeds the regional cores quota"
    "TooManyRequests": ErrorKind.TRANSIENT,
    "RetryableError": ErrorKind.TRANSIENT,
    "InternalServerError": ErrorKind.TRANSIENT,
    "ResourceNotFound": ErrorKind.NOT_FOUND,
    "ResourceGroupNotFound": ErrorKind.NOT_FOUND,
    "NotFound": ErrorKind.NOT_FOUND,
    "InUseSubnetCannotBeDeleted": ErrorKind.DEPENDENCY,
    "ResourceGroupBeingDeleted": ErrorKind.DEPENDENCY,
}

#: an Azure VM's power state (or provisioning state) -> the base's state words
_STATES = {"starting": "pending", "creating": "pending", "running": "running", "stopping": "stopping",
           "deallocating": "stopping", "stopped": "stopped", "deallocated": "stopped", "deleting": "terminated",
           "failed": "stopped"}  # a VM whose allocation failed: not running, still to be deleted


class Azure(LibcloudProvider):
    """Virtual machines on Azure, created per pool (in a resource group of their own) and destroyed with it.

    - `region` ("eastus"), `vm_size` (default ``Standard_D2s_v5``, or by the pool's accelerator), `spot`,
      `image` (publisher, offer, sku,
      version), `disk_gb`, `ssh_user`, `ssh_cidr` (who may open SSH; default anywhere — key-only SSH).
    - `boot_limit`: seconds after its create by which a VM no client has bootstrapped is deallocated (the VM's
      auto-shutdown schedule, `azure_shutdown.py`; deleted once bootstrapped) — default 3600, 600..86400 (the
      schedule is a time of day); None or 0: no schedule (a warning).
    - `idle_timeout`: seconds with no client after which a bootstrapped VM deletes itself (default 1800; None:
      no watchdog). The VM's system-assigned managed identity is given Virtual Machine Contributor on the VM
      itself, and the watchdog and the boot-time limit run the node's self-end script (`azure_end.py`:
      delete, else deallocate); the boot-time limit's auto-shutdown schedule stays as a backstop
      `azure_end.BACKSTOP` seconds later. Granting the role needs Microsoft.Authorization/roleAssignments/write
      (Owner or User Access Administrator): without it the pool has no idle watchdog (one warning; the plan
      says so) and the schedule is its boot-time limit, as before.
    Credentials: a service principal in ``AZURE_TENANT_ID``, ``AZURE_SUBSCRIPTION_ID``, ``AZURE_CLIENT_ID``,
    ``AZURE_CLIENT_SECRET``; else the Azure CLI's login (``az login``); else a managed identity
    (`providers.cloud.azure_credentials`, the order of `azure-identity`'s default chain).
    """

    name: ClassVar[str] = "azure"
    #: interruption notices: a spot VM's eviction (Scheduled Events' Preempt, runtime/onnode/notices/azure.py)
    features: ClassVar[Features] = Features(Feature.CREATES_MACHINES, Feature.CHECK, Feature.VOLUMES, notices="azure", cannot={
        Feature.KEEP: "kept cloud pools are built and tested for aws only (its instances' reach, idle watchdog and "
                      "termination by recorded instance id); use a pool without a name, or give the instances to "
                      "sky.SSH(hosts=...) to keep a pool on them"})
    chooses = frozenset({"accelerator", "spot"})  # cpus/memory only narrow an accelerator's sizes: refused alone
    resource_options = {"region": "region", "zone": "zones", "instance_type": "vm_size", "disk_size": "disk_gb",
                        "volumes": "volumes"}
    error_kinds = AZURE_ERRORS
    state_map = {"pending": "provisioning", "running": "running", "stopping": "terminating",
                 "stopped": "terminating", "terminated": "terminated"}

    def __init__(self, region: str = "eastus", vm_size: str | None = None, spot: bool = False,
                 image: Sequence[str] | None = None,
                 disk_gb: int = 100, ssh_user: str = "skyhive", ssh_cidr: str = "0.0.0.0/0",
                 zones: Sequence[str] | None = None, timeouts: CloudTimeouts | None = None,
                 volumes: Sequence[Any] = (), boot_limit: float | None = BOOT_LIMIT,
                 idle_timeout: float | None = 1800.0) -> None:
        super().__init__(timeouts=timeouts)
        self.idle_timeout = idle_timeout
        self._watched: set[str] = set()  # provider ids of VMs whose identity may end them (their role granted)
        self._refused: set[str] = set()  # pools whose role assignment was refused (warned once each)
        self.boot_limit = check_limit(boot_limit, "Azure(boot_limit=...)")
        self.volumes = mounts_of(volumes)  # managed disks for the head node (`azure_volumes.py`)
        self.zones = [str(z) for z in zones] if zones else None
        for zone in self.zones or ():
            if zone not in ("1", "2", "3"):
                raise ValueError(f"Azure(zones=...): availability zones are '1', '2' or '3', not {zone!r}")
        if image is not None and len(image) != 4:
            raise ValueError(f"image must be (publisher, offer, sku, version), not {image!r}")
        self.region, self.vm_size, self.spot = region, vm_size, spot
        self.image: tuple[str, str, str, str] | None = tuple(image) if image is not None else None  # type: ignore[assignment]
        self.disk_gb, self.ssh_user, self.ssh_cidr = disk_gb, ssh_user, ssh_cidr
        self._driver: Any = None
        self._plans: dict[str, catalog.Choice] = {}

    # ---- choosing the size -----------------------------------------------------------------------------

    def choice(self, spec: ClusterSpec) -> catalog.Choice:
        """The VM size for `spec` and its price (no API call): by accelerator from the shipped table, else
        `vm_size` or the default. Raises `ProvisionError` naming the request when no size satisfies it."""
        choice = self._plans.get(spec.pool_id)
        if choice is None:
            spot = self.spot if spec.spot is None else spec.spot
            if spec.accelerator:
                choice = catalog.choose("azure", self.region, accelerator=spec.accelerator, cpus=spec.cpus,
                                        memory_gb=spec.memory_gb, instance_type=self.vm_size, nodes=spec.nodes,
                                        spot=spot)
            else:
                size = self.vm_size or DEFAULT_VM_SIZE
                choice = catalog.unpriced("azure", self.region, size, nodes=spec.nodes, spot=spot)
            self._plans[spec.pool_id] = choice
            if self.boot_limit is None:
                warn_off(self.name, spec.pool_id)
        return choice

    def plan(self, spec: ClusterSpec) -> dict[str, Any]:
        """See `Provider.plan`: the chosen size, its price (when the table has it) and the pool's cost."""
        choice = self.choice(spec)
        return {**choice.as_dict(), "summary": choice.summary(), "boot_limit": shown(self.boot_limit),
                "idle_watchdog": self._watchdog_shown(spec.pool_id)}

    def _watchdog_shown(self, pool_id: str) -> str:
        if not self.idle_timeout:
            return "off (idle_timeout=None: VMs run until skyhive down)"
        if pool_id in self._refused:
            return ("none: giving the VMs' identity a role was refused (needs Microsoft.Authorization/"
                    "roleAssignments/write); VMs run until skyhive down")
        return (f"a VM with no client for {self.idle_timeout:g} s deletes itself (its managed identity, Virtual "
                "Machine Contributor on the VM; granting it needs Owner or User Access Administrator, without "
                "which there is no watchdog)")

    def describe(self) -> dict[str, Any]:
        return {"provider": self.name, "region": self.region, "vm_size": self.vm_size, "spot": self.spot,
                "image": list(self.image) if self.image else None, "disk_gb": self.disk_gb, "ssh_user": self.ssh_user,
                "ssh_cidr": self.ssh_cidr, "zones": self.zones, "boot_limit": self.boot_limit,
                "idle_timeout": self.idle_timeout,
                "volumes": [[v.target, v.name, v.size_gb] for v in self.volumes]}

    @property
    def driver(self) -> Any:
        if self._driver is None:
            from libcloud.compute.drivers.azure_arm import AzureNodeDriver

            from .azure_credentials import service_principal, token_source

            values = service_principal()
            if values is not None:
                self._driver = AzureNodeDriver(*values, region=self.region)
                return self._driver
            source = token_source()  # the Azure CLI's login or a managed identity (fatal when neither)
            if not source.subscription:
                raise ProvisionError(f"azure: {source.where} names no subscription: set AZURE_SUBSCRIPTION_ID",
                                     kind="fatal")
            from libcloud.common.azure_arm import AzureResourceManagementConnection

            class TokenConnection(AzureResourceManagementConnection):  # type: ignore[misc]
                def get_token_from_credentials(self) -> None:  # libcloud asks again 5 min before expiry
                    self.access_token, self.expires_on = source.fetch()

            class TokenDriver(AzureNodeDriver):  # type: ignore[misc]
                connectionCls = TokenConnection

            log.info("azure: credentials from %s, subscription %s", source.where, source.subscription)
            self._driver = TokenDriver(source.tenant, source.subscription, "token", "token", region=self.region)
        return self._driver

    def error_code(self, exc: BaseException) -> str | None:
        from libcloud.common.exceptions import BaseHTTPError

        if isinstance(exc, BaseHTTPError):  # libcloud words ARM errors "[Code] message"
            match = re.match(r"\[([^\]]+)\]", str(exc.message))
            return match.group(1) if match else f"http{exc.code}"
        return super().error_code(exc)

    # ---- ARM requests ----------------------------------------------------------------------------------

    def group(self, pool_id: str) -> str:
        return f"skyhive-{pool_id}"

    def _path(self, pool_id: str, resource: str = "") -> str:
        base = f"/subscriptions/{self.driver.subscription_id}/resourceGroups/{self.group(pool_id)}"
        return base + resource

    def arm(self, path: str, api: str, method: str = "GET", body: dict[str, Any] | None = None) -> Any:
        """One ARM call (`_arm`): for the volume and auto-shutdown modules (`azure_volumes.py`, `azure_shutdown.py`)."""
        return self._arm(path, api, method, body)

    def find_volume(self, name: str) -> Any:
        """See `Provider.find_volume` (managed disks, `azure_volumes.py`)."""
        return azure_volumes.find(self, name)

    def delete_volume(self, name: str) -> None:
        """See `Provider.delete_volume` (managed disks, `azure_volumes.py`)."""
        azure_volumes.delete(self, name)

    def _arm(self, path: str, api: str, method: str = "GET", body: dict[str, Any] | None = None,
             params: dict[str, str] | None = None) -> Any:
        from libcloud.common.exceptions import BaseHTTPError

        try:
            return self.driver.connection.request(path, params={"api-version": api, **(params or {})}, data=body,
                                                  method=method).object
        except BaseHTTPError as exc:
            if exc.code == 204:  # ARM's "nothing to delete"; libcloud counts only 200-202 as success
                return {}
            raise

    # ---- the blocking primitives -----------------------------------------------------------------------

    def zones_sync(self, spec: ClusterSpec) -> list[str]:
        """`zones` in order (a full zone moves on to the next), else the region (Azure places the VM)."""
        return list(self.zones) if self.zones else [self.region]

    def prepare_sync(self, spec: ClusterSpec) -> None:
        log.info("azure: pool %s: %s", spec.pool_id, self.choice(spec).summary())
        pool_key(spec.pool_id)
        for path, api, body in self.prepare_requests(spec.pool_id):
            self._arm(path, api, "PUT", body)

    def prepare_requests(self, pool_id: str) -> list[tuple[str, str, dict[str, Any]]]:
        """(path, api version, body) of each PUT that `prepare` sends, in order."""
        tags = {POOL_TAG: pool_id}
        nsg = self._path(pool_id, "/providers/Microsoft.Network/networkSecurityGroups/skyhive")
        return [
            (self._path(pool_id), RESOURCES_API, {"location": self.region, "tags": tags}),
            (nsg, NETWORK_API, {"location": self.region, "tags": tags, "properties": {"securityRules": [{
                "name": "ssh-from-client", "properties": {
                    "priority": 100, "direction": "Inbound", "access": "Allow", "protocol": "Tcp",
                    "sourceAddressPrefix": self.ssh_cidr, "sourcePortRange": "*",
                    "destinationAddressPrefix": "*", "destinationPortRange": "22"}}]}}),
            (self._path(pool_id, "/providers/Microsoft.Network/virtualNetworks/skyhive"), NETWORK_API, {
                "location": self.region, "tags": tags, "properties": {
                    "addressSpace": {"addressPrefixes": ["10.42.0.0/16"]},
                    "subnets": [{"name": "nodes", "properties": {"addressPrefix": "10.42.0.0/24",
                                                                 "networkSecurityGroup": {"id": nsg}}}]}}),
        ]

    def image_for(self, spec: ClusterSpec) -> tuple[str, str, str, str]:
        """The image of `spec`'s VMs: `image`, else Ubuntu 22.04 (Gen2), or for a GPU size Microsoft's
        Ubuntu HPC image (NVIDIA driver included). A size that boots Gen2 only refuses a Gen1 image here."""
        choice = self.choice(spec)
        image = self.image or (DEFAULT_GPU_IMAGE if choice.accelerators or spec.accelerator else DEFAULT_IMAGE)
        if catalog._table("azure").get("generations", {}).get(choice.instance_type) == "V2" and \
                not image[2].lower().endswith(("gen2", "-g2")) and image[2] != DEFAULT_GPU_IMAGE[2]:
            raise ProvisionError(f"azure: size {choice.instance_type} boots Hyper-V generation 2 images only; "
                                 f"image sku {image[2]!r} looks like generation 1 (use a '-gen2' sku)", kind="fatal")
        return image

    def vm_request(self, spec: ClusterSpec, index: int) -> tuple[str, dict[str, Any]]:
        """(path, body) of the PUT that creates node `index`."""
        _, public = pool_key(spec.pool_id)
        name = f"node-{index}"
        spot = self.spot if spec.spot is None else spec.spot
        subnet = self._path(spec.pool_id, "/providers/Microsoft.Network/virtualNetworks/skyhive/subnets/nodes")
        publisher, offer, sku, version = self.image_for(spec)
        properties: dict[str, Any] = {
            "hardwareProfile": {"vmSize": self.choice(spec).instance_type},
            "storageProfile": {
                "imageReference": {"publisher": publisher, "offer": offer, "sku": sku, "version": version},
                "osDisk": {"createOption": "FromImage", "diskSizeGB": self.disk_gb, "deleteOption": "Delete"}},
            "osProfile": {"computerName": f"skyhive-{index}", "adminUsername": self.ssh_user, "linuxConfiguration": {
                "disablePasswordAuthentication": True,
                "ssh": {"publicKeys": [{"path": f"/home/{self.ssh_user}/.ssh/authorized_keys", "keyData": public}]}}},
            "networkProfile": {"networkApiVersion": "2020-11-01", "networkInterfaceConfigurations": [{
                "name": f"{name}-nic", "properties": {"primary": True, "deleteOption": "Delete", "ipConfigurations": [{
                    "name": "ip", "properties": {"subnet": {"id": subnet}, "publicIPAddressConfiguration": {
                        "name": f"{name}-ip", "sku": {"name": "Standard", "tier": "Regional"},  # Basic is retired
                        "properties": {"deleteOption": "Delete", "publicIPAllocationMethod": "Static"}}}}]}}]},
        }
        deadline = time.time() + self.boot_limit if self.boot_limit else None  # the self-end timer, at first boot
        properties["osProfile"]["customData"] = _b64(azure_end.boot_script(deadline))  # cloud-init runs it
        if spot:
            properties.update(priority="Spot", evictionPolicy="Delete", billingProfile={"maxPrice": -1})
        if index == 0 and self.volumes:
            properties["storageProfile"]["dataDisks"] = azure_volumes.data_disks(self, self.volumes)
        body = {"location": self.region, "tags": {**dict(spec.tags), POOL_TAG: spec.pool_id, NODE_TAG: str(index)},
                "identity": {"type": "SystemAssigned"}, "properties": properties}  # ends itself: azure_end.py
        return self._path(spec.pool_id, f"/providers/Microsoft.Compute/virtualMachines/{name}"), body

    def launch_sync(self, spec: ClusterSpec, nodes: Sequence[int], zone: str) -> list[NodeHandle]:
        handles = []
        if 0 in nodes and self.volumes:
            azure_volumes.ensure(self)  # the head node's disks, made where missing
        for index in nodes:
            path, body = self.vm_request(spec, index)
            if self.zones:
                body["zones"] = [zone]
            vm = self._arm(path, COMPUTE_API, "PUT", body)
            if azure_end.grant(self, path, ((vm or {}).get("identity") or {}).get("principalId"), self._refused,
                               spec.pool_id):
                self._watched.add(f"{spec.pool_id}/{name_of(path)}")
            azure_shutdown.set_limit(self, path, after=azure_end.BACKSTOP)  # the backstop of the self-end timer
            handles.append(self._handle(vm, spec.pool_id, {}, launched_at=time.time()))
        for handle in handles:  # ARM answers 201 at once; whether the VM got a machine comes later
            self._allocated(spec.pool_id, handle.provider_id.partition("/")[2])
        return handles

    async def bootstrapped(self, handle: NodeHandle) -> None:
        """The node is bootstrapped: its auto-shutdown schedule (the boot-time limit) is deleted."""
        pool_id, _, name = handle.provider_id.partition("/")
        await self.call(azure_shutdown.lift, self,
                        self._path(pool_id, f"/providers/Microsoft.Compute/virtualMachines/{name}"))

    def _allocated(self, pool_id: str, name: str) -> None:
        """Wait until ARM has placed VM `name` (a power state, or provisioningState Succeeded), raising its
        failure as a `CloudAPIError` with ARM's code (``ZonalAllocationFailed``, ``AllocationFailed``:
        capacity, so the next zone is tried, then the next offer). ARM answers the PUT with 201 and reports
        a failed allocation later as provisioningState ``Failed``, in the instance view's statuses. Bounded
        by `timeouts.running` (then `wait_running` goes on watching)."""
        view_path = self._path(pool_id, f"/providers/Microsoft.Compute/virtualMachines/{name}/instanceView")
        deadline = time.monotonic() + self.timeouts.running
        while time.monotonic() < deadline:
            statuses = (self._arm(view_path, COMPUTE_API) or {}).get("statuses", [])
            for status in statuses:
                code = str(status.get("code") or "")
                if code.lower().startswith("provisioningstate/failed"):
                    reason = code.split("/", 2)[2] if code.count("/") >= 2 else "ProvisioningFailed"
                    raise CloudAPIError(reason, f"VM {name}: {status.get('message') or status.get('displayStatus')}",
                                        409)
            codes = [str(st.get("code") or "").lower() for st in statuses]
            if any(c.startswith("powerstate/") for c in codes) or "provisioningstate/succeeded" in codes:
                return
            time.sleep(self.timeouts.poll)

    def list_sync(self, pool_id: str, states: Sequence[str] | None = ACTIVE_STATES) -> list[NodeHandle]:
        try:
            vms = self._arm(self._path(pool_id, "/providers/Microsoft.Compute/virtualMachines"),
                            COMPUTE_API).get("value", [])
        except Exception as exc:
            if self.classify(exc) is ErrorKind.NOT_FOUND:  # no resource group: nothing of the pool left
                return []
            raise
        addresses = self._addresses(pool_id) if vms else {}
        found = [self._handle(vm, pool_id, addresses, self._power(pool_id, vm.get("name", "")))
                 for vm in vms if (vm.get("tags") or {}).get(POOL_TAG) == pool_id]
        return sorted((h for h in found if states is None or h.state in states), key=lambda h: h.node)

    def _power(self, pool_id: str, name: str) -> str:
        """The VM's power state ("running", "deallocated", …) from its instance view (the list has none);
        "" when the VM went away meanwhile."""
        try:
            view = self._arm(self._path(pool_id, f"/providers/Microsoft.Compute/virtualMachines/{name}/instanceView"),
                             COMPUTE_API)
        except Exception as exc:
            if self.classify(exc) is ErrorKind.NOT_FOUND:
                return ""
            raise
        codes = [s.get("code", "") for s in (view or {}).get("statuses", [])]
        return next((c.split("/", 1)[1] for c in codes if c.startswith("PowerState/")), "")

    def _addresses(self, pool_id: str) -> dict[str, tuple[str, str | None]]:
        """VM name -> (private address, public address), from the group's NICs and public addresses."""
        nics = self._arm(self._path(pool_id, "/providers/Microsoft.Network/networkInterfaces"), NETWORK_API)
        ips = self._arm(self._path(pool_id, "/providers/Microsoft.Network/publicIPAddresses"), NETWORK_API)
        public = {ip["id"].lower(): ip.get("properties", {}).get("ipAddress") for ip in ips.get("value", [])}
        out: dict[str, tuple[str, str | None]] = {}
        for nic in nics.get("value", []):
            vm_id = ((nic.get("properties") or {}).get("virtualMachine") or {}).get("id", "")
            for conf in nic.get("properties", {}).get("ipConfigurations", []):
                props = conf.get("properties", {})
                pub_id = (props.get("publicIPAddress") or {}).get("id", "").lower()
                out[vm_id.rsplit("/", 1)[-1]] = (props.get("privateIPAddress", ""), public.get(pub_id))
        return out

    def terminate_sync(self, provider_id: str) -> None:
        pool_id, _, name = provider_id.partition("/")
        self._arm(self._path(pool_id, f"/providers/Microsoft.Compute/virtualMachines/{name}"), COMPUTE_API, "DELETE")

    def cleanup_sync(self, pool_id: str) -> list[str]:
        azure_end.revoke(self, self._path(pool_id))  # the VMs' role assignments (not in the group)
        try:
            self._arm(self._path(pool_id), RESOURCES_API, "DELETE")
            self._arm(self._path(pool_id), RESOURCES_API)
        except Exception as exc:
            if self.classify(exc) is not ErrorKind.NOT_FOUND:
                raise
            deleted = [f"resource group {self.group(pool_id)}"]
            if remove_pool_key(pool_id):
                deleted.append("the pool's private key")
            return deleted
        # still there (ARM deletes a group asynchronously): the base retries while this says "dependency"
        raise CloudAPIError("ResourceGroupBeingDeleted", f"resource group {self.group(pool_id)} is being deleted", 409)

    def _handle(self, vm: dict[str, Any], pool_id: str, addresses: Mapping[str, tuple[str, str | None]],
                power: str = "", launched_at: float | None = None) -> NodeHandle:
        props = vm.get("properties") or {}
        provisioning = str(props.get("provisioningState") or "").lower()
        state = _STATES.get(power) or _STATES.get(provisioning, "pending")
        private, public = addresses.get(vm.get("name", ""), ("", None))
        key_path, _ = pool_key(pool_id, create=False)
        extra: dict[str, Any] = {"pool_id": pool_id, "zone": vm.get("location")}
        if launched_at is not None:
            extra["launched_at"] = launched_at
        size = str((props.get("hardwareProfile") or {}).get("vmSize") or "")
        info = catalog.instance("azure", size) if size else None
        gpus = info.accelerators if info else 0
        first_boot = ready_command(gpu=bool(gpus))
        watched = f"{pool_id}/{vm.get('name')}" in self._watched
        if self.volumes and (vm.get("tags") or {}).get(NODE_TAG) == "0":  # the head node mounts the volumes
            first_boot = "; ".join([first_boot, *azure_volumes.mount_commands(self.volumes)])
        return NodeHandle(node=int((vm.get("tags") or {}).get(NODE_TAG, -1)), provider_id=f"{pool_id}/{vm.get('name')}",
                          private_addr=private, public_addr=public, state=state, extra=extra, accelerators=gpus,
                          accelerator=info.accelerator if info else None,
                          reach=SSHReach(host=public or private, user=self.ssh_user, key=str(key_path),
                                         ready_command=first_boot, boot_limit_off=azure_end.BOOT_LIMIT_OFF
                                         if self.boot_limit else "", shutdown_command=azure_end.SHUTDOWN_COMMAND,
                                         idle_shutdown=(self.idle_timeout or 0.0) if watched else 0.0))


def name_of(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()
