"""A FAKE endpoint (`fake_http.FakeEndpoint`) served over real HTTP on loopback, for a program that is not
Python in this process (a node's shell script run by a test: curl talks to it).

`serve(fake, host)` answers each request with `fake.answer(method, "https://<host><path>", headers, body)`,
so the fake sees the host name it expects (``169.254.169.254``, ``management.azure.com``); a `str` answer is
sent as text (IMDS's ``format=text``), anything else as JSON. The server binds 127.0.0.1 on a free port and
is shut down, its thread joined, when the `with` block ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.infra.loopback_http import FakeService


class _Serving(FakeService):
    def __init__(self, fake: Any, host: str) -> None:
        self.fake, self.host = fake, host
        super().__init__(f"fake-{host}")

    def respond(self, method: str, path: str, headers: Any, body: bytes | None) -> tuple[int, Any, dict[str, str]]:
        status, payload = self.fake.answer(method, f"https://{self.host}{path}", headers, body)
        return status, payload, {}


@contextmanager
def serve(fake: Any, host: str) -> Iterator[str]:
    """`fake` on http://127.0.0.1:PORT (yielded), answering as `host`."""
    with _Serving(fake, host) as server:
        yield server.endpoint
