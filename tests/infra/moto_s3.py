"""moto as the S3 endpoint for tests: a `moto_server` process on 127.0.0.1 (or another address the test
created, e.g. the SSH tests' bridge), never any other address. The test's AWS environment is its own:
fixed keys, its own (empty) ~/.aws files, the instance-metadata lookup off (it would go to 169.254.169.254).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = ["S3Server", "s3", "isolated_aws_env", "start_server"]


def isolated_aws_env(monkeypatch: pytest.MonkeyPatch, home: Path, *, keys: bool = True) -> None:
    """This test's AWS settings only: no machine-wide files, no metadata service."""
    for var in list(os.environ):
        if var.startswith("AWS_"):
            monkeypatch.delenv(var)
    (home / "aws-config").write_text("")
    (home / "aws-credentials").write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(home / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(home / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    if keys:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class S3Server:
    """A running moto_server: `endpoint`, `client()` (boto3), `stop()` (cuts transfers), `start()` again."""

    host: str
    port: int
    proc: Any = field(default=None, repr=False)
    env: dict[str, str] = field(default_factory=dict)  # for moto_server (e.g. IAM auth enforced)

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def start(self) -> None:
        self.proc = start_server(self.host, self.port, self.env)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def keys(self, bucket: str) -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sorted(o["Key"] for p in pages for o in p.get("Contents", ()))

    def buckets(self) -> list[str]:
        return sorted(b["Name"] for b in self.client().list_buckets().get("Buckets", ()))


def start_server(host: str, port: int, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    import tempfile

    cmd = [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)]
    # its request log goes to a file: a pipe nobody reads would fill and stop the server mid-test
    log = tempfile.TemporaryFile()  # noqa: SIM115 - the process holds it; closed with the file object
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
                            env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection((host, port), timeout=1):
                return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                log.seek(0)
                pytest.fail(f"moto_server did not start on {host}:{port}: {log.read().decode()[-2000:]}")
            time.sleep(0.1)


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[S3Server]:
    """moto_server (S3) on 127.0.0.1, set as the endpoint the AWS way (`AWS_ENDPOINT_URL_S3`)."""
    isolated_aws_env(monkeypatch, tmp_path)
    server = S3Server("127.0.0.1", _free_port("127.0.0.1"))
    server.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", server.endpoint)
    try:
        yield server
    finally:
        server.stop()


class CutProxy:
    """A TCP proxy on 127.0.0.1 in front of an endpoint that cuts every connection once `cut_after` bytes
    went upstream (a transfer cut half-way), then refuses new ones until `restore()`."""

    def __init__(self, port: int, cut_after: int) -> None:
        import threading

        self.target = port
        self.cut_after = cut_after
        self.sent = 0
        self.cut = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def restore(self) -> None:
        self.cut_after = 1 << 62
        self.cut.clear()

    def close(self) -> None:
        self.listener.close()
        self._cut_all()

    def _cut_all(self) -> None:
        with self._lock:
            for conn in self._conns:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                conn.close()
            self._conns.clear()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            if self.cut.is_set():
                down.close()
                continue
            up = socket.create_connection(("127.0.0.1", self.target))
            with self._lock:
                self._conns += [down, up]
            threading.Thread(target=self._pipe, args=(down, up, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, down, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        try:
            while data := src.recv(1 << 16):
                if upstream:
                    with self._lock:
                        self.sent += len(data)
                        over = self.sent > self.cut_after
                    if over:
                        self.cut.set()
                        self._cut_all()
                        return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass
