"""What a bucket mount is: `Bucket` (a bucket, a prefix in it, how it reaches the node) and `Mount` (a
bucket at a path on the node), parsed from SkyPilot's spellings (`s3://b/p`, `gs://`, `r2://`, and the
long form `{name, source, store, mode}`). Pure values: pickled to the nodes as they are.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ...errors import StorageError
from .store import scheme_of, store_for_scheme, store_named, stores

__all__ = ["Bucket", "Mount", "MODES", "schemes", "parse_uri", "mount_of", "is_bucket_uri", "checkpoint_mount"]

#: How a bucket reaches a node: COPY (downloaded before setup, once per machine; writes stay on the node),
#: MOUNT (a FUSE mount: reads and writes go to the bucket), MOUNT_CACHED (a local folder filled from the
#: bucket; what the job writes is uploaded in the background and flushed before the job ends).
MODES = ("COPY", "MOUNT", "MOUNT_CACHED")



def schemes() -> dict[str, str]:
    """URI scheme -> store name, of every store known here (`store.py`: S3, GCS and R2 are reached through
    their S3-compatible APIs, docs/storage.md; a registered store adds its own)."""
    return {scheme: st.name for st in stores() for scheme in st.schemes}


def __getattr__(name: str) -> Any:  # `SCHEMES`, read as before: now the stores' own declarations
    if name == "SCHEMES":
        return schemes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# S3's bucket naming rules (3-63 chars, lower case, digits, dots and hyphens, starting and ending alnum)
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")


def is_bucket_uri(text: str) -> bool:
    """Whether `text` names a bucket (`s3://`, `gs://`, `gcs://`, `r2://`, a registered store's scheme)."""
    scheme, sep, _ = text.partition("://")
    return bool(sep) and store_for_scheme(scheme) is not None


def _check_name(name: str, where: str) -> str:
    if not _BUCKET.match(name) or ".." in name:
        raise ValueError(f"{where}: {name!r} is not a valid bucket name (3-63 characters: lower-case letters, "
                         f"digits, '.' and '-', starting and ending with a letter or digit)")
    return name


@dataclass(frozen=True, slots=True)
class Bucket:
    """A bucket (and a `prefix` in it) to mount: `sky.Bucket("runs", mode="MOUNT_CACHED")`.

    `store` is "s3" (default; any S3-compatible endpoint), "gcs" or "r2"; `endpoint_url` overrides the
    endpoint found the way AWS tools find it (`AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, `endpoint_url`
    in ~/.aws/config). `source` is a local folder uploaded into the bucket first (the bucket is created,
    tagged as skyhive's, if it does not exist). `persistent=False` deletes a bucket skyhive created when
    the pool or job ends. `checkpoint=True` marks the mount `sky.checkpoint_dir()` lives on. Raises
    `ValueError` naming the field for a bad value.
    """

    name: str
    prefix: str = ""
    mode: str = "MOUNT_CACHED"
    store: str = "s3"
    source: str | None = None
    endpoint_url: str | None = None
    persistent: bool = True
    checkpoint: bool = False
    region: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"Bucket(name={self.name!r}): need a str")
        if is_bucket_uri(self.name):  # Bucket("s3://b/p") reads as the URI
            parsed = parse_uri(self.name)
            object.__setattr__(self, "name", parsed.name)
            object.__setattr__(self, "prefix", parsed.prefix if not self.prefix else self.prefix)
            object.__setattr__(self, "store", parsed.store)
        _check_name(self.name, "Bucket(name)")
        mode = str(self.mode).upper()
        if mode not in MODES:
            raise ValueError(f"Bucket(mode={self.mode!r}): need one of {', '.join(MODES)}")
        object.__setattr__(self, "mode", mode)
        try:
            store = store_named(str(self.store)).name
        except StorageError:
            raise ValueError(f"Bucket(store={self.store!r}): skyhive reaches "
                             f"{', '.join(s.name for s in stores())} (and S3-compatible endpoints as s3); "
                             f"Azure Blob is not supported (docs/storage.md)") from None
        object.__setattr__(self, "store", store)
        object.__setattr__(self, "prefix", self.prefix.strip("/"))
        if self.endpoint_url is not None and not re.match(r"https?://", self.endpoint_url):
            raise ValueError(f"Bucket(endpoint_url={self.endpoint_url!r}): need an http:// or https:// URL")

    @property
    def uri(self) -> str:
        return f"{scheme_of(self.store)}://{self.name}/{self.prefix}".rstrip("/")

    def key(self, relative: str) -> str:
        """The object key of `relative` (a path under the mount) in this bucket."""
        return f"{self.prefix}/{relative}" if self.prefix else relative


