"""Buckets as mounts, against `moto_server` as the S3 endpoint on 127.0.0.1 (set the AWS way, through
`AWS_ENDPOINT_URL_S3`): the spellings, transfers that never show a partial file, errors that name bucket,
key and cause, `Pool(mounts=...)` on Local, and the buckets skyhive created (listed, deleted)."""

from __future__ import annotations

import io
import os

import pytest

import skyhive as sky
from skyhive.errors import StorageError
from skyhive.runtime.storage import buckets, node, s3 as s3mod, transfer
from skyhive.runtime.storage.spec import Bucket, mount_of, parse_uri
from tests.infra.moto_s3 import isolated_aws_env, s3  # noqa: F401 - the fixture


def _bucket(server, name: str, objects: dict[str, bytes]) -> None:
    c = server.client()
    c.create_bucket(Bucket=name)
    for key, data in objects.items():
        c.put_object(Bucket=name, Key=key, Body=data)


# ---- spellings ------------------------------------------------------------------------------------

def test_bucket_uris_and_the_long_form_parse_and_bad_ones_name_the_entry(tmp_path):
    assert parse_uri("s3://data-bucket/train/shards") == Bucket("data-bucket", prefix="train/shards")
    assert parse_uri("gs://g-bucket").store == "gcs" and parse_uri("r2://r-bucket/x").store == "r2"
    plain = mount_of("/data", "s3://data-bucket/p")
    assert plain.mode == "COPY" and plain.bucket.prefix == "p"  # a plain URI is copied, as in SkyPilot
    (tmp_path / "src").mkdir()
    long = mount_of("/ckpt", {"name": "runs-bucket", "source": str(tmp_path / "src"), "mode": "mount_cached"})
    assert long.bucket.source == str(tmp_path / "src") and long.mode == "MOUNT_CACHED"
    assert mount_of("/m", {"source": "s3://b-bucket/p"}).mode == "MOUNT"  # SkyPilot's default mode
    with pytest.raises(ValueError, match=r"mounts\['/x'\].*'UPPER' is not a valid bucket name"):
        mount_of("/x", "s3://UPPER/p")
    with pytest.raises(ValueError, match=r"mode='SYNC'.*COPY, MOUNT, MOUNT_CACHED"):
        sky.Bucket("runs-bucket", mode="SYNC")
    with pytest.raises(ValueError, match=r"mounts\['/y'\].source: '/no/such' does not exist"):
        mount_of("/y", {"name": "nb-bucket", "source": "/no/such"})
    with pytest.raises(ValueError, match="Azure Blob is not supported"):
        sky.Bucket("az-bucket", store="azure")
    with pytest.raises(ValueError, match=r"Pool\(mounts\)\['/z'\]: expected a bucket URI"):
        sky.Pool(mounts={"/z": 3})


def test_the_endpoint_comes_from_aws_config_when_the_environment_has_none(tmp_path, monkeypatch):
    isolated_aws_env(monkeypatch, tmp_path)
    (tmp_path / "aws-config").write_text("[default]\nendpoint_url = http://127.0.0.1:9\n")
    assert s3mod.access(Bucket("cfg-bucket")).endpoint_url == "http://127.0.0.1:9"
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:10")
    assert s3mod.access(Bucket("cfg-bucket")).endpoint_url == "http://127.0.0.1:10"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:11")
    assert s3mod.access(Bucket("cfg-bucket")).endpoint_url == "http://127.0.0.1:11"
    assert s3mod.access(Bucket("cfg-bucket", endpoint_url="http://127.0.0.1:12")).endpoint_url == "http://127.0.0.1:12"
    acc = s3mod.access(Bucket("cfg-bucket"))
    assert "testing" not in repr(acc)  # the keys never show


# ---- transfers ------------------------------------------------------------------------------------

