"""EFA on every network card of a node, and the public address such a node then needs.

EC2 User Guide, "Maximize network bandwidth on Amazon EC2 instances with multiple network cards": for an
EFA type with several network cards (p4d/p4de 4, p5/p5e 32, p5en 16, p6-b200 8, g6e.48xlarge 2) the
primary network interface (network card 0, device 0) is an ENA interface (an EFA-only interface cannot
be the primary one); card 0 also gets an EFA-only interface at device 1; every further card ``i`` an
EFA-only interface at device 0. A type with one card gets one interface of type ``efa`` (EFA with ENA).

RunInstances API reference, ``AssociatePublicIpAddress``: a public IPv4 address is assigned only to
eth0, and only when the request names a single network interface; with several, EC2 refuses the
parameter (``InvalidParameterCombination``) and the instance gets no public address. So a node with
several interfaces gets an Elastic IP (AllocateAddress, tagged with the pool and the node) associated
with its primary interface (AssociateAddress ``NetworkInterfaceId``: an instance with several
interfaces cannot be named by ``InstanceId``), found again by tag on a retry, and released by tag
with the pool (an Elastic IP is billed while it is allocated; terminating an instance only
disassociates it).
"""

from __future__ import annotations

import dataclasses
import logging
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from typing import Any

from ..base import NodeHandle, ProvisionError
from .aws_data import NODE_TAG, POOL_TAG

#: the provider (`aws.AWS`): typed loosely, as this module is imported by it
AWS = Any

__all__ = ["interface_params", "several_interfaces", "attach_public_addresses", "release_addresses"]

log = logging.getLogger("skyhive.providers.aws")


def several_interfaces(efa_cards: int) -> bool:
    """Whether a node with EFA on `efa_cards` network cards has more than one network interface (and so
    needs an Elastic IP to be reachable)."""
    return efa_cards > 1


def interface_params(subnet: str, group_id: str, efa_cards: int) -> dict[str, str]:
    """The ``NetworkInterface.N.*`` parameters of RunInstances: one interface without EFA (`efa_cards`
    0), one ``efa`` interface on a one-card type, else the ENA primary plus one EFA-only interface per
    card (see the module docstring). Only a single interface asks for a public address."""
    if efa_cards <= 1:
        layout = [(0, 0, "efa" if efa_cards == 1 else None)]
    else:
        layout = [(0, 0, "interface"), (0, 1, "efa-only")] + [(card, 0, "efa-only") for card in range(1, efa_cards)]
    params: dict[str, str] = {}
    for n, (card, device, kind) in enumerate(layout, 1):
        nic = f"NetworkInterface.{n}."
        params.update({nic + "DeviceIndex": str(device), nic + "SubnetId": subnet,
                       nic + "DeleteOnTermination": "true", nic + "SecurityGroupId.1": group_id})
        if kind is not None:
            params.update({nic + "InterfaceType": kind, nic + "NetworkCardIndex": str(card)})
    if len(layout) == 1:
        params["NetworkInterface.1.AssociatePublicIpAddress"] = "true"
    return params


# ---- reading EC2's XML -------------------------------------------------------------------------------

def _local(el: ET.Element) -> str:
    return el.tag.rsplit("}", 1)[-1]


def _child(el: ET.Element, name: str) -> ET.Element | None:
    return next((c for c in el if _local(c) == name), None)


def _text(el: ET.Element, name: str) -> str:
    found = _child(el, name)
    return (found.text or "") if found is not None else ""


def _items(el: ET.Element | None, *path: str) -> Iterator[ET.Element]:
    """The ``item`` children under `path` (``instancesSet``, ...), namespace-agnostic."""
    for name in path:
        if el is None:
            return
        el = _child(el, name)
    if el is not None:
        yield from (c for c in el if _local(c) == "item")


def _tags(item: ET.Element) -> dict[str, str]:
    return {_text(t, "key"): _text(t, "value") for t in _items(item, "tagSet")}


