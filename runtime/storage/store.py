"""The bucket-store contract: what differs between S3, GCS, R2 (and any other store reached through an
S3-compatible API) is one `Store` each, found by its name (`Bucket.store`) or its URI scheme.

Everything else — access, the client, transfers, mounts, `skyhive storage ls/delete` — is written once
against this contract (`s3.py`, `buckets.py`, `node.py`, `commands/storage.py`) and never compares a
store's name. A new store is one module with a `Store` subclass plus its registration: `register_store(
MyStore())` in code, or an entry point in the group `skyhive.stores` ("name = module:attr"). skyhive's
own stores are `store_s3.py`, `store_r2.py` and `store_gcs.py`, listed below by where they are declared.

What the nodes need of a store travels in the bucket's `Access` (`s3.py`), resolved on the client: a node
never looks a store up (a store registered in the client's code is unknown in a worker's process).
"""

from __future__ import annotations

import abc
import configparser
import logging
from importlib import import_module
from pathlib import Path
from typing import Any, ClassVar

from ...errors import StorageError

__all__ = ["Store", "register_store", "unregister_store", "store_named", "store_for_scheme", "stores",
           "scheme_of", "read_keys", "ENTRY_POINT_GROUP"]

log = logging.getLogger("skyhive.storage")

#: Entry-point group through which other packages add stores (name = "module:attr", a `Store` or its class).
ENTRY_POINT_GROUP = "skyhive.stores"


class Store(abc.ABC):
    """One kind of bucket store, reached through its S3-compatible API (boto3, `s3.client`)."""

    #: its name: `Bucket(store=...)`, `skyhive storage --store`, the journal of uploads
    name: ClassVar[str]
    #: its URI schemes (`gs://`, `gcs://`); the first is how its buckets' URIs are written
    schemes: ClassVar[tuple[str, ...]]
    #: its S3 API has bucket tagging: a bucket skyhive creates is tagged; else it holds a marker object
    tags_buckets: ClassVar[bool] = False
    #: its S3 API refuses the CRC32 checksums botocore adds to every upload by default: only where required
    checksums_when_required: ClassVar[bool] = False
    #: its S3 API has no multi-object delete (DeleteObjects): one DELETE per object
    deletes_one_by_one: ClassVar[bool] = False
    #: where its own keys are read from, for the error that finds none ("; R2: profile [r2] in ...")
    keys_hint: ClassVar[str] = ""

    @abc.abstractmethod
    def endpoint(self, bucket: Any, session: Any) -> str | None:
        """The endpoint of `bucket` when the bucket names none (`session`: boto3's, for the AWS chain); None:
        boto3's default. Raises `StorageError` naming the bucket when it cannot be found."""

    def region(self, bucket: Any, session: Any) -> str:
        """The signing region when the bucket names none."""
        return str(session.region_name or "us-east-1")

    def own_keys(self, bucket: Any) -> tuple[str, str] | None:
        """The store's own keys, where its tools keep them, or None (then the AWS chain's are used)."""
        return None

    def project(self) -> str | None:
        """The project buckets are created and listed in (GCS's `x-amz-project-id`), or None."""
        return None

    def configured(self) -> bool:
        """Whether this machine is set up for this store without a bucket's own endpoint (`skyhive storage ls`
        looks only at those)."""
        return True

    def location_constraint(self, acc: Any) -> str | None:
        """The `LocationConstraint` a bucket is created with at `acc` (None: none; us-east-1 takes none)."""
        return acc.region if acc.region not in ("us-east-1", "auto") and not acc.endpoint_url else None

    def __repr__(self) -> str:
        return f"<store {self.name}>"


_STORES: dict[str, Store] = {}
#: skyhive's own stores, in the order `skyhive storage ls` looks at them: where each is declared
_BUILT_IN = {
    "s3": "skyhive.runtime.storage.store_s3:STORE",
    "r2": "skyhive.runtime.storage.store_r2:STORE",
    "gcs": "skyhive.runtime.storage.store_gcs:STORE",
}
_entry_points_loaded = False


def register_store(store: Store) -> Store:
    """Make `store` known by its name and schemes (the last registration of a name wins). Returns it."""
    if not isinstance(store, Store):
        raise TypeError(f"register_store: {store!r} is not a skyhive Store")
    if not store.name or not store.schemes:
        raise ValueError(f"register_store: {type(store).__name__} needs a name and at least one URI scheme")
    _STORES[store.name] = store
    return store


def unregister_store(name: str) -> None:
    """Forget the store `name` (a test's, or a plugin's for a while); unknown names are ignored."""
    _STORES.pop(name, None)


def _load(name: str, target: str) -> Store | None:
    module, _, attr = target.partition(":")
    try:
        obj = getattr(import_module(module), attr)
    except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the other stores
        log.warning("store %s (%s) cannot be loaded: %s", name, target, exc)
        return None
    obj = obj() if isinstance(obj, type) else obj
    if not isinstance(obj, Store):
        log.warning("store %s (%s) is not a skyhive Store", name, target)
        return None
    return _STORES.setdefault(obj.name, obj)


def _all() -> dict[str, Store]:
    global _entry_points_loaded
    for name, target in _BUILT_IN.items():
        if name not in _STORES:
            _load(name, target)
    if not _entry_points_loaded:
        _entry_points_loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name not in _STORES:
                _load(ep.name, ep.value)
    return _STORES


def stores() -> list[Store]:
    """Every store known here: skyhive's own first (S3, R2, GCS), then the others as registered."""
    found = _all()
    return [found[n] for n in _BUILT_IN if n in found] + [s for n, s in found.items() if n not in _BUILT_IN]


def store_named(name: str) -> Store:
    """The store called `name` (case-insensitive; a URI scheme names its store too). Raises `StorageError`
    naming the stores known here."""
    key = str(name).lower()
    found = _STORES.get(key) or _all().get(key) or store_for_scheme(key)
    if found is None:
        raise StorageError(f"unknown bucket store {name!r}: skyhive reaches {', '.join(s.name for s in stores())} "
                           "(and S3-compatible endpoints as s3); Azure Blob is not supported (docs/storage.md)",
                           cause="unsupported")
    return found


def store_for_scheme(scheme: str) -> Store | None:
    """The store whose URIs start `scheme://`, or None."""
    key = scheme.lower()
    return next((s for s in stores() if key in s.schemes), None)


def scheme_of(name: str) -> str:
    """How URIs of the store `name` are written (its first scheme); the name itself where it is not known
    here (a node that never loaded it)."""
    found = _STORES.get(name) or (_all().get(name) if name in _BUILT_IN else None)
    return found.schemes[0] if found is not None else name


def read_keys(path: Path, section: str, names: tuple[str, str], bucket: Any) -> tuple[str, str] | None:
    """The (key, secret) named `names` in `section` of the INI file `path`, or None when absent. Raises
    `StorageError` naming the file when it cannot be parsed."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path)
        key, secret = (parser.get(section, name, fallback="").strip() for name in names)
    except configparser.Error as exc:
        raise StorageError(f"{bucket.uri}: cannot read {path}: {exc}", bucket=bucket.name,
                           cause="no-credentials") from None
    return (key, secret) if key and secret else None
