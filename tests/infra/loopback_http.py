"""A threaded HTTP server on 127.0.0.1 and a free port, for the suite's fake services (each a fake,
named as one): `endpoint`, and `with` starts it in a daemon thread and shuts it down."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

__all__ = ["LoopbackHTTPServer"]


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
