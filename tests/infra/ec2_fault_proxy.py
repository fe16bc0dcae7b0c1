"""`FaultInjectingEC2Proxy`: a FAKE EC2 front — an HTTP proxy on 127.0.0.1 in front of `moto_server`
that answers chosen EC2 actions with the error AWS sends, and forwards everything else to moto.

moto cannot fail a `TerminateInstances` or a `DeleteSecurityGroup` on demand; real EC2 does (an
`InternalError` during an outage, `UnauthorizedOperation` after a policy change). Through this proxy,
`sky.AWS(endpoint=...)` — in this process or in a `skyhive down` subprocess — meets those failures as
AWS sends them, black-box: no driver wrapper, the provider's own error parsing and retries.

The error body is EC2's documented error response, un-namespaced, as AWS sends it
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html: ``<Response><Errors>
<Error><Code>…</Code><Message>…</Message></Error></Errors><RequestID>…</RequestID></Response>``), with
HTTP 500 for `InternalError` (a server error) and 400 for client errors, as that page lists them.
Only for tests in the loopback-only namespace (`tests.infra.loopback`), like moto itself.
"""

from __future__ import annotations

import http.client
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

__all__ = ["FaultInjectingEC2Proxy", "fault_proxy"]

_SERVER_ERRORS = {"InternalError": 500, "InternalFailure": 500, "ServiceUnavailable": 503, "Unavailable": 503,
                  "RequestLimitExceeded": 503}


class FaultInjectingEC2Proxy:
    """FAKE: forwards EC2 Query API requests to `upstream` (moto_server), except that an action named
    in `failing` (action -> error code) is answered with that error. `seen` counts each action's
    requests; `refused` those answered with an error."""

    def __init__(self, upstream: str) -> None:
        split = urlsplit(upstream)
        self.upstream = (split.hostname or "127.0.0.1", split.port or 80)
        self.failing: dict[str, str] = {}
        self.seen: dict[str, int] = {}
        self.refused: dict[str, int] = {}
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                proxy._handle(self)

            def do_POST(self) -> None:  # noqa: N802
                proxy._handle(self)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="ec2-fault-proxy", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)

    def _handle(self, req: BaseHTTPRequestHandler) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length) if length else b""
        params = parse_qs(urlsplit(req.path).query)
        if body and "x-www-form-urlencoded" in (req.headers.get("Content-Type") or ""):
            params.update(parse_qs(body.decode("utf-8", "replace")))
        action = (params.get("Action") or [""])[0]
        with self._lock:
            self.seen[action] = self.seen.get(action, 0) + 1
            code = self.failing.get(action)
            if code:
                self.refused[action] = self.refused.get(action, 0) + 1
        if code:
            payload = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code>"
                       f"<Message>injected by the test's fault proxy: {action} fails</Message></Error></Errors>"
                       f"<RequestID>{uuid.uuid4()}</RequestID></Response>").encode()
            req.send_response(_SERVER_ERRORS.get(code, 400))
            req.send_header("Content-Type", "text/xml;charset=UTF-8")
            req.send_header("Content-Length", str(len(payload)))
            req.end_headers()
            req.wfile.write(payload)
            return
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            headers = {k: v for k, v in req.headers.items() if k.lower() not in ("connection", "keep-alive")}
            conn.request(req.command, req.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        req.send_response(resp.status)
        for key, value in resp.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                req.send_header(key, value)
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)


@contextmanager
def fault_proxy(upstream: str) -> Iterator[FaultInjectingEC2Proxy]:
    """A started proxy in front of `upstream`, closed at the end."""
    proxy = FaultInjectingEC2Proxy(upstream)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()
