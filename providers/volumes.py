"""Persistent volumes: a disk with a name that outlives the pools that use it (SkyPilot's `volumes:`).

    volumes:
      /mnt/data: ckpt                      # the volume named ckpt, mounted at /mnt/data on the head node
      /mnt/cache: {name: cache, size: 50}  # its size in GB when it is made (default 10)

A task's volume is made by the first `launch` that needs it and attached again by every later one (the
launch goes to the zone the volume is in). The same leak rules as instances, turned around: a pool's
`down`, autostop, a failed launch, a managed job's cleanup never delete a volume — only `skyhive volumes
delete NAME` does. Which cloud keeps it is recorded here (`SKYHIVE_HOME/volumes/NAME.json`: the provider's
description, the volume's id and zone; never a credential), so `skyhive volumes ls` asks each cloud about
its own. A provider keeps volumes by declaring `Feature.VOLUMES`, implementing `Provider.find_volume` /
`Provider.delete_volume` and taking the `volumes` option (`Provider.resource_options`): AWS (EBS,
`providers/cloud/aws_volumes.py`), GCP, Azure, Local, SSH (a directory on the head host, `ssh_volumes.py`).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..paths import private_dir

__all__ = ["Volume", "VolumeMount", "DEFAULT_SIZE_GB", "record", "recorded", "forget", "mounts_of", "mount_script", "pin_zones"]

#: a volume's size when the task does not say
DEFAULT_SIZE_GB = 10


@dataclass(frozen=True, slots=True)
class VolumeMount:
    """One `volumes` entry of a task: the volume `name` mounted at `target` (made `size_gb` large)."""

    target: str
    name: str
    size_gb: int = DEFAULT_SIZE_GB


@dataclass(frozen=True, slots=True)
class Volume:
    """A volume as its cloud lists it: `state` is the cloud's word ("available", "in-use"), `attached_to`
    the instance it is attached to ("" when none)."""

    name: str
    cloud: str
    region: str
    zone: str
    volume_id: str
    size_gb: int
    state: str
    attached_to: str = ""


def mounts_of(raw: Sequence[Any]) -> tuple[VolumeMount, ...]:
    """`VolumeMount`s from a provider option's plain values ((target, name, size) lists, as `describe()`
    writes them)."""
    return tuple(v if isinstance(v, VolumeMount) else VolumeMount(str(v[0]), str(v[1]), int(v[2])) for v in raw)


def _path(name: str) -> Any:
    return private_dir("volumes") / f"{name}.json"


def record(volume: Volume, provider: Mapping[str, Any]) -> None:
    """Remember which cloud keeps `volume` (`provider`: its provider's `describe()`)."""
    path = _path(volume.name)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"volume": asdict(volume), "provider": dict(provider)}))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def recorded() -> list[tuple[Volume, dict[str, Any]]]:
    """Every volume made from this state directory, with its provider's description, by name."""
    out = []
    for path in sorted(private_dir("volumes").glob("*.json")):
        try:
            data = json.loads(path.read_text())
            out.append((Volume(**data["volume"]), dict(data["provider"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def forget(name: str) -> None:
    _path(name).unlink(missing_ok=True)


def mount_script(devices: Sequence[str], target: str, what: str) -> str:
    """The shell command that mounts the first of `devices` to appear (within 2 minutes) at `target` on a
    node, formatting it ext4 only when it has no filesystem yet, owned by the login user; `what` names the
    volume in its error."""
    where = shlex.quote(target)
    return (f"d=; for i in $(seq 1 120); do for c in {' '.join(shlex.quote(d) for d in devices)}; do "
            f"if [ -b $c ]; then d=$c; break 2; fi; done; sleep 1; done; "
            f"if [ -z \"$d\" ]; then echo {shlex.quote(f'skyhive: volume {what} did not appear')} >&2; exit 1; fi; "
            f"sudo blkid $d >/dev/null 2>&1 || sudo mkfs.ext4 -q $d; sudo mkdir -p {where}; "
            f"mountpoint -q {where} || sudo mount $d {where}; sudo chown \"$(id -u):$(id -g)\" {where}")


def pin_zones(cloud: str, found: set[str], zones: Sequence[str], *, what: str = "volumes") -> list[str]:
    """`zones` narrowed to the one zone the task's existing volumes are in (`found`: their zones, empty when
    none exists yet); `ProvisionError` naming `cloud` when they are in several, or in one that does not offer
    the machine (a node attaches `what` of its own zone only)."""
    from .base import ProvisionError

    if not found:
        return list(zones)
    if len(found) > 1:
        raise ProvisionError(f"{cloud}: the task's volumes are in several zones ({', '.join(sorted(found))}); a node "
                             f"attaches {what} of its own zone only", kind="fatal")
    (zone,) = found
    if zone not in zones:
        raise ProvisionError(f"{cloud}: the task's volumes are in {zone}, which does not offer the machine (zones: "
                             f"{', '.join(zones) or 'none'})", kind="fatal")
    return [zone]

