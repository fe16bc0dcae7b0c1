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
from skyhive.runtime.storage import store_gcs as gcsstore, store_r2 as r2store
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

        for module in (node, buckets, s3mod):  # s3mod: the `skyhive storage` commands' clients
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
    # the bucket skyhive created is marked by an object: R2 has no bucket tagging (its S3 API compatibility table)
    assert s3.keys("r2-data") == [buckets.CREATED_MARKER, "step-1", "weights.bin"]
    assert not (tmp_path / "ckpt" / buckets.CREATED_MARKER).exists() and "PutBucketTagging" not in requests.ops()
    assert requests.credentials() == {"r2-key/auto"}
    assert {"PutObject", "UploadPart", "CompleteMultipartUpload", "GetObject", "DeleteObjects"} <= requests.ops()
    # no CRC32 checksum on uploads (boto3's default since 1.36, which R2 refused): only on the operations whose
    # API requires one
    assert requests.checksummed() == ["DeleteObjects"]


def test_gcs_goes_to_its_xml_api_with_hmac_keys_deletes_one_by_one_and_creates_buckets_in_the_project(s3, tmp_path,
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
    # a bucket for a local source is created in the project Google's tools name (GOOGLE_CLOUD_PROJECT here), and
    # marked by an object (the XML API has no bucket tagging)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "my-project")
    prepared = buckets.prepare([mount_of(str(tmp_path / "made"), {"name": "g-made", "store": "gcs", "source": str(src),
                                                                  "endpoint_url": s3.endpoint, "mode": "COPY"})])
    assert [b.name for b, _ in prepared.created] == ["g-made"]
    assert s3.keys("g-made") == [buckets.CREATED_MARKER, "a.txt"]
    created = [h for op, h in requests.seen if op == "CreateBucket"]
    assert len(created) == 1 and created[0]["x-amz-project-id"] == "my-project"
    assert "PutBucketTagging" not in requests.ops()
    node.install(prepared.mounts, "gcs-made-session")
    assert sorted(p.name for p in (tmp_path / "made").iterdir()) == ["a.txt"]  # the marker stays in the bucket
    requests.seen.clear()

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


def test_storage_ls_and_delete_cover_s3_r2_and_gcs_and_touch_only_the_buckets_skyhive_created(s3, tmp_path, monkeypatch,
                                                                                                capsys):
    """`skyhive storage ls/delete` on every store set up here: S3 at moto (the AWS chain's endpoint), R2 and then
    GCS at a second moto standing in at their endpoints (R2's account endpoint, GCS's XML API)."""
    from skyhive.cli import main
    from skyhive.runtime.commands import storage as cli
    from tests.infra.moto_s3 import S3Server, _free_port

    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("CLOUDFLARE_ACCOUNT_ID", "BOTO_CONFIG", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "CLOUDSDK_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    assert cli._stores(None, None) == ["s3"]  # neither R2's account nor GCS's HMAC keys here: S3 only
    with pytest.raises(StorageError, match="--endpoint-url points one store elsewhere: name one --store"):
        cli._stores(["s3", "r2"], "http://127.0.0.1:1")

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["storage", *args])
        got = capsys.readouterr()
        return code, got.out, got.err

    code, _, err = run("ls", "--store", "r2")  # a store named but not set up: named, with what is missing
    assert code == 1 and "skyhive storage ls: r2: " in err and "CLOUDFLARE_ACCOUNT_ID" in err, err

    other = S3Server("127.0.0.1", _free_port("127.0.0.1"))
    other.start()
    try:
        src = tmp_path / "seed"
        src.mkdir()
        (src / "a.txt").write_text("a")
        s3.client().create_bucket(Bucket="users-own")
        buckets.prepare([mount_of("/s", {"name": "sky-s3", "source": str(src)})])
        # R2 set up: its account (moto standing in at its endpoint) and its keys
        monkeypatch.setenv("CLOUDFLARE_ACCOUNT_ID", ACCOUNT)
        monkeypatch.setattr(r2store, "R2_ENDPOINT", other.endpoint)  # (the R2 store's module: store_r2.py)
        (tmp_path / ".cloudflare").mkdir()
        (tmp_path / ".cloudflare" / "r2.credentials").write_text(
            "[r2]\naws_access_key_id = r2-key\naws_secret_access_key = r2-secret\n")
        other.client().create_bucket(Bucket="r2-users")
        buckets.prepare([mount_of("/r", {"name": "sky-r2", "store": "r2", "source": str(src)})])
        assert cli._stores(None, None) == ["s3", "r2"]

        requests = Requests(monkeypatch)
        code, out, err = run("ls")
        assert code == 0 and err == "", err
        listed = [line.split()[0] for line in out.splitlines()[1:]]
        assert listed == ["s3://sky-s3", "r2://sky-r2"], out  # never the users' own buckets
        assert {"r2-key/auto", "testing/us-east-1"} == requests.credentials()
        code, out, _ = run("ls", "r2://r2-users", "users-own")
        assert code == 0 and "r2://r2-users" in out and "s3://users-own" in out and " no\n" in out, out

        code, _, err = run("delete", "r2://r2-users", "sky-s3")
        assert code == 1 and "r2://r2-users not created by skyhive" in err and "sky-s3" not in err, err
        assert "sky-s3" in s3.buckets() and "r2-users" in other.buckets()  # nothing deleted
        code, out, _ = run("delete", "--all")
        assert code == 0 and "deleted s3://sky-s3 (1 objects)" in out and "deleted r2://sky-r2 (1 objects)" in out, out
        assert s3.buckets() == ["users-own"] and other.buckets() == ["r2-users"]

        # GCS set up instead of R2 (the same moto now standing in for GCS's XML API): HMAC keys and a project
        monkeypatch.delenv("CLOUDFLARE_ACCOUNT_ID")
        monkeypatch.setattr(gcsstore, "_GCS_ENDPOINT", other.endpoint)  # (the GCS store's module: store_gcs.py)
        (tmp_path / ".boto").write_text("[Credentials]\ngs_access_key_id = GOOG1KEY\ngs_secret_access_key = hmac\n")
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "my-project")
        assert cli._stores(None, None) == ["s3", "gcs"]
        buckets.prepare([mount_of("/g", {"name": "sky-gs", "store": "gcs", "source": str(src)})])
        requests.seen.clear()
        code, out, _ = run("ls")
        assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["gs://sky-gs"], out
        listing = [h for op, h in requests.seen if op == "ListBuckets" and "GOOG1KEY" in h["authorization"]]
        assert listing and all(h["x-amz-project-id"] == "my-project" for h in listing)
        requests.seen.clear()
        code, out, _ = run("delete", "--all")
        assert code == 0 and out == "deleted gs://sky-gs (1 objects)\n", out
        ops = [op for op, _ in requests.seen]
        assert "DeleteObjects" not in ops and ops.count("DeleteObject") == 2  # a.txt and the marker, one by one
        assert other.buckets() == ["r2-users"] and s3.buckets() == ["users-own"]
    finally:
        other.stop()
