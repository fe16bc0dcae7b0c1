"""Bucket mounts on real OpenSSH hosts in network namespaces (tests/infra/netns.py): the hosts reach the S3
endpoint — `moto_server` on the test bridge's own address, created by the test — through the bridge and
nothing else. Their Python has no boto3: skyhive sends the client's (runtime/storage/deps.py). COPY and
MOUNT_CACHED through a task file and through `Pool(mounts=...)`; MOUNT refused with why (the test users are
not root, and the test makes /dev/fuse 0600 for them on that host, whatever the machine's mode is).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import textwrap

import anyio
import pytest

import skyhive as sky
from skyhive.runtime.control.launch import run_launch
from skyhive.runtime.commands.taskfile import loads
from tests.infra.moto_s3 import S3Server, isolated_aws_env
from tests.commands.test_cli_launch import by_node

pytestmark = pytest.mark.slow


@pytest.fixture
def bridge_s3(netns_hosts, monkeypatch, tmp_path):
    """moto_server on the bridge address the namespace hosts reach, set as the endpoint the AWS way."""
    isolated_aws_env(monkeypatch, tmp_path)
    host = netns_hosts.bridge_address
    with socket.socket() as sock:
        sock.bind((host, 0))
        port = sock.getsockname()[1]
    server = S3Server(host, port)
    server.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", server.endpoint)
    try:
        yield server
    finally:
        server.stop()


def _clean(hosts, *names: str) -> None:
    for host in hosts:
        for name in names:
            shutil.rmtree(host.home / name, ignore_errors=True)


def test_copy_and_cached_mounts_on_ssh_hosts_through_a_task_file(netns_hosts, bridge_s3, tmp_path, capfd):
    from tests.kinds.ssh.test_ssh_pool import ssh_for

    hosts = list(netns_hosts)[:2]
    c = bridge_s3.client()
    c.create_bucket(Bucket="ssh-data")
    c.put_object(Bucket="ssh-data", Key="set/x.txt", Body=b"remote-x")
    c.create_bucket(Bucket="ssh-ckpt")
    for rank in (0, 1):  # an earlier run's files: each node deletes its own, and the bucket follows
        c.put_object(Bucket="ssh-ckpt", Key=f"sshjob/old-{rank}.txt", Body=b"old")
    task = loads(textwrap.dedent("""\
        name: sshjob
        num_nodes: 2
        file_mounts:
          sdata: s3://ssh-data/set
          sckpt:
            name: ssh-ckpt
            mode: MOUNT_CACHED
        setup: |
          echo "setup on $(hostname) reads $(cat ~/sdata/x.txt)"
        run: |
          echo "ckpt $SKYHIVE_CHECKPOINT_DIR"
          mkdir -p $SKYHIVE_CHECKPOINT_DIR
          echo "from $(hostname)" > $SKYHIVE_CHECKPOINT_DIR/rank-$SKYPILOT_NODE_RANK.txt
          rm $SKYHIVE_CHECKPOINT_DIR/old-$SKYPILOT_NODE_RANK.txt
        """), cwd=str(tmp_path))
    try:
        code = run_launch(task, provider=ssh_for(hosts))
        out = capfd.readouterr()
        assert code == 0, out.out + out.err
        nodes = by_node(out.out)
        for n, host in enumerate(hosts):
            assert f"setup on {host.hostname} reads remote-x" in nodes[n], nodes
            assert f"ckpt {host.home}/sckpt/sshjob" in nodes[n]  # made absolute on the node
        keys = bridge_s3.keys("ssh-ckpt")
        assert keys == ["sshjob/rank-0.txt", "sshjob/rank-1.txt"], keys
        got = c.get_object(Bucket="ssh-ckpt", Key="sshjob/rank-1.txt")["Body"].read().decode()
        assert got == f"from {hosts[1].hostname}\n"
    finally:
        _clean(hosts, "sdata", "sckpt", ".skyhive/storage-deps")


def _read_and_checkpoint(tag: str) -> str:
    import os

    ckpt = sky.checkpoint_dir()
    (ckpt / f"{tag}-{sky.instance_info().node}").write_text(tag)
    return open(os.path.expanduser("~/pdata/x.txt")).read()


def test_pool_mounts_on_ssh_hosts(netns_hosts, bridge_s3, tmp_path):
    from tests.kinds.ssh.test_ssh_pool import ssh_for

    hosts = list(netns_hosts)[:2]
    c = bridge_s3.client()
    c.create_bucket(Bucket="pool-data")
    c.put_object(Bucket="pool-data", Key="x.txt", Body=b"pool-x")
    c.create_bucket(Bucket="pool-ckpt")
    mounts = {"pdata": "s3://pool-data", "pckpt": sky.Bucket("pool-ckpt", mode="MOUNT_CACHED")}
    try:
        with sky.Pool(provider=ssh_for(hosts), nodes=2, name="sshpool", mounts=mounts) as pool:
            assert pool.broadcast(_read_and_checkpoint, "epoch1") == ["pool-x", "pool-x"]
        assert bridge_s3.keys("pool-ckpt") == ["sshpool/epoch1-0", "sshpool/epoch1-1"]
    finally:
        _clean(hosts, "pdata", "pckpt", ".skyhive/storage-deps")


def test_a_fuse_mount_on_a_host_whose_user_cannot_open_dev_fuse_is_refused_with_why(netns_hosts, bridge_s3,
                                                                                       tmp_path, capfd):
    from tests.kinds.ssh.test_ssh_pool import ssh_for

    bridge_s3.client().create_bucket(Bucket="fuse-ssh")
    task = loads("file_mounts:\n  fmnt:\n    source: s3://fuse-ssh\n    mode: MOUNT\nrun: echo never\n",
                 cwd=str(tmp_path))
    host = list(netns_hosts)[0]
    # the host's user cannot open its /dev/fuse: one of its own, 0600 and root's, whatever this machine's is
    with host.private_dev_fuse(0o600):
        code = run_launch(task, provider=ssh_for([host]))
    err = capfd.readouterr().err
    assert code != 0
    assert "mode MOUNT of s3://fuse-ssh cannot work here: /dev/fuse is not open to user" in err, err
    assert "never" not in err


TRAIN = """\
import os, pathlib, re, time
ck = pathlib.Path(os.environ["SKYHIVE_CHECKPOINT_DIR"]).expanduser()
ck.mkdir(parents=True, exist_ok=True)
done = sorted(int(m.group(1)) for p in ck.iterdir() if (m := re.fullmatch(r"step-(\\d+)", p.name)))
start = done[-1] if done else 0
print(f"resumed at {start} on {os.uname().nodename}", flush=True)
with open(os.path.expanduser("~/train-pids"), "a") as fh:
    fh.write(f"{os.getpid()}\\n")
