"""`skyhive storage ls` and `skyhive storage delete`: the buckets skyhive created (tagged `skyhive-created`
when it made them for a file mount's local `source`), at the endpoint the AWS chain names (or
`--endpoint-url`). A bucket skyhive did not create is never deleted, unless named with `--force`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from ...errors import StorageError

__all__ = ["add_parser", "list_buckets", "delete_buckets"]


def _access(endpoint: str | None):  # type: ignore[no-untyped-def]
    from ..storage.s3 import access
    from ..storage.spec import Bucket

    return access(Bucket("skyhive-storage-cli", endpoint_url=endpoint))


def list_buckets(endpoint: str | None = None, out: TextIO | None = None) -> int:
    """Print the buckets skyhive created, one a line, with their object count and size."""
    from ..storage.buckets import created_buckets
    from ..storage.s3 import client
    from ..storage.transfer import list_prefix

    out = out or sys.stdout
    acc = _access(endpoint)
    names = created_buckets(acc)
    if not names:
        out.write("no buckets created by skyhive\n")
        return 0
    s3 = client(acc)
    out.write(f"{'BUCKET':<40} {'OBJECTS':>8} {'SIZE':>12}\n")
    for name in names:
        objects = list_prefix(s3, name, "")
        size = sum(o.size for o in objects)
        out.write(f"{name:<40} {len(objects):>8} {size / (1 << 20):>9.1f} MiB\n")
    return 0


def delete_buckets(names: list[str], *, all_created: bool = False, force: bool = False, endpoint: str | None = None,
                   out: TextIO | None = None) -> int:
    """Delete the named buckets (or every bucket skyhive created with `all_created`), objects included.
    A named bucket without skyhive's tag is refused (exit 1, naming it) unless `force`."""
    from ..storage.buckets import created_buckets, delete_bucket, is_created
    from ..storage.s3 import client

    out = out or sys.stdout
    acc = _access(endpoint)
    if all_created:
        names = [*names, *created_buckets(acc)]
    if not names:
        raise StorageError("skyhive storage delete: name the buckets, or --all for every bucket skyhive created",
                           cause="error")
    s3 = client(acc)
    refused = [n for n in names if not force and not is_created(acc, n)]
    if refused:
        raise StorageError(f"skyhive storage delete: {', '.join(refused)} not created by skyhive (no "
                           f"skyhive-created tag, or no such bucket): not deleted; pass --force to delete a bucket "
                           f"skyhive did not create", bucket=refused[0], cause="access-denied")
    for name in dict.fromkeys(names):
        count = delete_bucket(s3, name)
        out.write(f"deleted {name} ({count} objects)\n")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`storage ls` and `storage delete` on the CLI."""
    p = sub.add_parser("storage", help="buckets skyhive created for file mounts: ls, delete")
    verbs = p.add_subparsers(dest="storage_command", required=True)
    ls = verbs.add_parser("ls", help="the buckets skyhive created")
    ls.add_argument("--endpoint-url", metavar="URL", help="the S3 endpoint (default: the AWS chain's)")
    ls.set_defaults(func=lambda a: list_buckets(a.endpoint_url))
    rm = verbs.add_parser("delete", help="delete buckets skyhive created, with their objects")
    rm.add_argument("names", nargs="*", metavar="BUCKET")
    rm.add_argument("--all", action="store_true", help="every bucket skyhive created")
    rm.add_argument("--force", action="store_true", help="also a named bucket skyhive did not create")
    rm.add_argument("--endpoint-url", metavar="URL", help="the S3 endpoint (default: the AWS chain's)")
    rm.set_defaults(func=lambda a: delete_buckets(a.names, all_created=a.all, force=a.force, endpoint=a.endpoint_url))
