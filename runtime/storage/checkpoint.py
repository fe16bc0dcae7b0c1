"""`sky.checkpoint_dir()`: where a job keeps its checkpoints so that a restart on a fresh node finds them.

The folder is `<checkpoint mount>/<job name>` on a bucket mount (MOUNT_CACHED or MOUNT; the one marked
`checkpoint=True` when there are several), named to the job's processes by `SKYHIVE_CHECKPOINT_DIR`:
the same path for every run of the same job (`Pool(name=...)`, the task's `name`), so a job started
again on a fresh node — whose mount was filled from the bucket before the job began — resumes from the
last checkpoint it uploaded. The pattern (docs/storage.md): write each checkpoint to a temporary name and
rename it, so the background upload never sends half a file; on start, load the newest one found.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...errors import StorageError
from .plugin import CHECKPOINT_ENV

__all__ = ["checkpoint_dir"]


def checkpoint_dir() -> Path:
    """This job's checkpoint folder (created if missing). Raises `StorageError` when the job has no
    checkpoint mount (no MOUNT_CACHED/MOUNT bucket mount, and `SKYHIVE_CHECKPOINT_DIR` unset)."""
    raw = os.environ.get(CHECKPOINT_ENV)
    if not raw:
        raise StorageError(f"sky.checkpoint_dir(): this job has no checkpoint mount ({CHECKPOINT_ENV} is unset): "
                           f"mount a bucket with mode MOUNT_CACHED (Pool(mounts={{'/ckpt': sky.Bucket(NAME)}}) or a "
                           f"task's file_mounts)", cause="unsupported")
    path = Path(os.path.expanduser(raw))
    if not path.is_absolute():
        path = Path.home() / path
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"sky.checkpoint_dir(): cannot create {path}: {exc.strerror or exc}") from None
    return path
