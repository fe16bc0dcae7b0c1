"""Whole-object GETs with less per-request work than botocore's client: the request is signed here (AWS
Signature V4, about 40 Python calls) and sent over plain http by `wire.Wire` (~200 calls per object: a
socket per thread, the body received into a buffer), or, where the endpoint is https or reached through a
proxy, on the boto3 client's own HTTP session (its connection pool, proxies, TLS settings and timeouts),
skipping botocore's per-request machinery either way (parameter validation, serialisation, ~30 events,
response parsing: ~4,400 calls per object, docs/storage.md "Speed").

It is a fast path only, never the word on an error: `DirectGet.learn` copies what botocore itself sent
for one GET (the URL, so addressing style, endpoint and region redirects are botocore's; the signing
region; whether it asked for the object's checksum), and `fetch` returns False — the caller then makes
the same GET through botocore, with its retries and error codes — whenever the answer is anything but a
whole 200: another status, a connection or read error, a body shorter or longer than its Content-Length,
or a checksum that does not match (CRC32, SHA-1 and SHA-256 are checked here; another algorithm goes to
botocore). So a download through it fails, or is whole, exactly as one through botocore.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import logging
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

from .s3 import Access
from .wire import Wire

__all__ = ["DirectGet", "DirectPut", "sigv4_headers", "EMPTY_SHA256"]

log = logging.getLogger("skyhive.storage")

#: The SHA-256 of an empty payload (a GET's body), hex: S3's `x-amz-content-sha256` for it.
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_ALGORITHM = "AWS4-HMAC-SHA256"


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


@functools.lru_cache(maxsize=16)
def _signing_key(secret_key: str, day: str, region: str) -> bytes:
    """SigV4's key for a day and region (4 HMACs): the same for every request of a day, so made once."""
    return _hmac(_hmac(_hmac(_hmac(f"AWS4{secret_key}".encode(), day), region), "s3"), "aws4_request")


def sigv4_headers(method: str, url: str, *, region: str, access_key: str, secret_key: str,
                  token: str | None = None, extra: dict[str, str] | None = None,
                  payload_hash: str = EMPTY_SHA256, now: float | None = None) -> dict[str, str]:
    """The headers that sign an S3 request with AWS Signature Version 4 (docs.aws.amazon.com/AmazonS3/latest/
    API/sig-v4-header-based-auth.html): `x-amz-date`, `x-amz-content-sha256` (`payload_hash`: the body's
    SHA-256 in hex, or "UNSIGNED-PAYLOAD"; default an empty body's), `Authorization`, and
    `x-amz-security-token` with a session token. `url` is sent as it is: its path already percent-encoded
    once (S3 does not normalise it, so neither does the signature); its query, if any, already in
    canonical order. `extra` headers (lower-case names) are signed too."""
    parts = urlsplit(url)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    day = stamp[:8]
    signed = {"host": parts.netloc, "x-amz-content-sha256": payload_hash, "x-amz-date": stamp, **(extra or {})}
    if token:
        signed["x-amz-security-token"] = token
    names = sorted(signed)
    header_list = ";".join(names)
    canonical = "\n".join([method, parts.path or "/", parts.query, *(f"{n}:{signed[n].strip()}" for n in names), "",
                           header_list, payload_hash])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = f"{_ALGORITHM}\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    signature = hmac.new(_signing_key(secret_key, day, region), to_sign.encode(), hashlib.sha256).hexdigest()
    del signed["host"]  # the HTTP layer sends it from the URL
    signed["Authorization"] = f"{_ALGORITHM} Credential={access_key}/{scope}, SignedHeaders={header_list}, " \
                              f"Signature={signature}"
    return signed


class _Request:
    """What botocore's `URLLib3Session.send` reads of a request."""

    __slots__ = ("url", "method", "body", "headers", "stream_output", "context")

    def __init__(self, url: str, headers: dict[str, str], method: str = "GET", body: bytes | None = None) -> None:
        self.url, self.method, self.body, self.headers = url, method, body, headers
        self.stream_output, self.context = body is None, {}


