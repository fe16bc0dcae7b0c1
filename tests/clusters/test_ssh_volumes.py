"""Persistent volumes on SSH hosts (issue 39): a task's `volumes:` is a directory on the head node's host
(`~/.skyhive/volumes/NAME`), made by the first launch, linked at the mount point, kept by `skyhive down`,
linked again by a later launch of the task, and removed only by `skyhive volumes delete`. Real OpenSSH
sshd in network namespaces (tests/infra; the `two_hosts` fixture of test_ssh_clusters.py checks that
nothing of the pools is left on the hosts, and this test that nothing of the volumes is)."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import pytest

from skyhive.cli import main
from skyhive.errors import LaunchError, ProvisionError
from skyhive.providers.ssh import SSH
from skyhive.runtime.clusters import record as records
from skyhive.runtime.commands.resources import refused
from skyhive.runtime.commands.taskfile import loads
from skyhive.runtime.control.pools import down_cluster, launch_cluster
from tests.clusters.test_ssh_clusters import two_hosts  # noqa: F401
from tests.kinds.ssh.test_ssh_pool import ssh_for

pytestmark = [pytest.mark.slow]

TASK = """\
    num_nodes: 2
    volumes:
      {target}: ckpt
    run: |
      if [ -d {target} ]; then echo "node $SKYPILOT_NODE_RANK" >> {target}/log; else echo "node $SKYPILOT_NODE_RANK: no volume"; fi
      if [ "$SKYPILOT_NODE_RANK" = 0 ]; then cat {target}/log; fi
    """


def _launch(hosts, target: Path, name: str) -> str:
    task = loads(textwrap.dedent(TASK.format(target=target)), cwd="/")
    assert refused(task, SSH) == []  # the ssh provider keeps volumes: not refused
    out = io.StringIO()
    code = launch_cluster(task, name, provider=ssh_for(hosts, volumes=task.resources.volumes), out=out, err=out)
    assert code == 0, out.getvalue()
    return out.getvalue()


def test_an_ssh_volume_survives_down_is_linked_again_and_only_delete_removes_it(two_hosts, skyhive_home, capsys):
    hosts = two_hosts
    target = hosts[0].home / "mnt" / "data"  # (its parent does not exist yet: made)
    data = hosts[0].home / ".skyhive" / "volumes" / "ckpt"
    first = _launch(hosts, target, "train")
    assert "node 1: no volume" in first  # on the head node only, as on the clouds
    assert data.is_dir() and target.is_symlink() and target.resolve() == data.resolve()
    assert (data / "log").read_text() == "node 0\n"
    assert not (hosts[1].home / ".skyhive" / "volumes").exists()
    down_cluster("train", quiet=True)
    assert records.names() == [] and (data / "log").read_text() == "node 0\n" and target.is_symlink()  # kept

    again = _launch(hosts, target, "again")  # a later launch of the same task: the same directory
    assert (data / "log").read_text() == "node 0\nnode 0\n" and "[node 0] node 0\n[node 0] node 0" in again
    assert main(["volumes", "ls"]) == 0
    listed = capsys.readouterr().out
    row = next(ln for ln in listed.splitlines() if ln.startswith("ckpt "))
    assert " ssh " in row and hosts[0].host in row and "available" in row and str(target) in row
    down_cluster("again", quiet=True)

    # the volume is on host 0: a pool whose head node is host 1 is refused, naming both
    task = loads(textwrap.dedent(TASK.format(target=target)), cwd="/")
    with pytest.raises((ProvisionError, LaunchError), match=r"volume ckpt is a directory on \S+ and this pool's head"):
        launch_cluster(task, "other", provider=ssh_for(hosts[::-1], volumes=task.resources.volumes),
                       out=io.StringIO(), err=io.StringIO())
    assert records.names() == [] and not (hosts[1].home / ".skyhive" / "volumes").exists()

    assert main(["volumes", "delete", "ckpt", "-y"]) == 0
    assert "volume ckpt: deleted (ssh)" in capsys.readouterr().out
    assert not data.exists() and not target.is_symlink() and not target.exists()
    assert main(["volumes", "ls"]) == 0 and "no volumes" in capsys.readouterr().out
    (hosts[0].home / "mnt").rmdir()  # the mount point's parent the first launch made
    (hosts[0].home / ".skyhive" / "volumes").rmdir()


def test_a_mount_point_that_is_something_else_is_refused_and_kept(two_hosts, skyhive_home, capsys):
    hosts = two_hosts
    target = hosts[0].home / "mine"
    target.mkdir()
    (target / "keep.txt").write_text("the user's\n")
    try:
        task = loads(textwrap.dedent(TASK.format(target=target)), cwd="/")
        with pytest.raises((ProvisionError, LaunchError), match=rf"{target} exists and is not this volume's link"):
            launch_cluster(task, "train", provider=ssh_for(hosts, volumes=task.resources.volumes),
                           out=io.StringIO(), err=io.StringIO())
        assert (target / "keep.txt").read_text() == "the user's\n"
        assert records.names() == []
    finally:
        (target / "keep.txt").unlink()
        target.rmdir()
    assert not (hosts[0].home / ".skyhive" / "volumes" / "ckpt").exists()  # checked before anything was made
    assert main(["volumes", "ls"]) == 0 and "no volumes" in capsys.readouterr().out
