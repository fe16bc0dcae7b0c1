"""`Pool(mounts={...})`: the mounts as a plugin. On the client the buckets are checked (or created and
filled from a local source) when the pool opens; on every worker, before its first task, the mounts are
put in place (once per machine: the first worker of a machine does it, the others find it done); when a
worker stops, its cached mounts are flushed to the bucket and its FUSE mounts unmounted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from ...plugins.api import InstanceInfo
from .s3 import Access
from .spec import Mount, checkpoint_mount, mount_of

__all__ = ["BucketMounts", "parse_mounts", "CHECKPOINT_ENV", "checkpoint_path"]

#: The variable `sky.checkpoint_dir()` reads: the job's checkpoint folder on the mounted bucket.
CHECKPOINT_ENV = "SKYHIVE_CHECKPOINT_DIR"


def parse_mounts(mounts: Mapping[str, Any] | None, where: str = "Pool(mounts)") -> tuple[Mount, ...]:
    """`{path: "s3://b/p" | sky.Bucket(...) | {name, source, store, mode}}` as `Mount`s (checked now:
    `ValueError`/`TypeError` naming the entry)."""
    if mounts is None:
        return ()
    if not isinstance(mounts, Mapping):
        raise TypeError(f"{where}: need a mapping of path -> bucket, got {type(mounts).__name__}")
    out = tuple(mount_of(target, value, where=f"{where}[{target!r}]") for target, value in mounts.items())
    checkpoint_mount(out)  # two marked checkpoint=True: refused now
    return out


def checkpoint_path(mounts: tuple[Mount, ...] | list[Mount], job: str) -> str | None:
    """The checkpoint folder of job `job` on the mounts' checkpoint mount (None without one)."""
    mount = checkpoint_mount(list(mounts))
    if mount is None:
        return None
    return f"{mount.target.rstrip('/')}/{job}"


class BucketMounts:
    """The plugin: `mounts` with their access (resolved on the client), installed under `session`."""

    def __init__(self, mounts: list[tuple[Mount, Access]], session: str, checkpoint: str | None,
                 deps: Any = None) -> None:
        self.mounts = mounts
        self.deps = deps  # a deps.Bundle for nodes whose Python may lack boto3 (None: Local, the client's own)
        self.session = session
        self.checkpoint = checkpoint

    def __repr__(self) -> str:
        return f"BucketMounts({', '.join(f'{m.target}={m.bucket.uri} {m.mode}' for m, _ in self.mounts)})"

    def transform(self, image: Any, pool: Any) -> Any:
        return image.with_env(**{CHECKPOINT_ENV: self.checkpoint}) if self.checkpoint else image

    @contextlib.contextmanager
    def around_app(self, info: InstanceInfo) -> Iterator[None]:
        from . import node

        if self.deps is not None:
            from .deps import ensure

            ensure(self.deps.digest, self.deps.data)
        node.install(self.mounts, self.session)
        try:
            yield
        finally:
            try:
                node.flush()
            finally:
                node.unmount_all()
