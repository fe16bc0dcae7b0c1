"""S3, and any S3-compatible endpoint (MinIO, moto): the endpoint as AWS's tools find it."""

from __future__ import annotations

import os
from typing import Any

from .store import Store

__all__ = ["S3Store", "STORE"]


class S3Store(Store):
    name = "s3"
    schemes = ("s3",)
    tags_buckets = True  # `skyhive-created=true` on each bucket skyhive creates

    def endpoint(self, bucket: Any, session: Any) -> str | None:
        """AWS's chain: `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, `endpoint_url` in the profile (or its `s3 =`
        sub-section) of ~/.aws/config; None: AWS's own."""
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


STORE = S3Store()
