"""Where a task file's steps run on Local (issue 26, points 10 and 8): each node gets a home of its own
(`HOME`, the workdir at `~/sky_workdir` there), `run` sources `~/.bashrc` (so what `setup` exported
there is set), `setup` runs on every node (SkyPilot's failed_worker_setup.yaml fails on rank 1 instead
of hanging in rank 0), and a named pool's `exec` finds what `launch -c` shipped and `setup` made.
The real command, real processes; the machine user's home is a directory of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.commands.test_cli_launch import by_node, write
from tests.clusters.test_clusters import clean  # noqa: F401 - a fixture

SKYHIVE = [sys.executable, "-m", "skyhive"]


def run(*args: str, cwd: Path, home: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """The command with HOME set to the test's stand-in for the user's real home."""
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run([*SKYHIVE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def user_home(tmp_path: Path) -> Path:
    """The machine user's home: a .bashrc that must be neither read by a task nor written to."""
    home = tmp_path / "user-home"
    home.mkdir()
    (home / ".bashrc").write_text("export USERS_OWN=leaked\n")
    return home


TASK = """\
    num_nodes: 2
    workdir: code
    file_mounts:
      ~/mounted.txt: ./code/shipped.txt
    setup: |
      echo "export FROM_SETUP=set-by-setup-$SKYPILOT_NODE_RANK" >> ~/.bashrc
      echo "setup ran on node $SKYPILOT_SETUP_NODE_RANK"
      echo "made by setup" > made.txt
    run: |
      echo "FROM_SETUP=$FROM_SETUP USERS_OWN=${USERS_OWN:-unset}"
      echo "HOME=$HOME"
      echo "PWD=$(pwd)"
      echo "SHIPPED=$(cat shipped.txt) MADE=$(cat made.txt) MOUNTED=$(cat ~/mounted.txt)"
    """


def test_each_local_node_has_its_own_home_run_sources_bashrc_and_setup_runs_on_every_node(tmp_path, skyhive_home):
    home = user_home(tmp_path)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "shipped.txt").write_text("from-workdir\n")
    write(tmp_path / "task.yaml", TASK)
    done = run("launch", "-y", "task.yaml", cwd=tmp_path, home=home)
    assert done.returncode == 0, done.stdout + done.stderr
    nodes = by_node(done.stdout)
    homes = set()
    for n in (0, 1):
        lines = nodes[n]
        assert f"setup ran on node {n}" in lines  # setup on every node, as on separate machines
        assert f"FROM_SETUP=set-by-setup-{n} USERS_OWN=unset" in lines  # the node's ~/.bashrc, not the user's
        node_home = next(ln for ln in lines if ln.startswith("HOME="))[5:]
        assert f"PWD={node_home}/sky_workdir" in lines
        assert "SHIPPED=from-workdir MADE=made by setup MOUNTED=from-workdir" in lines
        assert node_home.startswith(skyhive_home) and not node_home.startswith(str(home))
        homes.add(node_home)
    assert len(homes) == 2
    # the user's home is as it was: nothing appended to .bashrc, nothing mounted there
    assert (home / ".bashrc").read_text() == "export USERS_OWN=leaked\n"
    assert sorted(os.listdir(home)) == [".bashrc"]
    assert not any(Path(h).exists() for h in homes)  # removed with the pool


def test_failed_worker_setup_fails_on_rank_1_instead_of_hanging(tmp_path, skyhive_home):
    """SkyPilot's tests/test_yamls/failed_worker_setup.yaml as written: rank 1's setup fails, the others'
    would sleep 10000 s."""
    write(tmp_path / "failed_worker_setup.yaml", """\
        resources:
          cpus: 1+

        num_nodes: 3

        setup: |
          if [ "$SKYPILOT_NODE_RANK" == "1" ]; then
              exit 1
          fi
          sleep 10000

        run: |
          echo Should not get here
        """)
    done = run("launch", "-y", "failed_worker_setup.yaml", cwd=tmp_path, home=user_home(tmp_path), timeout=180)
    assert done.returncode == 100, done.stdout + done.stderr  # SkyPilot's exit code for a failed job
    assert "setup failed on node 1: exit code 1" in done.stderr
    assert "Should not get here" not in done.stdout


def test_exec_finds_what_launch_c_shipped_and_setup_made(tmp_path, clean):
    home = user_home(tmp_path)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "shipped.txt").write_text("from-workdir\n")
    write(tmp_path / "task.yaml", TASK)
    first = run("launch", "-y", "-c", "keep", "task.yaml", cwd=tmp_path, home=home)
    assert first.returncode == 0, first.stdout + first.stderr
    # exec of a task without workdir or setup: the same directory, with the shipped and made files
    write(tmp_path / "again.yaml", """\
        num_nodes: 2
        run: |
          echo "FROM_SETUP=$FROM_SETUP PWD=$(pwd)"
          echo "SHIPPED=$(cat shipped.txt) MADE=$(cat made.txt)"
        """)
    again = run("exec", "keep", "again.yaml", cwd=tmp_path, home=home)
    assert again.returncode == 0, again.stdout + again.stderr
    nodes = by_node(again.stdout)
    firsts = by_node(first.stdout)
    for n in (0, 1):
        workdir = next(ln for ln in firsts[n] if ln.startswith("PWD="))[4:]
        assert f"FROM_SETUP=set-by-setup-{n} PWD={workdir}" in nodes[n]
        assert "SHIPPED=from-workdir MADE=made by setup" in nodes[n]
    # exec with the workdir again: its files are shipped over what is there, setup's files stay
    (tmp_path / "code" / "shipped.txt").write_text("changed\n")
    third = run("exec", "keep", "task.yaml", cwd=tmp_path, home=home)
    assert third.returncode == 0, third.stdout + third.stderr
    shown = by_node(third.stdout)
    assert sorted(shown) == [0, 1]
    assert all(any(ln.startswith("SHIPPED=changed MADE=made by setup") for ln in lines) for lines in shown.values())
    assert (home / ".bashrc").read_text() == "export USERS_OWN=leaked\n"
