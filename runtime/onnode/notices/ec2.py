"""EC2's spot interruption notice, from the instance metadata service (IMDSv2).

EC2 tells a spot instance about two minutes ahead that it will be interrupted: `GET
/latest/meta-data/spot/instance-action` answers 404 until then, and then `{"action": "terminate" | "stop" |
"hibernate", "time": "2026-11-26T22:00:00Z"}` (already skyhive's normalised form); AWS advises polling it
every 5 seconds. skyhive's instances require IMDSv2 (`HttpTokens=required`, `providers/cloud/aws_data.py`),
so each request carries a session token got with `PUT /latest/api/token` (header
`X-aws-ec2-metadata-token-ttl-seconds`, at most 21600). The service's address is botocore's setting
`AWS_EC2_METADATA_SERVICE_ENDPOINT` (default `http://169.254.169.254`).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

__all__ = ["CLOUD", "source", "EC2Notice", "endpoint"]

#: the cloud whose notice this reads (a provider's `Features.notices`)
CLOUD = "aws"


def source(wait: float = 5.0) -> EC2Notice:
    """This cloud's notice client at its default endpoint (`wait` is for hanging GETs: none here)."""
    return EC2Notice()


_TOKEN_TTL = 21600


def endpoint() -> str:
    return (os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or "http://169.254.169.254").rstrip("/")


class EC2Notice:
    """IMDSv2 client: one token, renewed when refused (expired)."""

    interval = 5.0  # as AWS advises
    hangs = False

    def __init__(self, endpoint_url: str | None = None, timeout: float = 2.0) -> None:
        self.endpoint, self.timeout, self.token = (endpoint_url or endpoint()).rstrip("/"), timeout, ""

    def _token(self) -> str:
        req = urllib.request.Request(f"{self.endpoint}/latest/api/token", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": str(_TOKEN_TTL)})
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - the metadata service
            return resp.read().decode()

    def notice(self) -> dict[str, Any] | None:
        for _ in range(2):
            if not self.token:
                self.token = self._token()
            req = urllib.request.Request(f"{self.endpoint}/latest/meta-data/spot/instance-action",
                                         headers={"X-aws-ec2-metadata-token": self.token})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                    value = json.loads(resp.read().decode())
                    return value if isinstance(value, dict) else {"action": str(value)}
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None  # no interruption scheduled
                if exc.code == 401:  # the token expired: a new one
                    self.token = ""
                    continue
                raise
        return None
