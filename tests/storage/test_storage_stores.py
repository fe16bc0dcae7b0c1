"""R2 and GCS, reached through skyhive's S3 path (docs/storage.md, "Stores"): where their endpoint and keys
come from (R2: the account's endpoint, ~/.cloudflare/; GCS: storage.googleapis.com, HMAC keys in ~/.boto)
and what the requests must leave out (the CRC32 checksums both refuse; GCS has no multi-object delete).
The transfers run against `moto_server` on 127.0.0.1 standing in as the endpoint: they prove skyhive's
requests, names, keys and signing region, not R2's or Google's servers (none is reachable here)."""

from __future__ import annotations

import os
import re

import pytest

import skyhive as sky
from skyhive.errors import StorageError
from skyhive.runtime.storage import buckets, node, s3 as s3mod, transfer
from skyhive.runtime.storage.spec import Bucket, mount_of
from tests.infra.moto_s3 import s3  # noqa: F401 - the fixture

ACCOUNT = "0123456789abcdef0123456789abcdef"


class Requests:
    """Every request the storage code's S3 clients send: (operation, headers)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        real = s3mod.client

        def recording(acc, **kw):
            c = real(acc, **kw)
            c.meta.events.register("before-send.s3", self._record)
            return c

        for module in (node, buckets):
            monkeypatch.setattr(module, "client", recording)

    def _record(self, request, **kwargs):
        op = kwargs.get("event_name", "").rsplit(".", 1)[-1]
        self.seen.append((op, {k.lower(): v.decode() if isinstance(v, bytes) else v
                               for k, v in request.headers.items()}))

    def ops(self) -> set[str]:
        return {op for op, _ in self.seen}

    def checksummed(self) -> list[str]:
        return sorted({op for op, h in self.seen if any(k.startswith(("x-amz-checksum", "x-amz-sdk-checksum"))
                                                        for k in h) or h.get("content-encoding") == "aws-chunked"})

    def credentials(self) -> set[str]:
        return {re.search(r"Credential=([^,]+)", h["authorization"]).group(1).split("/", 2)[0] + "/" +
                h["authorization"].split("Credential=")[1].split("/")[2] for _, h in self.seen}


def test_r2_goes_to_the_accounts_endpoint_with_r2_keys_and_transfers_through_the_s3_path(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CLOUDFLARE_ACCOUNT_ID", raising=False)
    with pytest.raises(StorageError, match=rf"r2://r2-data: an R2 bucket needs the Cloudflare account ID: set "
                                           rf"CLOUDFLARE_ACCOUNT_ID, write it to {tmp_path}/.cloudflare/accountid"):
        s3mod.access(Bucket("r2://r2-data"))
    cf = tmp_path / ".cloudflare"
    cf.mkdir()
    (cf / "accountid").write_text("my-account\n")
    with pytest.raises(StorageError, match=r"'my-account' \(from .*/accountid\) is not a Cloudflare account ID"):
        s3mod.access(Bucket("r2://r2-data"))
    (cf / "accountid").write_text(ACCOUNT.upper() + "\n")
    acc = s3mod.access(Bucket("r2://r2-data"))
    # the account's endpoint, not AWS_ENDPOINT_URL_S3 (moto's, set by the fixture: an S3 endpoint); region auto
    assert acc.endpoint_url == f"https://{ACCOUNT}.r2.cloudflarestorage.com" and acc.region == "auto"
    assert (acc.store, acc.access_key) == ("r2", "testing")  # no r2.credentials: the AWS chain
    (cf / "r2.credentials").write_text("[r2]\naws_access_key_id = r2-key\naws_secret_access_key = r2-secret\n")
    acc = s3mod.access(Bucket("r2://r2-data"))
    assert (acc.access_key, acc.secret_key) == ("r2-key", "r2-secret") and "r2-secret" not in repr(acc)
    monkeypatch.setenv("CLOUDFLARE_ACCOUNT_ID", "f" * 32)
    assert s3mod.access(Bucket("r2://r2-data")).endpoint_url == f"https://{'f' * 32}.r2.cloudflarestorage.com"

    # the transfer: moto as the R2 endpoint (the bucket's endpoint_url), R2's keys and region signing every request
    requests = Requests(monkeypatch)
    src = tmp_path / "seed"
    src.mkdir()
    (src / "vocab.txt").write_text("hello\n")
    (src / "weights.bin").write_bytes(os.urandom(transfer.PART + 1))  # a multipart upload
    mount = mount_of(str(tmp_path / "ckpt"), {"name": "r2-data", "store": "r2", "source": str(src),
                                              "mode": "MOUNT_CACHED", "endpoint_url": s3.endpoint})
    prepared = buckets.prepare([mount])
    node.install(prepared.mounts, "r2-session")
    assert (tmp_path / "ckpt" / "weights.bin").read_bytes() == (src / "weights.bin").read_bytes()
    (tmp_path / "ckpt" / "step-1").write_text("1")
    (tmp_path / "ckpt" / "vocab.txt").unlink()
    node.finish()
    assert s3.keys("r2-data") == ["step-1", "weights.bin"]
    assert requests.credentials() == {"r2-key/auto"}
    assert {"PutObject", "UploadPart", "CompleteMultipartUpload", "GetObject", "DeleteObjects"} <= requests.ops()
    # no CRC32 checksum on uploads (boto3's default since 1.36, which R2 refused): only on the operations whose
    # API requires one
    assert requests.checksummed() == ["DeleteObjects", "PutBucketTagging"]


def test_gcs_goes_to_its_xml_api_with_hmac_keys_deletes_one_by_one_and_never_creates_a_bucket(s3, tmp_path,
                                                                                               monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("BOTO_CONFIG", raising=False)
    acc = s3mod.access(Bucket("gs://g-data"))
    # GCS's XML API, whatever AWS_ENDPOINT_URL_S3 says (moto's, set by the fixture: an S3 endpoint)
    assert (acc.endpoint_url, acc.store, acc.access_key) == ("https://storage.googleapis.com", "gcs", "testing")
    (tmp_path / ".boto").write_text("[Credentials]\ngs_access_key_id = GOOG1EXAMPLE\ngs_secret_access_key = hmac-secret\n")
    acc = s3mod.access(Bucket("gs://g-data"))
    assert (acc.access_key, acc.secret_key) == ("GOOG1EXAMPLE", "hmac-secret") and "hmac-secret" not in repr(acc)

    requests = Requests(monkeypatch)
    src = tmp_path / "seed"
    src.mkdir()
    (src / "a.txt").write_text("a")
    with pytest.raises(StorageError, match=r"gs://g-data: skyhive does not create GCS buckets \(create it first: "
                                           r"gcloud storage buckets create gs://g-data\)") as info:
        buckets.prepare([mount_of("/d", {"name": "g-data", "store": "gcs", "source": str(src),
                                         "endpoint_url": s3.endpoint})])
    assert info.value.cause == "no-such-bucket" and s3.buckets() == []

    s3.client().create_bucket(Bucket="g-data")
    for i in range(3):
        s3.client().put_object(Bucket="g-data", Key=f"run/f{i}.txt", Body=b"x")
    prepared = buckets.prepare([mount_of(str(tmp_path / "m"), sky.Bucket("gs://g-data/run", mode="MOUNT_CACHED",
                                                                         endpoint_url=s3.endpoint))])
    node.install(prepared.mounts, "gcs-session")
    (tmp_path / "m" / "f0.txt").unlink()
    (tmp_path / "m" / "f1.txt").unlink()
    (tmp_path / "m" / "big.bin").write_bytes(os.urandom(transfer.PART + 1))
    node.finish()
    assert s3.keys("g-data") == ["run/big.bin", "run/f2.txt"]
    assert requests.credentials() == {"GOOG1EXAMPLE/us-east-1"}
    ops = [op for op, _ in requests.seen]
    assert "DeleteObjects" not in ops and ops.count("DeleteObject") == 2  # no multi-object delete in GCS's XML API
    assert {"UploadPart", "CompleteMultipartUpload", "ListObjectsV2", "GetObject"} <= set(ops)
    assert requests.checksummed() == []  # no CRC32 trailer or composite checksum (GCS refused them)
