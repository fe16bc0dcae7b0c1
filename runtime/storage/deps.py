"""boto3 for nodes that lack it: the client's own installed copy of boto3 and what it needs (all pure
Python) packed into one zip, sent to a node that cannot import boto3, unpacked there under skyhive's
state directory (named by a hash of the versions) and put on `sys.path`. A node's Python needs no
package index for bucket mounts, as for skyhive's own runtime (runtime/bootstrap/wheels.py).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata as md
import io
import os
import sys
import zipfile
from pathlib import Path

from ...paths import private_dir

__all__ = ["DISTS", "Bundle", "bundle", "ensure"]

#: boto3 and its requirements (pure Python wheels).
DISTS = ("boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six", "urllib3")


#: botocore's service models a node needs: S3, and the services of the credential chain.
_SERVICES = {"s3", "sts", "sso", "sso-oidc"}


class Bundle:
    """The packed distributions: `digest` names them (their names and versions), `data` is the zip."""

    def __init__(self, digest: str, data: bytes) -> None:
        self.digest, self.data = digest, data

    def __repr__(self) -> str:
        return f"Bundle({self.digest[:12]}, {len(self.data)} bytes)"


def bundle() -> Bundle:
    """The client's boto3 and its requirements, zipped (cached under the state directory)."""
    versions = [(name, md.version(name)) for name in DISTS]
    digest = hashlib.sha256(repr(versions).encode()).hexdigest()[:24]
    cache = private_dir("wheels") / f"s3deps-{digest}.zip"
    if not cache.exists():
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for name in DISTS:
                dist = md.distribution(name)
                for f in dist.files or ():
                    parts = Path(str(f)).parts
                    if not parts or parts[0] == ".." or "__pycache__" in parts or str(f).endswith(".pyc"):
                        continue
                    if parts[:2] == ("botocore", "data") and len(parts) > 3 and parts[2] not in _SERVICES:
                        continue  # the API models of the other 400 services: S3's and the credential chain's suffice
                    path = Path(dist.locate_file(f))
                    if path.is_file():
                        zf.write(path, Path(*parts).as_posix())
        tmp = cache.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, cache)
    return Bundle(digest, cache.read_bytes())


def ensure(digest: str, data: bytes | None = None) -> str | None:
    """On a node: make boto3 importable in this process. None when it is (already, or from an unpacked
    bundle named `digest`); "missing" when it is not and `data` (the bundle) was not given: ask again
    with it."""
    try:
        importlib.import_module("boto3")
        return None
    except ImportError:
        pass
    root = private_dir("storage-deps")
    target = root / digest
    if not (target / ".ready").exists():
        if data is None:
            return "missing"
        tmp = root / f".{digest}.tmp{os.getpid()}"
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            zf.extractall(tmp)
        (tmp / ".ready").write_text("ok")
        try:
            os.rename(tmp, target)
        except OSError:  # another worker of this machine unpacked it first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    if str(target) not in sys.path:
        sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    importlib.import_module("boto3")
    return None
