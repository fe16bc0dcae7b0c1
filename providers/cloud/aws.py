"""AWS EC2 through apache-libcloud: `sky.AWS(region=..., accelerator via the pool, spot=...)`.

The phases are implemented once in `providers.cloud.base.LibcloudProvider` (see `providers.base.Provider`
for each contract); this module holds what is EC2's own: the error-code table, the per-pool key pair
and security group, the default VPC's subnet per zone, image choice, spot and terminate-on-shutdown.

Everything is tagged ``skyhive-pool=<pool id>`` (instances also ``skyhive-node=<index>``) and found
again only by that tag. libcloud's EC2 quirks under moto are corrected in `ec2_driver`.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

import anyio.to_thread

from ..features import Feature, Features
from ..base import ClusterSpec, NodeHandle, ProvisionError, SSHReach
from ..volumes import mounts_of
from . import aws_credentials, aws_efa, aws_images, aws_launch, aws_quotas, aws_volumes, catalog
from .aws_data import (ADDRESS_TAG, EC2_ERRORS, EC2_STATES, EFA_TYPES, LAUNCH_TAG, NODE_TAG, PLACEMENT_TAG, POOL_TAG,
                       JUST_MADE, READY_COMMAND, USER_DATA, b64, client_token, vcpu_quota)
from .aws_network import AWSNetwork
from .aws_access import EC2Access
from .base import ACTIVE_STATES, CloudTimeouts, ErrorKind, LibcloudProvider
from .boot import BOOT_LIMIT, BOOT_LIMIT_OFF, check_limit, shown, warn_off
from .keys import pool_key, remove_pool_key

T = TypeVar("T")

__all__ = ["AWS", "POOL_TAG", "NODE_TAG", "LAUNCH_TAG", "USER_DATA", "READY_COMMAND", "EC2_ERRORS", "EC2_STATES", "EFA_TYPES", "client_token",
           "vcpu_quota"]

log = logging.getLogger(__name__)

class AWS(EC2Access, LibcloudProvider):
    """Machines on AWS EC2, created per pool and destroyed with it.

    - `region`: where; `zones`: the zones to try, in order (default: every zone of the region that
      offers the chosen instance type and has a usable subnet; the others are skipped and named).
    - `instance_type`: a fixed type; default: the cheapest type in the region that satisfies the pool's
      `accelerator` ("A100", "A100:8"), `cpus` and `memory_gb` (see `providers.cloud.catalog`).
    - `spot`: spot instances (priced from the table's spot column where it has one).
    - `image`: an AMI id; default by GPU generation (`aws_images`: proprietary-driver Deep Learning Base
      AMI before Turing, the OSS-driver one from Turing on, Ubuntu 22.04 without a GPU); `ssh_user`: the
      image's login user (default: follows the image). `disk_gb`: the root volume.
    - `profile`: the AWS profile (default ``AWS_PROFILE``, then "default"); credentials come from the
      standard chain (`aws_credentials`) and are never recorded.
    - `vpc`: a VPC id (default: the region's default VPC); `subnet` / `subnets`: the subnet (one per zone)
      nodes launch in (their zones are then the zones tried); `security_group`: an existing group id to
      use instead of a group made per pool (it must let the client SSH in and the nodes reach each other).
    - `efa`: EFA on every network card of the types that have it (default: on, for pools of more than one
      node); a node with several interfaces is reachable through an Elastic IP made and released with the pool;
      `placement_group`: a cluster placement group made and deleted with the pool (default: on for
      multi-node GPU pools).
    - `ssh_cidr`: who may open SSH to the nodes (default: this client's public address, looked up; "127.0.0.1/32"
      against a test `endpoint`); nodes of the pool reach each other on every port.
    - `idle_timeout`: seconds with no client connected after which a node shuts itself down (its idle
      watchdog, started by bootstrap, runs `shutdown_command`; instances terminate on shutdown); None: no
      watchdog. A connected client keeps its nodes however long a job runs.
    - `boot_limit`: seconds after its first boot by which a node no client has bootstrapped shuts itself down
      (and terminates): a client killed between create and bootstrap leaves nothing running longer (default
      3600; 600..86400; bootstrap lifts it). A bootstrap that builds a big environment for longer needs more;
      None or 0: no limit (a warning: a killed client then leaves its nodes running until `skyhive down`).
    - `endpoint`: an EC2-compatible endpoint (``http://127.0.0.1:5000`` for moto_server) instead of AWS.

    Launching is idempotent: one RunInstances per zone attempt for every node still missing, with a
    ClientToken from (pool, zone, attempt); only that call is retried (jittered backoff), and before each
    retry what already runs is counted by tag, so a pool never holds more instances than nodes.
    """

    name: ClassVar[str] = "aws"
    error_kinds = EC2_ERRORS
    state_map = EC2_STATES
    #: instances stopped and started again, ports opened on the security group (`aws_access.py`); a
    #: spot instance's `instance-action` watched (runtime/onnode/notices/ec2.py)
    features = Features(Feature.KEEP, Feature.CREATES_MACHINES, Feature.STOP, Feature.OPEN_PORTS, Feature.CHECK,
                        Feature.AUTOSTOP_HOOK, Feature.VOLUMES, notices="aws")
    retries_launch = True
    chooses = frozenset({"accelerator", "cpus", "memory_gb", "spot"})
    resource_options = {"region": "region", "zone": "zones", "instance_type": "instance_type", "image_id": "image",
                        "disk_size": "disk_gb", "volumes": "volumes"}

    def __init__(self, region: str = "us-east-1", zones: Sequence[str] | None = None, instance_type: str | None = None,
                 spot: bool = False, image: str | None = None, disk_gb: int = 100, ssh_user: str | None = None,
                 ssh_cidr: str | None = None, endpoint: str | None = None, idle_timeout: float | None = 1800.0,
                 shutdown_command: str = "sudo shutdown -h now", timeouts: CloudTimeouts | None = None, *,
                 profile: str | None = None, vpc: str | None = None, subnet: str | None = None,
                 subnets: Sequence[str] | None = None, security_group: str | None = None,
                 efa: bool | None = None, placement_group: bool | None = None,
                 volumes: Sequence[Any] = (), boot_limit: float | None = BOOT_LIMIT) -> None:
        super().__init__(timeouts=timeouts)
        self.boot_limit = check_limit(boot_limit, "AWS(boot_limit=...)")
        if disk_gb < 8:
            raise ValueError(f"disk_gb must be at least 8, not {disk_gb}")
        if subnet and subnets:
            raise ValueError("give subnet= (one) or subnets= (one per zone), not both")
        self.region = region
        self.zones = list(zones) if zones else None
        self.instance_type = instance_type
        self.spot = spot
        self.image = image
        self.disk_gb = disk_gb
        self.ssh_user = ssh_user
        self.ssh_cidr = ssh_cidr
        self.endpoint = endpoint
        if idle_timeout is not None and idle_timeout <= 0:
            raise ValueError(f"idle_timeout must be positive seconds or None (no watchdog), not {idle_timeout}")
        self.idle_timeout = idle_timeout
        self.shutdown_command = shutdown_command
        self.profile = profile
        self.vpc = vpc
        self.subnets = [subnet] if subnet else (list(subnets) if subnets else None)
        self.security_group = security_group
        self.efa = efa
        self.placement_group = placement_group
        self.volumes = mounts_of(volumes)  # EBS volumes for the head node (`aws_volumes.py`)
        self._driver: Any = None
        self._network: AWSNetwork | None = None
        self._plans: dict[str, catalog.Choice] = {}
        self._shared: dict[str, tuple[str, str, str | None]] = {}  # pool -> (key pair, group id, placement group)
        self._images: dict[str, Any] = {}
        self._attempts: dict[tuple[str, str], int] = {}
        self._skipped: dict[str, list[str]] = {}  # pool -> "zone (why)" skipped for want of a subnet
        self._no_credentials: set[str] = set()  # pools that failed before anything could be made
        # pool -> the markers of the key pair this provider imported for it, in this process: the pool is
        # new here (nothing of it could run before), and cleanup needs no listing to know the key pair
        self._imported: dict[str, dict[str, str]] = {}
        self._launched: set[str] = set()  # pools with a launch attempt in this process
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<AWS region={self.region} type={self.instance_type or 'by resources'} spot={self.spot}>"

    def describe(self) -> dict[str, Any]:
        """Plain values that rebuild this provider (never credentials; the profile's name only)."""
        return {"provider": self.name, "region": self.region, "zones": self.zones, "instance_type": self.instance_type,
                "spot": self.spot, "image": self.image, "disk_gb": self.disk_gb, "ssh_user": self.ssh_user,
                "ssh_cidr": self.ssh_cidr, "endpoint": self.endpoint, "idle_timeout": self.idle_timeout,
                "shutdown_command": self.shutdown_command,
                "profile": self.profile or os.environ.get("AWS_PROFILE"), "vpc": self.vpc,
                "subnets": self.subnets, "security_group": self.security_group, "efa": self.efa,
                "placement_group": self.placement_group, "boot_limit": self.boot_limit,
                "volumes": [[v.target, v.name, v.size_gb] for v in self.volumes]}

    # ---- the driver and errors -------------------------------------------------------------------------

    @property
    def driver(self) -> Any:
        """The libcloud driver (created on first use; credentials from the standard chain)."""
        if self._driver is None:
            from .ec2_driver import make_driver

            creds = aws_credentials.resolve(self.profile)
            self._driver = make_driver(key=creds.access_key, secret=creds.secret_key, region=self.region,
                                       token=creds.token, endpoint=self.endpoint, credentials=creds.source)
        return self._driver

    @property
    def network(self) -> AWSNetwork:
        if self._network is None:
            self._network = AWSNetwork(self)
        return self._network

    def _retrying(self, what: str, fn: Callable[[], T], *, just_made: bool = False) -> T:
        """`fn()` in this worker thread, retrying throttling with jittered backoff and (`just_made`) the
        NotFound of something the pool made moments ago until `visibility_grace` has passed."""
        delays = self.retry.delays()
        tries = 0
        grace = time.monotonic() + self.timeouts.visibility_grace
        while True:
            try:
                return fn()
            except Exception as exc:
                kind, code = self.classify(exc), self.error_code(exc)
                if kind is ErrorKind.TRANSIENT and tries < len(delays):
                    wait = delays[tries] * random.uniform(0.5, 1.0)
                    tries += 1
                elif just_made and code in JUST_MADE and time.monotonic() < grace:
                    wait = self.timeouts.poll
                else:
                    raise
                log.info("aws: %s: %s; retrying in %.2f s", what, exc, wait)
                time.sleep(wait)

    #: the vCPU quotas `check` reads (GPU families first)
    CHECKED_QUOTAS = ("L-417A185B", "L-DB2E81BA", "L-1216C47A")

    @classmethod
    def check(cls, profile: str | None = None, region: str | None = None) -> list[tuple[str, str]]:
        """See `LibcloudProvider.check`: the credentials the standard chain finds (and where), and the
        account's vCPU quotas for the P, G and standard families in `region` (from Service Quotas; the
        endpoint may be set by ``AWS_ENDPOINT_URL_SERVICE_QUOTAS``)."""
        try:
            creds = aws_credentials.resolve(profile)
        except ProvisionError as exc:
            return [("credentials", f"NOT FOUND: {exc}")]
        lines = [("credentials", f"found ({creds.method or 'unknown source'}; key {creds.access_key[:4]}…)")]
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        for code in cls.CHECKED_QUOTAS:
            # unread: said why, never guessed; the others may still be read
            lines.append((f"vCPU quota {region} {code}", str(aws_quotas.read_vcpu_quota(code, region, profile=profile))))
        return lines

    # ---- choosing the machine --------------------------------------------------------------------------

    def plan(self, spec: ClusterSpec) -> dict[str, Any]:
        """See `Provider.plan`: the chosen instance type, its price and the pool's cost per hour."""
        choice = self.choice(spec)
        return {**choice.as_dict(), "summary": choice.summary(), "boot_limit": shown(self.boot_limit)}

    def choice(self, spec: ClusterSpec) -> catalog.Choice:
        """The instance type, its hourly price and the pool's cost per hour for `spec` (no API call)."""
        choice = self._plans.get(spec.pool_id)
        if choice is None:
            spot = self.spot if spec.spot is None else spec.spot
            choice = catalog.choose("aws", self.region, accelerator=spec.accelerator, cpus=spec.cpus,
                                    memory_gb=spec.memory_gb, instance_type=self.instance_type,
                                    nodes=spec.nodes, spot=spot, cpus_exact=spec.cpus_exact,
                                    memory_exact=spec.memory_exact)
            self._plans[spec.pool_id] = choice
            if self.boot_limit is None:
                warn_off(self.name, spec.pool_id)
        return choice

    def uses_efa(self, spec: ClusterSpec) -> bool:
        """Whether nodes get an EFA interface: `efa`, else on for multi-node pools of EFA types."""
        supported = self.choice(spec).instance_type in EFA_TYPES
        if self.efa is None:
            return supported and spec.nodes > 1
        if self.efa and not supported:
            raise ProvisionError(f"aws: efa=True but {self.choice(spec).instance_type} has no EFA; types with EFA: "
                                 f"{', '.join(sorted(EFA_TYPES))}", kind="unavailable")
        return self.efa

    def efa_cards(self, spec: ClusterSpec) -> int:
        """On how many network cards each node gets EFA: every card of the type when it uses EFA, else 0."""
        return EFA_TYPES[self.choice(spec).instance_type] if self.uses_efa(spec) else 0

    def uses_placement_group(self, spec: ClusterSpec) -> bool:
        """A cluster placement group: `placement_group`, else on for multi-node GPU pools (nodes close
        together for NCCL)."""
        if self.placement_group is not None:
            return self.placement_group and spec.nodes > 1
        return spec.nodes > 1 and bool(self.choice(spec).accelerators)

    # ---- the phases that differ ------------------------------------------------------------------------

    async def prepare(self, spec: ClusterSpec) -> None:
        """See `Provider.prepare`; without credentials it fails before anything is made, and the pool's
        cleanup then has nothing to do (no warning, nothing listed)."""
        try:
            await anyio.to_thread.run_sync(lambda: self.driver)
        except ProvisionError as exc:
            if exc.code == aws_credentials.NO_CREDENTIALS:
                self._no_credentials.add(spec.pool_id)
            raise
        await super().prepare(spec)

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        """See `LibcloudProvider.launch`; a final error also names the zones skipped for want of a subnet
        and, for a vCPU quota, the quota and how to raise it."""
        try:
            return await super().launch(spec, nodes)
        except ProvisionError as exc:
            extra = []
            if exc.code == "VcpuLimitExceeded":
                choice = self.choice(spec)
                name, code = vcpu_quota(choice.instance_type, choice.spot)
                need = spec.nodes * choice.vcpus
                quota = await anyio.to_thread.run_sync(functools.partial(
                    aws_quotas.read_vcpu_quota, code, self.region, profile=self.profile, endpoint=self.endpoint))
                now = f"is {quota.value:g} vCPUs (Service Quotas)" if quota.value is not None else str(quota)
                extra.append(f"the vCPU quota {name!r} ({code}) of {self.region} {now}; the pool needs {need} "
                             f"({spec.nodes} x {choice.instance_type}, {choice.vcpus} vCPUs each) beside what runs; "
                             f"ask for more: Service Quotas console, or `aws service-quotas "
                             f"request-service-quota-increase --service-code ec2 --quota-code {code} "
                             f"--desired-value {need} --region {self.region}`")
            if exc.code == "AddressLimitExceeded" and aws_efa.several_interfaces(self.efa_cards(spec)):
                extra.append(f"each node of {self.choice(spec).instance_type} with EFA on every card needs an "
                             f"Elastic IP (EC2 gives no public address to several interfaces); the quota "
                             f"'EC2-VPC Elastic IPs' (L-0263D0A3, 5 per region by default) of {self.region} is "
                             f"too low for {spec.nodes}: ask for more (`aws service-quotas "
                             f"request-service-quota-increase --service-code ec2 --quota-code L-0263D0A3 "
                             f"--desired-value N --region {self.region}`), or pass efa=False")
            skipped = self._skipped.get(spec.pool_id)
            if skipped:
                extra.append(f"zones skipped: {', '.join(skipped)}")
            if not extra:
                raise
            err = ProvisionError(f"{exc}; {'; '.join(extra)}", host=exc.host, node=exc.node, code=exc.code,
                                 kind=exc.kind, zones_tried=exc.zones_tried, cleaned_up=exc.cleaned_up)
            raise err from exc.__cause__ or exc

    async def wait_running(self, handle: NodeHandle, report: Callable[[str], None]) -> NodeHandle:
        """See `LibcloudProvider.wait_running`; the head node also gets the pool's volumes (`aws_volumes`)."""
        running = await super().wait_running(handle, report)
        if self.volumes and running.node == 0:
            running = await self.call(aws_volumes.attach_all, self, running)
        return running

    def find_volume(self, name: str) -> Any:
        """See `Provider.find_volume` (EBS, `aws_volumes.py`)."""
        return aws_volumes.find(self, name)

    def delete_volume(self, name: str) -> None:
        """See `Provider.delete_volume` (EBS, `aws_volumes.py`)."""
        aws_volumes.delete(self, name)

    async def cleanup(self, pool_id: str) -> None:
        """See `Provider.cleanup`: first every instance still tagged with the pool is terminated (by tag,
        not by the handles anyone holds), then what `prepare` made is deleted."""
        if pool_id in self._no_credentials:
            return
        owned = await self.list_owned(pool_id)
        if owned:
            log.warning("aws: pool %s: %d instance(s) still tagged with the pool at cleanup: terminating %s",
                        pool_id, len(owned), ", ".join(h.provider_id for h in owned))
            await self.terminate(owned)
        await super().cleanup(pool_id)

    # ---- the blocking primitives -----------------------------------------------------------------------

    def zones_sync(self, spec: ClusterSpec) -> list[str]:
        choice = self.choice(spec)
        if self.zones:
            offered = list(self.zones)
        else:
            body = self._retrying("DescribeInstanceTypeOfferings", lambda: self.driver.request({
                "Action": "DescribeInstanceTypeOfferings", "LocationType": "availability-zone",
                "Filter.1.Name": "instance-type", "Filter.1.Value.1": choice.instance_type}))
            offered = sorted({el.text for el in body.iter() if el.tag.endswith("}location") and el.text})
        usable, skipped = self.network.usable_zones(aws_volumes.pin_zones(self, offered))
        self._skipped[spec.pool_id] = skipped
        if skipped:
            log.warning("aws: pool %s: zones skipped: %s", spec.pool_id, ", ".join(skipped))
        if not usable and offered:
            raise ProvisionError(f"aws: no zone of {self.region} that offers {choice.instance_type} has a usable "
                                 f"subnet: {', '.join(skipped)}; pass subnet=/subnets= or vpc=", kind="fatal")
        return usable

    def prepare_sync(self, spec: ClusterSpec) -> None:
        choice = self.choice(spec)
        log.info("aws: pool %s: %s", spec.pool_id, choice.summary())
        key_name = self._key_pair(spec.pool_id, placement=self.uses_placement_group(spec),
                                  addresses=aws_efa.several_interfaces(self.efa_cards(spec)))
        group_id = self.security_group or self.network.pool_group(spec.pool_id, efa=self.uses_efa(spec))
        placement = self.network.placement_group(spec.pool_id) if self.uses_placement_group(spec) else None
        self._shared[spec.pool_id] = (key_name, group_id, placement)

    def _tags(self, pool_id: str, resource: str) -> dict[str, str]:
        return {"TagSpecification.1.ResourceType": resource, "TagSpecification.1.Tag.1.Key": POOL_TAG,
                "TagSpecification.1.Tag.1.Value": pool_id}

    def _key_pair(self, pool_id: str, *, placement: bool = False, addresses: bool = False) -> str:
        """The pool's key pair (imported once). It also carries, as tags, whether the pool has a placement
        group and Elastic IPs, so that a cleanup in any process knows to look for them."""
        name = f"skyhive-{pool_id}"
        _, public = pool_key(pool_id)
        tags = self._tags(pool_id, "key-pair")
        markers = ([(PLACEMENT_TAG, name)] if placement else []) + ([(ADDRESS_TAG, "yes")] if addresses else [])
        for n, (key, value) in enumerate(markers, 2):
            tags.update({f"TagSpecification.1.Tag.{n}.Key": key, f"TagSpecification.1.Tag.{n}.Value": value})
        try:  # imported without a listing first: a pool that has one already is told by EC2 (Duplicate)
            self._retrying("ImportKeyPair", lambda: self.driver.request({
                "Action": "ImportKeyPair", "KeyName": name, "PublicKeyMaterial": b64(public), **tags}))
        except Exception as exc:
            if self.error_code(exc) != "InvalidKeyPair.Duplicate":
                raise
            if name not in self._owned_key_pairs(pool_id):  # the name is taken, but not by this pool's tag
                raise ProvisionError(f"aws: a key pair named {name} exists in {self.region} without the tag "
                                     f"{POOL_TAG}={pool_id}: not this pool's; delete it or use another pool name",
                                     kind="fatal") from exc
            self._imported.pop(pool_id, None)  # made before (a retry, another process): not new here
            return name
        self._imported[pool_id] = dict(markers)
        return name

    def _owned_key_pairs(self, pool_id: str) -> dict[str, dict[str, str]]:
        """The pool's key pairs (by tag): name -> its tags."""
        body = self._retrying("DescribeKeyPairs", lambda: self.driver.request({
            "Action": "DescribeKeyPairs", "Filter.1.Name": f"tag:{POOL_TAG}", "Filter.1.Value.1": pool_id}))
        found = {}
        for item in body.iter():
            name = next((el.text for el in item if el.tag.endswith("}keyName") and el.text), None)
            if name is None:
                continue
            tags = {}
            for tag in item.iter():
                if tag.tag.endswith("}item"):
                    fields = {el.tag.rsplit("}", 1)[-1]: el.text or "" for el in tag}
                    if "key" in fields:
                        tags[fields["key"]] = fields.get("value", "")
            found[name] = tags
        return found

    def _owned_groups(self, pool_id: str) -> list[str]:
        return self.network.owned_groups(pool_id)

    def _image(self, choice: catalog.Choice) -> Any:
        """The AMI to boot (its root device name sizes the root volume; its name says the login user)."""
        key = self.image or choice.accelerator or ""
        if key in self._images:
            return self._images[key]
        if self.image:
            image = self._retrying("DescribeImages", lambda: self.driver.get_image(self.image))
        else:
            try:
                spec = aws_images.default_image(choice.accelerator)
            except ValueError as exc:
                raise ProvisionError(f"aws: {choice.instance_type}: {exc}", kind="fatal") from None
            found = self._retrying("DescribeImages", lambda: self.driver.list_images(
                ex_owner=spec.owner, ex_filters={"name": spec.name}))
            # x86_64 only, checked here (moto does not filter on architecture)
            images = [im for im in found if im.extra.get("architecture") in (None, "", "x86_64")]
            if not images:
                raise ProvisionError(f"aws: no image named {spec.name!r} of owner {spec.owner} in {self.region}: "
                                     f"pass image=", kind="fatal")
            image = max(images, key=lambda im: im.extra.get("creation_date") or "")
        self._images[key] = image
        return image

    def login_user(self, image: Any) -> str:
        """`ssh_user`, else the user the image's name implies."""
        if self.ssh_user:
            return self.ssh_user
        return aws_images.user_for_image(f"{image.name or ''} {image.extra.get('description') or ''}")

    def run_params(self, spec: ClusterSpec, zone: str, count: int, token: str, launch_id: str) -> dict[str, str]:
        """The RunInstances parameters of one zone attempt for `count` nodes (see `aws_launch`)."""
        return aws_launch.run_params(self, spec, zone, count, token, launch_id)

    def launch_sync(self, spec: ClusterSpec, nodes: Sequence[int], zone: str) -> list[NodeHandle]:
        """One zone attempt, idempotent (see `aws_launch.launch_in_zone`)."""
        return aws_launch.launch_in_zone(self, spec, nodes, zone)

    def _terminate_quietly(self, instance_id: str) -> None:
        try:
            self.terminate_sync(instance_id)
        except Exception as exc:  # found by tag at the pool's end
            log.warning("aws: terminating %s failed (%s); the pool's cleanup terminates it by tag", instance_id, exc)

    def list_sync(self, pool_id: str, states: Sequence[str] | None = ACTIVE_STATES) -> list[NodeHandle]:
        if pool_id in self._no_credentials:
            return []
        filters: dict[str, Any] = {f"tag:{POOL_TAG}": pool_id}
        if states is not None:
            filters["instance-state-name"] = list(states)
        found = self._retrying("DescribeInstances", lambda: self.driver.list_instances(filters))
        return sorted((self._handle(n, pool_id) for n in found), key=lambda h: (h.node, h.provider_id))

    def terminate_sync(self, provider_id: str) -> None:
        from libcloud.compute.base import Node

        self.driver.destroy_node(Node(provider_id, "", None, [], [], self.driver))

    def cleanup_sync(self, pool_id: str) -> list[str]:
        if pool_id in self._no_credentials:
            return []
        deleted = self.network.delete_pool_groups(pool_id)
        known = self._imported.get(pool_id)  # imported here: its name and markers are known, no listing needed
        keys = {f"skyhive-{pool_id}": known} if known is not None else self._owned_key_pairs(pool_id)
        if any(PLACEMENT_TAG in tags for tags in keys.values()):  # the placement group goes before its marker
            deleted += self.network.delete_placement_group(pool_id)
        if any(ADDRESS_TAG in tags for tags in keys.values()):  # so do the Elastic IPs
            deleted += aws_efa.release_addresses(self, pool_id)
        for name in keys:
            self._retrying("DeleteKeyPair", lambda: self.driver.request({"Action": "DeleteKeyPair", "KeyName": name}))
            deleted.append(f"key pair {name}")
        if remove_pool_key(pool_id):
            deleted.append("the pool's private key")
        self._shared.pop(pool_id, None)
        self._imported.pop(pool_id, None)
        self._launched.discard(pool_id)
        return deleted

    # ---- records ---------------------------------------------------------------------------------------

    def _user_of(self, instance_type: str) -> str:
        """The login user: `ssh_user`, else the one the (resolved) image implies, else Ubuntu's."""
        if self.ssh_user:
            return self.ssh_user
        info = catalog.instance("aws", instance_type) if instance_type else None
        image = self._images.get(self.image or (info.accelerator if info else None) or "")
        return self.login_user(image) if image is not None else "ubuntu"

    def _handle(self, node: Any, pool_id: str, launched_at: float | None = None) -> NodeHandle:
        tags = node.extra.get("tags") or {}
        state = str(node.extra.get("status") or "pending")
        private = (node.private_ips or [""])[0] or ""
        public = (node.public_ips or [None])[0]
        instance_type = node.extra.get("instance_type") or ""
        info = catalog.instance("aws", instance_type) if instance_type else None
        key_path, _ = pool_key(pool_id, create=False)
        extra: dict[str, Any] = {"pool_id": pool_id, "zone": node.extra.get("availability"),
                                 "instance_type": instance_type, "launch": tags.get(LAUNCH_TAG)}
        if launched_at is not None:
            extra["launched_at"] = launched_at
        return NodeHandle(
            node=int(tags.get(NODE_TAG, -1)), provider_id=node.id, private_addr=private, public_addr=public,
            reach=SSHReach(host=public or private or "", user=self._user_of(instance_type), key=str(key_path),
                           idle_shutdown=self.idle_timeout or 0.0, shutdown_command=self.shutdown_command,
                           ready_command=READY_COMMAND, boot_limit_off=BOOT_LIMIT_OFF),
            accelerators=info.accelerators if info else 0, accelerator=info.accelerator if info else None,
            state=state, extra=extra,
        )