def test_a_folder_goes_up_and_comes_down_whole_with_large_objects_in_parts(s3, tmp_path):
    _bucket(s3, "xfer-bucket", {})
    src = tmp_path / "src"
    (src / "deep").mkdir(parents=True)
    big = os.urandom(transfer.PART * 2 + 12345)  # multipart: three parts
    (src / "deep" / "big.bin").write_bytes(big)
    for i in range(50):
        (src / f"small{i}.txt").write_text(f"item {i}\n")
    (src / "skip.tmp").write_text("a writer's temporary file")
    acc = s3mod.access(Bucket("xfer-bucket"))
    c = s3mod.client(acc)
    out = io.StringIO()
    sent = transfer.upload_files(c, "xfer-bucket", [(str(src / "deep" / "big.bin"), "p/deep/big.bin")],
                                 what="up", progress=lambda w, t: transfer.Progress(w, t, stream=out, force=True))
    assert sent == len(big) and "MiB (100%)" in out.getvalue()
    transfer.upload_dir(c, "xfer-bucket", "p", str(src))
    assert len(s3.keys("xfer-bucket")) == 51 and "p/skip.tmp" not in s3.keys("xfer-bucket")
    head = s3.client().head_object(Bucket="xfer-bucket", Key="p/deep/big.bin")
    assert head["ETag"].strip('"').endswith("-3")  # completed as a 3-part multipart upload
    dest = tmp_path / "dest"
    dest.mkdir()
    got = transfer.download_prefix(c, "xfer-bucket", "p", str(dest))
    assert len(got) == 51 and (dest / "deep" / "big.bin").read_bytes() == big
    assert (dest / "small7.txt").read_text() == "item 7\n"


def test_no_credentials_and_a_missing_bucket_are_named(s3, tmp_path, monkeypatch):
    with pytest.raises(StorageError, match=r"bucket 'nope-bucket': no such bucket") as info:
        buckets.prepare([mount_of("/data", "s3://nope-bucket/x")])
    assert info.value.cause == "no-such-bucket" and info.value.bucket == "nope-bucket"
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(StorageError, match=r"mounts\['/data'\]: s3://some-bucket/x: no credentials found") as info:
        buckets.prepare([mount_of("/data", "s3://some-bucket/x")])
    assert info.value.cause == "no-credentials"


def test_a_download_cut_half_way_leaves_no_partial_file_and_no_done_record(s3, tmp_path):
    _bucket(s3, "cut-bucket", {f"f{i}.bin": os.urandom(1 << 20) for i in range(4)})
    big = os.urandom(transfer.PART * 6)
    s3.client().put_object(Bucket="cut-bucket", Key="huge.bin", Body=big)
    acc = s3mod.access(Bucket("cut-bucket"))
    target = tmp_path / "cut"
    mount = mount_of(str(target), "s3://cut-bucket")
    calls = []
    real = transfer.Progress.__call__

    def stop_server_mid_transfer(self, n):  # the server dies inside the large object's download
        calls.append(n)
        if sum(calls) > (4 << 20) + transfer.PART and s3.proc.poll() is None:
            s3.stop()
        real(self, n)

    transfer.Progress.__call__ = stop_server_mid_transfer
    try:
        with pytest.raises(StorageError) as info:
            node.install([(mount, acc)], "cut-session")
    finally:
        transfer.Progress.__call__ = real
    assert info.value.cause == "interrupted" and info.value.bucket == "cut-bucket", info.value
    assert "s3://cut-bucket/" in str(info.value)
    for path in target.rglob("*"):  # whatever is there is whole, under its own name
        assert path.name in {"f0.bin", "f1.bin", "f2.bin", "f3.bin", "huge.bin"}, path
        assert path.stat().st_size == (len(big) if path.name == "huge.bin" else 1 << 20)
    s3.start()  # the same mount again (moto starts empty: fill it again): nothing recorded as done
    _bucket(s3, "cut-bucket", {"huge.bin": big})
    node.install([(mount, acc)], "cut-session")
    assert (target / "huge.bin").read_bytes() == big


