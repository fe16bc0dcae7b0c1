"""The dashboard's door: every request needs the token (docs/dashboard.md, "Security model").

The token comes as `?token=…` in the URL `skyhive dashboard` printed; the first answer sets a cookie
(HttpOnly, SameSite=Strict, named after the port) that carries it from then on. Anything without it —
pages, JSON, static files, the live streams — is answered 403. A request whose Host header is not this
server's loopback address is refused too (DNS rebinding), and an action (POST) must carry the
`X-Skyhive-Dashboard` header, which a page of another origin cannot send without a CORS preflight that
this server never grants. Every answer forbids framing and foreign scripts.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

__all__ = ["TokenGate", "new_token", "COOKIE", "ACTION_HEADER", "ASGIApp"]

COOKIE = "skyhive_dashboard_{port}"
ACTION_HEADER = "x-skyhive-dashboard"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def new_token() -> str:
    """A fresh random token (32 bytes from the OS, URL-safe)."""
    return secrets.token_urlsafe(32)


class TokenGate:
    """ASGI middleware: the token (query or cookie), the Host header and, for actions, the header."""

    def __init__(self, app: ASGIApp, *, token: str, port: Callable[[], int]) -> None:
        self.app = app
        self.token = token
        self.port = port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        port = self.port()
        cookie_name = COOKIE.format(port=port)
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        by_query = self._ok((query.get("token") or [""])[0])
        by_cookie = self._ok(_cookies(headers.get("cookie", "")).get(cookie_name, ""))
        if headers.get("host", "") not in (f"127.0.0.1:{port}", f"localhost:{port}"):
            await _refuse(send, 403, "forbidden: this dashboard answers on 127.0.0.1 only")
            return
        if not (by_query or by_cookie):
            await _refuse(send, 403, "forbidden: open the URL `skyhive dashboard` printed (it carries ?token=...)")
            return
        if scope["type"] == "http" and scope["method"] not in ("GET", "HEAD") and headers.get(ACTION_HEADER) != "1":
            await _refuse(send, 403, f"forbidden: an action needs the {ACTION_HEADER} header (the dashboard's pages send it)")
            return
        extra = list(_HEADERS)
        if by_query and not by_cookie:
            extra.append((b"set-cookie", f"{cookie_name}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode("latin-1")))

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _ok(self, given: str) -> bool:
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())


#: On every answer: no framing by another page (the buttons act), no scripts but ours, no sniffing.
_HEADERS = (
    (b"content-security-policy", b"default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                                 b"frame-ancestors 'none'; base-uri 'none'; form-action 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)


def _cookies(header: str) -> dict[str, str]:
    out = {}
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name:
            out[name] = value
    return out


async def _refuse(send: Send, status: int, text: str) -> None:
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
