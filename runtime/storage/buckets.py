"""The client side of bucket mounts: each mount's access resolved, its bucket checked (or created, marked
as skyhive's, and filled from a local `source`), and the buckets skyhive created listed and deleted
(`skyhive storage ls/delete`). A bucket skyhive did not create is never deleted unless named with force.

How a bucket is marked as skyhive's depends on what the store's S3 API has (`Store.tags_buckets`): S3 (and
S3-compatible endpoints) a bucket tag, `skyhive-created=true`; R2 and GCS's XML API have no bucket tagging (R2's S3 API
compatibility table lists Get/PutBucketTagging as not implemented; GCS's XML API has no tagging), so there
the mark is an object, `.skyhive-created`, at the bucket's root (never downloaded into a mount, never
touched by a cached mount's sync).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...errors import StorageError
from .s3 import Access, access, client, storage_error
from .spec import Bucket, Mount
from .store import store_named
from .transfer import CREATED_MARKER, delete_keys, list_prefix, upload_dir

__all__ = ["TAG", "CREATED_MARKER", "Prepared", "prepare", "release", "created_buckets", "delete_bucket",
           "create_bucket", "is_created"]

log = logging.getLogger("skyhive.storage")

#: The tag on every bucket skyhive creates (value: "true") where the store has bucket tags.
TAG = "skyhive-created"


@dataclass(slots=True)
class Prepared:
    """Mounts with their access, ready to send to the nodes; `created` the buckets this made (deleted by
    `release` when a mount is not persistent, or when preparing failed)."""

    mounts: list[tuple[Mount, Access]] = field(default_factory=list)
    created: list[tuple[Bucket, Access]] = field(default_factory=list)


def create_bucket(s3: object, bucket: Bucket, acc: Access) -> None:
    """Create `bucket` marked as skyhive's (a tag, or the marker object where the store has no bucket tags).
    Raises `StorageError` naming it. A GCS bucket is created in `acc.project` (the `x-amz-project-id`
    header, `client`), else in the default project of the HMAC key's interoperable access."""
    try:
        kwargs = {}
        store = store_named(acc.store)
        location = store.location_constraint(acc)  # (R2: its one region, "auto", developers.cloudflare.com/r2/api/s3/api/)
        if location:
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": location}
        s3.create_bucket(Bucket=bucket.name, **kwargs)  # type: ignore[attr-defined]
        if store.tags_buckets:
            s3.put_bucket_tagging(Bucket=bucket.name,  # type: ignore[attr-defined]
                                  Tagging={"TagSet": [{"Key": TAG, "Value": "true"}]})
        else:
            s3.put_object(Bucket=bucket.name, Key=CREATED_MARKER,  # type: ignore[attr-defined]
                          Body=b"created by skyhive for a file mount; `skyhive storage delete` deletes it\n")
    except Exception as exc:  # noqa: BLE001
        raise storage_error(exc, bucket=bucket.name, doing="creating") from exc


def _exists(s3: object, name: str) -> bool:
    try:
        s3.head_bucket(Bucket=name)  # type: ignore[attr-defined]
        return True
    except Exception as exc:  # noqa: BLE001
        err = storage_error(exc, bucket=name, doing="checking")
        if err.cause == "no-such-bucket":
            return False
        raise err from exc


def prepare(mounts: Sequence[Mount], *, progress: bool = False) -> Prepared:
    """Resolve each mount's access; create and fill the buckets of mounts with a local `source`; check the
    others exist. Raises `StorageError` naming the mount and the bucket, after deleting what it created."""
    out = Prepared()
    try:
        for mount in mounts:
            bucket = mount.bucket
            try:
                acc = access(bucket)
                s3 = client(acc)
                if bucket.source is not None:
                    if not _exists(s3, bucket.name):
                        create_bucket(s3, bucket, acc)
                        out.created.append((bucket, acc))
                    upload_dir(s3, bucket.name, bucket.prefix, bucket.source, progress=progress, access=acc)
                elif not _exists(s3, bucket.name):
                    raise StorageError(f"bucket {bucket.name!r}: no such bucket", bucket=bucket.name,
                                       cause="no-such-bucket")
            except StorageError as exc:
                where = mount.where or f"mounts[{mount.target!r}]"
                raise StorageError(f"{where}: {exc}", bucket=exc.bucket, key=exc.key, cause=exc.cause) from None
            out.mounts.append((mount, acc))
    except BaseException:
        release(out, failed=True)
        raise
    return out


def delete_bucket(s3: object, name: str, *, store: str = "s3") -> int:
    """Delete every object of bucket `name`, then the bucket; returns the objects deleted (skyhive's marker
    not counted)."""
    objects = list_prefix(s3, name, "")
    try:
        uploads = s3.list_multipart_uploads(Bucket=name).get("Uploads", ())  # type: ignore[attr-defined]
        for up in uploads:  # a cut upload's parts: never an object, but stored (and billed) until aborted
            s3.abort_multipart_upload(Bucket=name, Key=up["Key"], UploadId=up["UploadId"])  # type: ignore[attr-defined]
        delete_keys(s3, name, [o.key for o in objects], one_by_one=store_named(store).deletes_one_by_one)
        s3.delete_bucket(Bucket=name)  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001
        raise storage_error(exc, bucket=name, doing="deleting") from exc
    return sum(1 for o in objects if o.key != CREATED_MARKER)


def release(prepared: Prepared, *, failed: bool = False) -> list[str]:
    """Delete the buckets `prepared` created that are not persistent (all of them when `failed`);
    returns their names. A bucket that cannot be deleted is logged and left (named)."""
    gone = []
    for bucket, acc in prepared.created:
        if bucket.persistent and not failed:
            continue
        try:
            delete_bucket(client(acc), bucket.name, store=acc.store)
            gone.append(bucket.name)
        except StorageError as exc:
            log.warning("left bucket %s (skyhive created it; `skyhive storage delete %s`): %s", bucket.name,
                        bucket.name, exc)
    return gone


def is_created(s3: object, name: str, store: str = "s3") -> bool:
    """Whether bucket `name` carries skyhive's mark (its tag, or its marker object); False when it has none,
    does not exist, or its mark cannot be read."""
    try:
        if store_named(store).tags_buckets:
            tags = s3.get_bucket_tagging(Bucket=name)["TagSet"]  # type: ignore[attr-defined]
            return any(t.get("Key") == TAG for t in tags)
        s3.head_object(Bucket=name, Key=CREATED_MARKER)  # type: ignore[attr-defined]
        return True
    except Exception:  # noqa: BLE001 - no tags (NoSuchTagSet), no marker, no bucket, or not ours to read
        return False


def all_buckets(s3: object, store: str = "s3") -> list[str]:
    """Every bucket at `s3`'s endpoint (GCS: in the client's project). Raises `StorageError` naming the store."""
    try:
        return sorted(b["Name"] for b in s3.list_buckets().get("Buckets", ()))  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001
        raise storage_error(exc, bucket="*", doing=f"listing the {store} buckets at") from exc


def created_buckets(acc: Access) -> list[str]:
    """The buckets at `acc`'s endpoint that carry skyhive's mark."""
    s3 = client(acc)
    return [n for n in all_buckets(s3, acc.store) if is_created(s3, n, acc.store)]
