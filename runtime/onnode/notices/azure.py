"""Azure's spot eviction notice, from Scheduled Events on the VM's Instance Metadata Service.

Azure schedules a Spot VM's eviction as an event of type ``Preempt`` at least 30 seconds ahead
("Scheduled Events for Linux VMs": "Event scheduling"; skyhive's spot VMs are deleted on eviction,
`evictionPolicy: Delete`, `providers/cloud/azure.py`). `GET
/metadata/scheduledevents?api-version=2020-07-01` with the header `Metadata: true` answers
``{"DocumentIncarnation": N, "Events": []}`` while nothing is scheduled, and then an event
``{"EventId", "EventType": "Preempt", "EventStatus": "Scheduled", "Resources": [<VM name>],
"NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", "EventSource": "Platform", ...}``. IMDS refuses (400) a
request without `Metadata: true`, or without a supported `api-version`, and one carrying
`X-Forwarded-For` ("Azure Instance Metadata Service": "Security and authentication", "Versioning").
The first request enables Scheduled Events for the VM and may take up to two minutes to answer.

The event is never acknowledged (a `POST` with its `EventId` lets Azure go ahead before `NotBefore`:
the eviction would come sooner). skyhive's VMs are standalone (no availability set or scale set), so
an event seen by the VM is its own.

The service's address: `SKYHIVE_AZURE_IMDS_ENDPOINT` (Azure's tools have no setting for it), default
`http://169.254.169.254`. Normalised: ``{"action": "terminate", "time": <NotBefore, ISO 8601 Z>,
"cloud": "azure", "event_id": ..., "event_type": "Preempt"}``.
"""

from __future__ import annotations

import email.utils
import json
import os
import time
import urllib.request
from typing import Any

__all__ = ["CLOUD", "source", "AzureNotice", "endpoint", "API_VERSION"]

#: the cloud whose notice this reads (a provider's `Features.notices`)
CLOUD = "azure"


def source(wait: float = 5.0) -> AzureNotice:
    """This cloud's notice client at its default endpoint (`wait` is for hanging GETs: none here)."""
    return AzureNotice()


API_VERSION = "2020-07-01"  # Scheduled Events' newest version
_FIRST_ANSWER = 120.0  # seconds the first request may take (it enables Scheduled Events for the VM)


def endpoint() -> str:
    return (os.environ.get("SKYHIVE_AZURE_IMDS_ENDPOINT") or "http://169.254.169.254").rstrip("/")


def _iso(not_before: str) -> str:
    """`NotBefore` (RFC 1123, "Mon, 19 Sep 2016 18:29:47 GMT"; empty once the event has started) in ISO 8601."""
    try:
        when = email.utils.parsedate_to_datetime(not_before).timestamp() if not_before else time.time()
    except (TypeError, ValueError):
        when = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


class AzureNotice:
    """Scheduled Events client: the first `Preempt` event scheduled or started, never acknowledged."""

    interval = 1.0  # a Preempt event may come only 30 s ahead
    hangs = False

    def __init__(self, endpoint_url: str | None = None, timeout: float = 2.0) -> None:
        self.endpoint = (endpoint_url or endpoint()).rstrip("/")
        self.timeout, self._first = timeout, True

    def notice(self) -> dict[str, Any] | None:
        req = urllib.request.Request(f"{self.endpoint}/metadata/scheduledevents?api-version={API_VERSION}",
                                     headers={"Metadata": "true"})
        timeout = _FIRST_ANSWER if self._first else self.timeout
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - the metadata service
            doc = json.loads(resp.read().decode())
        self._first = False
        events = doc.get("Events") if isinstance(doc, dict) else None
        if not isinstance(events, list):
            raise ValueError(f"{self.endpoint}/metadata/scheduledevents: no Events list in {str(doc)[:120]!r}")
        for event in events:
            if isinstance(event, dict) and event.get("EventType") == "Preempt" and \
                    event.get("EventStatus", "Scheduled") in ("Scheduled", "Started"):
                return {"action": "terminate", "time": _iso(str(event.get("NotBefore") or "")), "cloud": "azure",
                        "event_id": str(event.get("EventId", "")), "event_type": "Preempt"}
        return None
