"""AWS EC2 through apache-libcloud: `sky.AWS(region=..., accelerator via the pool, spot=...)`.

The phases are implemented once in `providers.cloud.base.LibcloudProvider` (see `providers.base.Provider`
for each contract); this module holds what is EC2's own: the error-code table, the per-pool key pair
and security group, the default VPC's subnet per zone, image choice, spot and terminate-on-shutdown.

Everything is tagged ``skyhive-pool=<pool id>`` (instances also ``skyhive-node=<index>``) and found
again only by that tag. libcloud's EC2 quirks under moto are corrected in `ec2_driver`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ..base import ClusterSpec, NodeHandle, ProvisionError, SSHReach
from . import catalog
from .aws_access import EC2Access
from .base import ACTIVE_STATES, CloudTimeouts, ErrorKind, LibcloudProvider
from .keys import pool_key, remove_pool_key

__all__ = ["AWS", "POOL_TAG", "NODE_TAG", "EC2_ERRORS", "EC2_STATES"]

log = logging.getLogger(__name__)

POOL_TAG = "skyhive-pool"
NODE_TAG = "skyhive-node"

#: EC2 error codes -> what they mean for provisioning (codes ending ".NotFound" are NOT_FOUND).
EC2_ERRORS: Mapping[str, ErrorKind] = {
    # this zone cannot take the request now: the next zone may
    "InsufficientInstanceCapacity": ErrorKind.CAPACITY,
    "InsufficientHostCapacity": ErrorKind.CAPACITY,
    "InsufficientReservedInstanceCapacity": ErrorKind.CAPACITY,
    "InsufficientCapacity": ErrorKind.CAPACITY,
    "SpotMaxPriceTooLow": ErrorKind.CAPACITY,
    "Unsupported": ErrorKind.CAPACITY,  # the instance type is not offered in this zone
    # the account's limits: no other zone of the region helps
    "InstanceLimitExceeded": ErrorKind.QUOTA,
    "VcpuLimitExceeded": ErrorKind.QUOTA,
    "MaxSpotInstanceCountExceeded": ErrorKind.QUOTA,
    "InsufficientFreeAddressesInSubnet": ErrorKind.QUOTA,
    "AddressLimitExceeded": ErrorKind.QUOTA,
    "SecurityGroupLimitExceeded": ErrorKind.QUOTA,
    "KeyPairLimitExceeded": ErrorKind.QUOTA,
    # the service is busy or briefly failing: retry the same call
    "RequestLimitExceeded": ErrorKind.TRANSIENT,
    "Throttling": ErrorKind.TRANSIENT,
    "ThrottlingException": ErrorKind.TRANSIENT,
    "InternalError": ErrorKind.TRANSIENT,
    "InternalFailure": ErrorKind.TRANSIENT,
    "ServiceUnavailable": ErrorKind.TRANSIENT,
    "Unavailable": ErrorKind.TRANSIENT,
    # something still uses the resource (an instance's network interface holds its security group)
    "DependencyViolation": ErrorKind.DEPENDENCY,
    "InvalidGroup.InUse": ErrorKind.DEPENDENCY,
}

#: EC2 instance states -> lifecycle states.
EC2_STATES: Mapping[str, str] = {
    "pending": "provisioning",
    "running": "running",
    "stopping": "terminating",
    "stopped": "terminating",
    "shutting-down": "terminating",
    "terminated": "terminated",
}

#: What a node's user data does: installs uv (one static binary) so that bootstrap can install the client's
#: Python version when the image has another; everything else is done over SSH by the client's bootstrap.
USER_DATA = """#!/bin/sh
command -v uv >/dev/null 2>&1 || (curl -LsSf https://astral.sh/uv/install.sh |
    env UV_INSTALL_DIR=/usr/local/bin INSTALLER_NO_MODIFY_PATH=1 sh) || true
