"""FAKE cloud endpoints under `requests`: a transport adapter that answers a cloud's HTTPS calls in process.

`install_fakes(monkeypatch, *fakes)` makes every `requests.Session` (libcloud's included: it sends through
requests too) hand a request for a fake's host to that fake, and refuse any other host with a
`ConnectionError`, so nothing leaves the process even if a call was missed. A fake is an object with
`hosts` (the names it answers) and `answer(method, url, headers, body) -> (status, json-able body)`.
"""

from __future__ import annotations

import json
from typing import Any, Protocol
from urllib.parse import urlparse

import requests
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict


class FakeEndpoint(Protocol):
    hosts: tuple[str, ...]

    def answer(self, method: str, url: str, headers: Any, body: bytes | None) -> tuple[int, Any]: ...


class FakeAdapter(BaseAdapter):
    """FAKE transport: answers from `FakeEndpoint`s, refuses every other host."""

    def __init__(self, fakes: tuple[FakeEndpoint, ...]) -> None:
        super().__init__()
        self.by_host = {host: fake for fake in fakes for host in fake.hosts}

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        host = urlparse(request.url).hostname or ""
        fake = self.by_host.get(host)
        if fake is None:
            raise requests.ConnectionError(f"FAKE transport: no fake answers {host!r} (no real network in tests)")
        body = request.body.encode() if isinstance(request.body, str) else request.body
        status, payload = fake.answer(request.method or "GET", request.url or "", request.headers, body)
        response = requests.Response()
        response.status_code = status
        response._content = b"" if payload is None else json.dumps(payload).encode()
        response.headers = CaseInsensitiveDict({"content-type": "application/json"})
        response.url = request.url or ""
        response.request = request
        response.reason = "OK" if status < 400 else "Error"
        response.encoding = "utf-8"
        return response

    def close(self) -> None:
        pass


def install_fakes(monkeypatch: Any, *fakes: FakeEndpoint) -> FakeAdapter:
    adapter = FakeAdapter(fakes)
    monkeypatch.setattr(requests.Session, "get_adapter", lambda self, url: adapter)
    return adapter


def save_state(path: Any, state: dict[str, Any]) -> None:
    """A fake's account (`state`, picklable) to `path`, replaced whole: a test hands it from a process it kills
    to the next (`load_state`)."""
    import pickle
    from pathlib import Path

    tmp = Path(f"{path}.tmp")
    tmp.write_bytes(pickle.dumps(state))
    tmp.replace(path)


def load_state(path: Any) -> dict[str, Any]:
    """What `save_state` wrote."""
    import pickle
    from pathlib import Path

    state: dict[str, Any] = pickle.loads(Path(path).read_bytes())
    return state

