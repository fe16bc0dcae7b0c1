"""`skyhive storage ls` and `skyhive storage delete`: the buckets skyhive created (marked when it made them
for a file mount's local `source`: a bucket tag on S3, an object on R2 and GCS, runtime/storage/buckets.py),
on every store this machine is set up for — S3 at the endpoint the AWS chain names, R2 when its account ID
is found, GCS when HMAC keys are in ~/.boto (`--store` picks some; `--endpoint-url` points one store
elsewhere). A bucket skyhive did not create is never listed or deleted unless named (`s3://b`, `r2://b`,
`gs://b`, or a plain name for S3), and never deleted unless also `--force`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from ...errors import StorageError

__all__ = ["add_parser", "list_buckets", "delete_buckets", "store_names"]

#: the store a plain bucket name (no URI) and `--endpoint-url` alone are on (`Bucket`'s default)
_DEFAULT = "s3"


def store_names() -> list[str]:
    """The stores, in the order they are listed: every store known here (runtime/storage/store.py)."""
    from ..storage.store import stores

    return [s.name for s in stores()]


def _stores(stores: list[str] | None, endpoint: str | None) -> list[str]:
    """The stores to look at: those named (each must be set up), else every one this machine is set up for."""
    from ..storage.store import stores as known, store_named

    if endpoint is not None and (not stores or len(stores) != 1):
        if stores:
            raise StorageError("skyhive storage: --endpoint-url points one store elsewhere: name one --store",
                               cause="error")
        return [_DEFAULT]  # --endpoint-url alone: an S3-compatible endpoint, as before
    if stores:
        return list(dict.fromkeys(store_named(s).name for s in stores))
    return [s.name for s in known() if s.configured()]


def _access(store: str, endpoint: str | None):  # type: ignore[no-untyped-def]
    from ..storage.s3 import access
    from ..storage.spec import Bucket

    return access(Bucket("skyhive-storage-cli", store=store, endpoint_url=endpoint))


def _named(names: list[str]) -> list[tuple[str, str]]:
    """(store, bucket) of each name: a bucket URI, or a plain name (S3)."""
    from ..storage.spec import is_bucket_uri, parse_uri
    from ..storage.store import scheme_of

    out = []
    for name in names:
        if "://" in name:
            if not is_bucket_uri(name):
                raise StorageError(f"skyhive storage: {name!r}: not a bucket URI "
                                   f"({', '.join(scheme_of(s) + '://' for s in store_names())})", cause="error")
            bucket = parse_uri(name, where=name)
            if bucket.prefix:
                raise StorageError(f"skyhive storage: {name!r}: name a whole bucket (no path after it)", cause="error")
            out.append((bucket.store, bucket.name))
        else:
            out.append((_DEFAULT, name))
    return out


def _uri(store: str, name: str) -> str:
    from ..storage.store import scheme_of

    return f"{scheme_of(store)}://{name}"


def list_buckets(endpoint: str | None = None, out: TextIO | None = None, *, names: list[str] | None = None,
                 stores: list[str] | None = None, err: TextIO | None = None) -> int:
    """Print the buckets skyhive created on every store looked at (and the `names` given, created or not),
    one a line, with their object count and size. A store that cannot be listed is named on `err` and
    the exit status is 1; the others are listed still."""
    from ..storage.buckets import all_buckets, is_created
    from ..storage.s3 import client
    from ..storage.transfer import CREATED_MARKER, list_prefix

    out, err = out or sys.stdout, err or sys.stderr
    rows: list[tuple[str, str, bool]] = []  # (store, bucket, created by skyhive)
    failed = 0
    wanted = _named(names or [])
    order = store_names()
    look = _stores(stores, endpoint) if not wanted else sorted({s for s, _ in wanted}, key=order.index)
    clients = {}
    listed: list[str] = []  # the stores that answered (one that could not be listed is said on err)
    for store in look:
        try:
            acc = _access(store, endpoint)
            s3 = clients[store] = client(acc)
            if wanted:
                rows += [(store, n, is_created(s3, n, store)) for s, n in wanted if s == store]
            else:
                rows += [(store, n, True) for n in all_buckets(s3, store) if is_created(s3, n, store)]
            listed.append(store)
        except StorageError as exc:
            err.write(f"skyhive storage ls: {store}: {exc}\n")
            failed = 1
    if not rows:
        if listed or not look:  # "no buckets" of a store that could not be listed would be a guess
            out.write(f"no buckets created by skyhive ({', '.join(listed) or 'no store set up'})\n")
        return _show_unfinished(out, [], {}) or failed
    out.write(f"{'BUCKET':<48} {'OBJECTS':>8} {'SIZE':>12}  CREATED BY SKYHIVE\n")
    for store, name, created in rows:
        try:
            objects = [o for o in list_prefix(clients[store], name, "") if o.key != CREATED_MARKER]
        except StorageError as exc:
            err.write(f"skyhive storage ls: {_uri(store, name)}: {exc}\n")
            failed = 1
            continue
        size = sum(o.size for o in objects)
        mark = "yes" if created else "no"
        out.write(f"{_uri(store, name):<48} {len(objects):>8} {size / (1 << 20):>8.1f} MiB  {mark}\n")
    return _show_unfinished(out, [(store, name) for store, name, _ in rows], clients, err) or failed


def _show_unfinished(out: TextIO, listed: list[tuple[str, str]], clients: dict[str, object],
                     err: TextIO | None = None) -> int:
    """The multipart uploads left open in the buckets listed (any uploader's: their parts are stored and
    billed, no object shows them), and those skyhive started on this machine and did not finish
    (runtime/storage/journal.py), wherever they go."""
    from ..storage.journal import open_uploads, unfinished

    lines, failed = [], 0
    seen = set()
    for store, name in listed:
        try:
            found = open_uploads(clients[store], name)
        except Exception as exc:  # noqa: BLE001 - named; the others are shown still
            if err is not None:
                err.write(f"skyhive storage ls: {_uri(store, name)}: cannot list its unfinished uploads: {exc}\n")
            failed = 1
            continue
        for key, upload_id, _ in found:
            seen.add((name, upload_id))
            lines.append(f"{_uri(store, name)}/{key}  (upload {upload_id})")
    for up in unfinished():
        if (up.bucket, up.upload_id) in seen:
            continue
        who = "its process runs" if up.alive else f"its process {up.pid} ended"
        lines.append(f"{_uri(up.store, up.bucket)}/{up.key}  (upload {up.upload_id}, started here; {who})")
    if lines:
        out.write(f"\nunfinished uploads ({len(lines)}; their parts are stored and billed until aborted: "
                  f"`skyhive down` aborts those skyhive started whose process ended, `skyhive storage delete` a "
                  f"bucket's):\n")
        out.writelines(f"  {line}\n" for line in lines)
    return failed


def delete_buckets(names: list[str], *, all_created: bool = False, force: bool = False, endpoint: str | None = None,
                   out: TextIO | None = None, stores: list[str] | None = None) -> int:
    """Delete the named buckets (URIs, or plain names for S3), or with `all_created` every bucket skyhive
    created on the stores looked at, objects included. A named bucket without skyhive's mark is refused
    (exit 1, naming it, nothing deleted) unless `force`."""
    from ..storage.buckets import created_buckets, delete_bucket, is_created
    from ..storage.s3 import client

    out = out or sys.stdout
    targets = _named(names)
    if all_created:
        for store in _stores(stores, endpoint):
            targets += [(store, n) for n in created_buckets(_access(store, endpoint))]
    if not targets:
        raise StorageError("skyhive storage delete: name the buckets, or --all for every bucket skyhive created",
                           cause="error")
    targets = list(dict.fromkeys(targets))
    clients = {store: client(_access(store, endpoint)) for store in {s for s, _ in targets}}
    refused = [_uri(s, n) for s, n in targets if not force and not is_created(clients[s], n, s)]
    if refused:
        raise StorageError(f"skyhive storage delete: {', '.join(refused)} not created by skyhive (no skyhive "
                           f"mark, or no such bucket): not deleted; pass --force to delete a bucket skyhive did "
                           f"not create", bucket=refused[0].split("://", 1)[1], cause="access-denied")
    for store, name in targets:
        count = delete_bucket(clients[store], name, store=store)
        out.write(f"deleted {_uri(store, name)} ({count} objects)\n")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`storage ls` and `storage delete` on the CLI."""
    p = sub.add_parser("storage", help="buckets skyhive created for file mounts (S3, R2, GCS): ls, delete")
    verbs = p.add_subparsers(dest="storage_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", action="append", metavar="STORE",
                        help="s3, r2, gcs or another registered store (repeatable; default: every store this "
                             "machine is set up for)")
    common.add_argument("--endpoint-url", metavar="URL",
                        help="the endpoint of the one --store named (alone: an S3-compatible endpoint)")
    ls = verbs.add_parser("ls", parents=[common], help="the buckets skyhive created (and any named)")
    ls.add_argument("names", nargs="*", metavar="BUCKET", help="s3://b, r2://b, gs://b (a store's URI), or a name (S3)")
    ls.set_defaults(func=lambda a: list_buckets(a.endpoint_url, names=a.names, stores=a.store))
    rm = verbs.add_parser("delete", parents=[common], help="delete buckets skyhive created, with their objects")
    rm.add_argument("names", nargs="*", metavar="BUCKET", help="s3://b, r2://b, gs://b (a store's URI), or a name (S3)")
    rm.add_argument("--all", action="store_true", help="every bucket skyhive created")
    rm.add_argument("--force", action="store_true", help="also a named bucket skyhive did not create")
    rm.set_defaults(func=lambda a: delete_buckets(a.names, all_created=a.all, force=a.force, endpoint=a.endpoint_url,
                                                  stores=a.store))