class _Crc32:
    """A running CRC32 with hashlib's `update`/`digest` (S3's `x-amz-checksum-crc32`: 4 bytes, big-endian)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def update(self, data: bytes) -> None:
        self.value = zlib.crc32(data, self.value)

    def digest(self) -> bytes:
        return self.value.to_bytes(4, "big")


#: The checksums checked here: response header -> a running digest's factory (value: base64 of its digest).
_CHECKSUMS: dict[str, Callable[[], Any]] = {"x-amz-checksum-crc32": _Crc32, "x-amz-checksum-sha1": hashlib.sha1,
                                            "x-amz-checksum-sha256": hashlib.sha256}
_OTHER_CHECKSUMS = ("x-amz-checksum-crc32c", "x-amz-checksum-crc64nvme")
#: The headers botocore sends on a plain GetObject that this path knows how to reproduce (the others it
#: adds itself: the signature, the date, the payload hash, the token; user-agent and the like are not signed).
_KNOWN = {"x-amz-date", "x-amz-content-sha256", "x-amz-security-token", "authorization", "x-amz-checksum-mode",
          "user-agent", "amz-sdk-invocation-id", "amz-sdk-request", "host", "accept-encoding", "content-length",
          "expect", "x-amz-user-agent"}


def _watch(s3: Any, op: str, acc: Access, bucket: str, key: str, run: Callable[[], None],
           known: set[str]) -> tuple[str, str, dict[str, str]] | None:
    """Run `run` (botocore's `op` on `bucket`/`key`) watching the request botocore sends; return (the URL
    without the key, the signing region, the headers, lower-case) when this module can send the same for
    another key: Signature V4 for S3 with `acc`'s keys, no query, only headers in `known`. Else None."""
    seen: list[tuple[str, dict[str, str]]] = []

    def watch(request: Any, **_: Any) -> None:
        seen.append((request.url, {k.lower(): (v.decode() if isinstance(v, bytes) else str(v))
                                   for k, v in request.headers.items()}))

    event, handler_id = f"before-send.s3.{op}", f"skyhive-direct-{id(seen)}"
    s3.meta.events.register(event, watch, unique_id=handler_id)
    try:
        run()
    finally:
        s3.meta.events.unregister(event, unique_id=handler_id)
    if not seen or not acc.access_key or not acc.secret_key or not hasattr(s3, "_endpoint"):
        return None
    url, headers = seen[-1]  # the attempt that succeeded (after any redirect or retry)
    quoted = quote(key, safe="/~")
    parts = urlsplit(url)
    auth = headers.get("authorization", "")
    if (parts.query or not parts.path.endswith("/" + quoted) or not auth.startswith(_ALGORITHM + " ")
            or set(headers) - known or bool(headers.get("x-amz-security-token")) != bool(acc.token)):
        log.debug("direct %s not used for s3://%s: botocore's request is not one this module reproduces (%s, %s)",
                  op, bucket, url, sorted(set(headers) - known))
        return None
    try:
        scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/")
        region, service = scope[2], scope[3]
    except IndexError:
        return None
    if service != "s3" or scope[0] != acc.access_key:
        return None
    return url[: len(url) - len(quoted)], region, headers


class _Urllib3Reply:
    """A urllib3 response (botocore's session: https, proxies) read as a `wire.Reply` is."""

    __slots__ = ("status", "headers", "length", "_raw", "_whole")

    def __init__(self, response: Any) -> None:
        self.status, self.headers, self._raw, self._whole = response.status_code, response.headers, response.raw, False
        length = response.headers.get("content-length")
        self.length = int(length) if length is not None and length.isdigit() else -1

    def chunks(self) -> Any:
        read = self._raw.read
        while chunk := read(1 << 20):
            yield chunk
        self._whole = True

    def release(self) -> None:
        if not self._whole:  # a connection with an unread or doubtful body is never reused
            self._raw.close()
        self._raw.release_conn()


