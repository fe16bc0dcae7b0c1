"""Direct GETs and PUTs (runtime/storage/direct.py): small objects sent and fetched with requests signed by
skyhive on the boto3 client's own connection pool, botocore making any request that does not succeed whole.
Checked against botocore's own signer, and against `moto_server` verifying every request's signature (its
IAM enforcement on): a wrong signature would be refused there and the objects would go through botocore."""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os

import pytest

from skyhive.errors import StorageError
from skyhive.runtime.storage import direct, s3 as s3mod, transfer
from skyhive.runtime.storage.spec import Bucket
from tests.infra.moto_s3 import S3Server, _free_port, isolated_aws_env

#: Keys S3 allows that URL-encoding and signing get wrong easily: spaces, '+', '=', '%', '~', non-ASCII, '//'.
AWKWARD = ["a b+c=d.txt", "100%/x~y.bin", "ünï/cödé €.bin", "deep//double/slash", "plain.bin"]


@pytest.mark.parametrize("token", [None, "session-token/with+slash="])
def test_the_signature_is_the_one_botocore_computes(monkeypatch, token):
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    when = datetime.datetime(2026, 11, 27, 1, 2, 3)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: when)
    for key in AWKWARD:
        url = f"https://bkt.s3.eu-west-1.amazonaws.com/{direct.quote(key, safe='/~')}"
        request = AWSRequest(method="GET", url=url, headers={"x-amz-checksum-mode": "ENABLED"})
        botocore.auth.S3SigV4Auth(Credentials("AKIDEXAMPLE", "secret/key+x", token), "s3", "eu-west-1").add_auth(request)
        ours = direct.sigv4_headers("GET", url, region="eu-west-1", access_key="AKIDEXAMPLE", secret_key="secret/key+x",
                                    token=token, extra={"x-amz-checksum-mode": "ENABLED"},
                                    now=when.replace(tzinfo=datetime.timezone.utc).timestamp())
        assert ours["Authorization"] == request.headers["Authorization"], key
        assert ours.get("x-amz-security-token") == token
        # a PUT over http: the body's SHA-256 signed, its CRC32 in a signed header (what DirectPut sends)
        body = os.urandom(999)
        url = url.replace("https://", "http://")
        crc = {"x-amz-checksum-crc32": "AAAAAA==", "x-amz-sdk-checksum-algorithm": "CRC32"}
        request = AWSRequest(method="PUT", url=url, headers=dict(crc), data=body)
        botocore.auth.S3SigV4Auth(Credentials("AKIDEXAMPLE", "secret/key+x", token), "s3", "eu-west-1").add_auth(request)
        ours = direct.sigv4_headers("PUT", url, region="eu-west-1", access_key="AKIDEXAMPLE", secret_key="secret/key+x",
                                    token=token, extra=crc, payload_hash=hashlib.sha256(body).hexdigest(),
                                    now=when.replace(tzinfo=datetime.timezone.utc).timestamp())
        assert ours["Authorization"] == request.headers["Authorization"], key


