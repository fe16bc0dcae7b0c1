"""Azure persistent volumes: managed disks tagged `skyhive-volume=NAME` in a resource group of their own
per region, `skyhive-volumes-REGION` (see `providers/volumes.py`; the operations are declared in
`providers.base.Provider.find_volume` / `delete_volume`).

A pool's resources live in the pool's own resource group, deleted with the pool: a disk there would go
with it, so volumes live in a group that no pool's `down` deletes. The head node's VM names its disks in
`storageProfile.dataDisks` (`createOption: Attach`, `deleteOption: Detach`: deleting the VM — down,
autostop, a failed launch — lets go of them), at LUN 0, 1, ...; its first-boot command mounts each one by
its LUN (`/dev/disk/azure/scsi1/lunN`), formatting it ext4 the first time. Regional disks attach to a VM
of their region; a pool given zones takes no volumes yet (a zonal VM needs a disk of its zone).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..base import ProvisionError
from ..volumes import Volume, VolumeMount, mount_script, mounts_of, record

log = logging.getLogger(__name__)

__all__ = ["VOLUME_TAG", "group", "find", "ensure", "data_disks", "mount_commands", "delete"]

VOLUME_TAG = "skyhive-volume"
RESOURCES_API, COMPUTE_API = "2021-04-01", "2023-04-02"


def group(azure: Any) -> str:
    return f"/subscriptions/{azure.driver.subscription_id}/resourceGroups/skyhive-volumes-{azure.region}"


def _disk_path(azure: Any, name: str) -> str:
    return f"{group(azure)}/providers/Microsoft.Compute/disks/skyhive-vol-{name}"


def _volume(azure: Any, name: str, disk: dict[str, Any]) -> Volume:
    held = str(disk.get("managedBy") or "")
    props = disk.get("properties") or {}
    return Volume(name=name, cloud="azure", region=azure.region, zone="", volume_id=str(disk.get("id") or ""),
                  size_gb=int(props.get("diskSizeGB") or 0), state="in-use" if held else "available",
                  attached_to=held.rsplit("/", 1)[-1] if held else "")


def find(azure: Any, name: str) -> Volume | None:
    """The managed disk of volume `name` in the provider's region (None when there is none)."""
    from libcloud.common.exceptions import BaseHTTPError

    try:
        disk = azure.arm(_disk_path(azure, name), COMPUTE_API)
    except BaseHTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return _volume(azure, name, disk) if disk else None


def ensure(azure: Any) -> None:
    """Make each of the provider's volumes that does not exist yet (and its group), and record them all."""
    if azure.zones:
        raise ProvisionError("azure: volumes on a pool given zones= are not supported yet (a zonal VM needs a disk "
                             "of its zone): leave zones out", kind="fatal")
    for mount in mounts_of(azure.volumes):
        volume = find(azure, mount.name)
        if volume is None:
            azure.arm(group(azure), RESOURCES_API, "PUT", {"location": azure.region, "tags": {VOLUME_TAG: "*"}})
            disk = azure.arm(_disk_path(azure, mount.name), COMPUTE_API, "PUT", {
                "location": azure.region, "tags": {VOLUME_TAG: mount.name}, "sku": {"name": "StandardSSD_LRS"},
                "properties": {"creationData": {"createOption": "Empty"}, "diskSizeGB": mount.size_gb}})
            log.info("azure: volume %s made: %s (%d GB)", mount.name, disk.get("id"), mount.size_gb)
            volume = _volume(azure, mount.name, disk or {"id": _disk_path(azure, mount.name)})
        record(volume, azure.describe())


def data_disks(azure: Any, mounts: Sequence[VolumeMount]) -> list[dict[str, Any]]:
    """The head node's `storageProfile.dataDisks`: each volume attached, let go of when the VM is deleted."""
    return [{"lun": i, "createOption": "Attach", "deleteOption": "Detach",
             "managedDisk": {"id": _disk_path(azure, m.name)}} for i, m in enumerate(mounts)]


def mount_commands(mounts: Sequence[VolumeMount]) -> list[str]:
    return [mount_script([f"/dev/disk/azure/scsi1/lun{i}"], m.target, m.name) for i, m in enumerate(mounts)]


def delete(azure: Any, name: str) -> None:
    """Delete volume `name`'s disk (gone already: nothing to do); refused while a VM holds it."""
    volume = find(azure, name)
    if volume is None:
        return
    if volume.attached_to:
        raise ProvisionError(f"azure: volume {name} is attached to VM {volume.attached_to}: take down the pool "
                             f"that uses it first", kind="fatal")
    azure.arm(_disk_path(azure, name), COMPUTE_API, "DELETE")
    log.info("azure: volume %s deleted", name)
