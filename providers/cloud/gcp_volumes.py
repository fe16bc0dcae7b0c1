"""GCP persistent volumes: zonal persistent disks labelled `skyhive-volume=NAME` (see `providers/volumes.py`;
the operations are declared in `providers.base.Provider.find_volume` / `delete_volume`).

A persistent disk lives in one zone and, read-write, attaches to one instance: a pool with volumes
launches in the zone its disks are in (`pin_zones`; a new disk is made in the zone the head node is
launched in, before it), and the head node's `instances.insert` names the disks (`autoDelete: false`,
so deleting the instance — down, autostop, a failed launch — leaves them). Its first-boot command mounts
each one by its device name (`/dev/disk/by-id/google-skyhive-NAME`), formatting it ext4 the first time.
GCE names are lower case: a volume `My_Data` is the disk `skyhive-vol-my-data`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from ..base import ProvisionError
from ..volumes import Volume, VolumeMount, mount_script, mounts_of, record
from ..volumes import pin_zones as shared_pin_zones

log = logging.getLogger(__name__)

__all__ = ["VOLUME_LABEL", "gce_name", "find", "ensure", "pin_zones", "disk_entries", "mount_commands", "delete"]

VOLUME_LABEL = "skyhive-volume"


def gce_name(name: str) -> str:
    """The volume's name as GCE spells names and label values (lower case, digits, dashes)."""
    return re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-")[:40] or "volume"


def _volumes(gcp: Any, name: str | None) -> list[Volume]:
    wanted = f"labels.{VOLUME_LABEL} = {gce_name(name)}" if name is not None else None
    answer = gcp.client.request("GET", "aggregated/disks", params={"filter": wanted} if wanted else None)
    out = []
    for scoped in (answer.get("items") or {}).values():
        for disk in scoped.get("disks") or []:
            label = (disk.get("labels") or {}).get(VOLUME_LABEL)
            if not label or (name is not None and label != gce_name(name)):
                continue
            users = disk.get("users") or []
            out.append(Volume(name=name or label, cloud="gcp", region=gcp.region,
                              zone=str(disk.get("zone") or "").rsplit("/", 1)[-1], volume_id=str(disk.get("name")),
                              size_gb=int(disk.get("sizeGb") or 0),
                              state="in-use" if users else str(disk.get("status") or "").lower() or "ready",
                              attached_to=str(users[0]).rsplit("/", 1)[-1] if users else ""))
    return out


def find(gcp: Any, name: str) -> Volume | None:
    """The disk of volume `name` in the project (None when there is none); two of one name is an error."""
    found = _volumes(gcp, name)
    if len(found) > 1:
        raise ProvisionError(f"gcp: {len(found)} disks are labelled {VOLUME_LABEL}={gce_name(name)} "
                             f"({', '.join(f'{v.zone}/{v.volume_id}' for v in found)}): delete the extra ones",
                             kind="fatal")
    return found[0] if found else None


def ensure(gcp: Any, zone: str) -> None:
    """Make each of the provider's volumes that does not exist yet, in `zone` (and record them all)."""
    for mount in mounts_of(gcp.volumes):
        volume = find(gcp, mount.name)
        if volume is None:
            disk = f"skyhive-vol-{gce_name(mount.name)}"
            gcp.client.wait(gcp.client.request("POST", f"zones/{zone}/disks", {
                "name": disk, "sizeGb": str(mount.size_gb), "labels": {VOLUME_LABEL: gce_name(mount.name)},
                "description": f"skyhive volume {mount.name}"}))
            log.info("gcp: volume %s made: disk %s (%d GB in %s)", mount.name, disk, mount.size_gb, zone)
            volume = Volume(name=mount.name, cloud="gcp", region=gcp.region, zone=zone, volume_id=disk,
                            size_gb=mount.size_gb, state="ready")
        elif volume.zone != zone:
            raise ProvisionError(f"gcp: volume {mount.name} (disk {volume.volume_id}) is in {volume.zone}, the head "
                                 f"node in {zone}: a persistent disk attaches in its own zone only", kind="fatal")
        record(volume, gcp.describe())


def pin_zones(gcp: Any, zones: Sequence[str]) -> list[str]:
    """`zones` narrowed to the zone the provider's existing volumes are in (all of them must share one)."""
    if not gcp.volumes:
        return list(zones)
    found = {v.zone for m in mounts_of(gcp.volumes) if (v := find(gcp, m.name)) is not None}
    return shared_pin_zones("gcp", found, zones, what="disks")


def disk_entries(mounts: Sequence[VolumeMount], zone: str) -> list[dict[str, Any]]:
    """The head node's `instances.insert` disks for its volumes (kept when the instance is deleted)."""
    return [{"source": f"zones/{zone}/disks/skyhive-vol-{gce_name(m.name)}", "autoDelete": False, "boot": False,
             "mode": "READ_WRITE", "deviceName": f"skyhive-{gce_name(m.name)}"} for m in mounts]


def mount_commands(mounts: Sequence[VolumeMount]) -> list[str]:
    return [mount_script([f"/dev/disk/by-id/google-skyhive-{gce_name(m.name)}"], m.target, m.name) for m in mounts]


def delete(gcp: Any, name: str) -> None:
    """Delete volume `name`'s disk (gone already: nothing to do); refused while an instance uses it."""
    volume = find(gcp, name)
    if volume is None:
        return
    if volume.attached_to:
        raise ProvisionError(f"gcp: volume {name} (disk {volume.volume_id}) is attached to {volume.attached_to}: "
                             f"take down the pool that uses it first", kind="fatal")
    gcp.client.wait(gcp.client.request("DELETE", f"zones/{volume.zone}/disks/{volume.volume_id}"))
    log.info("gcp: volume %s (disk %s) deleted", name, volume.volume_id)
