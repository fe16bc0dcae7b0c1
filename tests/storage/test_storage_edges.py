"""Nothing a job wrote to a MOUNT_CACHED folder is lost at the edges (issue 36): `skyhive down` of a named
pool uploads what its workers' cached mounts still held (or keeps the files it could not upload, naming
them); a FIFO or socket in the folder is skipped with a warning instead of hanging the job's end; and a
multipart upload killed mid-way is shown by `skyhive storage ls` and aborted when the pool goes down.
Real named pools on Local, `skyhive` in real processes, moto_server as the S3 endpoint (127.0.0.1).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.clusters.test_clusters import clean  # noqa: F401 - the fixture (named pools downed after the test)
from tests.commands.test_cli_launch import SKYHIVE, skyhive
from tests.infra.moto_s3 import CutProxy, s3  # noqa: F401 - the fixture

WRITER = """\
import os, time
folder = os.environ["SKYHIVE_CHECKPOINT_DIR"]
os.makedirs(folder, exist_ok=True)
with open({written!r}, "a") as log:
    n = 0
    while True:
        n += 1
        tmp = os.path.join(folder, f"ckpt-{{n}}.bin.tmp")
        with open(tmp, "wb") as fh:
            fh.write(b"x" * 4096)
        os.replace(tmp, os.path.join(folder, f"ckpt-{{n}}.bin"))
        log.write(f"ckpt-{{n}}.bin\\n")
        log.flush()
        time.sleep(0.05)
"""


def _writer_task(tmp_path: Path, bucket: str) -> Path:
    """A task that writes a checkpoint every 50 ms into its checkpoint folder (in the node's own home,
    `~/ckpt`), naming each in `written` once it is complete; returns `written` (and its worker's pid is
    written to `worker`)."""
    written = tmp_path / "written"
    (tmp_path / "writer.py").write_text(WRITER.format(written=str(written)))
    (tmp_path / "t.yaml").write_text(textwrap.dedent(f"""\
        name: ckjob
        resources:
          cloud: local
        file_mounts:
          ~/ckpt:
            name: {bucket}
            mode: MOUNT_CACHED
        run: |
          echo $PPID > {tmp_path}/worker
          python {tmp_path}/writer.py
        """))
    return written


def _wait(what: str, done, deadline_s: float = 240) -> None:
    deadline = time.monotonic() + deadline_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _written(path: Path) -> list[str]:
    return [f"ckjob/{line}" for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_down_uploads_every_checkpoint_a_running_job_wrote_before_deleting_the_node_home(clean, s3, tmp_path):
    s3.client().create_bucket(Bucket="ck-down")
    written = _writer_task(tmp_path, "ck-down")
    launched = skyhive("launch", "-y", "-d", "-c", "ckpool", "t.yaml", cwd=tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    _wait("checkpoints in the bucket", lambda: len(s3.keys("ck-down")) >= 5)  # the background upload runs
    down = skyhive("down", "ckpool", "-y", cwd=tmp_path)
    assert down.returncode == 0, down.stdout + down.stderr
    wrote = _written(written)
    keys = set(s3.keys("ck-down"))
    assert wrote and not set(wrote) - keys, f"written but not in the bucket: {sorted(set(wrote) - keys)}"
    assert not (Path(clean) / "work" / "ckpool").exists()  # the node's home went with the pool, after the upload
    assert not list((Path(clean) / "storage" / "unsent").glob("*"))  # nothing needed keeping
    assert s3.client().list_multipart_uploads(Bucket="ck-down").get("Uploads", []) == []


KEPT_POOL = """\
import skyhive as sky

def write():
    folder = sky.checkpoint_dir()
    for n in range(30):
        (folder / f"f-{{n}}.txt").write_text(str(n))
    return len(list(folder.iterdir()))

mounts = {{{target!r}: sky.Bucket("ck-keep", mode="MOUNT_CACHED")}}
with sky.Pool(provider=sky.Local(), nodes=1, name="ckkeep", keep=True, mounts=mounts, output=None) as pool:
    print("wrote", pool.run(write), flush=True)