def test_a_full_disk_on_the_node_is_named_and_leaves_no_partial_file(s3, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    _bucket(s3, "full-bucket", {"ok.txt": b"small", "big.bin": os.urandom(3 << 20)})
    target = tmp_path / "tiny"
    target.mkdir()
    import subprocess

    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target)], check=True)
    try:
        acc = s3mod.access(Bucket("full-bucket"))
        # the small file may be the one that finds the disk full, while the large one fills it
        with pytest.raises(StorageError, match=r"downloading s3://full-bucket/(big.bin|ok.txt): the disk is full") \
                as info:
            node.install([(mount_of(str(target), "s3://full-bucket"), acc)], "full-session")
        assert info.value.cause == "disk-full" and info.value.key in ("big.bin", "ok.txt")
        assert sorted(p.name for p in target.iterdir()) in ([], ["ok.txt"])
    finally:
        subprocess.run(["umount", str(target)], check=True)


# ---- Pool(mounts=...) on Local ------------------------------------------------------------------------

def _train(steps: int) -> tuple[int, list[str]]:
    import os as _os

    ckpt = sky.checkpoint_dir()
    done = [int(p.split("-")[1]) for p in _os.listdir(ckpt) if p.startswith("step-")]
    start = max(done, default=0)
    for step in range(start + 1, start + steps + 1):
        tmp = ckpt / f"step-{step}.tmp"
        tmp.write_text(str(step))
        tmp.rename(ckpt / f"step-{step}")
    data = sorted(_os.listdir("/tmp/skyhive-i27-data" if False else _os.environ["DATA_DIR"]))
    return start, data


def test_pool_mounts_a_copied_prefix_and_a_cached_bucket_on_local_nodes(s3, tmp_path, monkeypatch):
    _bucket(s3, "data-bucket", {"train/a.txt": b"A", "train/b.txt": b"B", "other/c.txt": b"C"})
    src = tmp_path / "seed"
    src.mkdir()
    (src / "README").write_text("made by the test")
    data, ckpt = tmp_path / "data", tmp_path / "ckpt"
    monkeypatch.setenv("DATA_DIR", str(data))
    mounts = {str(data): "s3://data-bucket/train",
              str(ckpt): {"name": "runs-bucket", "source": str(src), "mode": "MOUNT_CACHED"}}
    with sky.Pool(provider=sky.Local(), nodes=2, name="trainjob", mounts=mounts) as pool:
        start, listing = pool.run(_train, 3)
        assert (start, listing) == (0, ["a.txt", "b.txt"])
    # the cached mount was flushed when the pool ended: the bucket holds the job's checkpoints
    keys = s3.keys("runs-bucket")
    assert {"README", "trainjob/step-1", "trainjob/step-3"} <= set(keys) and not any(k.endswith(".tmp") for k in keys)
    assert "runs-bucket" in buckets.created_buckets(s3mod.access(Bucket("runs-bucket")))
    # a fresh machine (the folder gone) and the same job: it resumes from the bucket's last checkpoint
    import shutil

    shutil.rmtree(ckpt)
    with sky.Pool(provider=sky.Local(), nodes=1, name="trainjob", mounts=mounts) as pool:
        assert pool.run(_train, 2)[0] == 3
    assert "trainjob/step-5" in s3.keys("runs-bucket")


