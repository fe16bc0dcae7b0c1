"""GCE's preemption notice, from the VM's metadata server.

Compute Engine gives a Spot (or preemptible) VM about 30 seconds' notice before it stops or deletes it
("Spot VMs", "Preemption process"; skyhive's spot VMs are deleted: `instanceTerminationAction: DELETE`,
`providers/cloud/gcp.py`). From inside the VM the notice is the metadata value
`computeMetadata/v1/instance/preempted` ("Detect if a VM was preempted"): ``FALSE``, then ``TRUE`` once the
preemption has begun. Every request carries `Metadata-Flavor: Google` (without it: 403), and none carries
`X-Forwarded-For` (refused). A *hanging GET* (`?wait_for_change=true&last_etag=E&timeout_sec=N`, "Waiting
for updates") returns as soon as the value's ETag differs from `E`, or after N seconds with the value
unchanged; the first look is a plain GET, for the value and its ETag (the VM may already be preempted).

The server's address is the Google client libraries' setting `GCE_METADATA_HOST` (host[:port]; the older
name `GCE_METADATA_ROOT` is read when it is unset), default `metadata.google.internal`.

The notice carries no time; skyhive's normalised form gives the 30 s GCE promises from when it was seen:
``{"action": "terminate", "time": <now + 30 s>, "cloud": "gcp"}``.
"""

from __future__ import annotations

import math
import os
import time
import urllib.parse
import urllib.request
from typing import Any

__all__ = ["CLOUD", "source", "GCENotice", "endpoint", "NOTICE_SECONDS"]

#: the cloud whose notice this reads (a provider's `Features.notices`)
CLOUD = "gcp"


def source(wait: float = 5.0) -> GCENotice:
    """This cloud's notice client at its default endpoint."""
    return GCENotice(wait=wait)


NOTICE_SECONDS = 30  # the preemption notice GCE gives a Spot or preemptible VM
_PATH = "/computeMetadata/v1/instance/preempted"


def endpoint() -> str:
    host = os.environ.get("GCE_METADATA_HOST") or os.environ.get("GCE_METADATA_ROOT") or "metadata.google.internal"
    return host.rstrip("/") if "://" in host else f"http://{host.rstrip('/')}"


class GCENotice:
    """Metadata-server client: a plain GET first, then hanging GETs of at most `wait` seconds each."""

    interval = 5.0  # the pause after a failed look (the hanging GET itself waits for the change)
    hangs = True

    def __init__(self, endpoint_url: str | None = None, wait: float = 5.0, timeout: float = 2.0) -> None:
        self.endpoint = (endpoint_url or endpoint()).rstrip("/")
        self.wait = max(1, math.ceil(wait))  # timeout_sec is whole seconds
        self.timeout = timeout
        self.etag = ""

    def notice(self) -> dict[str, Any] | None:
        url = self.endpoint + _PATH
        timeout = self.timeout
        if self.etag:  # wait for the value to change (or `wait` seconds)
            query = {"wait_for_change": "true", "last_etag": self.etag, "timeout_sec": str(self.wait)}
            url += "?" + urllib.parse.urlencode(query)
            timeout += self.wait
        req = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - the metadata server
            value = resp.read().decode().strip()
            if resp.headers.get("Metadata-Flavor") != "Google":  # not GCE's metadata server answering
                raise ValueError(f"{self.endpoint}: an answer without Metadata-Flavor: Google")
            self.etag = resp.headers.get("ETag", "")
        if value.upper() == "TRUE":
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + NOTICE_SECONDS))
            return {"action": "terminate", "time": when, "cloud": "gcp"}
        if value.upper() != "FALSE":
            raise ValueError(f"{self.endpoint}{_PATH}: expected TRUE or FALSE, got {value[:80]!r}")
        return None
