"""A cloud's interruption notice, watched on the node while a managed job's `run` step runs.

EC2 (the one cloud watched so far) tells a spot instance about two minutes ahead that it will be
interrupted: `GET /latest/meta-data/spot/instance-action` on the instance metadata service answers 404
until then, and then `{"action": "terminate" | "stop" | "hibernate", "time": "2026-11-26T22:00:00Z"}`;
AWS advises polling it every 5 seconds. skyhive's instances require IMDSv2 (`HttpTokens=required`,
`providers/cloud/aws_data.py`), so each request carries a session token got with `PUT /latest/api/token`
(header `X-aws-ec2-metadata-token-ttl-seconds`, at most 21600). The service's address is botocore's
setting `AWS_EC2_METADATA_SERVICE_ENDPOINT` (default `http://169.254.169.254`).

When the notice comes, the watcher writes it (JSON) to the file named by `SKYHIVE_INTERRUPTION_NOTICE`
in the script's environment — the program's cue to checkpoint now — and prints one line starting with
`MARK` on the script's stderr, which reaches the job's controller through the pool's output: it starts
the recovery before the machine is gone. Standard library only (this runs in the worker).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import urllib.error
import urllib.request
from typing import Any

__all__ = ["MARK", "NOTICE_ENV", "WATCH_ENV", "AFTER_NOTICE", "fetch_ec2_notice", "Watcher", "start_for"]

MARK = "[skyhive] interruption notice: "
NOTICE_ENV = "SKYHIVE_INTERRUPTION_NOTICE"  # the file the notice is written to (the program's cue)
WATCH_ENV = "SKYHIVE_INTERRUPTION_WATCH"  # which cloud's notice to watch ("aws"), set by the controller
INTERVAL_ENV = "SKYHIVE_INTERRUPTION_INTERVAL"  # seconds between looks (default 5, as AWS advises)
_TOKEN_TTL = 21600
#: a `run` script that fails after its node's notice returns AFTER_NOTICE + its exit code, so the controller
#: tells it from the program's own failure without waiting for the notice line in the output
AFTER_NOTICE = 1000


def _endpoint() -> str:
    return (os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or "http://169.254.169.254").rstrip("/")


class _EC2:
    """IMDSv2 client: one token, renewed when refused (expired)."""

    def __init__(self, endpoint: str, timeout: float = 2.0) -> None:
        self.endpoint, self.timeout, self.token = endpoint, timeout, ""

    def _token(self) -> str:
        req = urllib.request.Request(f"{self.endpoint}/latest/api/token", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": str(_TOKEN_TTL)})
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - the metadata service
            return resp.read().decode()

    def notice(self) -> dict[str, Any] | None:
        for _ in range(2):
            if not self.token:
                self.token = self._token()
            req = urllib.request.Request(f"{self.endpoint}/latest/meta-data/spot/instance-action",
                                         headers={"X-aws-ec2-metadata-token": self.token})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                    value = json.loads(resp.read().decode())
                    return value if isinstance(value, dict) else {"action": str(value)}
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None  # no interruption scheduled
                if exc.code == 401:  # the token expired: a new one
                    self.token = ""
                    continue
                raise
        return None


def fetch_ec2_notice(endpoint: str | None = None) -> dict[str, Any] | None:
    """EC2's spot interruption notice now (None: none scheduled). Raises OSError when the service does
    not answer."""
    return _EC2(endpoint or _endpoint()).notice()


class Watcher:
    """Polls the notice in a thread until `stop()`; on a notice: the file written, `MARK` line printed."""

    def __init__(self, path: str, interval: float, err: Any = None) -> None:
        self.path, self.interval = path, interval
        self.err = err or sys.stderr
        self.seen: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._client = _EC2(_endpoint())
        self._thread = threading.Thread(target=self._run, name="skyhive-interruption", daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                notice = self._client.notice()
            except (OSError, ValueError):  # the service not there (not an EC2 instance) or garbled: next look
                notice = None
            if notice is not None:
                self.seen = notice
                self.err.write(MARK + json.dumps(notice, sort_keys=True) + "\n")  # (before the program's cue)
                self.err.flush()
                tmp = self.path + ".tmp"
                with open(tmp, "w", encoding="utf-8") as fh:
                    json.dump(notice, fh)
                os.replace(tmp, self.path)
                return
            self._stop.wait(self.interval)


def start_for(env: dict[str, str], cwd: str) -> Watcher | None:
    """A watcher for a `run` script whose environment asks for one (`WATCH_ENV`); it sets `NOTICE_ENV`
    in `env` (a file beside the script's directory, removed with the job's)."""
    if env.get(WATCH_ENV) != "aws":
        return None
    path = os.path.join(os.path.dirname(os.path.abspath(cwd)), "interruption-notice.json")
    env[NOTICE_ENV] = path
    try:
        os.remove(path)  # an earlier attempt's, on the same machine
    except FileNotFoundError:
        pass
    try:
        interval = float(env.get(INTERVAL_ENV) or 5.0)
    except ValueError:
        interval = 5.0
    return Watcher(path, max(0.05, interval)).start()
