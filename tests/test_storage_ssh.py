"""Bucket mounts on real OpenSSH hosts in network namespaces (tests/infra/netns.py): the hosts reach the S3
endpoint — `moto_server` on the test bridge's own address, created by the test — through the bridge and
nothing else. Their Python has no boto3: skyhive sends the client's (runtime/storage/deps.py). COPY and
MOUNT_CACHED through a task file and through `Pool(mounts=...)`; MOUNT refused with why (the test users are
not root, and /dev/fuse is 0600 here: FUSE works for root, in the namespaces too, not for them).
"""

from __future__ import annotations

import shutil
import socket
import textwrap

import pytest

import skyhive as sky
from skyhive.runtime.commands.launch import run_launch
from skyhive.runtime.commands.taskfile import loads
from tests.infra.moto_s3 import S3Server, isolated_aws_env
from tests.test_cli_launch import by_node

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
    from tests.test_ssh_pool import ssh_for

    hosts = list(netns_hosts)[:2]
    c = bridge_s3.client()
    c.create_bucket(Bucket="ssh-data")
    c.put_object(Bucket="ssh-data", Key="set/x.txt", Body=b"remote-x")
    c.create_bucket(Bucket="ssh-ckpt")
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
          python3 -c "import skyhive as sky; print('ckpt', sky.checkpoint_dir())" 2>/dev/null || echo "ckpt $SKYHIVE_CHECKPOINT_DIR"
          mkdir -p ~/$SKYHIVE_CHECKPOINT_DIR
          echo "from $(hostname)" > ~/$SKYHIVE_CHECKPOINT_DIR/rank-$SKYPILOT_NODE_RANK.txt
        """), cwd=str(tmp_path))
    try:
        code = run_launch(task, provider=ssh_for(hosts))
        out = capfd.readouterr()
        assert code == 0, out.out + out.err
        nodes = by_node(out.out)
        for n, host in enumerate(hosts):
            assert f"setup on {host.hostname} reads remote-x" in nodes[n], nodes
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
    from tests.test_ssh_pool import ssh_for

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
    from tests.test_ssh_pool import ssh_for

    bridge_s3.client().create_bucket(Bucket="fuse-ssh")
    task = loads("file_mounts:\n  fmnt:\n    source: s3://fuse-ssh\n    mode: MOUNT\nrun: echo never\n",
                 cwd=str(tmp_path))
    code = run_launch(task, provider=ssh_for(list(netns_hosts)[:1]))
    err = capfd.readouterr().err
    assert code != 0
    assert "mode MOUNT of s3://fuse-ssh cannot work here: /dev/fuse is not open to user" in err, err
    assert "never" not in err
