"""skyhive's state directory on this machine, and the private directories under it.

`$SKYHIVE_HOME`, else `$XDG_STATE_HOME/skyhive`, else `~/.skyhive`. It holds event logs (task output
in them), pool SSH keys and per-node working copies, so it is created 0700 and so is every directory
skyhive makes under it (files in them are 0600). Missing parents above the state directory itself are
created with the usual permissions. A state directory that already exists is left as it is (it may
be one the user chose and shares on purpose).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["state_dir", "private_dir"]


def state_dir() -> Path:
    """The state directory (not created: `private_dir()` creates it)."""
    if env := os.environ.get("SKYHIVE_HOME"):
        return Path(env)
    if xdg := os.environ.get("XDG_STATE_HOME"):
        return Path(xdg) / "skyhive"
    return Path.home() / ".skyhive"


def private_dir(*parts: str) -> Path:
    """`state_dir()/parts...`, created where missing: the state directory and each part 0700."""
    path = state_dir()
    path.parent.mkdir(parents=True, exist_ok=True)
    _mkdir_private(path)
    for part in parts:
        if not part or part in (".", "..") or "/" in part:
            raise ValueError(f"private_dir{parts!r}: {part!r} is not a single directory name")
        path = path / part
        _mkdir_private(path)
    return path


def _mkdir_private(path: Path) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return
    os.chmod(path, 0o700)  # whatever the umask: 0700 exactly