@pytest.fixture
def signed_s3(tmp_path, monkeypatch):
    """moto_server checking every request's signature and permissions (after the 3 that make its IAM user)."""
    import boto3

    isolated_aws_env(monkeypatch, tmp_path)
    server = S3Server("127.0.0.1", _free_port("127.0.0.1"), env={"INITIAL_NO_AUTH_ACTION_COUNT": "3"})
    server.start()
    try:
        iam = boto3.client("iam", endpoint_url=server.endpoint, region_name="us-east-1")
        iam.create_user(UserName="skyhive")
        key = iam.create_access_key(UserName="skyhive")["AccessKey"]
        iam.put_user_policy(UserName="skyhive", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", server.endpoint)
        yield server
    finally:
        server.stop()


def test_small_objects_go_by_direct_puts_and_gets_the_endpoint_verified_and_botocore_takes_what_is_not_whole(
        signed_s3, tmp_path, monkeypatch, caplog):
    acc = s3mod.access(Bucket("direct-bucket"))
    s3 = s3mod.client(acc)
    s3.create_bucket(Bucket="direct-bucket")
    bodies = {f"run/{key}.{i}": os.urandom(1000 + 7 * i) for i, key in enumerate(AWKWARD * 3)}
    made: list[direct.DirectGet] = []
    puts: list[direct.DirectPut] = []

    def watch(kind, into):
        learn = kind.learn.__func__  # type: ignore[attr-defined]

        def watched(cls, *args, **kwargs):
            into.append(learn(cls, *args, **kwargs))
            return into[-1]

        monkeypatch.setattr(kind, "learn", classmethod(watched))

    watch(direct.DirectGet, made)
    watch(direct.DirectPut, puts)

    # uploaded from a folder: all but the first (botocore's, watched) by a direct PUT, moto verifying its
    # signature; each with its CRC32, which the store keeps (and checks on GET below)
    src = tmp_path / "src"
    for key, body in bodies.items():
        if "//" in key:
            s3.put_object(Bucket="direct-bucket", Key=key, Body=body)  # no such file name: botocore's PUT
            continue
        (src / key[4:]).parent.mkdir(parents=True, exist_ok=True)
        (src / key[4:]).write_bytes(body)
    transfer.upload_dir(s3, "direct-bucket", "run", str(src), access=acc)
    files = sum(1 for key in bodies if "//" not in key)
    assert puts[-1] is not None and puts[-1].direct == files - 1 and not puts[-1].disabled
    for key, body in bodies.items():
        got = s3.get_object(Bucket="direct-bucket", Key=key, ChecksumMode="ENABLED")
        assert got["Body"].read() == body and got["ChecksumCRC32"], key
    puts.clear()

    def fetched(target) -> dict[str, bytes]:  # (a key's "//" is one folder on disk)
        return {f"run/{p.relative_to(target).as_posix()}": p.read_bytes() for p in target.rglob("*") if p.is_file()}

    on_disk = {key.replace("//", "/"): body for key, body in bodies.items()}

    # every object whole; all but the first (botocore's, watched) by a direct GET whose signature moto verified
    target = tmp_path / "one"
    transfer.download_prefix(s3, "direct-bucket", "run", str(target), access=acc)
    assert fetched(target) == on_disk
    assert made[-1] is not None and made[-1].direct == len(bodies) - 1 and not made[-1].disabled

    # a body whose checksum does not match: thrown away, the object fetched again through botocore
    digest = direct._Crc32.digest
    monkeypatch.setattr(direct._Crc32, "digest", lambda self: b"\0\0\0\0")
    target = tmp_path / "two"
    with caplog.at_level(logging.WARNING, logger="skyhive.storage"):
        transfer.download_prefix(s3, "direct-bucket", "run", str(target), access=acc)
    assert fetched(target) == on_disk and made[-1].direct == 0
    assert "x-amz-checksum-crc32 does not match the body; botocore GETs it again" in caplog.text
    monkeypatch.setattr(direct._Crc32, "digest", digest)

    # wrong keys: moto refuses the direct GET; botocore makes it again and names the bucket, the key and the cause
    listing = transfer.list_prefix(s3, "direct-bucket", "run")
    monkeypatch.setattr(transfer, "list_prefix", lambda *a: listing)
    real_fetch = direct.DirectGet.fetch

    def stale_keys(self, key, write, progress=None):
        self._acc = s3mod.Access(endpoint_url=acc.endpoint_url, access_key=acc.access_key, secret_key="wrong")
        return real_fetch(self, key, write, progress)

    monkeypatch.setattr(direct.DirectGet, "fetch", stale_keys)
    target = tmp_path / "three"
    transfer.download_prefix(s3, "direct-bucket", "run", str(target), access=acc)
    assert fetched(target) == on_disk and made[-1].disabled and made[-1].direct == 0
    monkeypatch.setattr(direct.DirectGet, "fetch", real_fetch)
    real_send = direct.DirectPut.send

    def stale_put(self, key, body):  # the same for a PUT: refused, then botocore's PUT with the right keys
        self._acc = s3mod.Access(endpoint_url=acc.endpoint_url, access_key=acc.access_key, secret_key="wrong")
        return real_send(self, key, body)

    monkeypatch.setattr(direct.DirectPut, "send", stale_put)
    (src / "a b+c=d.txt.0").write_bytes(b"changed")
    (src / "plain.bin.4").write_bytes(b"changed too")
    transfer.upload_files(s3, "direct-bucket", [(str(src / n), f"run/{n}") for n in ("a b+c=d.txt.0", "plain.bin.4")],
                          access=acc)
    assert puts[-1].disabled and puts[-1].direct == 0
    assert s3.get_object(Bucket="direct-bucket", Key="run/plain.bin.4")["Body"].read() == b"changed too"
    monkeypatch.setattr(direct.DirectPut, "send", real_send)
    for key in ("run/a b+c=d.txt.0", "run/plain.bin.4"):
        s3.put_object(Bucket="direct-bucket", Key=key, Body=bodies[key])  # back as they were

    # an object gone between the listing and its GET: botocore's error, naming it; no file of it, no partial file
    gone = sorted(bodies)[3]
    s3.delete_object(Bucket="direct-bucket", Key=gone)
    target = tmp_path / "four"
    with pytest.raises(StorageError) as info:
        transfer.download_prefix(s3, "direct-bucket", "run", str(target), access=acc)
    assert info.value.cause == "no-such-key" and info.value.key == gone and info.value.bucket == "direct-bucket"
    assert f"downloading s3://direct-bucket/{gone}: no such object" in str(info.value)
    left = {p.name for p in target.rglob("*") if p.is_file()}
    assert not any(transfer.TEMP_MARK in name for name in left) and gone.rsplit("/", 1)[1] not in left
