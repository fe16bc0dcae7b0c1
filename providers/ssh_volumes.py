"""Persistent volumes on SSH hosts (for `providers.ssh.SSH`, the `provider` of each function): a directory on the head host, `~/.skyhive/volumes/NAME`, linked at the
task's mount point (see `providers/volumes.py`; the operations are declared in `Provider.find_volume` /
`delete_volume`).

The first pool whose head node is that host makes the directory (node 0's `launch`, before any worker
starts), and every later one links it again; the mount point becomes a symbolic link to it (its parent made
where missing, with `sudo -n` where the login user cannot: `/mnt/data`); a mount point that exists and is
not that link is refused, naming it — nothing of the user's is replaced. The volume is on the host that made
it: a later pool whose head node is another host is refused, naming both (list that host first). A pool's
end, `skyhive down`, `stop` and autostop leave the directory and the link (their sweeps know neither);
`skyhive volumes delete NAME` removes both, on that host.
"""

from __future__ import annotations

import getpass
import logging
import shlex
from collections.abc import Sequence
from typing import Any

from .base import ProvisionError
from .volumes import Volume, VolumeMount, record, recorded

__all__ = ["link_all", "find", "delete", "volume_dir"]

log = logging.getLogger("skyhive.providers.ssh_volumes")


def volume_dir(name: str) -> str:
    """The volume's directory on its host, as a shell word (under the login user's home)."""
    return f'"$HOME/.skyhive/volumes/"{shlex.quote(name)}'


def _link_script(mount: VolumeMount) -> str:
    d, t = volume_dir(mount.name), shlex.quote(mount.target)
    # (one line per volume, "V KIB DIR" or "E why"; the script exits 0: the sweep's caller reads it)
    return (f'd={d}; t={t}\n'
            f'if [ -L "$t" ] && [ "$(readlink -f "$t")" = "$(readlink -f "$d")" ]; then mkdir -p "$d" || '
            f'{{ echo "E cannot make $d"; exit 0; }}\n'
            f'elif [ -e "$t" ] || [ -L "$t" ]; then echo "E $t exists and is not this volume\'s link (to $d)"; exit 0\n'
            f'else\n'
            f'  mkdir -p "$d" || {{ echo "E cannot make $d"; exit 0; }}\n'
            f'  p=$(dirname "$t")\n'
            f'  {{ mkdir -p "$p" 2>/dev/null || sudo -n mkdir -p "$p" 2>/dev/null; }} && '
            f'{{ ln -s "$d" "$t" 2>/dev/null || sudo -n ln -s "$d" "$t" 2>/dev/null; }} || '
            f'{{ echo "E cannot link $t to $d (not writable, and no sudo without a password)"; exit 0; }}\n'
            f'fi\n'
            f'echo "V $(du -sk "$d" 2>/dev/null | cut -f1) $(readlink -f "$d")"\n')


def _size_gb(kib: str) -> int:
    try:
        return int(kib) // (1 << 20)
    except ValueError:
        return 0


def _where(provider: Any, host: tuple[str | None, str, int]) -> str:
    user, addr, port = host
    return provider.show_host((user or getpass.getuser(), addr, port))


async def link_all(provider: Any, host: tuple[str | None, str, int], mounts: Sequence[VolumeMount]) -> None:
    """Each volume's directory on `host` (the head node's, made where missing) linked at its mount point, and
    recorded. Raises `ProvisionError` (fatal) naming the volume when it is on another host, or when its mount
    point exists and is something else or cannot be made."""
    where = _where(provider, host)
    kept = {v.name: v for v, _ in recorded()}
    for mount in mounts:
        known = kept.get(mount.name)
        if known is not None and known.cloud == "ssh" and known.zone != where:
            raise ProvisionError(f"ssh: volume {mount.name} is a directory on {known.zone}, and this pool's head node "
                                 f"is {where}: list {known.zone} first (a volume stays on the host that made it)",
                                 kind="fatal")
    for mount in mounts:
        out = await provider.sweep_host(host, _link_script(mount))
        lines = out.splitlines()
        problem = next((ln[2:] for ln in lines if ln.startswith("E ")), None)
        if problem is not None:
            raise ProvisionError(f"ssh: volume {mount.name} on {where}: {problem}; choose another mount point",
                                 kind="fatal")
        made = next((ln.split(" ", 2) for ln in lines if ln.startswith("V ")), None)
        if made is None or len(made) < 3:
            raise ProvisionError(f"ssh: volume {mount.name} on {where}: the host did not say where it is: {out[-500:]!r}",
                                 kind="fatal")
        log.info("volume %s: %s on %s, linked at %s", mount.name, made[2], where, mount.target)
        record(Volume(name=mount.name, cloud="ssh", region="", zone=where, volume_id=made[2],
                      size_gb=_size_gb(made[1]), state="available", attached_to=mount.target), provider.describe())


def _host_of(provider: Any, name: str) -> tuple[Volume, tuple[str | None, str, int]]:
    volume = next((v for v, _ in recorded() if v.name == name and v.cloud == "ssh"), None)
    if volume is None:
        raise ProvisionError(f"ssh: no volume {name} is recorded in this state directory")
    for host in provider.hosts:
        if _where(provider, host) == volume.zone:
            return volume, host
    raise ProvisionError(f"ssh: volume {name} is on {volume.zone}, which is not one of this provider's hosts "
                         f"({', '.join(_where(provider, h) for h in provider.hosts)})")


async def find(provider: Any, name: str) -> Volume | None:
    """The volume `name` as its host has it now (None when its directory is gone)."""
    volume, host = _host_of(provider, name)
    out = await provider.sweep_host(host, f'd={volume_dir(name)}; [ -d "$d" ] && echo "V $(du -sk "$d" | cut -f1)"; '
                                          f'exit 0\n')
    line = next((ln for ln in out.splitlines() if ln.startswith("V ")), None)
    if line is None:
        return None
    return Volume(name=name, cloud="ssh", region="", zone=volume.zone, volume_id=volume.volume_id,
                  size_gb=_size_gb(line.split()[1]), state="available", attached_to=volume.attached_to)


async def delete(provider: Any, name: str) -> None:
    """Remove the volume's directory and its link (where the link still points to it) on its host."""
    volume, host = _host_of(provider, name)
    t = shlex.quote(volume.attached_to)
    script = (f'd={volume_dir(name)}; t={t}\n'
              f'if [ -L "$t" ] && [ "$(readlink -f "$t")" = "$(readlink -f "$d")" ]; then '
              f'rm -f "$t" 2>/dev/null || sudo -n rm -f "$t"; fi\n'
              f'rm -rf -- "$d" && echo "D"; exit 0\n')
    out = await provider.sweep_host(host, script)
    if "D" not in out.splitlines():
        raise ProvisionError(f"ssh: volume {name}: its directory on {volume.zone} could not be removed: {out[-500:]!r}")
    log.info("volume %s: removed from %s", name, volume.zone)
