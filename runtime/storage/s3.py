"""The S3 client skyhive's buckets go through: boto3 (the `s3` extra), for S3 and S3-compatible endpoints
(MinIO, R2 at its account's endpoint, GCS's XML API with HMAC keys). Why boto3 and not libcloud's S3 driver: docs/storage.md.

`access(bucket)` resolves, on the client, what a node needs to reach a bucket: the endpoint (the bucket's
own `endpoint_url`, else its store's: `store.py`, `store_*.py`; S3's is AWS's chain: `AWS_ENDPOINT_URL_S3`,
`AWS_ENDPOINT_URL`, `endpoint_url` in the profile of ~/.aws/config), the region, and the credentials (the
store's own keys, else AWS's standard chain: environment, ~/.aws/credentials and config profiles, SSO, the
instance's role). `client(access)` builds the client
anywhere, and `storage_error` turns botocore's exceptions into a `StorageError` naming bucket, key and cause.
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass, field
from typing import Any

from ...errors import StorageError
from .spec import Bucket
from .store import store_named
from .store_gcs import gcs_project
from .store_r2 import R2_ENDPOINT, r2_endpoint

__all__ = ["Access", "access", "client", "storage_error", "require_boto3", "r2_endpoint", "R2_ENDPOINT", "gcs_project",
           "store_configured"]

log = logging.getLogger("skyhive.storage")

@dataclass(frozen=True, slots=True)
class Access:
    """What reaches a bucket: endpoint, region and credentials. The secret parts never show in `repr`."""

    endpoint_url: str | None = None
    region: str = "us-east-1"
    store: str = "s3"
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    #: GCS: the Google Cloud project buckets are created and listed in (`x-amz-project-id`); None: the
    #: default project of the HMAC key's interoperable access.
    project: str | None = None
    #: what the nodes need of the store (`Store`): its S3 API takes checksums only where required; it has
    #: no multi-object delete. (Resolved on the client: a node never looks a store up.)
    checksums_when_required: bool = False
    deletes_one_by_one: bool = False

    def env(self) -> dict[str, str]:
        """The same access as AWS environment variables (for rclone, s3fs, and the task's scripts)."""
        out = {"AWS_DEFAULT_REGION": self.region, "AWS_REGION": self.region}
        if self.endpoint_url:
            out["AWS_ENDPOINT_URL_S3"] = self.endpoint_url
        if self.access_key:
            out["AWS_ACCESS_KEY_ID"] = self.access_key
        if self.secret_key:
            out["AWS_SECRET_ACCESS_KEY"] = self.secret_key
        if self.token:
            out["AWS_SESSION_TOKEN"] = self.token
        return out


def require_boto3(what: str) -> Any:
    try:
        import boto3
    except ImportError:
        raise StorageError(f"{what}: bucket mounts need boto3 (pip install 'skyhive[s3]')",
                           cause="unsupported") from None
    return boto3


def store_configured(store: str) -> bool:
    """Whether this machine is set up for `store` without a bucket's own endpoint (`Store.configured`: S3
    always, the AWS chain decides; R2 when the account ID is found; GCS when HMAC keys are in ~/.boto)."""
    return store_named(store).configured()


def access(bucket: Bucket) -> Access:
    """The endpoint, region and credentials for `bucket`: its own, else its store's (`Store.endpoint`,
    `region`, `own_keys`: R2 and GCS read their own files first, docs/storage.md), else AWS's chain. Raises
    `StorageError` (cause "no-credentials") when the chain finds none."""
    boto3 = require_boto3(bucket.uri)
    store = store_named(bucket.store)
    session = boto3.session.Session()
    endpoint = bucket.endpoint_url or store.endpoint(bucket, session)
    region = bucket.region or store.region(bucket, session)
    facts = {"endpoint_url": endpoint, "region": region, "store": bucket.store, "project": store.project(),
             "checksums_when_required": store.checksums_when_required,
             "deletes_one_by_one": store.deletes_one_by_one}
    own = store.own_keys(bucket)
    if own is not None:
        return Access(**facts, access_key=own[0], secret_key=own[1])
    creds = session.get_credentials()
    if creds is None:
        raise StorageError(f"{bucket.uri}: no credentials found for bucket {bucket.name!r} (set AWS_ACCESS_KEY_ID "
                           f"and AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials{store.keys_hint})",
                           bucket=bucket.name, cause="no-credentials")
    frozen = creds.get_frozen_credentials()
    return Access(**facts, access_key=frozen.access_key, secret_key=frozen.secret_key, token=frozen.token)


def client(acc: Access, *, pool_size: int = 48) -> Any:
    """A boto3 S3 client for `acc` (thread-safe; `pool_size` connections for parallel transfers)."""
    boto3 = require_boto3("storage")
    from botocore.config import Config

    # R2 and GCS's XML API refuse the CRC32 checksums botocore >= 1.36 adds to every upload by default (an
    # `aws-chunked` trailer; a composite checksum on CompleteMultipartUpload): only where an operation needs one
    checksums = ({"request_checksum_calculation": "when_required", "response_checksum_validation": "when_required"}
                 if acc.checksums_when_required else {})
    config = Config(max_pool_connections=pool_size, retries={"max_attempts": 3, "mode": "standard"},
                    connect_timeout=10, read_timeout=60, s3={"addressing_style": "path"} if acc.endpoint_url else None,
                    **checksums)
    s3 = boto3.client("s3", endpoint_url=acc.endpoint_url, region_name=acc.region, aws_access_key_id=acc.access_key,
                      aws_secret_access_key=acc.secret_key, aws_session_token=acc.token, config=config)
    if acc.project:  # GCS's XML API creates and lists buckets in the project this header names
        project = acc.project

        def name_the_project(request: Any, **_: Any) -> None:
            request.headers["x-amz-project-id"] = project

        for op in ("CreateBucket", "ListBuckets"):
            s3.meta.events.register(f"before-sign.s3.{op}", name_the_project)
    from .journal import journal

    journal(s3, endpoint_url=acc.endpoint_url, store=acc.store, region=acc.region)  # (a killed upload is aborted later)
    return s3


_CAUSES = {
    "NoSuchBucket": "no-such-bucket", "AccessDenied": "access-denied", "AllAccessDisabled": "access-denied",
    "InvalidAccessKeyId": "access-denied", "SignatureDoesNotMatch": "access-denied", "Forbidden": "access-denied",
    "403": "access-denied", "NoSuchKey": "no-such-key", "404": "no-such-key",
}
_SAYS = {
    "no-such-bucket": "no such bucket", "access-denied": "access denied (check the credentials and the bucket's policy)",
    "no-such-key": "no such object", "no-credentials": "no credentials found",
    "interrupted": "the transfer was cut (the endpoint stopped answering)", "disk-full": "the disk is full",
}


def storage_error(exc: BaseException, *, bucket: str, key: str = "", doing: str = "") -> StorageError:
    """`exc` (botocore's, s3transfer's or an `OSError`) as a `StorageError` naming `bucket`, `key` and the cause."""
    if isinstance(exc, StorageError):
        return exc
    cause, detail = "error", f"{type(exc).__name__}: {exc}"
    try:
        from botocore import exceptions as bx
    except ImportError:  # pragma: no cover - boto3 is required before any transfer
        bx = None
    if bx is not None and isinstance(exc, bx.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code == "404" and not key:
            code = "NoSuchBucket"
        cause = _CAUSES.get(code, "error")
    elif bx is not None and isinstance(exc, bx.NoCredentialsError):
        cause = "no-credentials"
    elif bx is not None and isinstance(exc, (bx.EndpointConnectionError, bx.ConnectionClosedError,
                                             bx.ReadTimeoutError, bx.ConnectTimeoutError, bx.ResponseStreamingError)):
        cause = "interrupted"
    elif isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        cause = "disk-full"
    elif type(exc).__name__ in ("RetriesExceededError", "IncompleteReadError", "ProtocolError"):
        cause = "interrupted"
    where = f"s3://{bucket}/{key}" if key else f"bucket {bucket!r}"
    what = f"{doing} {where}" if doing else where
    return StorageError(f"{what}: {_SAYS.get(cause, 'failed')} ({detail})", bucket=bucket, key=key, cause=cause)
