"""A threaded HTTP server on 127.0.0.1 and a free port, for the suite's fake services (each a fake,
named as one): `endpoint`, and `with` starts it in a daemon thread and shuts it down."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = ["LoopbackHTTPServer", "FakeService"]


class LoopbackHTTPServer:
    """Subclasses give `_handler()` (the request handler class) and call `super().__init__(name)`."""

    def __init__(self, name: str) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


class FakeService(LoopbackHTTPServer):
    """A fake service over HTTP on loopback, for programs that are not Python in this process (a node's shell
    script, curl): subclasses give `respond(method, path, headers, body)` -> (status, payload, extra headers),
    called one request at a time; a payload of None is sent empty, a `str` as text, anything else as JSON."""

    def __init__(self, name: str) -> None:
        self._lock = threading.Lock()
        super().__init__(name)

    def respond(self, method: str, path: str, headers: Any, body: bytes | None) -> tuple[int, Any, dict[str, str]]:
        raise NotImplementedError

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet: each fake keeps its own record of requests
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with service._lock:
                    status, payload, extra = service.respond(self.command, self.path, self.headers, body)
                if payload is None:
                    data, kind = b"", "application/json"
                elif isinstance(payload, str):
                    data, kind = payload.encode(), "text/plain; charset=utf-8"
                else:
                    data, kind = json.dumps(payload).encode(), "application/json"
                self.send_response(status)
                for key, value in extra.items():
                    self.send_header(key, value)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = _any  # noqa: N815

        return Handler
