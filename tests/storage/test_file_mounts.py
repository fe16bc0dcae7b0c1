"""`file_mounts`: a local directory and a local file reach every node before `setup` runs (setup reads
them), on Local and over SSH to real OpenSSH hosts in network namespaces (tests/infra); and `setup` runs
on every node: each Local node has a home of its own, each namespace host is its own machine.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from skyhive.runtime.control.launch import run_launch
from skyhive.runtime.commands.taskfile import loads
from tests.commands.test_cli_launch import by_node, pool_logs, skyhive

SETUP = """\
    set -e
    echo "setup on $(hostname): $(cat {dir}/inner/a.txt) $(cat {file}) $(stat -c %a {file})"
    echo "$SKYPILOT_SETUP_NODE_RANK" >> {marks}
    echo "made-by-setup" > made.txt
    """
RUN = """\
    set -e
    echo "run $SKYPILOT_NODE_RANK: $(cat {dir}/inner/a.txt) $(cat {file}) $(ls {dir} | sort | paste -sd,) $(cat made.txt)"
    """


def home_mounts_task(tmp_path, marks: str):
    """A 2-node task mounting ./data and ./config.txt under ~/mounted on each host, whose setup appends
    its node rank to ~/`marks` and checks the mounts, and whose run prints what it finds there."""
    text = textwrap.dedent("""\
        num_nodes: 2
        file_mounts:
          mounted/dir: ./data
          ~/mounted/etc/config.txt: ./config.txt
        setup: |
        """) + textwrap.indent(textwrap.dedent(SETUP).format(dir="~/mounted/dir", file="~/mounted/etc/config.txt",
                                                             marks=f"~/{marks}"), "  ") \
        + "run: |\n" + textwrap.indent(textwrap.dedent(RUN).format(dir="~/mounted/dir",
                                                                    file="~/mounted/etc/config.txt"), "  ")
    return loads(text, cwd=str(tmp_path))


def _sources(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "data"
    (data / "inner").mkdir(parents=True)
    (data / "inner" / "a.txt").write_text("payload-A\n")
    (data / "b.bin").write_bytes(bytes(range(256)) * 64)
    single = tmp_path / "config.txt"
    single.write_text("config-C\n")
    single.chmod(0o640)
    return data, single


def test_a_directory_and_a_file_reach_every_local_node_before_setup(tmp_path, skyhive_home):
    _sources(tmp_path)
    target = tmp_path / "mnt"
    marks = tmp_path / "setup-ran"
    (tmp_path / "t.yaml").write_text(textwrap.dedent(f"""\
        num_nodes: 3
        file_mounts:
          {target}/dir: ./data
          {target}/etc/config.txt: config.txt
        setup: |
        """) + textwrap.indent(textwrap.dedent(SETUP).format(dir=f"{target}/dir", file=f"{target}/etc/config.txt",
                                                             marks=marks), "  ")
        + "run: |\n" + textwrap.indent(textwrap.dedent(RUN).format(dir=f"{target}/dir",
                                                                    file=f"{target}/etc/config.txt"), "  "))
    done = skyhive("launch", "t.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    nodes = by_node(done.stdout)
    assert sorted(marks.read_text().split()) == ["0", "1", "2"]  # setup on every node (each its own home)
    assert any(line.endswith("payload-A config-C 640") for line in nodes[0])
    for n in range(3):
        assert f"run {n}: payload-A config-C b.bin,inner made-by-setup" in nodes[n]  # setup's work is everyone's
    assert (target / "dir" / "b.bin").read_bytes() == (tmp_path / "data" / "b.bin").read_bytes()


def test_a_mount_source_that_does_not_exist_is_an_error_naming_it(tmp_path, skyhive_home):
    (tmp_path / "t.yaml").write_text("file_mounts:\n  /tmp/x: ~/definitely-not-here-42\nrun: echo\n")
    done = skyhive("launch", "t.yaml", cwd=tmp_path)
    assert done.returncode == 2
    assert "t.yaml:2: file_mounts./tmp/x: the source '~/definitely-not-here-42' does not exist" in done.stderr
    assert pool_logs(skyhive_home) == []


@pytest.mark.slow
def test_a_directory_and_a_file_reach_every_ssh_host_before_setup(netns_hosts, tmp_path, skyhive_home, capfd):
    from tests.kinds.ssh.test_ssh_pool import ssh_for

    hosts = list(netns_hosts)[:2]
    _sources(tmp_path)
    marks = "setup-marks.txt"  # in each host's home: one line per setup run there
    task = home_mounts_task(tmp_path, marks)
    try:
        code = run_launch(task, provider=ssh_for(hosts))
        captured = capfd.readouterr()
        out = captured.out
        assert code == 0, out + captured.err
        nodes = by_node(out)
        for n, host in enumerate(hosts):
            assert f"setup on {host.hostname}: payload-A config-C 640" in nodes[n]  # two machines: setup on each
            assert f"run {n}: payload-A config-C b.bin,inner made-by-setup" in nodes[n]  # setup's work is everyone's
            assert (host.home / marks).read_text().split() == [str(n)]
            assert (host.home / "mounted" / "dir" / "b.bin").read_bytes() == (tmp_path / "data" / "b.bin").read_bytes()
    finally:
        for host in hosts:
            shutil.rmtree(host.home / "mounted", ignore_errors=True)
            (host.home / marks).unlink(missing_ok=True)
