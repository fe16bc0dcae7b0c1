"""Cloudflare R2 through its S3 API: the account's endpoint, its one region "auto", its own keys in
~/.cloudflare/r2.credentials (SkyPilot's spelling), no bucket tagging, no default CRC32 checksums."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ...errors import StorageError
from .store import Store, read_keys

__all__ = ["R2Store", "STORE", "R2_ENDPOINT", "r2_endpoint"]

#: R2's S3 endpoint for an account (https://developers.cloudflare.com/r2/api/s3/api/).
R2_ENDPOINT = "https://{account}.r2.cloudflarestorage.com"
_ACCOUNT = re.compile(r"[0-9a-f]{32}\Z")  # a Cloudflare account ID: 32 hexadecimal digits


def _cloudflare_dir() -> Path:
    return Path(os.path.expanduser("~/.cloudflare"))


def r2_endpoint(bucket: Any) -> str:
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


class R2Store(Store):
    name = "r2"
    schemes = ("r2",)
    checksums_when_required = True
    keys_hint = "; R2: profile [r2] in ~/.cloudflare/r2.credentials"

    def endpoint(self, bucket: Any, session: Any) -> str | None:
        return r2_endpoint(bucket)

    def region(self, bucket: Any, session: Any) -> str:
        return "auto"

    def own_keys(self, bucket: Any) -> tuple[str, str] | None:
        """Profile `r2` of ~/.cloudflare/r2.credentials (AWS's file format)."""
        return read_keys(_cloudflare_dir() / "r2.credentials", "r2", ("aws_access_key_id", "aws_secret_access_key"),
                         bucket)

    def configured(self) -> bool:
        """When the account ID is found."""
        from .spec import Bucket

        try:
            r2_endpoint(Bucket("skyhive-probe", store=self.name))
        except StorageError:
            return False
        return True

    def location_constraint(self, acc: Any) -> str | None:
        return str(acc.region)  # its one region, "auto", is also its LocationConstraint


STORE = R2Store()
