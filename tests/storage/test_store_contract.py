"""A new bucket store is one module plus its registration (issue 37, done-when 6): the FAKE store of
tests/storage/fake_store.py, registered here, is parsed from its URIs, reached with its own endpoint,
region and keys, mounted on Local nodes, and listed and deleted by `skyhive storage` — with no edit under
runtime/ (and nothing under runtime/ compares a store's name)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import skyhive as sky
from skyhive.runtime.storage import buckets, s3 as s3mod
from skyhive.runtime.storage.spec import Bucket, mount_of, parse_uri
from skyhive.runtime.storage.store import register_store, store_named, stores, unregister_store
from tests.infra.moto_s3 import S3Server, _free_port, s3  # noqa: F401 - the fixture
from tests.storage.fake_store import FakeStore
from tests.storage.test_storage_stores import Requests

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake(s3):  # noqa: F811 - the fixture: S3 (the AWS chain's endpoint) is moto too, apart from the fake's
    server = S3Server("127.0.0.1", _free_port("127.0.0.1"))
    server.start()
    register_store(FakeStore(server.endpoint))
    try:
        yield server
    finally:
        unregister_store("fakestore")
        server.stop()


def test_nothing_under_runtime_compares_a_stores_name():
    """`store == "gcs"`, `acc.store in ("r2", "gcs")`, `{"s3": ..., "gcs": ...}[store]`: gone; a store says
    what it is (`Store`), and only its own module (runtime/storage/store_*.py) names it."""
    names = {"s3", "gcs", "r2", "gs"}
    found = []
    for path in sorted((ROOT / "runtime").rglob("*.py")):
        if path.name.startswith("store_") or path.name == "store.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            operands = [node.left, *node.comparators] if isinstance(node, ast.Compare) else \
                [k for k in node.keys if k is not None] if isinstance(node, ast.Dict) else []
            strings = {o.value for o in operands for o in ([o] if not isinstance(o, (ast.Tuple, ast.Set, ast.List))
                                                            else o.elts) if isinstance(o, ast.Constant)}
            texts = {ast.unparse(o) for o in operands}
            if strings & names and (isinstance(node, ast.Dict) or any("store" in t for t in texts)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert not found, "\n".join(found)


def test_a_registered_store_is_parsed_reached_and_refused_by_its_declaration(fake):
    assert [s.name for s in stores()][:3] == ["s3", "r2", "gcs"] and stores()[-1].name == "fakestore"
    b = parse_uri("fake://fake-data/runs")
    assert (b.store, b.name, b.prefix, b.uri) == ("fakestore", "fake-data", "runs", "fake://fake-data/runs")
    assert Bucket("fake-data", store="FAKESTORE").uri == "fake://fake-data" and store_named("fake").name == "fakestore"
    acc = s3mod.access(b)
    assert (acc.endpoint_url, acc.region, acc.store, acc.access_key) == (fake.endpoint, "fake-1", "fakestore", "fake-key")
    assert acc.deletes_one_by_one and acc.checksums_when_required and "fake-secret" not in repr(acc)
    unregister_store("fakestore")
    with pytest.raises(ValueError, match=r"Bucket\(store='fakestore'\): skyhive reaches s3, r2, gcs"):
        Bucket("fake-data", store="fakestore")
    with pytest.raises(ValueError, match=r"'fake://fake-data' is not a bucket URI \(s3://, r2://, gs://\)"):
        parse_uri("fake://fake-data")


def _count(folder: str) -> list[str]:
    import os

    return sorted(os.listdir(os.path.expanduser(folder)))


def _write(folder: str, name: str) -> str:
    import os

    path = os.path.join(os.path.expanduser(folder), name)
    with open(path, "w") as fh:
        fh.write("written on the node")
    return path


def test_a_registered_store_mounts_on_local_nodes(fake, s3, tmp_path):  # noqa: F811 - the fixture
    fake.client().create_bucket(Bucket="fake-data")
    fake.client().put_object(Bucket="fake-data", Key="train/a.txt", Body=b"A")
    src = tmp_path / "seed"
    src.mkdir()
    (src / "README").write_text("seed")
    data, out = tmp_path / "data", tmp_path / "out"
    mounts = {str(data): "fake://fake-data/train",
              str(out): {"name": "fake-out", "store": "fakestore", "source": str(src), "mode": "MOUNT_CACHED"}}
    with sky.Pool(provider=sky.Local(), nodes=1, mounts=mounts, output=None) as pool:
        assert pool.run(_count, str(data)) == ["a.txt"]
        pool.run(_write, str(out), "result.txt")
    # the cached mount's upload went to the fake store's endpoint (and nowhere else)
    assert {"README", "result.txt"} <= set(fake.keys("fake-out")) and "fake-out" not in s3.buckets()


def test_skyhive_storage_lists_and_deletes_a_registered_stores_buckets(fake, tmp_path, monkeypatch, capsys):
    from skyhive.cli import main

    src = tmp_path / "seed"
    src.mkdir()
    (src / "a.txt").write_text("a")
    (src / "b.txt").write_text("b")
    fake.client().create_bucket(Bucket="users-own")
    requests = Requests(monkeypatch)
    buckets.prepare([mount_of("/f", {"name": "sky-fake", "store": "fakestore", "source": str(src)})])
    assert "PutBucketTagging" not in requests.ops()  # no tags on this store: the marker object
    assert ".skyhive-created" in fake.keys("sky-fake")

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["storage", *args])
        got = capsys.readouterr()
        return code, got.out, got.err

    code, out, err = run("ls", "--store", "fakestore")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:] if line.strip()] == ["fake://sky-fake"], out
    assert requests.credentials() == {"fake-key/fake-1"}
    code, out, _ = run("ls")  # every store set up here: S3 (nothing of skyhive's there) and the fake
    assert code == 0 and "fake://sky-fake" in out and "users-own" not in out, out
    code, _, err = run("delete", "fake://users-own")
    assert code == 1 and "fake://users-own not created by skyhive" in err and "users-own" in fake.buckets(), err
    requests.seen.clear()
    code, out, _ = run("delete", "--all", "--store", "fake")
    assert code == 0 and "deleted fake://sky-fake (2 objects)" in out, out
    assert fake.buckets() == ["users-own"]
    assert "DeleteObjects" not in requests.ops() and "DeleteObject" in requests.ops()  # one by one, as declared
    code, _, err = run("ls", "--store", "nosuchstore")
    assert code == 1 and "unknown bucket store 'nosuchstore'" in err, err
