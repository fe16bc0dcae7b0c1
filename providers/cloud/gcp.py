"""Google Compute Engine: `sky.GCP(project=..., region=..., machine_type=...)`.

The phases are implemented once in `providers.cloud.base.LibcloudProvider` (see `providers.base.Provider`
for each contract); this module holds what is GCE's own. It speaks GCE's ``compute/v1`` REST API through
`providers.cloud.gce_api` (libcloud's GCE driver cannot send what a GPU machine needs, nor read
``gcloud``'s user credentials). Per pool: a firewall rule (SSH from the client to the pool's network tag)
and one for all traffic between nodes carrying the tag; the pool's SSH key in instance metadata
(``ssh-keys``, with ``enable-oslogin: FALSE`` on the instance so that a project with OS Login on still
takes it); labels ``skyhive-pool``/``skyhive-node`` set at creation and used to find nodes again.

What GCE requires, and what is sent for it (each checked by the fake in ``tests/cloud/fake_gce.py``):

- Images by family: ``projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts`` (a family is not an
  image name); GPU machines get Google's deep-learning base image family, with the NVIDIA driver
  (installed at first boot on ``install-nvidia-driver: True``).
- A machine with GPUs (A2/A3/A4/G2, or an N1 with ``guestAccelerators``) cannot live-migrate:
  ``onHostMaintenance: TERMINATE``. Spot is ``provisioningModel: SPOT`` (deleted on preemption).
- The boot disk's type per machine series (``pd-balanced``; ``hyperdisk-balanced`` for A3 Mega/Ultra and A4),
  and only the consumption models a machine is sold with (a3-highgpu-1g/2g/4g: spot, not on demand): both
  from the table's ``machines`` (generate.py's ``GCP_SERIES``, with its source pages). GCE's default disk,
  ``pd-standard``, is refused by G2, A3 and A4 machines.
- A node ends itself (idle watchdog, boot-time limit) by deleting its own instance with its service
  account's token from the metadata server; it stops where that is refused (`providers.cloud.gcp_end`). The
  instance gets `service_account` with the one access scope ``compute``; a creator without
  ``iam.serviceAccounts.actAs`` on the default account gets nodes without it (`GCP._insert`).
- Zones: from the machine table (the zones whose catalog rows offer the machine) or, for a machine not
  in it, from the region's own list; all are tried, and a zone GCE does not know is skipped.

Machines: without an accelerator `machine_type` (default ``e2-standard-2``); with one, the cheapest machine
in the region that has it, from the shipped table ``data/gcp.json`` (A2/A3/G2 machines, and N1 machines
with T4/V100/P100/P4 attached, spelled ``n1-standard-8+1xT4``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ...errors import CloudAPIError
from ..features import Feature, Features
from ..base import ClusterSpec, NodeHandle, ProvisionError, SSHReach
from ..volumes import mounts_of
from . import catalog, gcp_end, gcp_volumes
from .base import ACTIVE_STATES, CloudTimeouts, ErrorKind, LibcloudProvider
from .boot import BOOT_LIMIT, BOOT_SCRIPT, check_limit, ready_command, shown, warn_off
from .gce_api import GCEClient, GCECredentials
from .keys import pool_key, remove_pool_key

__all__ = ["GCP", "GCE_ERRORS", "GCE_STATES"]

#: The machine of a pool that names no `machine_type`.
DEFAULT_MACHINE_TYPE = "e2-standard-2"
DEFAULT_IMAGE = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"
#: Google's deep-learning base image (CUDA 12.8, NVIDIA driver 570, Ubuntu 22.04), for GPU machines: a family
#: of https://cloud.google.com/deep-learning-vm/docs/images (the Debian 11 families are past their end of life)
DEFAULT_GPU_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu128-ubuntu-2204-nvidia-570"
#: the boot disk of a machine the table does not list (every Persistent Disk machine takes it; GCE's own
#: default, pd-standard, is refused by G2, A3 and A4 machines)
DEFAULT_DISK_TYPE = "pd-balanced"
#: public image projects by a bare family name's prefix (`image="debian-12"`)
_IMAGE_PROJECTS = {"ubuntu": "ubuntu-os-cloud", "debian": "debian-cloud", "rocky": "rocky-linux-cloud",
                   "common-cu": "deeplearning-platform-release"}
#: the accelerator types GCE attaches to N1 machines, by the catalog's name
N1_ACCELERATORS = {"T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100", "P100": "nvidia-tesla-p100",
                   "P4": "nvidia-tesla-p4"}

log = logging.getLogger(__name__)

POOL_LABEL = "skyhive-pool"
#: a pool's tag leaves room for ``-internal`` (its second firewall rule) and ``-<index>`` in 63 characters
MAX_TAG = 54
NODE_LABEL = "skyhive-node"

#: GCE error codes (the API's `reason`/`code` strings) -> what they mean for provisioning.
GCE_ERRORS: Mapping[str, ErrorKind] = {
    "ZONE_RESOURCE_POOL_EXHAUSTED": ErrorKind.CAPACITY,
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": ErrorKind.CAPACITY,
    "RESOURCE_POOL_EXHAUSTED": ErrorKind.CAPACITY,
    "UNSUPPORTED_OPERATION": ErrorKind.CAPACITY,
    "zoneNotFound": ErrorKind.CAPACITY,  # a zone this project does not have: skipped, the next one tried
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
    # the creator may not attach the service account it named (iam.serviceAccounts.actAs): a permission, so
    # no other offer of this cloud does better (`gcp_end.act_as_error`; the default account is dropped instead)
    gcp_end.ACT_AS_CODE: ErrorKind.FATAL,
}

#: GCE instance states -> the base's state words (EC2's vocabulary, see `base.ACTIVE_STATES`).
_TO_BASE = {"provisioning": "pending", "staging": "pending", "running": "running", "stopping": "stopping",
            "suspending": "stopping", "suspended": "stopped", "terminated": "stopped", "repairing": "running"}

#: the base's state words -> lifecycle states
GCE_STATES: Mapping[str, str] = {"pending": "provisioning", "running": "running", "stopping": "terminating",
                                 "stopped": "terminating"}


class GCP(LibcloudProvider):
    """Machines on Google Compute Engine, created per pool and destroyed with it.

    - `project` (default: from the environment or the credentials file), `region` ("us-central1"),
      `zones` (tried in order; default: every zone of the region that offers the machine).
    - `machine_type`: a fixed machine (default ``e2-standard-2``; with an accelerator, the cheapest machine
      of the table that has it). `spot`: ``provisioningModel: SPOT``.
    - `image`: an image path (``projects/P/global/images/family/F`` or ``.../images/NAME``) or a bare
      public family (``ubuntu-2204-lts``, ``debian-12``); default Ubuntu 22.04, or the deep-learning
      image for GPU machines. `disk_gb`, `ssh_user`, `ssh_cidr` (default anywhere: key-only SSH).
    - `network` ("default") and `subnetwork` (needed in a custom-mode network).
    - `idle_timeout`: seconds with no client after which a node ends itself: it deletes its own instance
      (and boot disk) with its service account's token (`providers.cloud.gcp_end`); where that is refused
      it shuts down and GCE stops it (its disk bills until `skyhive down`); None: no watchdog.
    - `boot_limit`: seconds after its first boot by which a node no client has bootstrapped ends itself the
      same way — default 3600, 600..86400, lifted by bootstrap; None or 0: no limit (a warning).
    - `service_account`: the instance's service account ("default": the project's default compute service
      account), with the one access scope ``compute`` so that the node can delete itself; None: no service
      account (no token on the node: it stops instead of deleting itself). Attaching one needs
      ``iam.serviceAccounts.actAs`` on it for the credentials skyhive uses (roles/iam.serviceAccountUser;
      Owner and Editor have it, Compute Instance Admin alone does not). Without it, "default" is dropped: the
      refused insert is sent again without it, and so are the pool's later ones, with one warning (its nodes
      stop instead of deleting themselves, their disks billing until `skyhive down`); an account named by its
      email (the default one's too, ``NUMBER-compute@developer.gserviceaccount.com``) is required: the pool
      fails, naming the permission.
    Credentials: application-default credentials (see `providers.cloud.gce_api`).
    """

    name: ClassVar[str] = "gcp"
    #: interruption notices: a spot VM's preemption (`instance/preempted`, runtime/onnode/notices/gce.py)
    features: ClassVar[Features] = Features(Feature.CREATES_MACHINES, Feature.CHECK, Feature.VOLUMES, notices="gcp", cannot={
        Feature.KEEP: "kept cloud pools are built and tested for aws only (its instances' reach, idle watchdog and "
                      "termination by recorded instance id); use a pool without a name, or give the instances to "
                      "sky.SSH(hosts=...) to keep a pool on them"})
    chooses = frozenset({"accelerator", "spot"})
    resource_options = {"region": "region", "zone": "zones", "instance_type": "machine_type", "image_id": "image",
                        "disk_size": "disk_gb", "volumes": "volumes"}
    error_kinds = GCE_ERRORS
    state_map = GCE_STATES
    retries_launch = True  # each insert is retried on its own, idempotently (`_insert`)

    def __init__(self, project: str | None = None, region: str = "us-central1", zones: Sequence[str] | None = None,
                 machine_type: str | None = None, spot: bool = False, image: str | None = None,
                 disk_gb: int = 100, ssh_user: str = "skyhive", ssh_cidr: str = "0.0.0.0/0",
                 network: str = "default", subnetwork: str | None = None, idle_timeout: float | None = 1800.0,
                 timeouts: CloudTimeouts | None = None, volumes: Sequence[Any] = (),
                 boot_limit: float | None = BOOT_LIMIT, service_account: str | None = gcp_end.SERVICE_ACCOUNT) -> None:
        super().__init__(timeouts=timeouts)
        self.service_account = service_account
        self.boot_limit = check_limit(boot_limit, "GCP(boot_limit=...)")
        self.project = project
        self.volumes = mounts_of(volumes)  # persistent disks for the head node (`gcp_volumes.py`)
        self.region = region
        self.zones = list(zones) if zones else None
        for zone in self.zones or ():
            if not zone.startswith(region + "-"):
                raise ValueError(f"GCP(zones=...): zone {zone!r} is not in region {region!r}")
        self.machine_type = machine_type
        self.spot = spot
        self.image = image
        self.disk_gb = disk_gb
        self.ssh_user = ssh_user
        self.ssh_cidr = ssh_cidr
        self.network = network
        self.subnetwork = subnetwork
        self.idle_timeout = idle_timeout
        self._client: GCEClient | None = None
        self._plans: dict[str, catalog.Choice] = {}
        self._without_account: set[str] = set()  # pools whose creator may not attach the default account

    def describe(self) -> dict[str, Any]:
        return {"provider": self.name, "project": self.project, "region": self.region, "zones": self.zones,
                "machine_type": self.machine_type, "spot": self.spot, "image": self.image,
                "disk_gb": self.disk_gb, "ssh_user": self.ssh_user, "ssh_cidr": self.ssh_cidr,
                "network": self.network, "subnetwork": self.subnetwork, "idle_timeout": self.idle_timeout,
                "boot_limit": self.boot_limit, "service_account": self.service_account,
                "volumes": [[v.target, v.name, v.size_gb] for v in self.volumes]}

    @property
    def client(self) -> GCEClient:
        if self._client is None:
            import os

            credentials = GCECredentials.from_environment()
            project = (self.project or os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUDSDK_CORE_PROJECT")
                       or credentials.project)
            if not project:
                raise ProvisionError(f"gcp: no project: pass GCP(project=...) or set GOOGLE_CLOUD_PROJECT "
                                     f"({credentials.where} names none)", kind="fatal")
            self._client = GCEClient(project, credentials, poll=self.timeouts.poll)
        return self._client

    # ---- names -----------------------------------------------------------------------------------------

    @staticmethod
    def tag(pool_id: str) -> str:
        """The pool's network tag and firewall rule name (GCE names, RFC 1035: lower case, digits, dashes,
        63 characters at most, a letter or digit last). A pool name too long for a node's name
        (``<tag>-<index>``) or ending in a dash is cut and given a short hash of the name; the original name
        is kept in each instance's metadata (``skyhive-pool-name``)."""
        spelled = "skyhive-" + "".join(c if c.isascii() and c.isalnum() else "-" for c in pool_id.lower())
        if len(spelled) <= MAX_TAG and not spelled.endswith("-"):
            return spelled
        import hashlib

        digest = hashlib.sha256(pool_id.encode()).hexdigest()[:8]
        return spelled[: MAX_TAG - 9].rstrip("-") + "-" + digest

    # ---- the machine ------------------------------------------------------------------------------------

    @property
    def keeps_disks(self) -> bool:
        """Whether a node that ends itself keeps its disks (a stop, not a delete): only for a pool whose
        machines stop on shutdown (`shutdown_behavior` "stop", what a kept pool with autostop sets; GCP pools
        cannot be kept today, so every GCP node deletes itself)."""
        return self.shutdown_behavior == "stop"

    def choice(self, spec: ClusterSpec) -> catalog.Choice:
        """The machine for `spec` and its price (no API call). Raises `ProvisionError` naming the request
        when nothing in the region satisfies it."""
        choice = self._plans.get(spec.pool_id)
        if choice is None:
            spot = bool(self.spot if spec.spot is None else spec.spot)
            if spec.accelerator:
                choice = catalog.choose("gcp", self.region, accelerator=spec.accelerator, cpus=spec.cpus,
                                        memory_gb=spec.memory_gb, instance_type=self.machine_type, nodes=spec.nodes,
                                        spot=spot)
            else:
                machine = self.machine_type or DEFAULT_MACHINE_TYPE
                try:
                    choice = catalog.choose("gcp", self.region, instance_type=machine, nodes=spec.nodes, spot=spot)
                except ProvisionError:  # a region the table does not price: the machine taken on trust
                    choice = catalog.unpriced("gcp", self.region, machine, nodes=spec.nodes, spot=spot)
            self._plans[spec.pool_id] = choice
            if self.boot_limit is None:
                warn_off(self.name, spec.pool_id)
        return choice

    def size(self, spec: ClusterSpec) -> str:
        """The machine type of `spec`'s nodes (an N1 machine without its ``+NxGPU``)."""
        return self.choice(spec).instance_type.split("+", 1)[0]

    def plan(self, spec: ClusterSpec) -> dict[str, Any]:
        """See `Provider.plan`: the machine, its on-demand (and spot) price, the pool's cost."""
        choice = self.choice(spec)
        return {**choice.as_dict(), "summary": choice.summary(), "boot_limit": shown(self.boot_limit)}

    def _gpus(self, spec: ClusterSpec) -> tuple[str | None, int]:
        """(N1 accelerator type to attach or None, GPUs the machine has)."""
        choice = self.choice(spec)
        machine, _, attached = choice.instance_type.partition("+")
        if attached:
            count, _, model = attached.partition("x")
            return N1_ACCELERATORS[model], int(count)
        info = catalog.instance("gcp", machine)
        return None, (info.accelerators if info else (1 if spec.accelerator else 0))

    def disk_type(self, spec: ClusterSpec) -> str:
        """The boot disk type of `spec`'s machine (from the table's ``machines``, whose source it records)."""
        return catalog.boot_disk("gcp", self.choice(spec).instance_type) or DEFAULT_DISK_TYPE

    def image_path(self, gpu: bool) -> str:
        """The ``sourceImage`` sent: `image` as a path, a bare name as a public family, or the default."""
        image = self.image or (DEFAULT_GPU_IMAGE if gpu else DEFAULT_IMAGE)
        if "/" in image:
            return image
        project = next((p for prefix, p in _IMAGE_PROJECTS.items() if image.startswith(prefix)), None)
        if project is None:
            return f"projects/{self.client.project}/global/images/{image}"
        return f"projects/{project}/global/images/family/{image}"

    # ---- the blocking primitives -----------------------------------------------------------------------

    def zones_sync(self, spec: ClusterSpec) -> list[str]:
        if self.zones:
            return gcp_volumes.pin_zones(self, self.zones)
        zones = list(self.choice(spec).zones)
        if not zones:
            region = self.client.request("GET", f"regions/{self.region}")
            zones = sorted(url.rsplit("/", 1)[-1] for url in region.get("zones", []))
        return gcp_volumes.pin_zones(self, zones)  # a pool with volumes: where its disks are

    def prepare_sync(self, spec: ClusterSpec) -> None:
        log.info("gcp: pool %s: %s", spec.pool_id, self.choice(spec).summary())
        pool_key(spec.pool_id)
        tag = self.tag(spec.pool_id)
        existing = {fw.get("name") for fw in self.client.request("GET", "global/firewalls").get("items", [])}
        network = f"global/networks/{self.network}"
        rules = [
            {"name": tag, "network": network, "sourceRanges": [self.ssh_cidr], "targetTags": [tag],
             "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}], "description": f"skyhive pool {spec.pool_id}: SSH"},
            {"name": f"{tag}-internal", "network": network, "sourceTags": [tag], "targetTags": [tag],
             "allowed": [{"IPProtocol": "all"}],
             "description": f"skyhive pool {spec.pool_id}: all traffic between its nodes"},
        ]
        for rule in rules:
            if rule["name"] in existing:
                continue
            try:
                self.client.wait(self.client.request("POST", "global/firewalls", rule))
            except CloudAPIError as exc:
                if exc.status == 404:
                    raise CloudAPIError("networkNotFound", f"network {self.network!r} does not exist in project "
                                        f"{self.client.project}: pass GCP(network=..., subnetwork=...) ({exc.message})",
                                        404) from exc
                raise

    def create_request(self, spec: ClusterSpec, index: int, zone: str) -> dict[str, Any]:
        """The body of ``instances.insert`` for node `index` in `zone` (what is sent)."""
        _, public = pool_key(spec.pool_id)
        spot = bool(self.spot if spec.spot is None else spec.spot)
        attach, gpus = self._gpus(spec)
        scheduling: dict[str, Any] = {"automaticRestart": False, "onHostMaintenance": "TERMINATE"} if (
            gpus or spot) else {"automaticRestart": True, "onHostMaintenance": "MIGRATE"}
        if spot:
            scheduling.update(provisioningModel="SPOT", instanceTerminationAction="DELETE")
        nic: dict[str, Any] = {"network": f"global/networks/{self.network}",
                               "accessConfigs": [{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}]}
        if self.subnetwork:
            nic["subnetwork"] = f"regions/{self.region}/subnetworks/{self.subnetwork}"
        metadata = [{"key": "ssh-keys", "value": f"{self.ssh_user}:{public} {self.ssh_user}"},
                    {"key": "enable-oslogin", "value": "FALSE"},
                    {"key": "startup-script", "value": gcp_end.startup_script(BOOT_SCRIPT, self.boot_limit,
                                                                                 keep=self.keeps_disks)},
                    {"key": "skyhive-pool-name", "value": spec.pool_id}]
        if gpus:
            metadata.append({"key": "install-nvidia-driver", "value": "True"})
        body: dict[str, Any] = {
            "name": f"{self.tag(spec.pool_id)}-{index}",
            "machineType": f"zones/{zone}/machineTypes/{self.size(spec)}",
            "labels": {**{k.lower(): str(v).lower() for k, v in dict(spec.tags).items()},
                       POOL_LABEL: self.tag(spec.pool_id).removeprefix("skyhive-"), NODE_LABEL: str(index)},
            "tags": {"items": [self.tag(spec.pool_id)]},
            "metadata": {"items": metadata},
            "disks": [{"boot": True, "autoDelete": True, "initializeParams": {
                "sourceImage": self.image_path(bool(gpus)), "diskSizeGb": str(self.disk_gb),
                "diskType": f"zones/{zone}/diskTypes/{self.disk_type(spec)}"}}],
            "networkInterfaces": [nic],
            "scheduling": scheduling,
        }
        if self.service_account is not None and spec.pool_id not in self._without_account:  # its token (gcp_end.py)
            body["serviceAccounts"] = gcp_end.service_accounts(self.service_account)
        if index == 0 and self.volumes:
            body["disks"] += gcp_volumes.disk_entries(self.volumes, zone)
        if attach:
            body["guestAccelerators"] = [{"acceleratorType": f"zones/{zone}/acceleratorTypes/{attach}",
                                          "acceleratorCount": gpus}]
        return body

    def launch_sync(self, spec: ClusterSpec, nodes: Sequence[int], zone: str) -> list[NodeHandle]:
        try:
            self.client.request("GET", f"zones/{zone}")
        except CloudAPIError as exc:
            if exc.status == 404:
                raise CloudAPIError("zoneNotFound", f"zone {zone} does not exist for project "
                                    f"{self.client.project}; skipped", 404) from exc
            raise
        if 0 in nodes and self.volumes:
            gcp_volumes.ensure(self, zone)  # the head node's disks, made in its zone where missing
        return [self._handle(self._insert(spec, i, zone), spec.pool_id, launched_at=time.time()) for i in nodes]

    def _insert(self, spec: ClusterSpec, index: int, zone: str) -> dict[str, Any]:
        """Create node `index` in `zone` (`_post`). Refused because the caller may not act as the service
        account (`gcp_end.act_as_refused`): with the default account, this insert is sent once more without
        it and so are the pool's later ones (one warning); an account named by its email stays fatal. The
        instance as GCE lists it."""
        body = self.create_request(spec, index, zone)
        try:
            self._post(spec, index, zone, body)
        except CloudAPIError as exc:
            if "serviceAccounts" not in body or not gcp_end.act_as_refused(exc):
                raise
            if self.service_account != gcp_end.SERVICE_ACCOUNT:
                raise gcp_end.act_as_error(str(self.service_account), self.client.project, exc) from exc
            if spec.pool_id not in self._without_account:  # a pool's inserts run one after another
                self._without_account.add(spec.pool_id)
                log.warning("%s", gcp_end.without_account_warning(spec.pool_id, self.client.project))
            body = self.create_request(spec, index, zone)
            self._post(spec, index, zone, body)
        return self.client.request("GET", f"zones/{zone}/instances/{body['name']}")

    def _post(self, spec: ClusterSpec, index: int, zone: str, body: dict[str, Any]) -> None:
        """Insert `body`, idempotently: only this insert is retried (transient errors, with the `retry`
        backoff), and before each retry — and on ``alreadyExists`` — the node is looked for by its name
        (which skyhive chose): one whose insert went through although its answer was lost is adopted, never
        created twice, and the rest of the launch is not re-run."""
        path = f"zones/{zone}/instances"
        delays = self.retry.delays()
        for attempt in range(len(delays) + 1):
            if attempt and self._ours(zone, body["name"], spec.pool_id) is not None:
                log.info("gcp: pool %s: node %s was created by an earlier try; adopted", spec.pool_id, index)
                break
            try:
                self.client.wait(self.client.request("POST", path, body))
                break
            except CloudAPIError as exc:
                if exc.code == "alreadyExists" and self._ours(zone, body["name"], spec.pool_id) is not None:
                    break
                if attempt == len(delays) or not self.is_transient(exc):
                    raise
                log.info("gcp: pool %s: creating node %s failed transiently (%s); retrying that call in %.1f s",
                         spec.pool_id, index, exc, delays[attempt])
                time.sleep(delays[attempt])

    def _ours(self, zone: str, name: str, pool_id: str) -> dict[str, Any] | None:
        """The instance `name` in `zone` when it is this pool's (by its label), else None."""
        try:
            instance = self.client.request("GET", f"zones/{zone}/instances/{name}")
        except CloudAPIError as exc:
            if self.classify(exc) is ErrorKind.NOT_FOUND:
                return None
            raise
        label = self.tag(pool_id).removeprefix("skyhive-")
        alive = str(instance.get("status") or "").upper() in ("PROVISIONING", "STAGING", "RUNNING")
        return instance if alive and (instance.get("labels") or {}).get(POOL_LABEL) == label else None

    def list_sync(self, pool_id: str, states: Sequence[str] | None = ACTIVE_STATES) -> list[NodeHandle]:
        label = self.tag(pool_id).removeprefix("skyhive-")
        found: list[NodeHandle] = []
        token = None
        while True:
            params = {"filter": f"labels.{POOL_LABEL} = {label}"}
            if token:
                params["pageToken"] = token
            answer = self.client.request("GET", "aggregated/instances", params=params)
            for scoped in (answer.get("items") or {}).values():
                found += [self._handle(i, pool_id) for i in scoped.get("instances", [])
                          if (i.get("labels") or {}).get(POOL_LABEL) == label]
            token = answer.get("nextPageToken")
            if not token:
                break
        return sorted((h for h in found if states is None or h.state in states), key=lambda h: h.node)

    def terminate_sync(self, provider_id: str) -> None:
        zone, _, name = provider_id.partition("/")
        self.client.request("DELETE", f"zones/{zone}/instances/{name}")

    def cleanup_sync(self, pool_id: str) -> list[str]:
        tag = self.tag(pool_id)
        deleted = []
        for fw in self.client.request("GET", "global/firewalls").get("items", []):
            if fw.get("name") in (tag, f"{tag}-internal"):
                self.client.wait(self.client.request("DELETE", f"global/firewalls/{fw['name']}"))
                deleted.append(f"firewall rule {fw['name']}")
        if remove_pool_key(pool_id):
            deleted.append("the pool's private key")
        return deleted

    def _handle(self, instance: dict[str, Any], pool_id: str, launched_at: float | None = None) -> NodeHandle:
        labels = instance.get("labels") or {}
        state = _TO_BASE.get(str(instance.get("status") or "").lower(), "pending")
        zone = str(instance.get("zone") or "").rsplit("/", 1)[-1]
        nics = instance.get("networkInterfaces") or [{}]
        private = nics[0].get("networkIP") or ""
        public = next((c.get("natIP") for c in nics[0].get("accessConfigs") or [] if c.get("natIP")), None)
        machine = str(instance.get("machineType") or "").rsplit("/", 1)[-1]
        attached = instance.get("guestAccelerators") or []
        info = catalog.instance("gcp", machine) if machine else None
        gpus = sum(int(a.get("acceleratorCount", 0)) for a in attached) or (info.accelerators if info else 0)
        key_path, _ = pool_key(pool_id, create=False)
        extra: dict[str, Any] = {"pool_id": pool_id, "zone": zone, "instance_type": machine}
        first_boot = ready_command(gpu=bool(gpus))
        if self.volumes and labels.get(NODE_LABEL) == "0":  # the head node mounts the volumes
            first_boot = "; ".join([first_boot, *gcp_volumes.mount_commands(self.volumes)])
            extra["volumes"] = {v.target: f"skyhive-vol-{gcp_volumes.gce_name(v.name)}" for v in self.volumes}
        if launched_at is not None:
            extra["launched_at"] = launched_at
        return NodeHandle(node=int(labels.get(NODE_LABEL, -1)), provider_id=f"{zone}/{instance.get('name')}",
                          private_addr=private, public_addr=public, state=state, extra=extra, accelerators=gpus,
                          reach=SSHReach(host=public or private, user=self.ssh_user, key=str(key_path),
                                         idle_shutdown=self.idle_timeout or 0.0,
                                         shutdown_command=gcp_end.SHUTDOWN_COMMAND,
                                         ready_command=first_boot, boot_limit_off=gcp_end.LIMIT_OFF))

    def find_volume(self, name: str) -> Any:
        """See `Provider.find_volume` (persistent disks, `gcp_volumes.py`)."""
        return gcp_volumes.find(self, name)

    def delete_volume(self, name: str) -> None:
        """See `Provider.delete_volume` (persistent disks, `gcp_volumes.py`)."""
        gcp_volumes.delete(self, name)
