"""DigitalOcean persistent volumes: Block Storage volumes named `skyhive-vol-NAME` (see `providers/volumes.py`;
the operations are declared in `providers.base.Provider.find_volume` / `delete_volume`).

A volume lives in one region and is attached to one droplet at a time, of its own region
(https://docs.digitalocean.com/reference/api/digitalocean/#tag/Block-Storage-Actions: "Each volume may only
be attached to a single Droplet"; the droplet and the volume in the same region). So a pool with volumes
launches in the region its volumes are in (`pin_regions`; a new volume is made, `POST /v2/volumes`, in the
region the head node got), and the head node (node 0) gets them attached once its droplet runs
(`POST /v2/volumes/{id}/actions`, type `attach`) and mounted by its first-boot command, by the device name
DigitalOcean gives a volume (`/dev/disk/by-id/scsi-0DO_Volume_<name>`), formatted ext4 the first time only.
Destroying a droplet (down, autostop, a failed launch) detaches its volumes and leaves them; only
`delete_volume` deletes one (`DELETE /v2/volumes/{id}`), refused while a droplet has it.

Volume names: lower case letters, digits and dashes, a letter first, 64 at most ("Create a New Block Storage
Volume", `name`): the volume `My_Data` is `skyhive-vol-my-data`. Sizes: 1 GiB to 16 TiB.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from collections.abc import Sequence
from typing import Any

from ..base import NodeHandle, ProvisionError
from ..volumes import Volume, VolumeMount, mount_script, mounts_of, record
from ..volumes import pin_zones as shared_pin_zones

log = logging.getLogger(__name__)

__all__ = ["do_name", "find", "ensure", "attach_all", "pin_regions", "delete", "mount_command", "MAX_SIZE_GB"]

#: DigitalOcean's largest volume (16 TiB), in GiB
MAX_SIZE_GB = 16384


def do_name(name: str) -> str:
    """The volume's name as DigitalOcean takes it (lower case letters, digits, dashes; a letter first; 64 at most)."""
    return "skyhive-vol-" + (re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-")[:52].strip("-") or "volume")


def _request(do: Any, path: str, *, method: str = "GET", body: dict[str, Any] | None = None,
             params: dict[str, str] | None = None) -> Any:
    answer = do.driver.connection.request(path, params=params, method=method,
                                          data=json.dumps(body) if body is not None else None)
    return answer.object or {}


def _volume(name: str, raw: dict[str, Any]) -> Volume:
    region = str((raw.get("region") or {}).get("slug") or "")
    droplets = [str(d) for d in raw.get("droplet_ids") or []]
    return Volume(name=name, cloud="digitalocean", region=region, zone=region, volume_id=str(raw.get("id")),
                  size_gb=int(raw.get("size_gigabytes") or 0), state="in-use" if droplets else "available",
                  attached_to=droplets[0] if droplets else "")


def find(do: Any, name: str) -> Volume | None:
    """The volume `name` in the account (None when there is none); one of that name in several regions is an
    error (a volume's name is unique in its region only)."""
    found = (_request(do, "/v2/volumes", params={"name": do_name(name)}).get("volumes") or [])
    if len(found) > 1:
        raise ProvisionError(f"digitalocean: {len(found)} volumes are named {do_name(name)} "
                             f"({', '.join(str((v.get('region') or {}).get('slug')) for v in found)}): delete the "
                             f"extra ones", kind="fatal")
    return _volume(name, found[0]) if found else None


def ensure(do: Any, mount: VolumeMount, region: str) -> Volume:
    """The volume of `mount`, made in `region` when it does not exist (and recorded either way)."""
    volume = find(do, mount.name)
    if volume is None:
        if not 1 <= mount.size_gb <= MAX_SIZE_GB:
            raise ProvisionError(f"digitalocean: volume {mount.name}: {mount.size_gb} GB; a volume is 1 to "
                                 f"{MAX_SIZE_GB} GB", kind="fatal")
        raw = _request(do, "/v2/volumes", method="POST", body={
            "name": do_name(mount.name), "size_gigabytes": mount.size_gb, "region": region,
            "description": f"skyhive volume {mount.name}"}).get("volume") or {}
        volume = _volume(mount.name, raw)
        log.info("digitalocean: volume %s made: %s (%d GB in %s)", mount.name, volume.volume_id, mount.size_gb, region)
    elif volume.region != region:
        raise ProvisionError(f"digitalocean: volume {mount.name} ({volume.volume_id}) is in {volume.region}, the head "
                             f"node in {region}: a volume attaches to a droplet of its own region only", kind="fatal")
    record(volume, do.describe())
    return volume


def pin_regions(do: Any, regions: Sequence[str]) -> list[str]:
    """`regions` narrowed to the region the provider's existing volumes are in (all of them must share one)."""
    if not do.volumes:
        return list(regions)
    found = {v.region for m in mounts_of(do.volumes) if (v := find(do, m.name)) is not None}
    return shared_pin_zones("digitalocean", found, regions, what="volumes")


def _wait_attached(do: Any, name: str, droplet: str) -> Volume:
    deadline = time.monotonic() + do.timeouts.running
    while True:
        volume = find(do, name)
        if volume is not None and volume.attached_to == droplet:
            return volume
        if time.monotonic() > deadline:
            raise ProvisionError(f"digitalocean: volume {name} not attached to droplet {droplet} after "
                                 f"{do.timeouts.running:.0f} s", kind="fatal")
        time.sleep(do.timeouts.poll)


def attach_all(do: Any, handle: NodeHandle) -> NodeHandle:
    """Attach (making where needed) the provider's volumes to the running head node `handle`; the handle with
    its first-boot command also mounting them, and `extra["volumes"]` naming them."""
    region = str(handle.extra.get("zone") or "")
    mounted: dict[str, str] = {}
    commands = []
    for mount in mounts_of(do.volumes):
        volume = ensure(do, mount, region)
        if volume.attached_to != handle.provider_id:
            if volume.attached_to:
                raise ProvisionError(f"digitalocean: volume {mount.name} ({volume.volume_id}) is attached to droplet "
                                     f"{volume.attached_to}: a volume is attached to one droplet at a time (take down "
                                     f"the pool that uses it first)", kind="fatal")
            _request(do, f"/v2/volumes/{volume.volume_id}/actions", method="POST",
                     body={"type": "attach", "droplet_id": int(handle.provider_id), "region": region})
            volume = _wait_attached(do, mount.name, handle.provider_id)
        record(volume, do.describe())
        mounted[mount.target] = volume.volume_id
        commands.append(mount_command(mount))
    first_boot = "; ".join([handle.reach.ready_command, *commands]) if handle.reach.ready_command else \
        "; ".join(commands)
    return dataclasses.replace(handle, reach=dataclasses.replace(handle.reach, ready_command=first_boot),
                               extra={**handle.extra, "volumes": mounted})


def mount_command(mount: VolumeMount) -> str:
    """The shell command that mounts the volume of `mount` at its target on the droplet (by its device name)."""
    return mount_script([f"/dev/disk/by-id/scsi-0DO_Volume_{do_name(mount.name)}"], mount.target, mount.name)


def delete(do: Any, name: str) -> None:
    """Delete volume `name` (gone already: nothing to do); refused while a droplet has it."""
    volume = find(do, name)
    if volume is None:
        return
    if volume.attached_to:
        raise ProvisionError(f"digitalocean: volume {name} ({volume.volume_id}) is attached to droplet "
                             f"{volume.attached_to}: take down the pool that uses it first", kind="fatal")
    _request(do, f"/v2/volumes/{volume.volume_id}", method="DELETE")
    log.info("digitalocean: volume %s (%s) deleted", name, volume.volume_id)
