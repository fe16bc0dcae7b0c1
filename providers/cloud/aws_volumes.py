"""AWS persistent volumes: EBS volumes tagged `skyhive-volume=NAME` (see `providers/volumes.py`; the
operations are declared in `providers.base.Provider.find_volume` / `delete_volume`).

An EBS volume lives in one zone and attaches to one instance: a pool with volumes launches in the zone
its volumes are in (`pin_zones`; a new volume is made in the zone the head node got), and the head node
(node 0) gets them attached (`attach_all`, when it runs) and mounted by its first-boot command (formatted
ext4 the first time only). Attached with EC2's default, DeleteOnTermination false: terminating the pool's
instances (down, autostop, a failed launch) leaves the volume, `available` again. Only `delete_volume`
deletes one. Requests are EC2's query API through the provider's libcloud driver (`driver.request`),
tagged at creation (a TagSpecification: `CreateTags` after the fact is what moto refuses, TESTBED.md).
"""

from __future__ import annotations

import dataclasses
import logging
import string
from collections.abc import Sequence
from typing import Any

from ..base import NodeHandle, ProvisionError
from .aws_data import READY_COMMAND
from ..volumes import Volume, VolumeMount, mount_script, mounts_of, record
from ..volumes import pin_zones as shared_pin_zones

log = logging.getLogger(__name__)

__all__ = ["VOLUME_TAG", "find", "ensure", "attach_all", "pin_zones", "delete", "mount_command"]

VOLUME_TAG = "skyhive-volume"
_GONE = ("deleting", "deleted", "error")


def _text(el: Any, name: str) -> str:
    found = next((c for c in el if c.tag.rsplit("}", 1)[-1] == name), None)
    return (found.text or "") if found is not None else ""


def _child(el: Any, name: str) -> Any:
    return next((c for c in el if c.tag.rsplit("}", 1)[-1] == name), None)


def _volumes(aws: Any, name: str | None) -> list[Volume]:
    params = {"Action": "DescribeVolumes", "Filter.1.Name": "tag-key", "Filter.1.Value.1": VOLUME_TAG}
    if name is not None:
        params = {"Action": "DescribeVolumes", "Filter.1.Name": f"tag:{VOLUME_TAG}", "Filter.1.Value.1": name}
    body = aws._retrying("DescribeVolumes", lambda: aws.driver.request(params))
    out = []
    sets = [el for el in body.iter() if el.tag.rsplit("}", 1)[-1] == "volumeSet"]
    for item in (sets[0] if sets else []):  # (the attachments' items name the volume too: not those)
        tags = {_text(t, "key"): _text(t, "value") for t in (_child(item, "tagSet") or [])}
        attachments = [_text(a, "instanceId") for a in (_child(item, "attachmentSet") or [])
                       if _text(a, "status") in ("attaching", "attached")]
        state = _text(item, "status")
        if state in _GONE:
            continue
        out.append(Volume(name=tags.get(VOLUME_TAG, ""), cloud="aws", region=aws.region,
                          zone=_text(item, "availabilityZone"), volume_id=_text(item, "volumeId"),
                          size_gb=int(_text(item, "size") or 0), state=state,
                          attached_to=attachments[0] if attachments else ""))
    return out


def find(aws: Any, name: str) -> Volume | None:
    """The volume `name` in the provider's region (None when there is none); two of one name is an error."""
    found = _volumes(aws, name)
    if len(found) > 1:
        raise ProvisionError(f"aws: {len(found)} volumes are tagged {VOLUME_TAG}={name} in {aws.region} "
                             f"({', '.join(v.volume_id for v in found)}): delete the extra ones", kind="fatal")
    return found[0] if found else None


