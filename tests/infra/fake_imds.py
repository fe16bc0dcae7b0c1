"""FakeInstanceMetadata: a FAKE of the EC2 instance metadata service (IMDSv2), only what a spot node's
interruption watcher asks, on 127.0.0.1 — nothing real runs here (the service lives on an instance).

What it refuses, as the EC2 documentation says ("Use the Instance Metadata Service to access instance
metadata", "Spot Instance interruption notices"):
- `PUT /latest/api/token` needs `X-aws-ec2-metadata-token-ttl-seconds` between 1 and 21600 (else 400);
  a PUT carrying `X-Forwarded-For` is refused (403);
- with `HttpTokens=required` (skyhive's instances) a `GET` without a valid token is 401;
- `GET /latest/meta-data/spot/instance-action` is 404 until an interruption is scheduled, then 200 with
  `{"action": "terminate", "time": "<UTC, ISO 8601, Z>"}` two minutes ahead.

One fake stands for the machines of a test: `notify()` schedules the interruption for the instances that
exist *now* — the holders of tokens issued before the call — so a replacement started afterwards (its
watcher gets a new token) is not interrupted, as a real new instance would not be.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeInstanceMetadata"]

_MAX_TTL = 21600


class FakeInstanceMetadata:
    """FAKE IMDSv2 on 127.0.0.1 (see the module docstring): `endpoint`, `notify(action)`, `close()`;
    `asked` counts the instance-action requests answered."""

    def __init__(self) -> None:
        self._tokens: dict[str, tuple[float, int]] = {}  # token -> (expiry, generation it was issued in)
        self._generation = 0
        self._notice: tuple[int, dict[str, Any]] | None = None  # (tokens of generations below it, the notice)
        self._lock = threading.Lock()
        self.asked = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: str = "", ctype: str = "text/plain") -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:  # noqa: N802 - http.server's spelling
                if self.path != "/latest/api/token":
                    return self._send(404)
                if self.headers.get("X-Forwarded-For"):
                    return self._send(403)
                try:
                    ttl = int(self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", ""))
                except ValueError:
                    return self._send(400)
                if not 1 <= ttl <= _MAX_TTL:
                    return self._send(400)
                token = secrets.token_urlsafe(24)
                with fake._lock:
                    fake._tokens[token] = (time.time() + ttl, fake._generation)
                self._send(200, token)

            def do_GET(self) -> None:  # noqa: N802
                with fake._lock:
                    held = fake._tokens.get(self.headers.get("X-aws-ec2-metadata-token", ""))
                    if held is None or held[0] < time.time():
                        return self._send(401)
                    if self.path != "/latest/meta-data/spot/instance-action":
                        return self._send(404)
                    fake.asked += 1
                    notice = fake._notice
                if notice is None or held[1] >= notice[0]:
                    return self._send(404)
                self._send(200, json.dumps(notice[1]), "application/json")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-imds", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def notify(self, action: str = "terminate", in_seconds: float = 120.0) -> dict[str, Any]:
        """Schedule an interruption of the instances that exist now (tokens issued so far)."""
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + in_seconds))
        notice = {"action": action, "time": when}
        with self._lock:
            self._generation += 1
            self._notice = (self._generation, notice)
        return notice

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
