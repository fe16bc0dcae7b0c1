"""SkyPilot task files with bucket `file_mounts`, run by `skyhive launch` on Local against moto_server as
the S3 endpoint (127.0.0.1, set the AWS way): a COPY mount downloaded before `setup`, a bucket made and
filled from a local `source` (and deleted after the job, being not persistent), and the checkpoint
pattern — a training job killed mid-run (SIGKILL of its worker, its processes and its client) and started
again on a fresh machine resumes from the last checkpoint it had uploaded.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import textwrap
import time
from pathlib import Path
import pytest

from skyhive.errors import StorageError
from skyhive.runtime.control.launch import run_launch
from skyhive.runtime.commands.taskfile import loads
from tests.infra.moto_s3 import s3  # noqa: F401 - the fixture
from tests.commands.test_cli_launch import SKYHIVE, by_node
from tests.clusters.test_clusters import clean  # noqa: F401 - the fixture (named pools downed after the test)
from tests.procs import Lines


def test_a_copy_mount_is_there_before_setup_and_a_sourced_bucket_is_made_then_removed(s3, tmp_path, capsys):
    c = s3.client()
    c.create_bucket(Bucket="train-data")
    for i in range(3):
        c.put_object(Bucket="train-data", Key=f"shards/part-{i}.txt", Body=f"shard {i}\n".encode())
    c.put_object(Bucket="train-data", Key="elsewhere/skip.txt", Body=b"not under the prefix")
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "vocab.txt").write_text("hello world\n")
    data, out = tmp_path / "data", tmp_path / "out"
    task = loads(textwrap.dedent(f"""\
        name: copyjob
        num_nodes: 2
        file_mounts:
          {data}: s3://train-data/shards
          {out}:
            name: scratch-bucket
            source: ./seed
            mode: MOUNT_CACHED
            persistent: false
        setup: |
          echo "setup sees $(cat {data}/part-*.txt | paste -sd,) and $(cat {out}/vocab.txt)"
        run: |
          echo "node $SKYPILOT_NODE_RANK $(ls {data} | paste -sd,)"
          echo "result of $SKYPILOT_NODE_RANK" > {out}/result-$SKYPILOT_NODE_RANK.txt
        """), cwd=str(tmp_path))
    code = run_launch(task)
    printed = capsys.readouterr()
    assert code == 0, printed.err
    nodes = by_node(printed.out)
    assert any("setup sees shard 0,shard 1,shard 2 and hello world" in line for line in nodes[0]), nodes
    assert "part-0.txt,part-1.txt,part-2.txt" in " ".join(nodes[1])
    assert sorted(p.name for p in out.iterdir()) == ["result-0.txt", "result-1.txt", "vocab.txt"]
    assert "scratch-bucket" not in s3.buckets() # made for the job, not persistent: deleted after it
    assert "train-data" in s3.buckets()  # never a bucket skyhive did not make


def test_a_missing_bucket_fails_the_launch_naming_it_before_any_node_work(s3, tmp_path):
    task = loads(f"file_mounts:\n  {tmp_path}/d: s3://absent-bucket/x\nrun: echo never\n", cwd=str(tmp_path))
    with pytest.raises(StorageError, match=r"file_mounts./.*/d: bucket 'absent-bucket': no such bucket"):
        run_launch(task)


TRAIN = """\
import os, pathlib, re, sys, time
ck = pathlib.Path(os.environ["SKYHIVE_CHECKPOINT_DIR"])
ck.mkdir(parents=True, exist_ok=True)
done = sorted(int(m.group(1)) for p in ck.iterdir() if (m := re.fullmatch(r"step-(\\d+)", p.name)))
start = done[-1] if done else 0
print(f"resumed at {{start}} with data {{sorted(os.listdir('{data}'))}}", flush=True)
with open("{pids}", "a") as fh:
    fh.write(f"{{os.getpid()}}\\n")
for step in range(start + 1, {total} + 1):
    print(f"step {{step}}", flush=True)
    if step % 2 == 0:  # a checkpoint every 2 steps: a temporary name, then renamed
        tmp = ck / f"step-{{step}}.tmp"
        tmp.write_text(str(step))
        tmp.rename(ck / f"step-{{step}}")
    if step == {stop} and not os.path.exists("{release}"):
        while True:  # the first run stops here and waits to be killed
            time.sleep(0.2)