"""

#: Bootstrap waits for this before it looks at a node (cloud-init runs the user data after sshd starts).
READY_COMMAND = "cloud-init status --wait >/dev/null 2>&1 || true"

#: Default images, by owner and name pattern (the newest match is used): Ubuntu 22.04, and for GPU
#: machines AWS's Deep Learning base image with the NVIDIA driver.
DEFAULT_IMAGE = ("099720109477", "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*")
DEFAULT_GPU_IMAGE = ("amazon", "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)*")


class AWS(EC2Access, LibcloudProvider):
    """Machines on AWS EC2, created per pool and destroyed with it.

    - `region`: where; `zones`: the zones to try, in order (default: every zone of the region that
      offers the chosen instance type).
    - `instance_type`: a fixed type; default: the cheapest type in the region that satisfies the pool's
      `accelerator` ("A100", "A100:8"), `cpus` and `memory_gb` (see `providers.cloud.catalog`).
    - `spot`: spot instances; `image`: an AMI id (default: Ubuntu 22.04, or the Deep Learning base image
      for GPU types); `disk_gb`: the root volume; `ssh_user`: the image's login user.
    - `ssh_cidr`: who may open SSH to the nodes (default: this client's address; "127.0.0.1/32" against
      a test `endpoint`); nodes of the pool reach each other on every port.
    - `idle_timeout`: seconds with no client connected after which a node shuts itself down (its idle
      watchdog, started by bootstrap, runs `shutdown_command`; instances terminate on shutdown); None: no
      watchdog. A connected client keeps its nodes however long a job runs.
    - `endpoint`: an EC2-compatible endpoint (``http://127.0.0.1:5000`` for moto_server) instead of AWS.
    Credentials come from the standard ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
    ``AWS_SESSION_TOKEN`` variables and are never recorded.
    """

    name: ClassVar[str] = "aws"
    error_kinds = EC2_ERRORS
    state_map = EC2_STATES
    chooses = frozenset({"accelerator", "cpus", "memory_gb", "spot"})
    resource_options = {"region": "region", "zone": "zones", "instance_type": "instance_type", "image_id": "image",
                        "disk_size": "disk_gb"}

    def __init__(self, region: str = "us-east-1", zones: Sequence[str] | None = None, instance_type: str | None = None,
                 spot: bool = False, image: str | None = None, disk_gb: int = 100, ssh_user: str = "ubuntu",
                 ssh_cidr: str | None = None, endpoint: str | None = None, idle_timeout: float | None = 1800.0,
                 shutdown_command: str = "sudo shutdown -h now", timeouts: CloudTimeouts | None = None) -> None:
        super().__init__(timeouts=timeouts)
        if disk_gb < 8:
            raise ValueError(f"disk_gb must be at least 8, not {disk_gb}")
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
        self._driver: Any = None
        self._plans: dict[str, catalog.Choice] = {}
        self._shared: dict[str, tuple[str, str]] = {}  # pool id -> (key pair name, security group id)

    def __repr__(self) -> str:
        return f"<AWS region={self.region} type={self.instance_type or 'by resources'} spot={self.spot}>"

    def describe(self) -> dict[str, Any]:
        """Plain values that rebuild this provider (never credentials)."""
        return {"provider": self.name, "region": self.region, "zones": self.zones, "instance_type": self.instance_type,
                "spot": self.spot, "image": self.image, "disk_gb": self.disk_gb, "ssh_user": self.ssh_user,
                "ssh_cidr": self.ssh_cidr, "endpoint": self.endpoint, "idle_timeout": self.idle_timeout,
                "shutdown_command": self.shutdown_command}

    # ---- the driver and errors -------------------------------------------------------------------------

    @property
    def driver(self) -> Any:
        """The libcloud driver (created on first use; credentials from the environment)."""
        if self._driver is None:
            from .ec2_driver import make_driver

            key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
            if not key or not secret:
                raise ProvisionError("aws: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                                     kind="fatal")
            self._driver = make_driver(key=key, secret=secret, region=self.region,
                                       token=os.environ.get("AWS_SESSION_TOKEN"), endpoint=self.endpoint)
        return self._driver

    # ---- choosing the machine --------------------------------------------------------------------------

    def plan(self, spec: ClusterSpec) -> dict[str, Any]:
        """See `Provider.plan`: the chosen instance type, its price and the pool's cost per hour."""
        choice = self.choice(spec)
        return {**choice.as_dict(), "summary": choice.summary()}

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
        return choice

    # ---- the blocking primitives -----------------------------------------------------------------------

    def zones_sync(self, spec: ClusterSpec) -> list[str]:
        if self.zones:
            return list(self.zones)
        choice = self.choice(spec)
        body = self.driver.request({
            "Action": "DescribeInstanceTypeOfferings", "LocationType": "availability-zone",
            "Filter.1.Name": "instance-type", "Filter.1.Value.1": choice.instance_type,
        })
        offered = sorted({el.text for el in body.iter() if el.tag.endswith("}location") and el.text})
        return offered

    def prepare_sync(self, spec: ClusterSpec) -> None:
        choice = self.choice(spec)
        log.info("aws: pool %s: %s", spec.pool_id, choice.summary())
        key_name = self._key_pair(spec.pool_id)
        group_id = self._security_group(spec.pool_id)
        self._shared[spec.pool_id] = (key_name, group_id)

    def _tags(self, pool_id: str, resource: str) -> dict[str, str]:
        return {"TagSpecification.1.ResourceType": resource, "TagSpecification.1.Tag.1.Key": POOL_TAG,
                "TagSpecification.1.Tag.1.Value": pool_id}

    def _key_pair(self, pool_id: str) -> str:
        name = f"skyhive-{pool_id}"
        _, public = pool_key(pool_id)
        owned = self._owned_key_pairs(pool_id)
        if name not in owned:
            self.driver.request({"Action": "ImportKeyPair", "KeyName": name, "PublicKeyMaterial": _b64(public),
                                 **self._tags(pool_id, "key-pair")})
        return name

    def _owned_key_pairs(self, pool_id: str) -> list[str]:
        body = self.driver.request({"Action": "DescribeKeyPairs", "Filter.1.Name": f"tag:{POOL_TAG}",
                                    "Filter.1.Value.1": pool_id})
        return [el.text for el in body.iter() if el.tag.endswith("}keyName") and el.text]

    def _owned_groups(self, pool_id: str) -> list[str]:
        return [g.id for g in self.driver.ex_get_security_groups(filters={f"tag:{POOL_TAG}": pool_id})]

    def _security_group(self, pool_id: str) -> str:
        owned = self._owned_groups(pool_id)
        if owned:
            return owned[0]
        vpc = self._default_vpc()
        name = f"skyhive-{pool_id}"
        created = self.driver.request({"Action": "CreateSecurityGroup", "GroupName": name, "VpcId": vpc,
                                       "GroupDescription": f"skyhive pool {pool_id}: SSH from the client, all "
                                                           f"traffic within the pool", **self._tags(pool_id, "security-group")})
        group_id = next(el.text for el in created.iter() if el.tag.endswith("}groupId"))
        self.driver.ex_authorize_security_group_ingress(group_id, 22, 22, cidr_ips=[self._ssh_cidr()], protocol="tcp")
        self.driver.ex_authorize_security_group_ingress(group_id, 0, 65535, group_pairs=[{"group_id": group_id}],
                                                        protocol="-1")
        return group_id

    def _ssh_cidr(self) -> str:
        if self.ssh_cidr:
            return self.ssh_cidr
        if self.endpoint:
            return "127.0.0.1/32"
        from urllib.request import urlopen  # the client's public address, as AWS sees it

        with urlopen("https://checkip.amazonaws.com", timeout=10) as resp:  # noqa: S310 - fixed https URL
            return resp.read().decode().strip() + "/32"

    def _default_vpc(self) -> str:
        for net in self.driver.ex_list_networks():
            if str(net.extra.get("is_default")).lower() == "true":
                return net.id
        raise ProvisionError(f"aws: region {self.region} has no default VPC", kind="fatal")

    def _subnet(self, zone: str) -> Any:
        vpc = self._default_vpc()
        for subnet in self.driver.ex_list_subnets(filters={"vpc-id": vpc, "availability-zone": zone}):
            return subnet
        raise ProvisionError(f"aws: the default VPC has no subnet in {zone}", kind="fatal")

    def _image(self, choice: catalog.Choice) -> Any:
        """The AMI to boot (its root device name sizes the root volume)."""
        if self.image:
            return self.driver.get_image(self.image)
        owner, pattern = DEFAULT_GPU_IMAGE if choice.accelerators else DEFAULT_IMAGE
        images = self.driver.list_images(ex_owner=owner, ex_filters={"name": pattern, "architecture": "x86_64"})
        if not images:
            raise ProvisionError(f"aws: no image named {pattern!r} in {self.region}: pass image=", kind="fatal")
        return max(images, key=lambda im: im.extra.get("creation_date") or "")

    def launch_sync(self, spec: ClusterSpec, nodes: Sequence[int], zone: str) -> list[NodeHandle]:
        from libcloud.compute.base import NodeSize

        choice = self.choice(spec)
        shared = self._shared.get(spec.pool_id)
        if shared is None:  # prepared by another call (or process): found again by tag
            groups = self._owned_groups(spec.pool_id)
            if not groups:
                raise ProvisionError(f"aws: pool {spec.pool_id} has no security group: prepare() must run first",
                                     kind="fatal")
            shared = self._shared[spec.pool_id] = (f"skyhive-{spec.pool_id}", groups[0])
        key_name, group_id = shared
        subnet = self._subnet(zone)
        size = NodeSize(choice.instance_type, choice.instance_type, 0, self.disk_gb, 0, 0, self.driver)
        image = self._image(choice)
        root_device = image.extra.get("root_device_name") or "/dev/sda1"
        extra_tags = dict(spec.tags)
        handles = []
        for index in nodes:
            node = self.driver.create_node(
                name=f"skyhive-{spec.pool_id}-{index}", size=size, image=image, ex_keyname=key_name,
                ex_security_group_ids=[group_id], ex_subnet=subnet, ex_assign_public_ip=True,
                ex_metadata={**extra_tags, POOL_TAG: spec.pool_id, NODE_TAG: str(index)},
                ex_userdata=USER_DATA, ex_terminate_on_shutdown=True, ex_spot=bool(choice.spot),
                ex_blockdevicemappings=[{"DeviceName": root_device, "Ebs": {
                    "VolumeSize": self.disk_gb, "VolumeType": "gp3", "DeleteOnTermination": "true"}}],
            )
            handles.append(self._handle(node, spec.pool_id, launched_at=time.time()))
        return handles

    def list_sync(self, pool_id: str, states: Sequence[str] | None = ACTIVE_STATES) -> list[NodeHandle]:
        filters: dict[str, Any] = {f"tag:{POOL_TAG}": pool_id}
        if states is not None:
            filters["instance-state-name"] = list(states)
        return sorted((self._handle(n, pool_id) for n in self.driver.list_nodes(ex_filters=filters)),
                      key=lambda h: (h.node, h.provider_id))

    def terminate_sync(self, provider_id: str) -> None:
        from libcloud.compute.base import Node

        self.driver.destroy_node(Node(provider_id, "", None, [], [], self.driver))

    def cleanup_sync(self, pool_id: str) -> list[str]:
        deleted = []
        for group_id in self._owned_groups(pool_id):
            try:  # returns False under moto although the group is gone: the listing below decides
                self.driver.ex_delete_security_group_by_id(group_id)
            except Exception as exc:
                if self.classify(exc) is not ErrorKind.NOT_FOUND:
                    raise
            if group_id not in self._owned_groups(pool_id):
                deleted.append(f"security group {group_id}")
        for name in self._owned_key_pairs(pool_id):
            self.driver.request({"Action": "DeleteKeyPair", "KeyName": name})
            deleted.append(f"key pair {name}")
        remaining = self._owned_groups(pool_id)
        if remaining:
            raise ProvisionError(f"aws: security groups {remaining} of pool {pool_id} still exist", kind="fatal")
        if remove_pool_key(pool_id):
            deleted.append("the pool's private key")
        self._shared.pop(pool_id, None)
        return deleted

    # ---- records ---------------------------------------------------------------------------------------

    def _handle(self, node: Any, pool_id: str, launched_at: float | None = None) -> NodeHandle:
        tags = node.extra.get("tags") or {}
        state = str(node.extra.get("status") or "pending")
        private = (node.private_ips or [""])[0] or ""
        public = (node.public_ips or [None])[0]
        instance_type = node.extra.get("instance_type") or ""
        info = catalog.instance("aws", instance_type) if instance_type else None
        key_path, _ = pool_key(pool_id, create=False)
        extra: dict[str, Any] = {"pool_id": pool_id, "zone": node.extra.get("availability"),
                                 "instance_type": instance_type}
        if launched_at is not None:
            extra["launched_at"] = launched_at
        return NodeHandle(
            node=int(tags.get(NODE_TAG, -1)), provider_id=node.id, private_addr=private, public_addr=public,
            reach=SSHReach(host=public or private or "", user=self.ssh_user, key=str(key_path),
                           idle_shutdown=self.idle_timeout or 0.0, shutdown_command=self.shutdown_command,
                           ready_command=READY_COMMAND),
            accelerators=info.accelerators if info else 0, accelerator=info.accelerator if info else None,
            state=state, extra=extra,
        )


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()