class DirectGet:
    """GETs of whole objects of one bucket, signed here and sent on plain http by `wire.Wire` (a connection
    per thread, reused while the server keeps it), else (https, a proxy) on `s3`'s HTTP session. Made by
    `learn` from a GET botocore made; `fetch` does one more; `close` closes the wire's connections.
    Thread-safe (botocore's session is, the wire keeps a connection per thread; this holds no state that
    changes but `disabled` and the count `direct`)."""

    def __init__(self, s3: Any, acc: Access, base: str, region: str, checksum_mode: bool) -> None:
        self._session = s3._endpoint.http_session
        self._acc, self._base, self._region, self._checksum_mode = acc, base, region, checksum_mode
        self._wire = Wire.for_session(self._session, base)
        self._path = urlsplit(base).path
        self.disabled = False
        self._count = threading.Lock()
        self.direct = 0  # GETs answered here (the rest went through botocore)

    @classmethod
    def learn(cls, s3: Any, acc: Access, bucket: str, key: str, get: Callable[[], None]) -> DirectGet | None:
        """Run `get` (a botocore GetObject of `bucket`/`key`) watching what botocore sends; return a
        `DirectGet` that sends the same for other keys, or None where this path cannot reproduce it (not
        Signature V4, headers it does not know, no keys in `acc`, a client without the session it uses)."""
        seen = _watch(s3, "GetObject", acc, bucket, key, get, _KNOWN)
        if seen is None:
            return None
        base, region, headers = seen
        return cls(s3, acc, base, region, headers.get("x-amz-checksum-mode", "").upper() == "ENABLED")

    def close(self) -> None:
        """Close the connections the wire keeps (botocore's session keeps its own)."""
        if self._wire is not None:
            self._wire.close()

    def fetch(self, key: str, write: Callable[[Any], object], progress: Callable[[int], None] | None = None) -> bool:
        """GET `key`, each chunk of its body (bytes or a memoryview, valid during the call) to `write`. True
        when the whole object came (status 200, every byte of its Content-Length, its checksum matching);
        False otherwise (what `write` got then is to be thrown away, what `progress` was told is taken
        back, and the GET made again through botocore, which names the error). After a status other than
        200, or a 200 this path cannot read whole (no Content-Length), every later `fetch` returns False at
        once (`disabled`): botocore handles what follows."""
        if self.disabled:
            return False
        quoted = quote(key, safe="/~")
        url = self._base + quoted
        acc = self._acc
        headers = sigv4_headers("GET", url, region=self._region, access_key=acc.access_key or "",
                                secret_key=acc.secret_key or "", token=acc.token,
                                extra={"x-amz-checksum-mode": "ENABLED"} if self._checksum_mode else None)
        count = 0
        whole = False
        reply: Any = None
        try:
            if self._wire is not None:
                reply = self._wire.get(self._path + quoted, headers)
            else:
                reply = _Urllib3Reply(self._session.send(_Request(url, headers)))
            if reply.status != 200 or reply.length < 0:
                self.disabled = True
                log.debug("direct GET of %s: HTTP %s, Content-Length %s; botocore takes over", url, reply.status,
                          reply.headers.get("content-length"))
                return False
            check = self._checksum(reply.headers)
            if check is False:
                return False
            update = check[2].update if check is not None else None
            for chunk in reply.chunks():
                count += len(chunk)
                write(chunk)
                if update is not None:
                    update(chunk)
                if progress is not None:
                    progress(len(chunk))
            if count != reply.length:
                log.debug("direct GET of %s: %d bytes of %d; botocore takes over", url, count, reply.length)
                return False
            if check is not None and base64.b64encode(check[2].digest()).decode() != check[1]:
                log.warning("direct GET of %s: %s does not match the body; botocore GETs it again", url, check[0])
                return False
            whole = True
            with self._count:
                self.direct += 1
            return True
        except Exception as exc:  # noqa: BLE001 - any failure: botocore makes the same GET and names its error
            log.debug("direct GET of %s failed (%s: %s); botocore takes over", url, type(exc).__name__, exc)
            return False
        finally:
            if not whole and progress is not None and count:
                progress(-count)
            if reply is not None:
                reply.release()

    def _checksum(self, got: Any) -> tuple[str, str, Any] | None | bool:
        """The body's checksum to check (header name, value, a running digest), None when there is none to
        check, False when there is one this path does not compute (botocore then GETs the object)."""
        if not self._checksum_mode or got.get("x-amz-checksum-type", "FULL_OBJECT").upper() != "FULL_OBJECT":
            return None
        if any(got.get(name) for name in _OTHER_CHECKSUMS):
            return False
        for name, make in _CHECKSUMS.items():
            value = got.get(name)
            if value and "-" not in value:  # "<base64>-<parts>": a composite checksum, not the body's
                return (name, value, make())
        return None