@dataclass(frozen=True, slots=True)
class Mount:
    """A bucket at `target` on every node (absolute, or relative to the node user's home)."""

    target: str
    bucket: Bucket
    where: str = field(default="", compare=False)

    @property
    def mode(self) -> str:
        return self.bucket.mode


def parse_uri(uri: str, *, mode: str = "MOUNT_CACHED", where: str = "") -> Bucket:
    """`s3://bucket/prefix` (or gs://, gcs://, r2://) as a `Bucket`; `ValueError` naming `where` if not."""
    scheme, sep, rest = uri.partition("://")
    store = store_for_scheme(scheme) if sep else None
    if store is None:
        raise ValueError(f"{where or uri}: {uri!r} is not a bucket URI "
                         f"({', '.join(st.schemes[0] + '://' for st in stores())})")
    name, _, prefix = rest.partition("/")
    _check_name(name, where or uri)
    return Bucket(name=name, prefix=prefix, mode=mode, store=store.name)


def mount_of(target: str, value: Any, *, where: str = "") -> Mount:
    """One entry of `Pool(mounts=...)` or of a task's `file_mounts`: a bucket URI (mounted COPY, as
    SkyPilot does for a plain URI), a `Bucket`, or the long form `{name, source, store, mode}`."""
    where = where or f"mounts[{target!r}]"
    if not isinstance(target, str) or not target.strip():
        raise ValueError(f"{where}: the mount path must be a non-empty str")
    if isinstance(value, Bucket):
        return Mount(target, value, where)
    if isinstance(value, str):
        return Mount(target, parse_uri(value, mode="COPY", where=where), where)
    if isinstance(value, Mapping):
        return Mount(target, _long_form(value, where), where)
    raise ValueError(f"{where}: expected a bucket URI (s3://bucket/prefix), sky.Bucket(...) or "
                     f"{{name, source, store, mode}}, got {type(value).__name__}")


def _long_form(entry: Mapping[str, Any], where: str) -> Bucket:
    unknown = set(entry) - {"name", "source", "store", "mode", "persistent", "endpoint_url", "_bucket_sub_path"}
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))} "
                         f"(known: name, source, store, mode, persistent)")
    mode = str(entry.get("mode", "MOUNT")).upper()  # SkyPilot's default mode is MOUNT
    source = entry.get("source")
    name = entry.get("name")
    store = entry.get("store")
    try:
        if isinstance(source, str) and is_bucket_uri(source):
            bucket = parse_uri(source, mode=mode, where=f"{where}.source")
            if store is not None:
                bucket = replace(bucket, store=str(store))
            return replace(bucket, persistent=bool(entry.get("persistent", True)),
                           endpoint_url=entry.get("endpoint_url"))
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: need `name` (the bucket) or a bucket URI as `source`")
        local = None
        if source is not None:
            if not isinstance(source, str):
                raise ValueError(f"{where}.source: expected a local folder or a bucket URI, got {source!r}")
            local = os.path.abspath(os.path.expanduser(source))
            if not os.path.exists(local):
                raise ValueError(f"{where}.source: {source!r} does not exist ({local})")
        return Bucket(name=name, mode=mode, store=str(store or "s3"), source=local,
                      persistent=bool(entry.get("persistent", True)), endpoint_url=entry.get("endpoint_url"))
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if msg.startswith(where) else f"{where}: {msg}") from None


def checkpoint_mount(mounts: tuple[Mount, ...] | list[Mount]) -> Mount | None:
    """The mount checkpoints live on: the one marked `checkpoint=True`, else the only writable one
    (MOUNT or MOUNT_CACHED), else None. Two marked, or several writable and none marked: `ValueError`."""
    marked = [m for m in mounts if m.bucket.checkpoint]
    if len(marked) > 1:
        raise ValueError(f"mounts: {', '.join(m.target for m in marked)} are all marked checkpoint=True; mark one")
    if marked:
        return marked[0]
    writable = [m for m in mounts if m.mode != "COPY"]
    return writable[0] if len(writable) == 1 else None
