"""Copies between a local folder and a bucket prefix: parallel (many objects at once, large objects in
parts through s3transfer, the engine of boto3's transfer manager), and honest — an object is visible in
the bucket only once its upload (or multipart upload) completed, a downloaded file appears under its name
only once whole (written under a temporary name, then renamed), and a failed copy raises a `StorageError`
naming the bucket, the key and the cause, with no partial file left behind.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Any

from .direct import DirectGet, DirectPut
from .s3 import Access, storage_error

__all__ = ["Progress", "upload_files", "delete_keys", "upload_dir", "download_prefix", "list_prefix", "TEMP_MARK",
           "is_temporary", "CREATED_MARKER"]

MiB = 1 << 20
#: Parts of 8 MiB above 8 MiB, up to 10 part requests at once (boto3's defaults); objects under a part
#: go one request each, 16 at once (as rclone's --transfers 16: 32 threads spent 15% more CPU per object
#: on the GIL for no more throughput, docs/storage.md "Speed").
PART = 8 * MiB
CONCURRENCY = 10
SMALL_CONCURRENCY = 16
#: A file whose name contains this is skyhive's (or s3transfer's) partial download: never uploaded or shown.
TEMP_MARK = ".skyhive-part"
#: The object that marks a bucket skyhive created on a store without bucket tags (buckets.py): at the
#: bucket's root, never downloaded into a mount, never uploaded or deleted by a cached mount's sync.
CREATED_MARKER = ".skyhive-created"


def is_temporary(name: str) -> bool:
    """Files the sync leaves alone: partial downloads, a writer's temporary names (`*.tmp`, `*~`), and the
    name of skyhive's created-bucket marker."""
    base = os.path.basename(name)
    return TEMP_MARK in base or base.endswith((".tmp", "~")) or base.startswith(".nfs") or base == CREATED_MARKER


class Progress:
    """Bytes done of a total, drawn on `stream` (default stderr) when it is a terminal (or `force`),
    at most 4 times a second, and finished with a newline."""

    def __init__(self, what: str, total: int, *, stream: IO[str] | None = None, force: bool = False) -> None:
        self.what, self.total, self.done = what, total, 0
        self.stream = stream if stream is not None else sys.stderr
        self.show = force or (hasattr(self.stream, "isatty") and self.stream.isatty())
        self._lock = threading.Lock()
        self._start = self._last = time.monotonic()

    def __call__(self, nbytes: int) -> None:
        with self._lock:
            self.done += nbytes
            now = time.monotonic()
            if self.show and now - self._last >= 0.25:
                self._last = now
                self._draw(now, "\r")

    def _draw(self, now: float, end: str) -> None:
        rate = self.done / max(now - self._start, 1e-6) / MiB
        pct = 100.0 * self.done / self.total if self.total else 100.0
        self.stream.write(f"{end}{self.what}: {self.done / MiB:.1f}/{self.total / MiB:.1f} MiB ({pct:.0f}%) "
                          f"{rate:.1f} MiB/s")
        self.stream.flush()

    def finish(self) -> None:
        if self.show:
            self._draw(time.monotonic(), "\r")
            self.stream.write("\n")
            self.stream.flush()


#: A large object is downloaded in at most this many ranged GETs at once (as rclone's 4 streams): some
#: endpoints (moto, small MinIO set-ups) read the whole object for every range, so 8 MiB ranges of a
#: 1 GiB object cost 128 whole reads there; on S3 itself a few streams of a large object already fill a
#: node's link, and many objects are downloaded in parallel anyway.
RANGES = 4


def _manager(s3: Any, part: int = PART) -> Any:
    from s3transfer.manager import TransferConfig, TransferManager
    from s3transfer.utils import OSUtils, random_file_extension

    class Names(OSUtils):  # type: ignore[misc]
        def get_temp_filename(self, filename: str) -> str:  # a partial download is named as skyhive's
            return f"{filename}{TEMP_MARK}-{random_file_extension()}"

    config = TransferConfig(multipart_threshold=max(PART, part), multipart_chunksize=part,
                            max_request_concurrency=CONCURRENCY, max_submission_concurrency=4, max_io_queue_size=1000)
    return TransferManager(s3, config, osutil=Names())