def test_a_pool_whose_mount_cannot_be_made_names_the_path_and_deletes_what_it_created(s3, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    src = tmp_path / "seed"
    src.mkdir()
    (src / "x").write_text("x")
    mounts = {str(blocker / "sub"): {"name": "temp-bucket", "source": str(src), "mode": "COPY", "persistent": False}}
    with pytest.raises(Exception, match=rf"cannot create or write the folder {blocker}/sub"):
        with sky.Pool(provider=sky.Local(), nodes=1, mounts=mounts) as pool:
            pool.run(int, 1)
    assert "temp-bucket" not in s3.buckets()  # nothing skyhive created is left


def test_checkpoint_dir_without_a_checkpoint_mount_says_how_to_get_one(monkeypatch):
    monkeypatch.delenv("SKYHIVE_CHECKPOINT_DIR", raising=False)
    with pytest.raises(StorageError, match="no checkpoint mount.*MOUNT_CACHED"):
        sky.checkpoint_dir()


# ---- MOUNT (FUSE) ---------------------------------------------------------------------------------

def test_a_fuse_mount_reads_and_writes_the_bucket_where_fuse_works(s3, tmp_path):
    problem = node.fuse_problem()
    if problem:
        pytest.skip(f"FUSE cannot work for this test process: {problem}")
    _bucket(s3, "fuse-bucket", {"in/a.txt": b"from the bucket"})
    target = tmp_path / "fuse"
    acc = s3mod.access(Bucket("fuse-bucket"))
    node.install([(mount_of(str(target), {"source": "s3://fuse-bucket/in", "mode": "MOUNT"}), acc)], "fuse-session")
    try:
        assert (target / "a.txt").read_text() == "from the bucket"
        (target / "b.txt").write_text("written through FUSE")
    finally:
        node.finish()  # unmounts (rclone uploads what was written before the mount goes)
    assert not os.path.ismount(target)
    assert s3.client().get_object(Bucket="fuse-bucket", Key="in/b.txt")["Body"].read() == b"written through FUSE"


def test_a_fuse_mount_is_refused_with_why_where_fuse_cannot_work(s3, tmp_path, monkeypatch):
    _bucket(s3, "nofuse-bucket", {})
    monkeypatch.setattr(node.shutil, "which", lambda tool: None)  # a node without rclone
    acc = s3mod.access(Bucket("nofuse-bucket"))
    mount = mount_of(str(tmp_path / "m"), {"source": "s3://nofuse-bucket", "mode": "MOUNT"})
    with pytest.raises(StorageError, match=r"mode MOUNT of s3://nofuse-bucket cannot work here: rclone is not "
                                           r"installed on this node .*MOUNT_CACHED") as info:
        node.install([(mount, acc)], "nofuse-session")
    assert info.value.cause == "unsupported"


# ---- skyhive storage ls/delete --------------------------------------------------------------------------

def test_storage_ls_and_delete_touch_only_the_buckets_skyhive_created(s3, tmp_path):
    import subprocess
    import sys

    _bucket(s3, "users-own", {"keep.txt": b"mine"})
    src = tmp_path / "seed"
    src.mkdir()
    (src / "a").write_text("a")
    buckets.prepare([mount_of("/x", {"name": "made-by-sky", "source": str(src)})])

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "skyhive", "storage", *args], capture_output=True, text=True,
                              timeout=120)

    listed = cli("ls")
    assert listed.returncode == 0 and "made-by-sky" in listed.stdout and "users-own" not in listed.stdout, listed
    refused = cli("delete", "users-own")
    assert refused.returncode == 1 and "users-own not created by skyhive" in refused.stderr, refused
    assert "users-own" in s3.buckets()
    gone = cli("delete", "--all")
    assert gone.returncode == 0 and "deleted s3://made-by-sky (1 objects)" in gone.stdout, gone
    assert s3.buckets() == ["users-own"]
    assert "no buckets created by skyhive" in cli("ls").stdout


def test_an_upload_cut_half_way_leaves_no_object_and_the_bucket_it_made_is_named_then_deletable(s3, tmp_path,
                                                                                                   monkeypatch, caplog):
    from tests.infra.moto_s3 import CutProxy

    src = tmp_path / "seed"
    src.mkdir()
    (src / "weights.bin").write_bytes(os.urandom(transfer.PART * 3))  # three parts
    proxy = CutProxy(s3.port, cut_after=transfer.PART + (1 << 20))  # the endpoint dies inside part two
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
    try:
        with pytest.raises(StorageError) as info:
            buckets.prepare([mount_of("/w", {"name": "cut-upload", "source": str(src), "persistent": False})])
        assert info.value.cause == "interrupted" and info.value.key == "weights.bin", info.value
        assert "s3://cut-upload/weights.bin" in str(info.value)
        assert proxy.cut.is_set()
        # straight to the server: no object was completed; the bucket skyhive made could not be deleted
        # through the dead endpoint, and the log says so, naming it and the command that finishes it
        assert s3.keys("cut-upload") == []
        assert "left bucket cut-upload" in caplog.text and "skyhive storage delete cut-upload" in caplog.text
        proxy.restore()
        buckets.delete_bucket(s3mod.client(s3mod.access(Bucket("cut-upload"))), "cut-upload")
        assert "cut-upload" not in s3.buckets()
    finally:
        proxy.close()


