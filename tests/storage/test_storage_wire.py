"""The direct GETs' plain-http client (runtime/storage/wire.py) against an endpoint that keeps connections
open as S3 does: moto_server closes every connection, so these tests put `KeepAliveRelay` in front of it — a
relay on 127.0.0.1 passing each request to moto and its answer back, without moto's `Connection: close`,
that can also end an answer's body half-way or close a kept connection without a word (a server's idle
timeout). The objects, signatures and errors are moto's."""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import unquote

from skyhive.runtime.storage import direct, s3 as s3mod, transfer
from skyhive.runtime.storage.spec import Bucket
from tests.infra.moto_s3 import s3  # noqa: F401 - the fixture


class KeepAliveRelay:
    """HTTP/1.1 on 127.0.0.1 in front of moto_server (port `target`), keeping its clients' connections:
    `connections` accepted, `gets` (the keys of the GETs answered or cut, in order); `cut`: keys whose next
    answer ends half-way through its body (the connection then closed); `garble`: keys whose next answer
    has a head line that is no header; `chunked`: keys whose answers come in chunked transfer encoding
    (no Content-Length, as HTTP/1.1 allows); `drop_every`: a client's connection is closed, unannounced,
    after that many answers."""

    def __init__(self, target: int, *, drop_every: int = 0) -> None:
        self.target, self.drop_every = target, drop_every
        self.cut: set[str] = set()
        self.garble: set[str] = set()
        self.chunked: set[str] = set()
        self.connections = 0
        self.gets: list[str] = []
        self._lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(down,), daemon=True).start()

    def _serve(self, down: socket.socket) -> None:
        pending = b""
        served = 0
        try:
            while True:
                while b"\r\n\r\n" not in pending:
                    data = down.recv(1 << 16)
                    if not data:
                        return
                    pending += data
                head, _, pending = pending.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(pending) < length:
                    data = down.recv(1 << 16)
                    if not data:
                        return
                    pending += data
                body, pending = pending[:length], pending[length:]
                with socket.create_connection(("127.0.0.1", self.target)) as up:
                    up.sendall(head + b"\r\n\r\n" + body)
                    answer = b""
                    while data := up.recv(1 << 16):  # moto closes the connection after its answer
                        answer += data
                answer_head, _, answer_body = answer.partition(b"\r\n\r\n")
                kept = [line for line in answer_head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
                method, target = head.split(b" ", 2)[:2]
                key = unquote(target.decode().split("?", 1)[0]).split("/", 2)[-1]  # path style: /bucket/key
                cut = False
                if method == b"GET" and "?" not in target.decode():
                    with self._lock:
                        self.gets.append(key)
                        cut, garble = key in self.cut, key in self.garble
                        self.cut.discard(key)
                        self.garble.discard(key)
                        chunked = key in self.chunked
                    if garble:
                        kept.insert(1, b"this line is no header")
                    if chunked:
                        kept = [line for line in kept if not line.lower().startswith(b"content-length:")]
                        kept.append(b"Transfer-Encoding: chunked")
                        answer_body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(answer_body), answer_body)
                out = b"\r\n".join(kept) + b"\r\n\r\n"
                if cut:
                    down.sendall(out + answer_body[: len(answer_body) // 2])
                    return
                down.sendall(out + answer_body)
                served += 1
                if self.drop_every and served % self.drop_every == 0:
                    return
        except OSError:
            pass
        finally:
            down.close()


def test_direct_gets_reuse_the_connection_the_server_keeps_and_botocore_fetches_what_the_wire_does_not_read_whole(
        s3, tmp_path, monkeypatch):
    plain = s3.client()
    plain.create_bucket(Bucket="wire-bucket")
    bodies = {f"run/o{i:02d}.bin": os.urandom(300_000 + 1000 * i) for i in range(12)}
    for key, body in bodies.items():
        plain.put_object(Bucket="wire-bucket", Key=key, Body=body, ChecksumAlgorithm="CRC32")
    relay = KeepAliveRelay(s3.port, drop_every=3)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", relay.endpoint)
    monkeypatch.setattr(transfer, "SMALL_CONCURRENCY", 2)  # each thread makes several GETs: reuse shows
    made: list[direct.DirectGet] = []
    real_init = direct.DirectGet.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(direct.DirectGet, "__init__", init)
    acc = s3mod.access(Bucket("wire-bucket"))
    s3c = s3mod.client(acc)

    def fetched(target) -> dict[str, bytes]:
        return {f"run/{p.name}": p.read_bytes() for p in target.iterdir()}

    try:
        # all but the first (botocore's, watched) by a direct GET on the wire, its CRC32 checked; a thread's
        # connection kept between its GETs (fewer connections than GETs), and one the relay closed
        # unannounced after every third answer is opened anew without losing the GET to botocore
        target = tmp_path / "one"
        target.mkdir()
        transfer.download_prefix(s3c, "wire-bucket", "run", str(target), access=acc)
        assert fetched(target) == bodies
        assert made[-1]._wire is not None and made[-1].direct == len(bodies) - 1 and not made[-1].disabled
        assert sorted(relay.gets) == sorted(bodies)  # one GET each: none made twice
        assert relay.connections < len(bodies)
        assert made[-1]._wire._open == set()  # every connection closed at the end

        # a body cut half-way (the connection closed before its Content-Length): the bytes thrown away, the
        # object fetched again through botocore, whole; no partial file left
        relay.drop_every = 0
        cut = "run/o07.bin"
        relay.cut = {cut}
        relay.gets.clear()
        target = tmp_path / "two"
        target.mkdir()
        transfer.download_prefix(s3c, "wire-bucket", "run", str(target), access=acc)
        assert fetched(target) == bodies
        assert made[-1].direct == len(bodies) - 2 and not made[-1].disabled
        assert relay.gets.count(cut) == 2 and not relay.cut
        assert not any(transfer.TEMP_MARK in p.name for p in target.iterdir())

        # a head the wire does not read (a line that is no header): that object through botocore, the
        # others still direct
        garbled = "run/o03.bin"
        relay.garble = {garbled}
        relay.gets.clear()
        target = tmp_path / "three"
        target.mkdir()
        transfer.download_prefix(s3c, "wire-bucket", "run", str(target), access=acc)
        assert fetched(target) == bodies
        assert made[-1].direct == len(bodies) - 2 and not made[-1].disabled and relay.gets.count(garbled) == 2

        # a body without a Content-Length (chunked): botocore reads it, and every object after it
        relay.chunked = set(bodies)
        target = tmp_path / "four"
        target.mkdir()
        transfer.download_prefix(s3c, "wire-bucket", "run", str(target), access=acc)
        assert fetched(target) == bodies
        assert made[-1].disabled and made[-1].direct == 0
        assert not any(transfer.TEMP_MARK in p.name for p in target.iterdir())
    finally:
        relay.close()