for step in range(start + 1, 21):
    print(f"step {step}", flush=True)
    if step % 2 == 0:
        tmp = ck / f"step-{step}.tmp"
        tmp.write_text(str(step))
        tmp.rename(ck / f"step-{step}")
    if step == 10 and not os.path.exists(os.path.expanduser("~/release")):
        while True:
            time.sleep(0.2)
print(f"finished at {step}", flush=True)
"""


def test_a_training_job_killed_on_one_host_resumes_on_a_fresh_host(netns_hosts, bridge_s3, tmp_path, capfd,
                                                                    monkeypatch):
    """The node dies mid-run (its worker, the job's shell and the trainer SIGKILLed); the same task started
    on another host — a machine that never saw the job — resumes from the last checkpoint in the bucket."""
    import os
    import signal
    import threading
    import time

    from tests.kinds.ssh.test_ssh_pool import ssh_for

    first_host, fresh_host = list(netns_hosts)[:2]
    monkeypatch.setenv("SKYHIVE_STORAGE_SYNC_INTERVAL", "0.2")
    c = bridge_s3.client()
    c.create_bucket(Bucket="resume-data")
    c.put_object(Bucket="resume-data", Key="d/a.txt", Body=b"A")
    c.create_bucket(Bucket="resume-ckpt")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text(TRAIN)
    task = loads(textwrap.dedent("""\
        name: hostjob
        workdir: .
        file_mounts:
          rdata: s3://resume-data/d
          rckpt:
            name: resume-ckpt
            mode: MOUNT_CACHED
        run: |
          echo "$$ $PPID" >> ~/train-pids
          python3 train.py
        """), cwd=str(tmp_path / "work"))
    codes: list[int] = []
    from skyhive.runtime.control.launch import launch

    def first_run() -> None:  # in a thread of its own (launch, not run_launch: no signal handlers there)
        codes.append(anyio.run(lambda: launch(task, provider=ssh_for([first_host]))))

    runner = threading.Thread(target=first_run)
    runner.start()
    try:
        deadline = time.monotonic() + 120
        while "hostjob/step-10" not in bridge_s3.keys("resume-ckpt"):
            assert runner.is_alive() and time.monotonic() < deadline, capfd.readouterr()
            time.sleep(0.2)
        shell, worker, trainer = (int(x) for x in (first_host.home / "train-pids").read_text().split())
        for pid in (worker, shell, trainer):
            os.kill(pid, signal.SIGKILL)
        runner.join(300)
        assert not runner.is_alive() and codes and codes[0] != 0  # the first run failed with its node
        first = capfd.readouterr().out
        assert "step 10" in first and "step 11" not in first
        (fresh_host.home / "release").write_text("go on")
        assert not (fresh_host.home / "rckpt").exists()  # nothing of the job on the fresh host
        code = run_launch(task, provider=ssh_for([fresh_host]))
        second = capfd.readouterr()
        assert code == 0, second.out + second.err
        assert f"resumed at 10 on {fresh_host.hostname}" in second.out, second.out
        steps = [int(line.rsplit(" ", 1)[1]) for line in second.out.splitlines() if " step " in f" {line.split('] ', 1)[-1]}"
                 and line.split("] ", 1)[-1].startswith("step ")]
        assert steps == list(range(11, 21)) and "finished at 20" in second.out, second.out
        assert "hostjob/step-20" in bridge_s3.keys("resume-ckpt")
    finally:
        runner.join(60)
        _clean([first_host, fresh_host], "rdata", "rckpt", "train-pids", "release", ".skyhive/storage-deps")


def _start_writer() -> str:
    """A process of this worker's (its process group) writing a checkpoint every 50 ms into the job's
    checkpoint folder, each named in ~/written once complete."""
    import subprocess
    import sys

    folder = sky.checkpoint_dir()
    code = ("import os, sys, time\n"
            "folder, log = sys.argv[1], open(os.path.expanduser('~/written'), 'a')\n"
            "n = 0\n"
            "while True:\n"
            "    n += 1\n"
            "    tmp = os.path.join(folder, f'ckpt-{n}.bin.tmp')\n"
            "    open(tmp, 'wb').write(b'x' * 4096)\n"
            "    os.replace(tmp, os.path.join(folder, f'ckpt-{n}.bin'))\n"
            "    log.write(f'ckpt-{n}.bin\\n'); log.flush()\n"
            "    time.sleep(0.05)\n")
    subprocess.Popen([sys.executable, "-c", code, str(folder)], stdin=subprocess.DEVNULL)
    return str(folder)


def test_down_of_a_kept_ssh_pool_uploads_every_checkpoint_its_job_wrote(netns_hosts, bridge_s3, skyhive_home):
    """Issue 36 point 1 on an SSH host: `skyhive down` SIGTERMs the pool's processes there; the worker
    uploads what its cached mount holds before it exits."""
    import time

    from skyhive.runtime.control.pools import down_cluster
    from tests.kinds.ssh.test_ssh_pool import ssh_for

    host = list(netns_hosts)[0]
    bridge_s3.client().create_bucket(Bucket="ssh-down")
    mounts = {"sckpt": sky.Bucket("ssh-down", mode="MOUNT_CACHED")}
    try:
        with sky.Pool(provider=ssh_for([host]), nodes=1, name="skw", keep=True, mounts=mounts, output=None) as pool:
            pool.run(_start_writer)
        deadline = time.monotonic() + 120
        while len(bridge_s3.keys("ssh-down")) < 5:  # the background upload runs, the client gone
            assert time.monotonic() < deadline, "no checkpoint reached the bucket"
            time.sleep(0.2)
        down_cluster("skw", quiet=True)
        wrote = {f"skw/{n}" for n in (host.home / "written").read_text().split()}
        keys = set(bridge_s3.keys("ssh-down"))
        assert wrote and not wrote - keys, f"written but not in the bucket: {sorted(wrote - keys)}"
    finally:
        from skyhive.errors import PoolNotFound

        with contextlib.suppress(PoolNotFound):  # (taken down above, unless the test failed before)
            down_cluster("skw", quiet=True)
        _clean([host], "sckpt", "written", ".skyhive/storage-deps")
    from tests.clusters.test_ssh_clusters import cluster_processes, key

    assert cluster_processes(key("skw", skyhive_home)) == []  # nothing of the pool left on the host
    assert not (host.home / ".skyhive" / "work").exists() or not list((host.home / ".skyhive" / "work").iterdir())


def test_down_of_a_kept_ssh_pool_names_what_its_host_could_not_upload(netns_hosts, bridge_s3, skyhive_home, caplog):
    """The bucket's endpoint gone before `skyhive down`: the host's worker keeps what it could not upload in
    the host's state directory, and `down` names that folder and the host (issue 36 point 1: every way a
    pool ends flushes, or says which files it could not upload and keeps them)."""
    import logging
    import time

    from skyhive.runtime.control.pools import down_cluster
    from tests.kinds.ssh.test_ssh_pool import ssh_for

    host = list(netns_hosts)[0]
    bridge_s3.client().create_bucket(Bucket="ssh-cut")
    mounts = {"sckpt": sky.Bucket("ssh-cut", mode="MOUNT_CACHED")}
    unsent = host.home / ".skyhive" / "storage" / "unsent"
    try:
        with sky.Pool(provider=ssh_for([host]), nodes=1, name="skc", keep=True, mounts=mounts, output=None) as pool:
            pool.run(_start_writer)
        deadline = time.monotonic() + 120
        while len(bridge_s3.keys("ssh-cut")) < 3:  # the background upload runs, the client gone
            assert time.monotonic() < deadline, "no checkpoint reached the bucket"
            time.sleep(0.2)
        bridge_s3.stop()  # the endpoint is gone: the last upload cannot be made
        with caplog.at_level(logging.WARNING, logger="skyhive"):
            down_cluster("skc", quiet=True)
        named = [r.getMessage() for r in caplog.records if "could not upload" in r.getMessage()]
        assert len(named) == 1 and host.address in named[0] and str(unsent) in named[0], named
        (folder,) = [p for p in unsent.iterdir()]
        assert str(folder) in named[0]
        listed = (folder / "UNSENT.txt").read_text().splitlines()
        wrote = (host.home / "written").read_text().split()
        # the last checkpoint, written after the endpoint went, is kept and listed
        assert "bucket: s3://ssh-cut" in listed and any(ln.endswith(wrote[-1]) for ln in listed), listed
        assert list(folder.rglob(wrote[-1])), sorted(folder.rglob("*"))
    finally:
        from skyhive.errors import PoolNotFound

        with contextlib.suppress(PoolNotFound):
            down_cluster("skc", quiet=True)
        _clean([host], "sckpt", "written", ".skyhive/storage-deps", ".skyhive/storage")
