"""The S3 client skyhive's buckets go through: boto3 (the `s3` extra), for S3 and S3-compatible endpoints
(MinIO, R2, GCS's XML API with HMAC keys). Why boto3 and not libcloud's S3 driver: docs/storage.md.

`access(bucket)` resolves, on the client, what a node needs to reach a bucket: the endpoint (the bucket's
own `endpoint_url`, else AWS's chain: `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, `endpoint_url` in the
profile of ~/.aws/config), the region, and the credentials from AWS's standard chain (environment,
~/.aws/credentials and config profiles, SSO, the instance's role). `client(access)` builds the client
anywhere, and `storage_error` turns botocore's exceptions into a `StorageError` naming bucket, key and cause.
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from ...errors import StorageError
from .spec import Bucket

__all__ = ["Access", "access", "client", "storage_error", "require_boto3"]

log = logging.getLogger("skyhive.storage")

#: Default endpoints of the stores reached through their S3-compatible APIs.
_GCS_ENDPOINT = "https://storage.googleapis.com"


@dataclass(frozen=True, slots=True)
class Access:
    """What reaches a bucket: endpoint, region and credentials. The secret parts never show in `repr`."""

    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

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


def _endpoint(bucket: Bucket, session: Any) -> str | None:
    if bucket.endpoint_url:
        return bucket.endpoint_url
    for var in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        if os.environ.get(var):
            return os.environ[var]
    try:  # `endpoint_url` in the profile, or in its `s3 =` sub-section / `services` section
        config = session._session.get_scoped_config()
    except Exception:  # noqa: BLE001 - a broken config file: the default endpoint, and boto3 will say why
        config = {}
    if isinstance(config.get("s3"), dict) and config["s3"].get("endpoint_url"):
        return str(config["s3"]["endpoint_url"])
    if config.get("endpoint_url"):
        return str(config["endpoint_url"])
    if bucket.store == "gcs":
        return _GCS_ENDPOINT
    if bucket.store == "r2":
        raise StorageError(f"{bucket.uri}: an R2 bucket needs its endpoint (https://ACCOUNT.r2.cloudflarestorage.com) "
                           f"in AWS_ENDPOINT_URL_S3, ~/.aws/config or endpoint_url", bucket=bucket.name,
                           cause="unsupported")
    return None


def access(bucket: Bucket) -> Access:
    """The endpoint, region and credentials for `bucket`, from the chains above. Raises `StorageError`
    (cause "no-credentials") when the chain finds none."""
    boto3 = require_boto3(bucket.uri)
    session = boto3.session.Session()
    endpoint = _endpoint(bucket, session)
    region = bucket.region or session.region_name or ("auto" if bucket.store == "r2" else "us-east-1")
    creds = session.get_credentials()
    if creds is None:
        raise StorageError(f"{bucket.uri}: no credentials found for bucket {bucket.name!r} (set AWS_ACCESS_KEY_ID "
                           f"and AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials)", bucket=bucket.name,
                           cause="no-credentials")
    frozen = creds.get_frozen_credentials()
    return Access(endpoint_url=endpoint, region=region, access_key=frozen.access_key, secret_key=frozen.secret_key,
                  token=frozen.token)


def client(acc: Access, *, pool_size: int = 48) -> Any:
    """A boto3 S3 client for `acc` (thread-safe; `pool_size` connections for parallel transfers)."""
    boto3 = require_boto3("storage")
    from botocore.config import Config

    config = Config(max_pool_connections=pool_size, retries={"max_attempts": 3, "mode": "standard"},
                    connect_timeout=10, read_timeout=60, s3={"addressing_style": "path"} if acc.endpoint_url else None)
    return boto3.client("s3", endpoint_url=acc.endpoint_url, region_name=acc.region, aws_access_key_id=acc.access_key,
                        aws_secret_access_key=acc.secret_key, aws_session_token=acc.token, config=config)


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
