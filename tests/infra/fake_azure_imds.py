"""FakeAzureScheduledEvents: a FAKE of an Azure VM's Instance Metadata Service, only its Scheduled Events
(what a spot node's interruption watcher asks), on 127.0.0.1 — nothing real runs here (IMDS lives on
the VM's host).

What it refuses and answers, as the Azure documentation says ("Azure Instance Metadata Service":
"Security and authentication", "Versioning", "Errors and debugging"; "Azure Metadata Service: Scheduled
Events for Linux VMs": "Query for events", "Event scheduling", "Start an event"):
- a request without the header `Metadata: true` is 400 (``Bad request. Required metadata header not
  specified``);
- a request carrying `X-Forwarded-For` is rejected (400: IMDS serves no proxied request; the page names
  no other status);
- a request without `api-version`, or with one Scheduled Events does not support, is 400 with the
  ``newest-versions`` list;
- a path it does not hold is 404; a method other than GET or POST is 405;
- `GET /metadata/scheduledevents` answers ``{"DocumentIncarnation": N, "Events": []}`` while nothing is
  scheduled; `evict()` schedules a Spot VM's eviction: an event of type ``Preempt``, ``Scheduled``,
  ``NotBefore`` 30 s ahead (RFC 1123), and a new ``DocumentIncarnation``;
- `POST` with ``{"StartRequests": [{"EventId": ...}]}`` acknowledges an event (recorded in `acknowledged`:
  a watcher must never do it — it lets the eviction come sooner).

One fake stands for one VM (IMDS knows its VM by where the request comes from; the fake cannot).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import uuid
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeAzureScheduledEvents", "VERSIONS"]

#: the api-versions Scheduled Events answers to
VERSIONS = ("2017-03-01", "2017-08-01", "2017-11-01", "2019-01-01", "2019-08-01", "2020-07-01")
_PATH = "/metadata/scheduledevents"


class FakeAzureScheduledEvents:
    """FAKE Azure IMDS Scheduled Events on 127.0.0.1 (see the module docstring): `endpoint`, `evict()`,
    `close()`; `asked` counts the GETs answered, `acknowledged` the event ids POSTed, `refused` the status
    of each request refused."""

    def __init__(self, vm_name: str = "skyhive-vm-0") -> None:
        self.vm_name = vm_name
        self._incarnation = 1
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.asked = 0
        self.acknowledged: list[str] = []
        self.refused: list[int] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: Any = None) -> None:
                data = json.dumps(body).encode() if body is not None else b""
                if code >= 400:
                    with fake._lock:
                        fake.refused.append(code)
                self.send_response(code)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _checked(self) -> bool:
                """False (and the refusal sent) for a request IMDS refuses."""
                if self.headers.get("X-Forwarded-For") is not None:
                    self._send(400, {"error": "Bad request. X-Forwarded-For header is not allowed"})
                    return False
                if (self.headers.get("Metadata") or "").lower() != "true":
                    self._send(400, {"error": "Bad request. Required metadata header not specified"})
                    return False
                url = urllib.parse.urlsplit(self.path)
                if url.path.rstrip("/") != _PATH:
                    self._send(404, {"error": "Not found"})
                    return False
                version = dict(urllib.parse.parse_qsl(url.query)).get("api-version")
                if version not in VERSIONS:
                    why = "was not specified in the request" if not version else "is invalid"
                    self._send(400, {"error": f"Bad request. api-version {why}. For more information refer "
                                              "to aka.ms/azureimds", "newest-versions": list(VERSIONS[::-1][:3])})
                    return False
                return True

            def do_GET(self) -> None:  # noqa: N802 - http.server's spelling
                if not self._checked():
                    return
                with fake._lock:
                    fake.asked += 1
                    doc = {"DocumentIncarnation": fake._incarnation, "Events": [dict(e) for e in fake._events]}
                self._send(200, doc)

            def do_POST(self) -> None:  # noqa: N802
                if not self._checked():
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                    ids = [r["EventId"] for r in body["StartRequests"]]
                except (ValueError, KeyError, TypeError):
                    return self._send(400, {"error": "Bad request. StartRequests expected"})
                with fake._lock:
                    fake.acknowledged.extend(ids)
                self._send(200)

            def _method_not_allowed(self) -> None:
                self._send(405, {"error": "Method not allowed"})

            do_PUT = do_DELETE = _method_not_allowed  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-azure-imds", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def evict(self, in_seconds: float = 30.0) -> dict[str, Any]:
        """Schedule the Spot VM's eviction (a ``Preempt`` event `in_seconds` ahead); returns the event."""
        event = {"EventId": str(uuid.uuid4()).upper(), "EventType": "Preempt", "ResourceType": "VirtualMachine",
                 "Resources": [self.vm_name], "EventStatus": "Scheduled",
                 "NotBefore": formatdate(time.time() + in_seconds, usegmt=True), "Description": "",
                 "EventSource": "Platform", "DurationInSeconds": -1}
        with self._lock:
            self._events.append(event)
            self._incarnation += 1
        return dict(event)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