def ensure(aws: Any, mount: VolumeMount, zone: str) -> Volume:
    """The volume of `mount`, made in `zone` when it does not exist (and recorded either way)."""
    volume = find(aws, mount.name)
    if volume is None:
        body = aws._retrying("CreateVolume", lambda: aws.driver.request({
            "Action": "CreateVolume", "AvailabilityZone": zone, "Size": str(mount.size_gb), "VolumeType": "gp3",
            "TagSpecification.1.ResourceType": "volume", "TagSpecification.1.Tag.1.Key": VOLUME_TAG,
            "TagSpecification.1.Tag.1.Value": mount.name}))
        volume_id = next((el.text for el in body.iter() if el.tag.endswith("}volumeId") or el.tag == "volumeId"), "")
        log.info("aws: volume %s made: %s (%d GB in %s)", mount.name, volume_id, mount.size_gb, zone)
        volume = Volume(name=mount.name, cloud="aws", region=aws.region, zone=zone, volume_id=str(volume_id),
                        size_gb=mount.size_gb, state="creating")
    elif volume.zone != zone:
        raise ProvisionError(f"aws: volume {mount.name} ({volume.volume_id}) is in {volume.zone}, the head node "
                             f"in {zone}: an EBS volume attaches in its own zone only", kind="fatal")
    record(volume, aws.describe())
    return volume


def pin_zones(aws: Any, zones: Sequence[str]) -> list[str]:
    """`zones` narrowed to the zone the provider's existing volumes are in (all of them must share one)."""
    if not aws.volumes:
        return list(zones)
    found = {v.zone for m in mounts_of(aws.volumes) if (v := find(aws, m.name)) is not None}
    return shared_pin_zones("aws", found, zones, what="volumes")


def _wait(aws: Any, name: str, ready: tuple[str, ...], what: str) -> Volume:
    import time

    deadline = time.monotonic() + aws.timeouts.running
    while True:
        volume = find(aws, name)
        if volume is not None and volume.state in ready:
            return volume
        if time.monotonic() > deadline:
            raise ProvisionError(f"aws: volume {name} not {what} after {aws.timeouts.running:.0f} s "
                                 f"({volume.state if volume else 'gone'})", kind="fatal")
        time.sleep(aws.timeouts.poll)


def attach_all(aws: Any, handle: NodeHandle) -> NodeHandle:
    """Attach (making where needed) the provider's volumes to the running head node `handle`; the handle
    with its first-boot command also mounting them, and `extra["volumes"]` naming them."""
    zone = str(handle.extra.get("zone") or "")
    mounted: dict[str, str] = {}
    commands = []
    for i, mount in enumerate(mounts_of(aws.volumes)):
        volume = ensure(aws, mount, zone)
        if volume.attached_to == handle.provider_id:
            pass
        else:
            if volume.attached_to:  # still held by an instance of an earlier pool (terminating): let go first
                aws._retrying("DetachVolume", lambda: aws.driver.request({
                    "Action": "DetachVolume", "VolumeId": volume.volume_id, "Force": "true"}))
            volume = _wait(aws, mount.name, ("available",), "available")
            device = f"/dev/sd{string.ascii_lowercase[5 + i]}"
            aws._retrying("AttachVolume", lambda: aws.driver.request({
                "Action": "AttachVolume", "VolumeId": volume.volume_id, "InstanceId": handle.provider_id,
                "Device": device}))
        volume = _wait(aws, mount.name, ("in-use",), "attached")
        record(volume, aws.describe())
        mounted[mount.target] = volume.volume_id
        commands.append(mount_command(volume.volume_id, mount.target, i))
    first_boot = "; ".join([READY_COMMAND, *commands])  # (the first boot every AWS node waits for, then these)
    return dataclasses.replace(handle, reach=dataclasses.replace(handle.reach, ready_command=first_boot),
                               extra={**handle.extra, "volumes": mounted})


def mount_command(volume_id: str, target: str, index: int) -> str:
    """The shell command that mounts EBS volume `volume_id` at `target` on the node: by its NVMe serial on
    Nitro machines, else by its device name (`providers.volumes.mount_script`)."""
    letter = string.ascii_lowercase[5 + index]
    serial = volume_id.replace("-", "")
    return mount_script([f"/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_{serial}", f"/dev/xvd{letter}",
                         f"/dev/sd{letter}"], target, volume_id)


def delete(aws: Any, name: str) -> None:
    """Delete volume `name` (gone already: nothing to do); refused while it is attached to an instance."""
    volume = find(aws, name)
    if volume is None:
        return
    if volume.attached_to:
        raise ProvisionError(f"aws: volume {name} ({volume.volume_id}) is attached to {volume.attached_to}: "
                             f"take down the pool that uses it first", kind="fatal")
    aws._retrying("DeleteVolume", lambda: aws.driver.request({"Action": "DeleteVolume", "VolumeId": volume.volume_id}))
    log.info("aws: volume %s (%s) deleted", name, volume.volume_id)
