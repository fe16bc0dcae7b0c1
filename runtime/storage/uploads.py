"""Aborting the multipart uploads journaled on this machine (journal.py) whose process is gone: a killed
upload's parts are stored, and billed, until the upload is aborted, though no object ever shows them.
Called by `skyhive down`/`stop`/autostop once the pool's workers ended (clusters/stop.py), a pool's
close on the client (pool.py), and a node putting its mounts in place or ending a job (node.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from .journal import Unfinished, unfinished

__all__ = ["abort_orphans"]

log = logging.getLogger("skyhive.storage")


def _client_for(up: Unfinished, accesses: Sequence[Any]) -> Any:
    from .s3 import access, client
    from .spec import Bucket

    for acc in accesses:  # a node: the keys its mounts came with
        if acc.endpoint_url == up.endpoint_url and acc.store == up.store:
            return client(acc)
    return client(access(Bucket(up.bucket, store=up.store, endpoint_url=up.endpoint_url, region=up.region)))


def abort_orphans(accesses: Sequence[Any] = ()) -> list[Unfinished]:
    """Abort the journaled uploads whose process is gone (with the keys of `accesses` where one reaches
    the upload's endpoint, else this machine's); returns those aborted. One that cannot be aborted is
    named in a warning and stays journaled."""
    done = []
    for up in unfinished():
        if up.alive:
            continue
        from botocore.exceptions import ClientError

        try:
            _client_for(up, accesses).abort_multipart_upload(Bucket=up.bucket, Key=up.key, UploadId=up.upload_id)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("NoSuchUpload", "NoSuchBucket", "404"):
                log.warning("could not abort the unfinished upload of s3://%s/%s (id %s): %s", up.bucket, up.key,
                            up.upload_id, exc)
                continue
        except Exception as exc:  # noqa: BLE001 - named, kept for the next try
            log.warning("could not abort the unfinished upload of s3://%s/%s (id %s): %s", up.bucket, up.key,
                        up.upload_id, exc)
            continue
        try:
            os.unlink(up.path)
        except OSError:
            pass
        log.info("aborted the unfinished upload of s3://%s/%s (its process %d is gone)", up.bucket, up.key, up.pid)
        done.append(up)
    return done