"""


def test_stop_uploads_what_a_kept_pool_s_cached_mount_still_held(clean, s3, tmp_path):
    """A kept Python pool (`Pool(name=..., keep=True, mounts=...)`) whose last task wrote files, its
    background sync slowed to every 10 minutes: `skyhive stop` (the path autostop takes too) uploads them."""
    s3.client().create_bucket(Bucket="ck-keep")
    (tmp_path / "keep.py").write_text(KEPT_POOL.format(target=str(tmp_path / "ck")))
    env = {**os.environ, "SKYHIVE_STORAGE_SYNC_INTERVAL": "600"}
    ran = subprocess.run([sys.executable, "keep.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=240)
    assert ran.returncode == 0 and "wrote 30" in ran.stdout, ran.stdout + ran.stderr
    stopped = skyhive("stop", "ckkeep", "-y", cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert s3.keys("ck-keep") == sorted(f"ckkeep/f-{n}.txt" for n in range(30))


def test_a_killed_client_s_workers_upload_every_checkpoint_before_they_exit(s3, tmp_path):
    """`skyhive launch` (no name) SIGKILLed while its job writes: the workers, their client gone, upload
    what their cached mount holds before they exit."""
    s3.client().create_bucket(Bucket="ck-client")
    written = _writer_task(tmp_path, "ck-client")
    client = subprocess.Popen([*SKYHIVE, "launch", "-y", "t.yaml"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        _wait("checkpoints in the bucket", lambda: len(s3.keys("ck-client")) >= 5)
    finally:
        client.kill()
        client.wait()
    worker = int((tmp_path / "worker").read_text())
    _wait("the worker gone", lambda: not _alive(worker), 120)
    wrote = _written(written)
    keys = set(s3.keys("ck-client"))
    assert wrote and not set(wrote) - keys, f"written but not in the bucket: {sorted(set(wrote) - keys)}"


def test_down_keeps_and_names_the_checkpoints_it_could_not_upload(clean, s3, tmp_path, monkeypatch):
    s3.client().create_bucket(Bucket="ck-cut")
    proxy = CutProxy(s3.port, cut_after=1 << 62)  # the nodes reach the endpoint through it
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
    try:
        written = _writer_task(tmp_path, "ck-cut")
        launched = skyhive("launch", "-y", "-d", "-c", "ckcut", "t.yaml", cwd=tmp_path)
        assert launched.returncode == 0, launched.stdout + launched.stderr
        _wait("checkpoints in the bucket", lambda: len(s3.keys("ck-cut")) >= 3)
        proxy.cut_after = 0  # the endpoint becomes unreachable at the next upload
        _wait("the endpoint cut", proxy.cut.is_set)
        down = skyhive("down", "ckcut", "-y", cwd=tmp_path)
        assert down.returncode == 0, down.stdout + down.stderr
    finally:
        proxy.close()
    wrote = set(_written(written))
    missing = wrote - set(s3.keys("ck-cut"))
    assert missing, "every checkpoint reached the bucket although the endpoint was cut"
    kept = list((Path(clean) / "storage" / "unsent").iterdir())
    assert len(kept) == 1, kept
    manifest = (kept[0] / "UNSENT.txt").read_text().splitlines()
    assert manifest[1] == "bucket: s3://ck-cut"
    held = {f"ckjob/{p.name}" for p in (kept[0] / "ckjob").iterdir()}
    assert missing <= held, f"neither uploaded nor kept: {sorted(missing - held)}"
    assert {f"ckjob/{line.rsplit('/', 1)[-1]}" for line in manifest[2:]} == held
    assert "could not be uploaded to s3://ck-cut" in down.stderr and str(kept[0]) in down.stderr, down.stderr
    assert not (Path(clean) / "work" / "ckcut").exists()


def _run_to_end(args: list[str], cwd: Path, timeout: float = 240) -> tuple[int, str]:
    """Run `skyhive ARGS` to its end (its whole process group killed if it has not ended by `timeout`)."""
    proc = subprocess.Popen([*SKYHIVE, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"`skyhive {' '.join(args)}` did not end in {timeout:g} s: {out[-3000:]}") from None
    return proc.returncode, out


def test_a_fifo_or_socket_in_a_cached_mount_is_skipped_with_a_warning_and_the_job_ends(clean, s3, tmp_path):
    s3.client().create_bucket(Bucket="ck-fifo")
    (tmp_path / "t.yaml").write_text(textwrap.dedent("""\
        name: fifojob
        resources:
          cloud: local
        file_mounts:
          ~/ckpt:
            name: ck-fifo
            mode: MOUNT_CACHED
        run: |
          mkdir -p "$SKYHIVE_CHECKPOINT_DIR"
          cd "$SKYHIVE_CHECKPOINT_DIR"
          mkfifo a-fifo
          python -c "import socket; socket.socket(socket.AF_UNIX).bind('a-socket')"
          echo kept > ok.txt
          sleep 2.5
        """))
    code, out = _run_to_end(["launch", "-y", "-c", "fifopool", "t.yaml"], tmp_path)
    assert code == 0, out
    assert "fifojob/ok.txt" in s3.keys("ck-fifo")
    assert not {"fifojob/a-fifo", "fifojob/a-socket"} & set(s3.keys("ck-fifo"))
    for name in ("a-fifo", "a-socket"):
        assert f"{name}: skipped, not a regular file" in out, out
    assert skyhive("down", "fifopool", "-y", cwd=tmp_path).returncode == 0


def test_a_file_whose_name_is_not_utf8_is_kept_and_named_and_the_others_still_reach_the_bucket(clean, s3, tmp_path):
    """An object key is UTF-8 (S3's API reference, "Naming Amazon S3 objects"): a file named with other bytes
    cannot be uploaded under its name. It is skipped with a warning naming it (escaped), kept where the pool's
    end keeps what it could not upload, and the folder's other files are uploaded as usual; the job ends well
    and its worker lives on (issue 36 point 3: the flush killed the worker)."""
    s3.client().create_bucket(Bucket="ck-names")
    (tmp_path / "t.yaml").write_text(textwrap.dedent("""\
        name: namesjob
        resources:
          cloud: local
        file_mounts:
          ~/ckpt:
            name: ck-names
            mode: MOUNT_CACHED
        run: |
          mkdir -p "$SKYHIVE_CHECKPOINT_DIR"
          cd "$SKYHIVE_CHECKPOINT_DIR"
          python -c "open(b'bad-\\xff.bin', 'wb').write(b'x' * 10)"
          echo kept > ok.txt
          sleep 2.5
        """))
    code, out = _run_to_end(["launch", "-y", "-c", "namespool", "t.yaml"], tmp_path)
    assert code == 0, out
    assert s3.keys("ck-names") == ["namesjob/ok.txt"]
    assert "bad-\\xff.bin: skipped, its name is not UTF-8" in out, out
    again = skyhive("exec", "namespool", "t.yaml", cwd=tmp_path)  # the same worker takes the next job
    assert again.returncode == 0, again.stderr
    done = skyhive("down", "namespool", "-y", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    kept = [p for p in (Path(clean) / "storage" / "unsent").rglob("*") if p.is_file() and p.name != "UNSENT.txt"]
    # a copy at each job's end (two jobs ran), under the name's own bytes
    assert [os.fsencode(p.name) for p in kept] == [b"bad-\xff.bin"] * 2, kept
    assert all(p.read_bytes() == b"x" * 10 for p in kept)


def test_a_killed_upload_is_shown_by_storage_ls_and_aborted_at_down(clean, s3, tmp_path, monkeypatch):
    s3.client().create_bucket(Bucket="ck-mpu")
    # the endpoint goes away inside the big file's second part (what goes before it is a few KiB)
    proxy = CutProxy(s3.port, cut_after=12 * (1 << 20))
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
    pids = tmp_path / "pids"
    (tmp_path / "t.yaml").write_text(textwrap.dedent(f"""\
        name: bigjob
        resources:
          cloud: local
        file_mounts:
          ~/ckpt:
            name: ck-mpu
            mode: MOUNT_CACHED
        run: |
          echo "$PPID" > {pids}
          mkdir -p "$SKYHIVE_CHECKPOINT_DIR"
          head -c 25165824 /dev/zero > "$SKYHIVE_CHECKPOINT_DIR/big.tmp"
          mv "$SKYHIVE_CHECKPOINT_DIR/big.tmp" "$SKYHIVE_CHECKPOINT_DIR/big.bin"
          sleep 100000
        """))
    try:
        launched = skyhive("launch", "-y", "-d", "-c", "mpupool", "t.yaml", cwd=tmp_path)
        assert launched.returncode == 0, launched.stdout + launched.stderr
        _wait("the worker's pid", lambda: pids.exists() and pids.read_text().strip() != "")
        worker = int(pids.read_text())
        moto = s3.client()
        _wait("a multipart upload started", lambda: moto.list_multipart_uploads(Bucket="ck-mpu").get("Uploads"))
        _wait("the endpoint cut", proxy.cut.is_set)
        os.killpg(worker, signal.SIGKILL)  # the node's worker dies mid-upload
        _wait("the worker gone", lambda: not _alive(worker), 60)
        proxy.restore()
        listed = skyhive("storage", "ls", "s3://ck-mpu", cwd=tmp_path)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert "unfinished uploads (1;" in listed.stdout and "s3://ck-mpu/bigjob/big.bin" in listed.stdout, listed.stdout
        down = skyhive("down", "mpupool", "-y", cwd=tmp_path)
        assert down.returncode == 0, down.stdout + down.stderr
    finally:
        proxy.close()
    assert s3.client().list_multipart_uploads(Bucket="ck-mpu").get("Uploads", []) == []
    assert "big.bin" not in " ".join(s3.keys("ck-mpu"))
    assert not list((Path(clean) / "storage" / "uploads").glob("*.json"))  # nothing journaled is left
    again = skyhive("storage", "ls", "s3://ck-mpu", cwd=tmp_path)
    assert "unfinished uploads" not in again.stdout, again.stdout


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_last_upload_keeps_what_it_cannot_send_undecodable_names_included(s3, tmp_path, skyhive_home,
                                                                              monkeypatch):
    """In process: a cached mount whose endpoint is gone when its worker ends keeps every unsent file,
    one whose name is not UTF-8 included, under its own bytes, and names them in UNSENT.txt."""
    import skyhive as sky
    from skyhive.runtime.storage import node, s3 as s3mod
    from skyhive.runtime.storage.spec import Bucket, mount_of

    s3.client().create_bucket(Bucket="ck-last")
    monkeypatch.setenv("SKYHIVE_STORAGE_SYNC_INTERVAL", "600")  # only the last upload sends
    target = tmp_path / "ck"
    node.install([(mount_of(str(target), sky.Bucket("ck-last", mode="MOUNT_CACHED")),
                   s3mod.access(Bucket("ck-last")))], "last-upload")
    (target / "ok.bin").write_bytes(b"ok")
    with open(os.path.join(os.fsencode(target), b"bad-\xff.bin"), "wb") as fh:
        fh.write(b"bad")
    s3.stop()  # the endpoint gone
    node.flush_before_exit()
    assert node.active_syncers() == []
    kept = list((Path(skyhive_home) / "storage" / "unsent").iterdir())
    assert len(kept) == 1, kept
    assert sorted(os.listdir(os.fsencode(kept[0]))) == [b"UNSENT.txt", b"bad-\xff.bin", b"ok.bin"]
    manifest = (kept[0] / "UNSENT.txt").read_text().splitlines()
    assert manifest[:2] == [f"folder: {target}", "bucket: s3://ck-last"]
    assert sorted(manifest[2:]) == ["bad-\\xff.bin", "ok.bin"]