def test_keys_the_endpoint_does_not_know_are_access_denied_naming_the_bucket(tmp_path, monkeypatch):
    from tests.infra.moto_s3 import S3Server, _free_port

    isolated_aws_env(monkeypatch, tmp_path)
    server = S3Server("127.0.0.1", _free_port("127.0.0.1"), env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    server.start()  # moto checking every request's keys against its IAM users (there are none)
    try:
        acc = s3mod.access(Bucket("locked-bucket", endpoint_url=server.endpoint))
        with pytest.raises(StorageError, match=r"listing bucket 'locked-bucket': access denied") as info:
            transfer.download_prefix(s3mod.client(acc), "locked-bucket", "", str(tmp_path / "d"))
        assert info.value.cause == "access-denied" and info.value.bucket == "locked-bucket"
    finally:
        server.stop()


def test_a_mount_is_copied_once_per_machine_and_session(s3, tmp_path):
    _bucket(s3, "once-bucket", {"a.txt": b"A"})
    acc = s3mod.access(Bucket("once-bucket"))
    mount = mount_of(str(tmp_path / "once"), "s3://once-bucket")
    assert node.install([(mount, acc)], "session-1") == [str(tmp_path / "once")]
    s3.stop()  # a second worker of the same machine and session needs nothing from the endpoint
    assert node.install([(mount, acc)], "session-1") == []
    with pytest.raises(StorageError, match="interrupted|the transfer was cut"):
        node.install([(mount, acc)], "session-2")  # a new launch copies again


def test_a_worker_that_finds_the_mount_done_but_its_uploader_dead_takes_the_upload_over(s3, tmp_path):
    """A worker restarted on the same machine: the mount is there (not downloaded again), but the worker
    that uploaded its writes is gone — the new one uploads what changed since that one's last sync."""
    import subprocess
    import sys

    _bucket(s3, "takeover-bucket", {"old.txt": b"old"})
    acc = s3mod.access(Bucket("takeover-bucket"))
    target = tmp_path / "ckpt"
    mount = mount_of(str(target), sky.Bucket("takeover-bucket", mode="MOUNT_CACHED"))
    # the first worker: another process that installs the mount, then is gone (its syncer with it)
    code = ("import pickle, sys; from skyhive.runtime.storage import node; "
            "node.install(pickle.loads(sys.stdin.buffer.read()), 'takeover')")
    import pickle

    subprocess.run([sys.executable, "-c", code], input=pickle.dumps([(mount, acc)]), check=True, timeout=120)
    assert (target / "old.txt").read_bytes() == b"old"
    (target / "new.txt").write_text("written after the first worker died")
    assert node.install([(mount, acc)], "takeover") == []  # not downloaded again
    assert node.active_syncers() == [str(target)]  # but its uploads taken over
    node.finish()
    assert s3.keys("takeover-bucket") == ["new.txt", "old.txt"]


def test_partial_files_are_never_shown_as_complete_nor_uploaded(s3, tmp_path):
    """A copy killed earlier left a partial download (named as skyhive's): the next install removes it;
    a writer's temporary files and partials are never uploaded from a cached mount."""
    _bucket(s3, "partial-bucket", {"data.bin": b"whole"})
    target = tmp_path / "p"
    target.mkdir()
    (target / f"data.bin{transfer.TEMP_MARK}-dead1234").write_bytes(b"half")
    acc = s3mod.access(Bucket("partial-bucket"))
    node.install([(mount_of(str(target), sky.Bucket("partial-bucket", mode="MOUNT_CACHED")), acc)], "partial")
    assert sorted(p.name for p in target.iterdir()) == ["data.bin"]
    (target / "ckpt.pt.tmp").write_text("being written")
    (target / f"more.bin{transfer.TEMP_MARK}-x").write_text("partial")
    (target / "ckpt.pt").write_text("done")
    node.finish()
    assert s3.keys("partial-bucket") == ["ckpt.pt", "data.bin"]


def test_deletes_in_a_cached_mount_reach_the_bucket_once_settled_and_a_delete_racing_an_upload_wins(
        s3, tmp_path, monkeypatch):
    """A file deleted in a MOUNT_CACHED folder is deleted from the bucket once the deletion held for one
    scan (as a write must), after that scan's uploads (a checkpoint renamed: the new name is in the bucket
    before the old one goes); a file deleted before or while its upload runs ends with no object, no error
    and no unfinished multipart upload; `finish` propagates the deletions of the last moment."""
    monkeypatch.setenv("SKYHIVE_STORAGE_SYNC_INTERVAL", "3600")  # the scans below are the test's, one by one
    _bucket(s3, "del-bucket", {"run/a.txt": b"A", "run/dir/b.txt": b"B", "run/dir/c.txt": b"C",
                               "run/keep.txt": b"K", "run/step-1": b"1", "other/x.txt": b"outside the prefix"})
    target = tmp_path / "ckpt"
    acc = s3mod.access(Bucket("del-bucket"))
    node.install([(mount_of(str(target), sky.Bucket("s3://del-bucket/run", mode="MOUNT_CACHED")), acc)], "del")
    syncer = node._syncers[str(target)]
    keys = lambda: s3.keys("del-bucket")  # noqa: E731

    (target / "a.txt").unlink()
    import shutil

    shutil.rmtree(target / "dir")
    (target / "step-1").rename(target / "step-2")
    assert syncer.sync(settled_only=True) == 0  # seen once: nothing sent yet
    assert "run/a.txt" in keys() and "run/step-1" in keys()
    assert syncer.sync(settled_only=True) == 5  # step-2 up, then a.txt, dir/b.txt, dir/c.txt, step-1 gone
    assert keys() == ["other/x.txt", "run/keep.txt", "run/step-2"]

    # deleted after the scan saw it, before its upload: skipped, and keep.txt's object goes at the next scan
    (target / "keep.txt").write_text("changed, then deleted")
    (target / "new.txt").write_text("deleted before upload")
    syncer.sync(settled_only=True)
    real_upload = node.upload_files

    def delete_first(s3c, bucket, files, **kw):
        for path, _ in files:
            os.unlink(path)
        return real_upload(s3c, bucket, files, **kw)

    monkeypatch.setattr(node, "upload_files", delete_first)
    assert syncer.sync(settled_only=True) == 0
    monkeypatch.setattr(node, "upload_files", real_upload)
    assert keys() == ["other/x.txt", "run/keep.txt", "run/step-2"]  # the old keep.txt still: not settled
    syncer.sync(settled_only=True)
    assert keys() == ["other/x.txt", "run/step-2"]

    # deleted while being uploaded: a single PUT (the file already open) completes and the next scan deletes
    # the object; a multipart upload reading its parts fails, is aborted, and no object appears
    (target / "small.bin").write_bytes(b"s" * 1000)
    (target / "large.bin").write_bytes(os.urandom(transfer.PART * 2 + 1))
    syncer.sync(settled_only=True)
    hits = []

    def unlink_during(name: str):
        def handler(**kwargs):
            path = target / name
            if path.exists():
                hits.append(name)
                path.unlink()
        return handler

    syncer.s3.meta.events.register("before-call.s3.PutObject", unlink_during("small.bin"))
    # before any part is opened (s3transfer opens a part's file when it sends it, after this call)
    syncer.s3.meta.events.register("before-call.s3.CreateMultipartUpload", unlink_during("large.bin"))
    assert syncer.sync(settled_only=True) == 1  # small.bin sent, large.bin skipped
    assert sorted(hits) == ["large.bin", "small.bin"]
    assert keys() == ["other/x.txt", "run/small.bin", "run/step-2"]
    assert s3.client().list_multipart_uploads(Bucket="del-bucket").get("Uploads", []) == []
    syncer.sync(settled_only=True)
    syncer.sync(settled_only=True)
    assert keys() == ["other/x.txt", "run/step-2"]

    target.rename(tmp_path / "away")  # the folder itself gone (a home cleaned up): no object deleted
    assert syncer.sync(settled_only=False) == 0 and keys() == ["other/x.txt", "run/step-2"]
    (tmp_path / "away").rename(target)
    (target / "step-2").unlink()  # the last moment: flushed at the end without waiting for a scan
    node.finish()
    assert keys() == ["other/x.txt"] and syncer.deleted == 7
