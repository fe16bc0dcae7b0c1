"""EC2 as data: what its error codes mean, its instance states, which vCPU quota limits a family, which
types have EFA, the instance-metadata options, and RunInstances' idempotency token."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from .base import ErrorKind
from .boot import BOOT_LIMIT, limited

__all__ = ["POOL_TAG", "NODE_TAG", "LAUNCH_TAG", "PLACEMENT_TAG", "ADDRESS_TAG", "USER_DATA", "user_data",
           "READY_COMMAND", "b64",
           "EC2_ERRORS", "EC2_STATES", "JUST_MADE", "VCPU_QUOTAS", "STANDARD_QUOTA", "EFA_TYPES", "METADATA_OPTIONS",
           "vcpu_quota", "client_token"]

POOL_TAG = "skyhive-pool"
NODE_TAG = "skyhive-node"
PLACEMENT_TAG = "skyhive-placement-group"  # on the pool's key pair: the pool has a placement group
ADDRESS_TAG = "skyhive-elastic-ips"  # on the pool's key pair: the pool's nodes have Elastic IPs (aws_efa)
LAUNCH_TAG = "skyhive-launch"  # which RunInstances call made an instance (not yet numbered if NODE_TAG is missing)

#: What a node's user data does: installs uv (one static binary) so that bootstrap can install the client's
#: Python version when the image has another; everything else is done over SSH by the client's bootstrap. Sent
#: with the pool's boot-time limit set first (`user_data`).
INSTALL_UV = """#!/bin/sh
command -v uv >/dev/null 2>&1 || (curl -LsSf https://astral.sh/uv/install.sh |
    env UV_INSTALL_DIR=/usr/local/bin INSTALLER_NO_MODIFY_PATH=1 sh) || true
"""


def user_data(boot_limit: int | None) -> str:
    """A node's user data: the boot-time limit (`AWS(boot_limit=)` seconds, None: none; an instance no client
    bootstraps shuts down, and terminates, by itself), then `INSTALL_UV`."""
    return limited(INSTALL_UV, boot_limit)


#: the user data with the default limit (`boot.BOOT_LIMIT`)
USER_DATA = user_data(BOOT_LIMIT)

#: Bootstrap waits for this before it looks at a node (cloud-init runs the user data after sshd starts).
READY_COMMAND = "cloud-init status --wait >/dev/null 2>&1 || true"

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
    "InvalidPlacementGroup.InUse": ErrorKind.DEPENDENCY,
    "InvalidPlacementGroup.Unknown": ErrorKind.NOT_FOUND,
}

#: NotFound answers that, right after the pool made the thing, mean "not visible yet" (EC2 is eventually
#: consistent for a few seconds): retried for `CloudTimeouts.visibility_grace`, then fatal
JUST_MADE = frozenset({"InvalidGroup.NotFound", "InvalidKeyPair.NotFound", "InvalidPlacementGroup.Unknown",
                       "InvalidInstanceID.NotFound", "InvalidNetworkInterfaceID.NotFound",
                       "InvalidAllocationID.NotFound"})

#: the vCPU quota (Service Quotas, service "ec2") that limits each instance family, by the type's
#: leading letters: (quota name, quota code); spot pools use the spot counterpart
VCPU_QUOTAS: Mapping[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "p": (("Running On-Demand P instances", "L-417A185B"), ("All P Spot Instance Requests", "L-7212CCBC")),
    "g": (("Running On-Demand G and VT instances", "L-DB2E81BA"), ("All G and VT Spot Instance Requests", "L-3819A6DF")),
    "vt": (("Running On-Demand G and VT instances", "L-DB2E81BA"), ("All G and VT Spot Instance Requests", "L-3819A6DF")),
    "inf": (("Running On-Demand Inf instances", "L-1945791B"), ("All Inf Spot Instance Requests", "L-B5D1601B")),
    "trn": (("Running On-Demand Trn instances", "L-2C3B7624"), ("All Trn Spot Instance Requests", "L-6B0D517C")),
    "dl": (("Running On-Demand DL instances", "L-6E869C2A"), ("All DL Spot Instance Requests", "L-85EED4F7")),
    "f": (("Running On-Demand F instances", "L-74FC7D96"), ("All F Spot Instance Requests", "L-88CF9481")),
    "x": (("Running On-Demand X instances", "L-7295265B"), ("All X Spot Instance Requests", "L-E3A00192")),
}
STANDARD_QUOTA = (("Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", "L-1216C47A"),
                  ("All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests", "L-34B43A08"))

#: instance types with EFA, and how many EFA network cards they have (EC2 User Guide, "Elastic Fabric
#: Adapter", supported instance types). skyhive puts EFA on every card (`aws_efa`).
EFA_TYPES: Mapping[str, int] = {
    "p3dn.24xlarge": 1, "p4d.24xlarge": 4, "p4de.24xlarge": 4, "p5.48xlarge": 32, "p5e.48xlarge": 32,
    "p5en.48xlarge": 16, "p6-b200.48xlarge": 8, "g4dn.metal": 1, "g4dn.8xlarge": 1, "g4dn.12xlarge": 1,
    "g4dn.16xlarge": 1, "g5.8xlarge": 1, "g5.12xlarge": 1, "g5.16xlarge": 1, "g5.24xlarge": 1, "g5.48xlarge": 1,
    "g6.8xlarge": 1, "g6.12xlarge": 1, "g6.16xlarge": 1, "g6.24xlarge": 1, "g6.48xlarge": 1,
    "g6e.8xlarge": 1, "g6e.12xlarge": 1, "g6e.16xlarge": 1, "g6e.24xlarge": 1, "g6e.48xlarge": 2,
}


def vcpu_quota(instance_type: str, spot: bool) -> tuple[str, str]:
    """(quota name, quota code) of the vCPU quota that limits `instance_type`."""
    family = instance_type.split(".", 1)[0]
    letters = "".join(ch for ch in family if ch.isalpha())
    for prefix in sorted(VCPU_QUOTAS, key=len, reverse=True):
        if letters.startswith(prefix):
            return VCPU_QUOTAS[prefix][spot]
    return STANDARD_QUOTA[spot]


def client_token(pool_id: str, zone: str, attempt: int, missing: Sequence[int]) -> str:
    """RunInstances' idempotency token (at most 64 ASCII characters): the same for a retry of the same
    request, so EC2 answers a retry of a call that did go through with that call's instances."""
    digest = hashlib.sha256(f"{pool_id}|{zone}|{attempt}|{','.join(map(str, missing))}".encode()).hexdigest()
    return f"skyhive-{digest[:48]}"


#: EC2 instance states -> lifecycle states.
EC2_STATES: Mapping[str, str] = {
    "pending": "provisioning",
    "running": "running",
    "stopping": "terminating",
    "stopped": "terminating",
    "shutting-down": "terminating",
    "terminated": "terminated",
}

#: IMDSv2 only (a token is required), and a hop limit of 2 so that containers on the node reach it too
METADATA_OPTIONS = {"MetadataOptions.HttpTokens": "required", "MetadataOptions.HttpPutResponseHopLimit": "2",
                    "MetadataOptions.HttpEndpoint": "enabled"}


def b64(text: str) -> str:
    """Base64 of `text` (EC2's UserData and PublicKeyMaterial)."""
    import base64

    return base64.b64encode(text.encode()).decode()
