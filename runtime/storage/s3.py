"""The S3 client skyhive's buckets go through: boto3 (the `s3` extra), for S3 and S3-compatible endpoints
(MinIO, R2 at its account's endpoint, GCS's XML API with HMAC keys). Why boto3 and not libcloud's S3 driver: docs/storage.md.

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
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import StorageError
from .spec import Bucket

__all__ = ["Access", "access", "client", "storage_error", "require_boto3", "r2_endpoint", "R2_ENDPOINT", "gcs_project",
           "store_configured"]

log = logging.getLogger("skyhive.storage")

#: Default endpoints of the stores reached through their S3-compatible APIs.
_GCS_ENDPOINT = "https://storage.googleapis.com"


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
    if bucket.store == "gcs":  # the AWS chain names an S3 endpoint, never GCS's
        return _GCS_ENDPOINT
    if bucket.store == "r2":
        return r2_endpoint(bucket)
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
    return None


#: R2's S3 endpoint for an account (https://developers.cloudflare.com/r2/api/s3/api/).
R2_ENDPOINT = "https://{account}.r2.cloudflarestorage.com"
_ACCOUNT = re.compile(r"[0-9a-f]{32}\Z")  # a Cloudflare account ID: 32 hexadecimal digits


def _cloudflare_dir() -> Path:
    return Path(os.path.expanduser("~/.cloudflare"))


def r2_endpoint(bucket: Bucket) -> str:
    """`https://<account>.r2.cloudflarestorage.com`, the account from `CLOUDFLARE_ACCOUNT_ID`, else the file
    `~/.cloudflare/accountid` (SkyPilot's). Raises `StorageError` naming both when neither has one, or the
    place a malformed one came from."""
    where, account = "CLOUDFLARE_ACCOUNT_ID", os.environ.get("CLOUDFLARE_ACCOUNT_ID", "").strip()
    if not account:
        path = _cloudflare_dir() / "accountid"
        where = str(path)
        try:
            account = path.read_text().strip()
        except OSError:
            raise StorageError(f"{bucket.uri}: an R2 bucket needs the Cloudflare account ID: set CLOUDFLARE_ACCOUNT_ID, "
                               f"write it to {path}, or give the bucket's endpoint_url "
                               f"({R2_ENDPOINT.format(account='ACCOUNT')})", bucket=bucket.name,
                               cause="unsupported") from None
    if not _ACCOUNT.match(account.lower()):
        raise StorageError(f"{bucket.uri}: {account!r} (from {where}) is not a Cloudflare account ID "
                           f"(32 hexadecimal digits)", bucket=bucket.name, cause="unsupported")
    return R2_ENDPOINT.format(account=account.lower())


def _store_keys(bucket: Bucket) -> tuple[str, str] | None:
    """A store's own keys, where its tools keep them: R2's in `~/.cloudflare/r2.credentials`, profile `r2`
    (SkyPilot's spelling, AWS's file format); GCS's HMAC keys in the `[Credentials]` section of `~/.boto`
    (`gs_access_key_id`, `gs_secret_access_key`: gsutil's). None when the file or the keys are not there."""
    import configparser

    if bucket.store == "r2":
        path, section, names = _cloudflare_dir() / "r2.credentials", "r2", ("aws_access_key_id", "aws_secret_access_key")
    elif bucket.store == "gcs":
        path = Path(os.environ.get("BOTO_CONFIG") or os.path.expanduser("~/.boto"))
        section, names = "Credentials", ("gs_access_key_id", "gs_secret_access_key")
    else:
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path)
        key, secret = (parser.get(section, name, fallback="").strip() for name in names)
    except configparser.Error as exc:
        raise StorageError(f"{bucket.uri}: cannot read {path}: {exc}", bucket=bucket.name,
                           cause="no-credentials") from None
    return (key, secret) if key and secret else None


def gcs_project() -> str | None:
    """The Google Cloud project, as Google's tools find it: `GOOGLE_CLOUD_PROJECT`, `CLOUDSDK_CORE_PROJECT`,
    else `project` in the `[core]` section of gcloud's active configuration (`$CLOUDSDK_CONFIG`, default
    ~/.config/gcloud: `configurations/config_<active_config>`). None when none says."""
    import configparser

    for var in ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        if os.environ.get(var, "").strip():
            return os.environ[var].strip()
    folder = Path(os.environ.get("CLOUDSDK_CONFIG") or os.path.expanduser("~/.config/gcloud"))
    try:
        active = os.environ.get("CLOUDSDK_ACTIVE_CONFIG_NAME") or (folder / "active_config").read_text().strip()
    except OSError:
        active = "default"
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(folder / "configurations" / f"config_{active or 'default'}")
        return parser.get("core", "project", fallback="").strip() or None
    except configparser.Error:
        return None


def store_configured(store: str) -> bool:
    """Whether this machine is set up for `store` without a bucket's own endpoint: S3 always (the AWS chain
    decides); R2 when the account ID is found; GCS when HMAC keys are in ~/.boto (the AWS chain's keys are
    never GCS's)."""
    if store == "r2":
        try:
            r2_endpoint(Bucket("skyhive-probe", store="r2"))
        except StorageError:
            return False
        return True
    if store == "gcs":
        return _store_keys(Bucket("skyhive-probe", store="gcs")) is not None
    return True


def access(bucket: Bucket) -> Access:
    """The endpoint, region and credentials for `bucket`, from the chains above (R2 and GCS: their own
    files first, docs/storage.md). Raises `StorageError` (cause "no-credentials") when the chain finds none."""
    boto3 = require_boto3(bucket.uri)
    session = boto3.session.Session()
    endpoint = _endpoint(bucket, session)
    region = bucket.region or ("auto" if bucket.store == "r2" else session.region_name or "us-east-1")
    project = gcs_project() if bucket.store == "gcs" else None
    own = _store_keys(bucket)
    if own is not None:
        return Access(endpoint_url=endpoint, region=region, store=bucket.store, access_key=own[0], secret_key=own[1],
                      project=project)
    creds = session.get_credentials()
    if creds is None:
        raise StorageError(f"{bucket.uri}: no credentials found for bucket {bucket.name!r} (set AWS_ACCESS_KEY_ID "
                           f"and AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials"
                           f"{_OWN_FILES.get(bucket.store, '')})", bucket=bucket.name, cause="no-credentials")
    frozen = creds.get_frozen_credentials()
    return Access(endpoint_url=endpoint, region=region, store=bucket.store, access_key=frozen.access_key,
                  secret_key=frozen.secret_key, token=frozen.token, project=project)


_OWN_FILES = {"r2": "; R2: profile [r2] in ~/.cloudflare/r2.credentials",
              "gcs": "; GCS: HMAC keys as gs_access_key_id/gs_secret_access_key in ~/.boto [Credentials]"}


def client(acc: Access, *, pool_size: int = 48) -> Any:
    """A boto3 S3 client for `acc` (thread-safe; `pool_size` connections for parallel transfers)."""
    boto3 = require_boto3("storage")
    from botocore.config import Config

    # R2 and GCS's XML API refuse the CRC32 checksums botocore >= 1.36 adds to every upload by default (an
    # `aws-chunked` trailer; a composite checksum on CompleteMultipartUpload): only where an operation needs one
    checksums = ({"request_checksum_calculation": "when_required", "response_checksum_validation": "when_required"}
                 if acc.store in ("r2", "gcs") else {})
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