print(f"finished at {{step}}", flush=True)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def test_a_killed_training_job_restarted_on_a_fresh_machine_resumes_from_its_last_checkpoint(s3, tmp_path):
    c = s3.client()
    c.create_bucket(Bucket="train-data")
    c.put_object(Bucket="train-data", Key="shards/a.txt", Body=b"A")
    c.create_bucket(Bucket="ckpt-bucket")
    data, ckpt, pids, release = tmp_path / "data", tmp_path / "ckpt", tmp_path / "pids", tmp_path / "release"
    (tmp_path / "train.py").write_text(TRAIN.format(data=data, pids=pids, total=20, stop=10, release=release))
    (tmp_path / "t.yaml").write_text(textwrap.dedent(f"""\
        name: resumable
        file_mounts:
          {data}: s3://train-data/shards
          {ckpt}:
            name: ckpt-bucket
            mode: MOUNT_CACHED
        run: |
          echo "$$ $PPID" >> {pids}
          python {tmp_path}/train.py
        """))
    env = {**os.environ, "SKYHIVE_STORAGE_SYNC_INTERVAL": "0.2"}
    client = subprocess.Popen([*SKYHIVE, "launch", "t.yaml"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    killed: list[int] = []
    out = Lines(client.stdout)
    try:
        deadline = time.monotonic() + 300
        while "resumable/step-10" not in s3.keys("ckpt-bucket"):  # uploaded in the background, mid-run
            if client.poll() is not None or time.monotonic() > deadline:
                client.kill()
                raise AssertionError(f"no checkpoint reached the bucket: {out.rest()}")
            time.sleep(0.2)
        # the node dies: its worker, the job's processes, and the client that ran it, all SIGKILLed
        shell, worker, trainer = (int(x) for x in pids.read_text().split())
        for pid in (worker, shell, trainer, client.pid):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        client.wait()
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    first_run = out.rest(60)
    assert "step 10" in first_run and "step 11" not in first_run, first_run
    assert {"resumable/step-2", "resumable/step-10"} <= set(s3.keys("ckpt-bucket"))
    # a fresh machine: nothing of the first run on its disk
    shutil.rmtree(ckpt)
    shutil.rmtree(data)
    pids.write_text("")
    release.write_text("go on")
    again = subprocess.run([*SKYHIVE, "launch", "t.yaml"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    steps = [int(n) for n in re.findall(r"step (\d+)", again.stdout)]
    assert "resumed at 10 with data ['a.txt']" in again.stdout, again.stdout
    assert steps == list(range(11, 21)) and "finished at 20" in again.stdout, again.stdout
    assert "resumable/step-20" in s3.keys("ckpt-bucket")
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in killed) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in killed)


def test_the_example_task_with_bucket_mounts_runs_as_written_and_resumes(s3, tmp_path):
    """examples/tasks/train-buckets.yaml as written, the endpoint configured the AWS way; HOME is the
    test's (its paths are under ~)."""
    root = Path(__file__).resolve().parents[2] / "examples" / "tasks"
    c = s3.client()
    c.create_bucket(Bucket="skyhive-example-data")
    c.put_object(Bucket="skyhive-example-data", Key="numbers/a.txt", Body=b"1 2 3\n")
    c.put_object(Bucket="skyhive-example-data", Key="numbers/b.txt", Body=b"4\n")
    c.create_bucket(Bucket="skyhive-example-ckpt")
    env = {**os.environ, "HOME": str(tmp_path)}
    first = subprocess.run([*SKYHIVE, "launch", "train-buckets.yaml"], cwd=root, env=env, capture_output=True,
                           text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "dataset: 2 file(s)" in first.stdout and "starting from scratch" in first.stdout, first.stdout
    assert "step 6 total 210" in first.stdout
    assert s3.keys("skyhive-example-ckpt") == [f"bucket-train/step-{n}.json" for n in (2, 4, 6)]
    # on Local each node has a home of its own (docs/cli.md): the mounts went there, never into the user's
    # real home, and the next launch's pool gets fresh node homes — a fresh machine
    assert not (tmp_path / "skyhive-example").exists()
    second = subprocess.run([*SKYHIVE, "launch", "train-buckets.yaml"], cwd=root, env=env, capture_output=True,
                            text=True, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "resuming from step 6" in second.stdout and "step 12 total 780" in second.stdout, second.stdout


def test_a_job_on_a_named_pool_mounts_buckets_and_flushes_its_checkpoints(clean, s3, tmp_path):
    from tests.commands.test_cli_launch import skyhive

    c = s3.client()
    c.create_bucket(Bucket="named-data")
    c.put_object(Bucket="named-data", Key="in/x.txt", Body=b"named-x")
    c.create_bucket(Bucket="named-ckpt")
    data, ckpt = tmp_path / "data", tmp_path / "ckpt"
    (tmp_path / "t.yaml").write_text(textwrap.dedent(f"""\
        name: namedjob
        resources:
          cloud: local
        file_mounts:
          {data}: s3://named-data/in
          {ckpt}:
            name: named-ckpt
            mode: MOUNT_CACHED
        run: |
          echo "read $(cat {data}/x.txt)"
          echo done > $SKYHIVE_CHECKPOINT_DIR/marker.txt || {{ mkdir -p $SKYHIVE_CHECKPOINT_DIR && echo done > $SKYHIVE_CHECKPOINT_DIR/marker.txt; }}
        """))
    done = skyhive("launch", "-y", "-c", "bucketpool", "t.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "read named-x" in done.stdout
    assert s3.keys("named-ckpt") == ["namedjob/marker.txt"]  # flushed when the job ended, the pool still up
