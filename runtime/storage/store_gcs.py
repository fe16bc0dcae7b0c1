"""Google Cloud Storage through its XML API with HMAC keys: storage.googleapis.com, gsutil's keys in
~/.boto, the project from Google's tools; no bucket tagging, no multi-object delete, no default CRC32
checksums."""

from __future__ import annotations

import configparser
import os
from pathlib import Path
from typing import Any

from .store import Store, read_keys

__all__ = ["GCSStore", "STORE", "gcs_project"]

_GCS_ENDPOINT = "https://storage.googleapis.com"


def gcs_project() -> str | None:
    """The Google Cloud project, as Google's tools find it: `GOOGLE_CLOUD_PROJECT`, `CLOUDSDK_CORE_PROJECT`,
    else `project` in the `[core]` section of gcloud's active configuration (`$CLOUDSDK_CONFIG`, default
    ~/.config/gcloud: `configurations/config_<active_config>`). None when none says."""
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


class GCSStore(Store):
    name = "gcs"
    schemes = ("gs", "gcs")
    checksums_when_required = True
    deletes_one_by_one = True
    keys_hint = "; GCS: HMAC keys as gs_access_key_id/gs_secret_access_key in ~/.boto [Credentials]"

    def endpoint(self, bucket: Any, session: Any) -> str | None:
        return _GCS_ENDPOINT  # the AWS chain names an S3 endpoint, never GCS's

    def own_keys(self, bucket: Any) -> tuple[str, str] | None:
        """gsutil's HMAC keys: `[Credentials]` of `$BOTO_CONFIG` (default ~/.boto)."""
        path = Path(os.environ.get("BOTO_CONFIG") or os.path.expanduser("~/.boto"))
        return read_keys(path, "Credentials", ("gs_access_key_id", "gs_secret_access_key"), bucket)

    def project(self) -> str | None:
        return gcs_project()

    def configured(self) -> bool:
        """When HMAC keys are in ~/.boto (the AWS chain's keys are never GCS's)."""
        from .spec import Bucket

        return self.own_keys(Bucket("skyhive-probe", store=self.name)) is not None


STORE = GCSStore()
