"""The multipart uploads skyhive started and has not finished, journaled on the machine that started them,
so that a killed upload (its process SIGKILLed mid-copy: the parts it sent are stored, and billed, until
the upload is aborted, though no object ever shows them) is aborted when the pool ends (uploads.py) and
shown by `skyhive storage ls`.

Every S3 client skyhive makes (`s3.client`) journals its CreateMultipartUpload in
`<state dir>/storage/uploads/<id>.json` (bucket, key, upload id, endpoint, the process that started it) and
forgets it once CompleteMultipartUpload or AbortMultipartUpload succeeded. `uploads.abort_orphans` aborts
those whose process is gone: `skyhive down`/`stop`/autostop once the pool's workers ended, a pool's close
on the client, a node putting its mounts in place or ending a job.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ...paths import private_dir, state_dir

__all__ = ["journal", "Unfinished", "unfinished", "open_uploads"]

log = logging.getLogger("skyhive.storage")


@dataclass(frozen=True, slots=True)
class Unfinished:
    """One journaled upload: where it goes, who started it (`pid`, and that process's start time)."""

    bucket: str
    key: str
    upload_id: str
    endpoint_url: str | None
    store: str
    region: str
    pid: int
    started: float
    path: str  # the journal file

    @property
    def alive(self) -> bool:
        return _process_start(self.pid) == self.started


def _process_start(pid: int) -> float | None:
    """The start time (clock ticks since boot, as /proc says) of process `pid`; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else float(fields[19])


def _folder(create: bool) -> Path:
    return private_dir("storage", "uploads") if create else Path(state_dir()) / "storage" / "uploads"


def _file(upload_id: str) -> Path:
    return _folder(True) / f"{hashlib.sha256(upload_id.encode()).hexdigest()[:32]}.json"


def journal(s3: Any, *, endpoint_url: str | None, store: str, region: str) -> None:
    """Have client `s3` journal the multipart uploads it starts, and forget those it completes or aborts."""
    me = os.getpid()

    def started(parsed: Any = None, **_: Any) -> None:
        if not isinstance(parsed, dict) or not parsed.get("UploadId"):
            return
        entry = {"bucket": parsed.get("Bucket"), "key": parsed.get("Key"), "upload_id": parsed["UploadId"],
                 "endpoint_url": endpoint_url, "store": store, "region": region, "pid": me,
                 "started": _process_start(me)}
        try:
            path = _file(parsed["UploadId"])
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(entry))
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("cannot journal the upload of s3://%s/%s: %s", entry["bucket"], entry["key"], exc)

    def naming(params: Any = None, context: Any = None, **_: Any) -> None:
        if isinstance(params, dict) and isinstance(context, dict) and params.get("UploadId"):
            context["skyhive_upload_id"] = params["UploadId"]

    def ended(http_response: Any = None, context: Any = None, parsed: Any = None, **_: Any) -> None:
        upload = context.get("skyhive_upload_id") if isinstance(context, dict) else None
        status = http_response.status_code if http_response is not None else 500
        code = (parsed or {}).get("Error", {}).get("Code", "") if isinstance(parsed, dict) else ""
        if upload and (status < 300 or code == "NoSuchUpload"):
            try:
                _file(upload).unlink(missing_ok=True)
            except OSError:
                pass

    events = s3.meta.events
    events.register("after-call.s3.CreateMultipartUpload", started)
    for op in ("CompleteMultipartUpload", "AbortMultipartUpload"):
        events.register(f"before-parameter-build.s3.{op}", naming)
        events.register(f"after-call.s3.{op}", ended)


def unfinished() -> list[Unfinished]:
    """Every upload journaled on this machine, oldest first."""
    out = []
    try:
        files = list(_folder(False).glob("*.json"))
    except OSError:
        return []
    for path in files:
        try:
            raw = json.loads(path.read_text())
            out.append(Unfinished(str(raw["bucket"]), str(raw["key"]), str(raw["upload_id"]), raw.get("endpoint_url"),
                                  str(raw.get("store") or "s3"), str(raw.get("region") or "us-east-1"), int(raw["pid"]),
                                  float(raw.get("started") or -1), str(path)))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(out, key=lambda u: os.path.getmtime(u.path) if os.path.exists(u.path) else 0)


def open_uploads(s3: Any, bucket: str) -> list[tuple[str, str, float]]:
    """The multipart uploads open in `bucket` (any uploader's), as (key, upload id, initiated epoch)."""
    out = []
    token: dict[str, str] = {}
    while True:
        page = s3.list_multipart_uploads(Bucket=bucket, **token)
        for up in page.get("Uploads", ()):
            when = up.get("Initiated")
            out.append((up["Key"], up["UploadId"], when.timestamp() if isinstance(when, datetime) else time.time()))
        if not page.get("IsTruncated"):
            return out
        token = {"KeyMarker": page.get("NextKeyMarker", ""), "UploadIdMarker": page.get("NextUploadIdMarker", "")}
