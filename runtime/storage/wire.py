"""The fewest Python steps for a plain-http GET of a whole object (the direct GETs of many small objects,
direct.py): one socket per thread, the request written in one `sendall`, the head read into a buffer the
thread keeps and split by hand, the body received straight into that buffer (`recv_into`, no copies,
no per-read Python objects): ~240 Python calls per object in all, signing included, where urllib3 and
http.client made it ~1,450 (profiled 2026-11-27; their header parser, pools and wrappers) for the same
work, most of a 1 MiB GET's Python CPU once the request is signed by hand (docs/storage.md "Speed").

It reads only the answers it can read whole and raises `WireError` (or an `OSError`) for any other, the
caller then making the request through botocore: the head must be HTTP/1.x, one status line and
`name: value` lines; a body must have one `Content-Length` and no `Transfer-Encoding`; the connection
is kept for the thread's next GET only when the server keeps it (HTTP/1.1 without `Connection: close`)
and the body came whole, with no byte after it — else closed, and the next GET opens a new one (moto,
the tests' and the bench's endpoint, closes every connection). A kept connection the server closed
meanwhile (its idle timeout) is retried once on a new one, when not a byte of an answer came on it.

Plain http only, and only where botocore's session sends it straight (no proxy for the endpoint): TLS,
proxies and their settings stay urllib3's (`Wire.for_session` returns None for them).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Wire", "Reply", "WireError", "BUFFER"]

#: Each thread's receive buffer; a body goes through it in turns (a 1 MiB object in 4). Small enough to
#: stay in the CPU's caches between the socket's copy into it, the checksum and the file's copy out of
#: it: buffers of 1 MiB + 64 KiB (a whole object per turn) in 16 threads cost 2.9-3.5 ms of client CPU per
#: 1 MiB object against moto, 256 KiB ones 1.5-2.1 ms (128-512 KiB alike; 64 KiB 1.9-2.2 ms: more turns).
BUFFER = 256 << 10
_HEAD_END = b"\r\n\r\n"


class WireError(Exception):
    """An answer this client does not read (the caller sends the request through botocore instead)."""


class _Conn:
    __slots__ = ("sock", "buf", "view")

    def __init__(self, sock: socket.socket, buf: bytearray, view: memoryview) -> None:
        self.sock, self.buf, self.view = sock, buf, view  # the thread's buffer, kept across its connections


class Reply:
    """One answer: `status`, `headers` (lower-case names; a repeated one's values joined by ", "), and,
    for a 200, `length` (its Content-Length) and `chunks()`. `release()` ends it: the connection is kept
    only when the body came whole and the server keeps the connection."""

    __slots__ = ("status", "headers", "length", "_wire", "_conn", "_pos", "_filled", "_keep", "_whole")

    def __init__(self, wire: Wire, conn: _Conn, status: int, headers: dict[str, str], pos: int, filled: int,
                 keep: bool) -> None:
        self._wire, self._conn, self.status, self.headers = wire, conn, status, headers
        self._pos, self._filled, self._keep, self._whole = pos, filled, keep, False
        self.length = -1

    def chunks(self) -> Iterator[memoryview]:
        """The body, `length` bytes, as views of the connection's buffer (each valid until the next is
        asked for). Raises `WireError` when the connection ends before the last byte."""
        if self.length < 0:
            raise WireError("no Content-Length to read the body by")
        conn = self._conn
        view, recv, size = conn.view, conn.sock.recv_into, len(conn.buf)
        pos, filled, left = self._pos, self._filled, self.length
        if filled - pos > left:
            self._keep = False  # bytes after the body: nothing more is read on this connection
        while left:
            if pos == size:
                pos = filled = 0
            want = min(size, pos + left)
            while filled < want:
                got = recv(view[filled:want])
                if not got:
                    raise WireError(f"the connection closed {left - (filled - pos)} bytes before the body's end")
                filled += got
            end = min(filled, pos + left)
            yield view[pos:end]
            left -= end - pos
            pos = end
        self._whole = True

    def release(self) -> None:
        self._wire._done(self._conn, self._keep and self._whole)


class Wire:
    """GETs to one `host:port` over plain http, a connection per thread (kept while the server keeps it).
    `connect_timeout`/`read_timeout` and `socket_options` as botocore's session has them."""

    def __init__(self, netloc: str, *, connect_timeout: float | None = 60, read_timeout: float | None = 60,
                 socket_options: list[tuple[int, int, int]] | None = None) -> None:
        parts = urlsplit(f"http://{netloc}")
        if not parts.hostname:
            raise ValueError(f"no host in {netloc!r}")
        self.netloc = netloc
        self._address = (parts.hostname, parts.port or 80)
        self._connect_timeout, self._read_timeout = connect_timeout, read_timeout
        self._options = list(socket_options or ())
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: set[_Conn] = set()

    @classmethod
    def for_session(cls, session: Any, url: str) -> Wire | None:
        """A `Wire` that sends `url`'s requests as botocore's `URLLib3Session` `session` would (its
        timeouts, socket options), or None where it would not send them straight over plain http (https,
        a proxy, a session of another kind)."""
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or "@" in parts.netloc:
            return None
        try:
            proxied = session._proxy_config.proxy_url_for(url)
            timeout = session._timeout
            options = session._socket_options
        except AttributeError:
            return None
        if proxied:
            return None
        if isinstance(timeout, (int, float)):
            connect = read = timeout
        elif isinstance(timeout, tuple):
            connect, read = timeout
        else:  # urllib3's Timeout (botocore makes one from the client's connect and read timeouts)
            connect, read = getattr(timeout, "connect_timeout", None), getattr(timeout, "read_timeout", None)
            if not isinstance(connect, (int, float)) or not isinstance(read, (int, float)):
                return None
        return cls(parts.netloc, connect_timeout=connect, read_timeout=read, socket_options=options)

    def get(self, target: str, headers: dict[str, str]) -> Reply:
        """Send `GET target` (a path, percent-encoded as it is to be sent) with `headers`, read the answer's
        head. Raises `WireError` or `OSError` when no answer could be read."""
        lines = [f"GET {target} HTTP/1.1", f"Host: {self.netloc}", "Accept-Encoding: identity"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            reply = self._send(conn, request, kept=True)
            if reply is not None:
                return reply
        reply = self._send(self._connect(), request, kept=False)
        assert reply is not None
        return reply

    def close(self) -> None:
        """Close every connection this wire holds (each thread's)."""
        with self._lock:
            conns, self._open = list(self._open), set()
        for conn in conns:
            conn.sock.close()

    def _connect(self) -> _Conn:
        sock = socket.create_connection(self._address, timeout=self._connect_timeout)
        try:
            for level, name, value in self._options:
                sock.setsockopt(level, name, value)
            sock.settimeout(self._read_timeout)
        except OSError:
            sock.close()
            raise
        local = self._local
        buf = getattr(local, "buf", None)
        if buf is None:
            buf = local.buf = bytearray(BUFFER)
            local.view = memoryview(buf)
        conn = _Conn(sock, buf, local.view)
        with self._lock:
            self._open.add(conn)
        self._local.conn = conn
        return conn

    def _done(self, conn: _Conn, keep: bool) -> None:
        if keep:
            return
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            self._open.discard(conn)
        conn.sock.close()

    def _send(self, conn: _Conn, request: bytes, *, kept: bool) -> Reply | None:
        """The answer's head on `conn`; None when `kept` (a connection kept from an earlier answer) and it
        failed before a byte of an answer came (the server closed it meanwhile: the caller retries once)."""
        sock, view, buf = conn.sock, conn.view, conn.buf
        filled = 0
        try:
            sock.sendall(request)
            while (end := buf.find(_HEAD_END, 0, filled)) < 0:
                if filled == len(buf):
                    raise WireError("an answer's head larger than the buffer")
                got = sock.recv_into(view[filled:])
                if not got:
                    raise WireError("the connection closed before an answer")
                filled += got
        except (OSError, WireError):
            self._done(conn, False)
            if kept and not filled:
                return None
            raise
        lines = bytes(view[:end]).decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if version not in ("HTTP/1.1", "HTTP/1.0") or not code.isdigit() or rest[3:4] not in ("", " "):
            self._done(conn, False)
            raise WireError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name[0] in " \t" or name[-1] in " \t":
                self._done(conn, False)
                raise WireError(f"not a header line: {line[:80]!r}")
            name = name.lower()
            value = value.strip(" \t")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        reply = Reply(self, conn, int(code), headers, end + 4, filled, keep)
        length = headers.get("content-length")
        if "transfer-encoding" not in headers and length is not None and length.isdigit():
            reply.length = int(length)
        return reply
