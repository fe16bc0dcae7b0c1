"""FakeGCEMetadata: a FAKE of a Compute Engine VM's metadata server, only what a spot node's interruption
watcher asks (`computeMetadata/v1/instance/preempted`), on 127.0.0.1 — nothing real runs here (the server
lives on a VM).

What it refuses and answers, as the Compute Engine documentation says ("About VM metadata", "Query VM
metadata": "Query metadata server", "Waiting for updates"; "Detect if a VM was preempted"; the
metadata server's troubleshooting page for its status codes):
- a request without the header `Metadata-Flavor: Google` is 403 (the retired `X-Google-Metadata-Request`
  header is no substitute);
- a request carrying `X-Forwarded-For` is rejected ("Query VM metadata": the server answers no proxied
  request; the page names no status: 403, the troubleshooting page's "the request fails security checks");
- only GET (else 405); a path it does not hold is 404; `timeout_sec` that is not a whole number is 400;
- every answer carries `Metadata-Flavor: Google` and the value's `ETag`;
- `instance/preempted` is ``FALSE`` until `preempt()`, then ``TRUE``;
- `?wait_for_change=true` holds the request until the value's ETag differs from `last_etag` (at once when
  it already does), or — without `last_etag` — until the value next changes; after `timeout_sec` seconds
  it answers the unchanged value.

One fake stands for one VM (the real server knows its VM by where the request comes from; the fake
cannot): `preempt()` preempts it.
"""

from __future__ import annotations

import hashlib
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeGCEMetadata"]

_PREEMPTED = "/computeMetadata/v1/instance/preempted"


class FakeGCEMetadata:
    """FAKE GCE metadata server on 127.0.0.1 (see the module docstring): `host` (for `GCE_METADATA_HOST`),
    `endpoint`, `preempt()`, `close()`; `asked` counts the `preempted` requests answered, `refused` the
    status of each request refused."""

    def __init__(self) -> None:
        self._value = "FALSE"
        self._closed = False
        self._changed = threading.Condition()
        self.asked = 0
        self.refused: list[int] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: str = "", etag: str = "") -> None:
                data = body.encode()
                if code >= 400:
                    with fake._changed:
                        fake.refused.append(code)
                self.send_response(code)
                self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Type", "application/text")
                if etag:
                    self.send_header("ETag", etag)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _refused(self) -> int:
                if self.headers.get("X-Forwarded-For") is not None:
                    return 403
                if self.headers.get("Metadata-Flavor") != "Google":
                    return 403
                return 0

            def do_GET(self) -> None:  # noqa: N802 - http.server's spelling
                code = self._refused()
                if code:
                    return self._send(code, "Missing required header \"Metadata-Flavor\": \"Google\"\n"
                                      if self.headers.get("Metadata-Flavor") != "Google" else "")
                url = urllib.parse.urlsplit(self.path)
                if url.path != _PREEMPTED:
                    return self._send(404)
                query = dict(urllib.parse.parse_qsl(url.query))
                try:
                    timeout = float(int(query.get("timeout_sec", "300")))
                except ValueError:
                    return self._send(400, "timeout_sec must be an integer\n")
                with fake._changed:
                    fake.asked += 1
                    if query.get("wait_for_change", "").lower() == "true":
                        last = query.get("last_etag") or fake._etag()
                        fake._changed.wait_for(lambda: fake._closed or fake._etag() != last, timeout=timeout)
                    value, etag = fake._value, fake._etag()
                self._send(200, value, etag)

            def _method_not_allowed(self) -> None:
                self._send(405)

            do_POST = do_PUT = do_DELETE = _method_not_allowed  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-gce-metadata", daemon=True)
        self._thread.start()

    def _etag(self) -> str:
        return hashlib.sha256(self._value.encode()).hexdigest()[:16]

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}"

    def preempt(self) -> None:
        """Begin the VM's preemption: `preempted` turns ``TRUE`` (and held requests return)."""
        with self._changed:
            self._value = "TRUE"
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:  # release held requests
            self._closed = True
            self._changed.notify_all()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
