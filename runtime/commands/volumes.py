"""`skyhive volumes ls` and `skyhive volumes delete NAME...`: the persistent volumes made from this state
directory (`providers/volumes.py`), each asked of the cloud that keeps it.

`ls` shows what the cloud says now (its state, the instance it is attached to), or why it could not be
asked; a volume its cloud no longer has is shown as gone (and forgotten by `delete`). `delete` is the
only thing that deletes a volume: it refuses one attached to an instance (take the pool down first).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...providers.base import ProvisionError
from ...providers.registry import from_description
from ...providers.volumes import Volume, forget, recorded

__all__ = ["VolumeRow", "volume_rows", "delete_volumes"]


@dataclass(frozen=True, slots=True)
class VolumeRow:
    name: str
    cloud: str
    region: str
    zone: str
    volume_id: str
    size_gb: int
    state: str  # the cloud's word, "gone", or "unknown: why"
    attached_to: str


def _row(volume: Volume, state: str, attached_to: str = "") -> VolumeRow:
    return VolumeRow(volume.name, volume.cloud, volume.region, volume.zone, volume.volume_id, volume.size_gb, state,
                     attached_to)


def volume_rows() -> list[VolumeRow]:
    """Every recorded volume with what its cloud says of it now."""
    rows = []
    for volume, desc in recorded():
        try:
            now = from_description(desc).find_volume(volume.name)
        except Exception as exc:  # noqa: BLE001 - no credentials, no network: said in the row, the others go on
            rows.append(_row(volume, f"unknown: {exc}"))
            continue
        rows.append(_row(volume, "gone") if now is None else _row(now, now.state, now.attached_to))
    return rows


def delete_volumes(names: list[str]) -> list[str]:
    """Delete each named volume from its cloud and forget it; what was done, one line each. Raises
    `LookupError` for a name never recorded here and `ProvisionError` for one its cloud refuses to delete."""
    known = {volume.name: desc for volume, desc in recorded()}
    missing = [n for n in names if n not in known]
    if missing:
        raise LookupError(f"no volume {', '.join(missing)} in this state directory (`skyhive volumes ls` lists them)")
    done = []
    for name in names:
        provider = from_description(known[name])
        try:
            provider.delete_volume(name)
        except ProvisionError as exc:
            raise ProvisionError(f"volume {name}: {exc}") from None
        forget(name)
        done.append(f"volume {name}: deleted ({provider.name})")
    return done
