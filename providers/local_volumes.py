"""Local persistent volumes: a directory of the state directory (`SKYHIVE_HOME/volume-data/NAME`), linked
at the task's mount point (see `providers/volumes.py`; the operations are declared in
`providers.base.Provider.find_volume` / `delete_volume`).

This machine is the node: the mount point (`/mnt/data`) becomes a symbolic link to the volume's directory
when the pool starts (its parent made where missing; a mount point that exists and is not that link is
refused, naming it — nothing of the user's is replaced). The pool's end leaves both; `skyhive volumes
delete NAME` removes the directory and the links that point to it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..paths import private_dir
from .base import ProvisionError
from .volumes import Volume, VolumeMount, record

__all__ = ["data_dir", "link_all", "find", "delete"]


def data_dir(name: str) -> Path:
    return private_dir("volume-data", name)


def _size_gb(path: Path) -> int:
    total = sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return total // (1 << 30)


def link_all(mounts: Sequence[VolumeMount], provider: Mapping[str, Any]) -> None:
    """Each volume's directory (made where missing) linked at its mount point; raises `ProvisionError`
    naming a mount point that exists and is something else, or cannot be made."""
    for mount in mounts:
        target = Path(mount.target)
        data = data_dir(mount.name)
        if target.is_symlink() and os.path.realpath(target) == os.path.realpath(data):
            pass
        elif target.exists() or target.is_symlink():
            raise ProvisionError(f"local: volume {mount.name}: {target} exists and is not this volume's link (to "
                                 f"{data}); choose another mount point, or remove it", kind="fatal")
        else:
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(data, target_is_directory=True)
            except OSError as exc:
                raise ProvisionError(f"local: volume {mount.name}: cannot link {target} to {data}: "
                                     f"{exc.strerror or exc} (on Local the mount point is a link on this machine: "
                                     f"choose one you can write)", kind="fatal") from None
        record(Volume(name=mount.name, cloud="local", region="", zone="", volume_id=str(data), size_gb=_size_gb(data),
                      state="available", attached_to=str(target)), provider)


def find(name: str) -> Volume | None:
    path = private_dir() / "volume-data" / name
    if not path.is_dir():
        return None
    return Volume(name=name, cloud="local", region="", zone="", volume_id=str(path), size_gb=_size_gb(path),
                  state="available")


def delete(name: str, mounts: Sequence[VolumeMount]) -> None:
    """Remove volume `name`'s directory and the links of `mounts` that point to it."""
    path = private_dir() / "volume-data" / name
    for mount in mounts:
        link = Path(mount.target)
        if mount.name == name and link.is_symlink() and os.path.realpath(link) == os.path.realpath(path):
            link.unlink()
    import shutil  # (on use: every pool imports this module, few delete a volume)

    shutil.rmtree(path, ignore_errors=True)
