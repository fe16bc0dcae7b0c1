"""Google Compute Engine through apache-libcloud: `sky.GCP(project=..., region=..., machine_type=...)`.

The phases are implemented once in `providers.cloud.base.LibcloudProvider` (see `providers.base.Provider`
for each contract); this module holds what is GCE's own: its error codes, a per-pool firewall rule (SSH
from the client to the pool's network tag, all traffic between nodes carrying that tag), the pool's SSH
key in instance metadata (``ssh-keys``), labels ``skyhive-pool``/``skyhive-node`` set at creation and
used to find nodes again, spot as GCE's preemptible scheduling.

Machines are named, not chosen: `machine_type` (default ``e2-standard-2``). Nothing that can be read
offline prices GCE's GPUs or says which zone offers which (libcloud's price list has only the CPU
families), so there is no table to choose from. A pool that asks for an accelerator must name a machine
type that carries it (A2: A100, A3: H100, G2: L4); with the default type it is refused, never ignored.
GPUs attached to N1 machines (T4, V100, P100) are not supported yet.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ..base import ClusterSpec, NodeHandle, ProvisionError, SSHReach
from . import catalog
from .base import ACTIVE_STATES, CloudTimeouts, ErrorKind, LibcloudProvider, named_machine
from .keys import pool_key, remove_pool_key

__all__ = ["GCP", "GCE_ERRORS", "GCE_STATES"]

#: The machine of a pool that names no `machine_type`.
DEFAULT_MACHINE_TYPE = "e2-standard-2"

log = logging.getLogger(__name__)

POOL_LABEL = "skyhive-pool"
NODE_LABEL = "skyhive-node"

#: GCE error codes (the API's `reason`/`code` strings) -> what they mean for provisioning.
GCE_ERRORS: Mapping[str, ErrorKind] = {
    "ZONE_RESOURCE_POOL_EXHAUSTED": ErrorKind.CAPACITY,
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": ErrorKind.CAPACITY,
    "RESOURCE_POOL_EXHAUSTED": ErrorKind.CAPACITY,
    "UNSUPPORTED_OPERATION": ErrorKind.CAPACITY,
    "QUOTA_EXCEEDED": ErrorKind.QUOTA,
    "quotaExceeded": ErrorKind.QUOTA,
    "rateLimitExceeded": ErrorKind.TRANSIENT,
    "userRateLimitExceeded": ErrorKind.TRANSIENT,
    "backendError": ErrorKind.TRANSIENT,
    "internalError": ErrorKind.TRANSIENT,
    "RESOURCE_NOT_FOUND": ErrorKind.NOT_FOUND,
    "notFound": ErrorKind.NOT_FOUND,
    "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE": ErrorKind.DEPENDENCY,
    "resourceInUseByAnotherResource": ErrorKind.DEPENDENCY,
}

#: GCE instance states -> the base's state words (EC2's vocabulary, see `base.ACTIVE_STATES`).
_TO_BASE = {"provisioning": "pending", "staging": "pending", "running": "running", "stopping": "stopping",
            "suspending": "stopping", "suspended": "stopped", "terminated": "stopped", "repairing": "running"}

#: the base's state words -> lifecycle states
GCE_STATES: Mapping[str, str] = {"pending": "provisioning", "running": "running", "stopping": "terminating",
                                 "stopped": "terminating"}


class GCP(LibcloudProvider):
    """Machines on Google Compute Engine, created per pool and destroyed with it.

    - `project`, `region` (zones tried in order: `zones`, default the region's ``-a``, ``-b``, ``-c``,
      ``-f``), `machine_type` (default ``e2-standard-2``; required with an accelerator), `spot` (preemptible), `image` (a family or
      image name, default ``ubuntu-2204-lts``), `disk_gb`, `ssh_user`, `ssh_cidr` (default: anywhere —
      key-only SSH), `network`.
    Credentials: a service account's JSON key file in ``GOOGLE_APPLICATION_CREDENTIALS``.
    """

    name: ClassVar[str] = "gcp"
    chooses = frozenset({"accelerator", "spot"})  # an accelerator needs a named machine type (`named_machine`)
    resource_options = {"region": "region", "zone": "zones", "instance_type": "machine_type", "image_id": "image",
                        "disk_size": "disk_gb"}
    error_kinds = GCE_ERRORS
    state_map = GCE_STATES

    def __init__(self, project: str | None = None, region: str = "us-central1", zones: Sequence[str] | None = None,
                 machine_type: str | None = None, spot: bool = False, image: str = "ubuntu-2204-lts",
                 disk_gb: int = 100, ssh_user: str = "skyhive", ssh_cidr: str = "0.0.0.0/0",
                 network: str = "default", timeouts: CloudTimeouts | None = None) -> None:
        super().__init__(timeouts=timeouts)
        self.project = project
        self.region = region
        self.zones = list(zones) if zones else [f"{region}-{z}" for z in "abcf"]
        self.machine_type = machine_type
        self.spot = spot
        self.image = image
        self.disk_gb = disk_gb
        self.ssh_user = ssh_user
        self.ssh_cidr = ssh_cidr
        self.network = network
        self._driver: Any = None

    def describe(self) -> dict[str, Any]:
        return {"provider": self.name, "project": self.project, "region": self.region, "zones": self.zones,
                "machine_type": self.machine_type, "spot": self.spot, "image": self.image,
                "disk_gb": self.disk_gb, "ssh_user": self.ssh_user, "ssh_cidr": self.ssh_cidr,
                "network": self.network}

    @property
    def driver(self) -> Any:
        if self._driver is None:
            from libcloud.compute.drivers.gce import GCENodeDriver

            keyfile = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
            if not keyfile or not self.project:
                raise ProvisionError("gcp: set GOOGLE_APPLICATION_CREDENTIALS (a service account key file) and "
                                     "pass GCP(project=...)", kind="fatal")
            import json

            with open(keyfile) as fh:
                email = json.load(fh)["client_email"]
            self._driver = GCENodeDriver(email, keyfile, project=self.project, datacenter=self.zones[0])
        return self._driver

    def error_code(self, exc: BaseException) -> str | None:
        from libcloud.common.google import GoogleBaseError, QuotaExceededError, ResourceNotFoundError

        if not isinstance(exc, GoogleBaseError):
            return super().error_code(exc)
        code = getattr(exc, "code", None)
        if isinstance(code, str) and code:
            return code
        # libcloud 3.9 drops the code of these two on the way to the base class: name it by class
        if isinstance(exc, ResourceNotFoundError):
            return "notFound"
        if isinstance(exc, QuotaExceededError):
            return "QUOTA_EXCEEDED"
        return type(exc).__name__

    # ---- names -----------------------------------------------------------------------------------------

    @staticmethod
    def tag(pool_id: str) -> str:
        """The pool's network tag and firewall rule name (GCE names: lower case, digits, dashes)."""
        return "skyhive-" + "".join(c if c.isalnum() else "-" for c in pool_id.lower())

    # ---- the machine ------------------------------------------------------------------------------------

    def size(self, spec: ClusterSpec) -> str:
        """The machine type of `spec`'s nodes (see `named_machine`: GCE has no table to choose from)."""
        return named_machine("gcp", spec, self.machine_type, DEFAULT_MACHINE_TYPE,
                             "GCP(machine_type='a2-highgpu-1g') for one A100, 'a3-highgpu-8g' for 8 H100, "
                             "'g2-standard-8' for one L4; GPUs attached to N1 machines are not supported yet")

    def plan(self, spec: ClusterSpec) -> dict[str, Any]:
        """See `Provider.plan`: the machine type (no price: GCE has no table here)."""
        spot = self.spot if spec.spot is None else spec.spot
        choice = catalog.unpriced("gcp", self.region, self.size(spec), nodes=spec.nodes, spot=bool(spot))
        return {**choice.as_dict(), "summary": choice.summary()}

    # ---- the blocking primitives -----------------------------------------------------------------------

    def zones_sync(self, spec: ClusterSpec) -> list[str]:
        return list(self.zones)

    def prepare_sync(self, spec: ClusterSpec) -> None:
        self.size(spec)  # an accelerator request it cannot meet fails before anything is created
        pool_key(spec.pool_id)
        tag = self.tag(spec.pool_id)
        if any(fw.name == tag for fw in self.driver.ex_list_firewalls()):
            return
        self.driver.ex_create_firewall(
            tag, allowed=[{"IPProtocol": "tcp", "ports": ["22"]}], network=self.network,
            source_ranges=[self.ssh_cidr], target_tags=[tag], description=f"skyhive pool {spec.pool_id}: SSH")
        self.driver.ex_create_firewall(
            f"{tag}-internal", allowed=[{"IPProtocol": "all"}], network=self.network, source_tags=[tag],
            target_tags=[tag], description=f"skyhive pool {spec.pool_id}: all traffic between its nodes")

    def create_request(self, spec: ClusterSpec, index: int, zone: str) -> dict[str, Any]:
        """The keyword arguments of libcloud's ``create_node`` for node `index` (what is sent)."""
        _, public = pool_key(spec.pool_id)
        spot = self.spot if spec.spot is None else spec.spot
        return {
            "name": f"{self.tag(spec.pool_id)}-{index}", "size": self.size(spec), "image": self.image,
            "location": zone, "ex_network": self.network, "ex_tags": [self.tag(spec.pool_id)],
            "ex_metadata": {"ssh-keys": f"{self.ssh_user}:{public} {self.ssh_user}"},
            "ex_labels": {**dict(spec.tags), POOL_LABEL: self.tag(spec.pool_id).removeprefix("skyhive-"),
                          NODE_LABEL: str(index)},
            "ex_preemptible": bool(spot), "ex_automatic_restart": False if spot else None,
            "ex_on_host_maintenance": "TERMINATE" if spot else None, "ex_disk_size": self.disk_gb,
        }

    def launch_sync(self, spec: ClusterSpec, nodes: Sequence[int], zone: str) -> list[NodeHandle]:
        import time

        return [self._handle(self.driver.create_node(**self.create_request(spec, i, zone)), spec.pool_id,
                             launched_at=time.time()) for i in nodes]

    def list_sync(self, pool_id: str, states: Sequence[str] | None = ACTIVE_STATES) -> list[NodeHandle]:
        label = self.tag(pool_id).removeprefix("skyhive-")
        found = [self._handle(n, pool_id) for n in self.driver.list_nodes(ex_zone="all")
                 if (n.extra.get("labels") or {}).get(POOL_LABEL) == label]
        return sorted((h for h in found if states is None or h.state in states), key=lambda h: h.node)

    def terminate_sync(self, provider_id: str) -> None:
        zone, _, name = provider_id.partition("/")
        node = self.driver.ex_get_node(name, zone)
        self.driver.destroy_node(node, destroy_boot_disk=True)

    def cleanup_sync(self, pool_id: str) -> list[str]:
        tag = self.tag(pool_id)
        deleted = []
        for fw in self.driver.ex_list_firewalls():
            if fw.name in (tag, f"{tag}-internal"):
                self.driver.ex_destroy_firewall(fw)
                deleted.append(f"firewall rule {fw.name}")
        if remove_pool_key(pool_id):
            deleted.append("the pool's private key")
        return deleted

    def _handle(self, node: Any, pool_id: str, launched_at: float | None = None) -> NodeHandle:
        labels = node.extra.get("labels") or {}
        state = _TO_BASE.get(str(node.extra.get("status") or "").lower(), "pending")
        zone = getattr(node.extra.get("zone"), "name", None) or str(node.extra.get("zone") or "")
        key_path, _ = pool_key(pool_id, create=False)
        public = (node.public_ips or [None])[0]
        private = (node.private_ips or [""])[0] or ""
        extra: dict[str, Any] = {"pool_id": pool_id, "zone": zone}
        if launched_at is not None:
            extra["launched_at"] = launched_at
        return NodeHandle(node=int(labels.get(NODE_LABEL, -1)), provider_id=f"{zone}/{node.name}",
                          private_addr=private, public_addr=public, state=state, extra=extra,
                          reach=SSHReach(host=public or private, user=self.ssh_user, key=str(key_path)))