def _run_all(s3: Any, jobs: list[tuple[str, str, int | None]], bucket: str, op: str,
             progress: Progress | None, *, missing: list[str] | None = None) -> None:
    """Submit every (local path, key, size if known) transfer at once; wait for all; raise the first failure (the
    others are cancelled; s3transfer aborts a failed multipart upload and removes a failed download's
    temporary file)."""
    if not jobs:
        return
    from s3transfer.subscribers import BaseSubscriber

    class Sub(BaseSubscriber):  # type: ignore[misc]
        def __init__(self, size: int | None = None) -> None:
            self.size = size

        def on_queued(self, future: Any, **kwargs: Any) -> None:
            if self.size is not None:  # known from the listing: no HEAD request per object
                future.meta.provide_transfer_size(self.size)

        def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
            if progress is not None:
                progress(bytes_transferred)

    largest = max((size or 0 for _, _, size in jobs), default=0)
    part = PART if op == "upload" else max(PART, -(-largest // RANGES // MiB) * MiB)
    manager = _manager(s3, part)
    failed: tuple[BaseException, str] | None = None
    futures = []
    finished = False
    try:
        for path, key, size in jobs:
            if op == "upload":
                futures.append((key, manager.upload(path, bucket, key, subscribers=[Sub()])))
            else:
                futures.append((key, manager.download(bucket, key, path, subscribers=[Sub(size)])))
        for (path, _, _), (key, fut) in zip(jobs, futures):
            try:
                fut.result()
            except Exception as exc:  # noqa: BLE001 - the first failure is raised below, named
                if missing is not None and op == "upload" and not os.path.exists(path):
                    missing.append(path)  # deleted while it was read: its multipart upload was aborted
                    continue
                failed = (exc, key)
                break
        finished = failed is None
    finally:
        if not finished:  # a failure, or this thread interrupted: the rest cancelled (s3transfer 0.19's
            for _, fut in futures:  # shutdown(cancel=True) mis-passes its arguments: each future instead)
                fut.cancel()
        manager.shutdown()
    if failed is not None:
        exc, key = failed
        doing = "uploading to" if op == "upload" else "downloading"
        raise storage_error(exc, bucket=bucket, key=key, doing=doing) from exc


@dataclass(frozen=True, slots=True)
class Listed:
    key: str
    size: int


def list_prefix(s3: Any, bucket: str, prefix: str) -> list[Listed]:
    """Every object under `prefix` ("" for the whole bucket), as (key, size)."""
    out = []
    token: dict[str, str] = {}
    start = f"{prefix}/" if prefix else ""
    try:
        while True:
            page = s3.list_objects_v2(Bucket=bucket, Prefix=start, **token)
            out.extend(Listed(o["Key"], int(o["Size"])) for o in page.get("Contents", ()))
            if not page.get("IsTruncated"):
                return out
            token = {"ContinuationToken": page["NextContinuationToken"]}
    except Exception as exc:  # noqa: BLE001
        raise storage_error(exc, bucket=bucket, key=start, doing="listing") from exc


def upload_files(s3: Any, bucket: str, files: Iterable[tuple[str, str]], *, what: str = "",
                 progress: Callable[[str, int], Progress | None] | None = None,
                 missing: list[str] | None = None, access: Access | None = None) -> int:
    """Upload (local path, key) pairs in parallel; returns the bytes uploaded. With `missing` (a list), a
    file deleted before or while it is read is skipped and its path appended there, instead of failing the
    copy (a cached mount's writer may delete what the scan just saw). With `access` (the keys `s3` was
    made with), files under one part after the first go by `DirectPut` (botocore PUTs any it could not)."""
    jobs: list[tuple[str, str, int | None]] = []
    sizes: dict[str, int] = {}
    for path, key in files:
        try:
            sizes[path] = os.path.getsize(path)
        except FileNotFoundError:
            if missing is None:
                raise
            missing.append(path)
            continue
        jobs.append((path, key, sizes[path]))
    total = sum(sizes.values())
    meter = progress(what, total) if progress else None
    direct: list[DirectPut | None] = [None]

    def put(s3: Any, bucket: str, path: str, key: str, progress: Progress | None) -> None:
        try:
            _put_one(s3, bucket, path, key, progress, direct=direct[0])
        except FileNotFoundError:
            if missing is None:
                raise
            missing.append(path)

    small = [j for j in jobs if sizes[j[0]] < PART]
    try:
        if access is not None and len(small) > 1:
            path, key, _ = small.pop(0)
            try:  # the first through botocore, watched: the others are sent as it sent that one
                direct[0] = DirectPut.learn(s3, access, bucket, key, lambda: put(s3, bucket, path, key, meter))
            except BaseException as exc:
                raise storage_error(exc, bucket=bucket, key=key, doing="uploading to") from exc
        _parallel(small, put, s3, bucket, meter, doing="uploading to")
        _run_all(s3, [j for j in jobs if sizes[j[0]] >= PART], bucket, "upload", meter, missing=missing)
    finally:
        if meter is not None:
            meter.finish()
    return total - sum(sizes[p] for p in missing or () if p in sizes)


def delete_keys(s3: Any, bucket: str, keys: list[str], *, one_by_one: bool = False) -> None:
    """Delete `keys` from `bucket` (1,000 per DeleteObjects request; with `one_by_one`, a DeleteObject
    each: GCS's XML API has no multi-object delete); a key already gone is no error. Raises `StorageError`
    naming the first key the endpoint refused to delete."""
    if one_by_one:
        for key in keys:
            try:
                s3.delete_object(Bucket=bucket, Key=key)
            except Exception as exc:  # noqa: BLE001
                raise storage_error(exc, bucket=bucket, key=key, doing="deleting") from exc
        return
    for start in range(0, len(keys), 1000):
        batch = keys[start:start + 1000]
        try:
            done = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
        except Exception as exc:  # noqa: BLE001
            raise storage_error(exc, bucket=bucket, key=batch[0], doing="deleting") from exc
        for err in done.get("Errors", ()):
            from botocore.exceptions import ClientError

            exc = ClientError({"Error": {"Code": err.get("Code", ""), "Message": err.get("Message", "")}},
                              "DeleteObjects")
            raise storage_error(exc, bucket=bucket, key=err.get("Key", ""), doing="deleting") from None


def upload_dir(s3: Any, bucket: str, prefix: str, local: str, *, progress: bool = False,
               access: Access | None = None) -> int:
    """Upload a folder (or one file) to `prefix`; returns the bytes uploaded (`access`: see `upload_files`)."""
    if os.path.isfile(local):
        files = [(local, f"{prefix}/{os.path.basename(local)}" if prefix else os.path.basename(local))]
    else:
        files = []
        for root, _, names in os.walk(local):
            for name in sorted(names):
                path = os.path.join(root, name)
                if is_temporary(name) or not os.path.isfile(path):
                    continue
                rel = os.path.relpath(path, local).replace(os.sep, "/")
                files.append((path, f"{prefix}/{rel}" if prefix else rel))
    return upload_files(s3, bucket, files, what=f"upload {local} -> s3://{bucket}/{prefix}",
                        progress=(lambda w, t: Progress(w, t, force=progress)), access=access)


def download_prefix(s3: Any, bucket: str, prefix: str, local: str, *, progress: bool = False,
                    access: Access | None = None) -> list[str]:
    """Download every object under `prefix` into the folder `local` (keys below the prefix become paths
    below it); returns the relative paths written. A key that would leave `local` ("..") is refused.
    With `access` (the keys `s3` was made with), objects under one part after the first are fetched by
    `DirectGet` (less CPU per object; botocore still makes any GET that does not come back whole)."""
    listed = list_prefix(s3, bucket, prefix)
    start = f"{prefix}/" if prefix else ""
    base = os.path.realpath(local)
    jobs = []
    made = {base}
    for obj in listed:
        rel = obj.key[len(start):]
        if not rel or rel.endswith("/") or obj.key == CREATED_MARKER:
            continue  # "folder" marker objects, and skyhive's mark on a bucket it created
        path = os.path.realpath(os.path.join(base, rel))
        if not path.startswith(base + os.sep):
            raise storage_error(ValueError("the key leaves the target folder"), bucket=bucket, key=obj.key,
                                doing="downloading")
        folder = os.path.dirname(path)
        if folder not in made:  # one mkdir per folder, not per object
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        jobs.append((path, obj.key, obj.size))
    total = sum(size or 0 for _, _, size in jobs)
    meter = Progress(f"download s3://{bucket}/{prefix}", total, force=progress)
    small = [j for j in jobs if (j[2] or 0) < PART]
    large = [j for j in jobs if (j[2] or 0) >= PART]
    getter: DirectGet | None = None
    try:
        one: Callable[..., None] = _get_one
        if access is not None and len(small) > 1:
            path, key, _ = small.pop(0)
            try:  # the first through botocore, watched: the others are sent as it sent that one
                getter = DirectGet.learn(s3, access, bucket, key, lambda: _get_one(s3, bucket, path, key, meter))
            except BaseException as exc:
                raise storage_error(exc, bucket=bucket, key=key, doing="downloading") from exc
            if getter is not None:
                def one(s3: Any, bucket: str, path: str, key: str, progress: Progress | None) -> None:
                    _get_one(s3, bucket, path, key, progress, direct=getter)
        _parallel(small, one, s3, bucket, meter)
        _run_all(s3, large, bucket, "download", meter)
    finally:
        if getter is not None:
            getter.close()
        meter.finish()
    return [os.path.relpath(p, base) for p, _, _ in jobs]


def _get_one(s3: Any, bucket: str, path: str, key: str, progress: Progress | None, *,
             direct: DirectGet | None = None) -> None:
    """One object in one GET, into a temporary name renamed when whole: through `direct` when it brings
    the whole object, else (and for the error) through botocore."""
    tmp = f"{path}{TEMP_MARK}-{os.getpid()}-{threading.get_ident()}"
    try:
        with open(tmp, "wb") as fh:
            if direct is None or not direct.fetch(key, fh.write, progress):
                if direct is not None:
                    fh.seek(0)
                    fh.truncate()
                body = s3.get_object(Bucket=bucket, Key=key)["Body"]
                for chunk in body.iter_chunks(1 << 20):
                    fh.write(chunk)
                    if progress is not None:
                        progress(len(chunk))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _put_one(s3: Any, bucket: str, path: str, key: str, progress: Progress | None, *,
             direct: DirectPut | None = None) -> None:
    """One object in one PUT (the object exists only once the PUT succeeded): through `direct` when it
    takes it, else (and for the error) through botocore."""
    with open(path, "rb") as fh:
        if direct is None or not direct.send(key, fh.read()):
            fh.seek(0)
            s3.put_object(Bucket=bucket, Key=key, Body=fh)
        if progress is not None:
            progress(os.fstat(fh.fileno()).st_size)


def _parallel(jobs: list[tuple[str, str, int | None]], one: Callable[..., None], s3: Any, bucket: str,
              progress: Progress | None, *, doing: str = "downloading") -> None:
    """Objects under one part, one request each, many at once (less machinery per object than
    s3transfer's: no HEAD, no ranges, no IO queue). The first failure cancels the rest and is raised."""
    if not jobs:
        return
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    def run(path: str, key: str) -> None:
        try:
            one(s3, bucket, path, key, progress)
        except BaseException as exc:
            raise storage_error(exc, bucket=bucket, key=key, doing=doing) from exc

    with ThreadPoolExecutor(max_workers=SMALL_CONCURRENCY, thread_name_prefix="skyhive-s3") as pool:
        futures = [pool.submit(run, path, key) for path, key, _ in jobs]
        wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((f for f in futures if f.done() and not f.cancelled() and f.exception() is not None), None)
        if failed is not None:
            for f in futures:
                f.cancel()
            wait(futures)
            raise failed.exception()  # type: ignore[misc]
