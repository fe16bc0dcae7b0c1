"""The dashboard's door: every request for data needs the token (docs/dashboard.md, "Security model").

No cookie carries the token: a browser sends a cookie set by 127.0.0.1 to every server on 127.0.0.1,
whatever its port, so a job's web server reached through `skyhive forward`, or any local program
listening on loopback, would receive it. Instead the page keeps the token in its tab (the URL
`skyhive dashboard` prints carries it in the fragment, `#token=…`, which a browser never sends to any
server; `sessionStorage` keeps it, readable by this origin — scheme, host *and port* — only) and
sends it on every request in the `Authorization: Bearer …` header. A script may put it in the query
(`?token=…`). The page itself (`/`, `/static/…`) is the package's public code, holds no data, and is
served to anyone on loopback; every route that answers with data or acts — JSON, the live streams,
the downloads — is refused (403) without the token.

A download is a link the browser follows itself (no header can be added): the page asks for a
one-time ticket for that one path (`POST /api/ticket`, with the token), good for one request within
`TICKET_SECONDS`. `skyhive dashboard --open` gives the browser a one-time code (in a 0600 file, never
on its command line), which the page exchanges once for the token (`POST /api/session`).

A request whose Host header is not this server's loopback address is refused too (DNS rebinding), and
an action (POST) must carry the `X-Skyhive-Dashboard` header, which a page of another origin cannot
send without a CORS preflight that this server never grants. Every answer forbids framing and
foreign scripts. A websocket (there is none) is closed with 1008, answered 403 by the server.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs, unquote

__all__ = ["TokenGate", "new_token", "ACTION_HEADER", "ASGIApp", "TICKET_SECONDS", "CODE_SECONDS"]

ACTION_HEADER = "x-skyhive-dashboard"
#: Seconds a download ticket is good for (it is used at once: the page follows the link it made).
TICKET_SECONDS = 60.0
#: Seconds the `--open` code is good for (a browser that starts slowly still gets in).
CODE_SECONDS = 600.0
#: What anyone on loopback gets without the token: the page's own code, no data.
PUBLIC = ("/", "/static/")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def new_token() -> str:
    """A fresh random token (32 bytes from the OS, URL-safe)."""
    return secrets.token_urlsafe(32)


class _OneTime:
    """Secrets good for one use each, until they expire (tickets by path, the `--open` code)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, tuple[str, float]] = {}

    def issue(self, what: str, seconds: float) -> str:
        value = secrets.token_urlsafe(32)
        with self._lock:
            now = time.monotonic()
            self._items = {k: v for k, v in self._items.items() if v[1] > now}
            self._items[value] = (what, now + seconds)
        return value

    def take(self, value: str, what: str) -> bool:
        """True once for an unexpired `value` issued for `what` (used up then, whatever the answer)."""
        if not value:
            return False
        with self._lock:
            found = None
            for key in list(self._items):
                if hmac.compare_digest(key.encode(), value.encode()):
                    found = self._items.pop(key)
            return found is not None and found[0] == what and found[1] > time.monotonic()


class TokenGate:
    """ASGI middleware: the token (header or query) on every data route, the Host header, the action
    header on a POST, the one-time download tickets and the `--open` code."""

    def __init__(self, app: ASGIApp, *, token: str, port: Callable[[], int]) -> None:
        self.app = app
        self.token = token
        self.port = port
        self._once = _OneTime()
        self._on_code_used: Callable[[], None] | None = None

    def open_code(self, on_used: Callable[[], None] | None = None) -> str:
        """A code the page exchanges once, within `CODE_SECONDS`, for the token (`--open`); `on_used()`
        once it was."""
        self._on_code_used = on_used
        return self._once.issue("session", CODE_SECONDS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refuse = _refuse if scope["type"] == "http" else _close
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        port = self.port()
        path = scope.get("path", "")
        method = scope.get("method", "GET")
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if headers.get("host", "") not in (f"127.0.0.1:{port}", f"localhost:{port}"):
            await refuse(send, 403, "forbidden: this dashboard answers on 127.0.0.1 only")
            return
        bearer = headers.get("authorization", "")
        given = bearer[7:].strip() if bearer[:7].lower() == "bearer " else (query.get("token") or [""])[0]
        authorized = self._ok(given)
        public = scope["type"] == "http" and method in ("GET", "HEAD") and (path == PUBLIC[0] or path.startswith(PUBLIC[1]))
        if scope["type"] == "http" and method not in ("GET", "HEAD") and headers.get(ACTION_HEADER) != "1":
            await refuse(send, 403, f"forbidden: an action needs the {ACTION_HEADER} header (the dashboard's pages send it)")
            return
        if scope["type"] == "http" and path == "/api/session" and method == "POST":
            await self._session(receive, send)
            return
        if not authorized and method in ("GET", "HEAD") and scope["type"] == "http" and path.endswith("/download"):
            authorized = self._once.take((query.get("ticket") or [""])[0], path)
        if not (authorized or public):
            await refuse(send, 403, "forbidden: open the URL `skyhive dashboard` printed (it carries #token=...)")
            return
        if scope["type"] == "http" and path == "/api/ticket" and method == "POST":
            await self._ticket(receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _ok(self, given: str) -> bool:
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())

    async def _ticket(self, receive: Receive, send: Send) -> None:
        """A one-time ticket for one download path (the page follows a link with it: no header)."""
        body = await _json_body(receive)
        path = body.get("path") if isinstance(body, dict) else None
        if not isinstance(path, str) or not path.startswith("/api/") or not path.endswith("/download"):
            await _answer(send, 400, {"error": "a ticket is for a download path (/api/.../download)"})
            return
        # (for the path as the request will be routed: percent-escapes decoded, as in the ASGI scope)
        await _answer(send, 200, {"ticket": self._once.issue(unquote(path), TICKET_SECONDS), "seconds": TICKET_SECONDS})

    async def _session(self, receive: Receive, send: Send) -> None:
        """The `--open` code exchanged, once, for the token."""
        body = await _json_body(receive)
        code = body.get("code") if isinstance(body, dict) else None
        if not isinstance(code, str) or not self._once.take(code, "session"):
            await _answer(send, 403, {"error": "this link was used already or has expired: open the URL "
                                               "`skyhive dashboard` printed"})
            return
        if self._on_code_used is not None:
            self._on_code_used()
        await _answer(send, 200, {"token": self.token})


#: On every answer: no framing by another page (the buttons act), no scripts but ours, no sniffing.
_HEADERS = (
    (b"content-security-policy", b"default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                                 b"frame-ancestors 'none'; base-uri 'none'; form-action 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)


async def _json_body(receive: Receive) -> Any:
    data = b""
    while True:
        message = await receive()
        data += message.get("body", b"")
        if len(data) > 65536:
            return None
        if not message.get("more_body"):
            break
    try:
        return json.loads(data or b"{}")
    except ValueError:
        return None


async def _answer(send: Send, status: int, value: Any) -> None:
    body = json.dumps(value).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store"), *_HEADERS]})
    await send({"type": "http.response.body", "body": body})


async def _refuse(send: Send, status: int, text: str) -> None:
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                            *_HEADERS]})
    await send({"type": "http.response.body", "body": body})


async def _close(send: Send, status: int, text: str) -> None:
    """A websocket refused before it is accepted: the server answers the upgrade 403 (close code 1008:
    policy violation)."""
    await send({"type": "websocket.close", "code": 1008, "reason": text[:120]})
