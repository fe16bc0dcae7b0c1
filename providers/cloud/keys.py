"""A pool's SSH key: generated on this machine, private half 0600 in a 0700 directory of the pool.

The directory is ``<state>/cloud/<pool id>/`` under skyhive's state directory (`skyhive.paths`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...paths import private_dir, state_dir

__all__ = ["pool_key_dir", "pool_key", "remove_pool_key"]


def pool_key_dir(pool_id: str) -> Path:
    """Where the pool's key lives (not created)."""
    if not pool_id or "/" in pool_id or pool_id.startswith("."):
        raise ValueError(f"not a pool id: {pool_id!r}")
    return state_dir() / "cloud" / pool_id


def pool_key(pool_id: str, *, create: bool = True) -> tuple[Path, str]:
    """(private key path, public key in OpenSSH form) of the pool; generated on first use when `create`.
    With `create=False` the public key is "" if there is none yet."""
    directory = pool_key_dir(pool_id)
    private = directory / "id_ed25519"
    public = directory / "id_ed25519.pub"
    if public.exists():
        return private, public.read_text().strip()
    if not create:
        return private, ""
    from ..sshlib import asyncssh
    directory = private_dir("cloud", pool_id)
    key = asyncssh.generate_private_key("ssh-ed25519", comment=f"skyhive-{pool_id}")
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.export_private_key())
    text = key.export_public_key().decode().strip()
    fd = os.open(public, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # everything in the state: 0600
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")
    return private, text


def remove_pool_key(pool_id: str) -> bool:
    """Delete the pool's key directory; whether there was one."""
    directory = pool_key_dir(pool_id)
    if not directory.exists():
        return False
    shutil.rmtree(directory)
    return True