#: What botocore sends on a PutObject that `DirectPut` reproduces: the GET's, its CRC32 (in a header or, over
#: https, in an aws-chunked trailer: sent here in a header, which S3 takes as well), the body's length.
_KNOWN_PUT = _KNOWN | {"x-amz-checksum-crc32", "x-amz-sdk-checksum-algorithm", "transfer-encoding", "content-encoding",
                       "x-amz-trailer", "x-amz-decoded-content-length"}


class DirectPut:
    """PUTs of whole small objects (one request each) to one bucket, signed here and sent on `s3`'s HTTP
    session, as botocore sent the one `learn` watched: the body's SHA-256 signed where botocore signed it
    (plain http) else UNSIGNED-PAYLOAD, and its CRC32 in `x-amz-checksum-crc32` where botocore sent one
    (S3 checks it and refuses the object if it does not match). `send` returns False for anything but a
    200 — the caller then PUTs through botocore, which names the error; an object exists only once a PUT of
    it succeeded, either way. Thread-safe as `DirectGet`."""

    def __init__(self, s3: Any, acc: Access, base: str, region: str, sign_payload: bool, crc32: bool) -> None:
        self._session = s3._endpoint.http_session
        self._acc, self._base, self._region = acc, base, region
        self._sign_payload, self._crc32 = sign_payload, crc32
        self.disabled = False
        self._count = threading.Lock()
        self.direct = 0  # PUTs made here (the rest went through botocore)

    @classmethod
    def learn(cls, s3: Any, acc: Access, bucket: str, key: str, put: Callable[[], None]) -> DirectPut | None:
        """Run `put` (a botocore PutObject of `bucket`/`key`) watching what botocore sends; return a
        `DirectPut` that sends the same for other keys, or None where this module cannot (see `_watch`; a
        checksum other than CRC32)."""
        seen = _watch(s3, "PutObject", acc, bucket, key, put, _KNOWN_PUT)
        if seen is None:
            return None
        base, region, headers = seen
        algorithm = headers.get("x-amz-sdk-checksum-algorithm", "").upper()
        if algorithm not in ("", "CRC32"):
            return None
        payload = headers.get("x-amz-content-sha256", "")
        return cls(s3, acc, base, region, len(payload) == 64 and all(c in "0123456789abcdef" for c in payload),
                   algorithm == "CRC32")

    def send(self, key: str, body: bytes) -> bool:
        """PUT `body` as `key`; True when the endpoint answered 200, else False (after a status other than
        200, every later `send` returns False at once: botocore handles what follows)."""
        if self.disabled:
            return False
        url = self._base + quote(key, safe="/~")
        acc = self._acc
        extra = ({"x-amz-checksum-crc32": base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode(),
                  "x-amz-sdk-checksum-algorithm": "CRC32"} if self._crc32 else None)
        payload = hashlib.sha256(body).hexdigest() if self._sign_payload else "UNSIGNED-PAYLOAD"
        headers = sigv4_headers("PUT", url, region=self._region, access_key=acc.access_key or "",
                                secret_key=acc.secret_key or "", token=acc.token, extra=extra, payload_hash=payload)
        headers["Content-Length"] = str(len(body))
        try:
            response = self._session.send(_Request(url, headers, "PUT", body))
        except Exception as exc:  # noqa: BLE001 - botocore makes the same PUT and names its error
            log.debug("direct PUT of %s failed (%s: %s); botocore takes over", url, type(exc).__name__, exc)
            return False
        try:
            if response.status_code != 200:
                self.disabled = True
                log.debug("direct PUT of %s: HTTP %s; botocore takes over", url, response.status_code)
                return False
        finally:
            response.raw.release_conn()
        with self._count:
            self.direct += 1
        return True
