"""A FAKE endpoint (`fake_http.FakeEndpoint`) served over real HTTP on loopback, for a program that is not
Python in this process (a node's shell script run by a test: curl talks to it).

`serve(fake, host)` answers each request with `fake.answer(method, "https://<host><path>", headers, body)`,
so the fake sees the host name it expects (``169.254.169.254``, ``management.azure.com``); a `str` answer is
sent as text (IMDS's ``format=text``), anything else as JSON. The server binds 127.0.0.1 on a free port and
is shut down, its thread joined, when the `with` block ends.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def serve(fake: Any, host: str) -> Iterator[str]:
    """`fake` on http://127.0.0.1:PORT (yielded), answering as `host`."""

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            status, payload = fake.answer(self.command, f"https://{host}{self.path}", self.headers, body)
            if payload is None:
                data, kind = b"", "application/json"
            elif isinstance(payload, str):
                data, kind = payload.encode(), "text/plain; charset=utf-8"
            else:
                data, kind = json.dumps(payload).encode(), "application/json"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = _any

        def log_message(self, *args: Any) -> None:  # quiet: the fake keeps its own record of requests
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name=f"fake-{host}", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)