def _primary_interfaces(aws: AWS, instance_ids: list[str]) -> dict[str, str]:
    """instance id -> the id of its primary network interface (network card 0, device 0)."""
    params = {"Action": "DescribeInstances"}
    for i, iid in enumerate(instance_ids, 1):
        params[f"InstanceId.{i}"] = iid
    body = aws._retrying("DescribeInstances", lambda: aws.driver.request(params), just_made=True)
    found = {}
    for reservation in _items(body, "reservationSet"):
        for instance in _items(reservation, "instancesSet"):
            for nic in _items(instance, "networkInterfaceSet"):
                attachment = _child(nic, "attachment")
                if attachment is None:
                    continue
                if _text(attachment, "deviceIndex") == "0" and _text(attachment, "networkCardIndex") in ("", "0"):
                    found[_text(instance, "instanceId")] = _text(nic, "networkInterfaceId")
    return found


def _pool_addresses(aws: AWS, pool_id: str) -> list[dict[str, str]]:
    """The pool's Elastic IPs (by tag): allocationId, publicIp, associationId, networkInterfaceId, node."""
    body = aws._retrying("DescribeAddresses", lambda: aws.driver.request({
        "Action": "DescribeAddresses", "Filter.1.Name": f"tag:{POOL_TAG}", "Filter.1.Value.1": pool_id}))
    return [{"allocationId": _text(item, "allocationId"), "publicIp": _text(item, "publicIp"),
             "associationId": _text(item, "associationId"), "networkInterfaceId": _text(item, "networkInterfaceId"),
             "node": _tags(item).get(NODE_TAG, "")} for item in _items(body, "addressesSet")]


def attach_public_addresses(aws: AWS, pool_id: str, nodes: Mapping[int, NodeHandle]) -> dict[int, NodeHandle]:
    """An Elastic IP for each node of `nodes` on its primary interface (idempotent: the pool's addresses
    are found by tag and only what is missing is allocated or associated); the handles with it as their
    public address."""
    owned = {a["node"]: a for a in _pool_addresses(aws, pool_id)}
    primaries = _primary_interfaces(aws, [h.provider_id for h in nodes.values()])
    done: dict[int, NodeHandle] = {}
    for index, handle in nodes.items():
        eni = primaries.get(handle.provider_id)
        if not eni:
            raise ProvisionError(f"aws: pool {pool_id}: instance {handle.provider_id} (node {index}) lists no "
                                 f"primary network interface to give a public address", kind="fatal")
        address = owned.get(str(index))
        if address is None:
            body = aws._retrying("AllocateAddress", lambda: aws.driver.request({
                "Action": "AllocateAddress", "Domain": "vpc", "TagSpecification.1.ResourceType": "elastic-ip",
                "TagSpecification.1.Tag.1.Key": POOL_TAG, "TagSpecification.1.Tag.1.Value": pool_id,
                "TagSpecification.1.Tag.2.Key": NODE_TAG, "TagSpecification.1.Tag.2.Value": str(index)}))
            address = {"allocationId": _text(body, "allocationId"), "publicIp": _text(body, "publicIp"),
                       "associationId": "", "networkInterfaceId": "", "node": str(index)}
        if address["networkInterfaceId"] != eni:
            allocation = address["allocationId"]
            aws._retrying(f"AssociateAddress {allocation}", lambda: aws.driver.request({
                "Action": "AssociateAddress", "AllocationId": allocation, "NetworkInterfaceId": eni,
                "AllowReassociation": "true"}), just_made=True)
        log.info("aws: pool %s: node %d (%s) reachable at Elastic IP %s", pool_id, index, handle.provider_id,
                 address["publicIp"])
        ip = address["publicIp"]
        done[index] = dataclasses.replace(handle, public_addr=ip, reach=dataclasses.replace(handle.reach, host=ip))
    return done


def release_addresses(aws: AWS, pool_id: str) -> list[str]:
    """Release the pool's Elastic IPs (disassociated first where still associated); what was released."""
    released = []
    for address in _pool_addresses(aws, pool_id):
        if address["associationId"]:
            try:
                aws._retrying("DisassociateAddress", lambda: aws.driver.request({
                    "Action": "DisassociateAddress", "AssociationId": address["associationId"]}))
            except Exception as exc:  # gone with its terminated instance: nothing to undo
                if aws.error_code(exc) != "InvalidAssociationID.NotFound":
                    raise
        aws._retrying("ReleaseAddress", lambda: aws.driver.request({
            "Action": "ReleaseAddress", "AllocationId": address["allocationId"]}))
        released.append(f"Elastic IP {address['publicIp']}")
    return released
