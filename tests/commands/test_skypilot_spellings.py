"""SkyPilot's spellings that its users and its own smoke tests type (issue 26, point 9): `--infra`
(local, aws/REGION[/ZONE], ssh/POOL from ~/.sky/ssh_node_pools.yaml, slurm[/LOGIN[/PARTITION]]), `-y` on
`down`/`cancel`, `logs --status`, `logs --sync-down`, `status --refresh`, `exec -n`, `--detach-setup`,
`exec NAME 'inline command'`, fractional GPUs (`L4:0.5`), and a failed job's exit code 100.

The named-pool flow is SkyPilot's smoke test `test_multi_node_failure` on Local, its YAML files as
written (failed_worker_run.yaml's rank 1 waits until the others have printed, so that the count of
"My hostname:" lines does not depend on timing)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from skyhive.runtime.commands.infra import Infra, parse_infra
from skyhive.runtime.commands.taskfile import TaskFileError, loads
from skyhive.runtime.commands.values import parse_accelerators
from tests.clusters.test_clusters import clean  # noqa: F401 - a fixture

SKYHIVE = [sys.executable, "-m", "skyhive"]


def sky(*args: str, cwd: Path, home: Path | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"HOME": str(home)} if home else {})}
    return subprocess.run([*SKYHIVE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# ---- --infra --------------------------------------------------------------------------------------------


def test_infra_spellings(tmp_path):
    assert parse_infra("local") == Infra("local")
    assert parse_infra("aws") == Infra("aws")
    assert parse_infra("aws/us-east-1") == Infra("aws", region="us-east-1")
    assert parse_infra("AWS/us-east-1/us-east-1a") == Infra("aws", region="us-east-1", zone="us-east-1a")
    assert parse_infra("aws/*/us-east-1a") == Infra("aws", zone="us-east-1a")
    assert parse_infra("slurm") == Infra("slurm")
    assert parse_infra("slurm/login1/gpu") == Infra("slurm", options=(("login", "login1"), ("partition", "gpu")))
    pools = write(tmp_path / "pools.yaml", """\
        my-cluster:
          user: alice
          identity_file: ~/.ssh/pool_key
          hosts:
            - 10.0.0.1
            - ip: 10.0.0.2
              user: bob
        my-box:
          hosts: [box-alias]
        """)
    pool = parse_infra("ssh/my-cluster", pools_file=str(pools))
    assert pool.provider == "ssh" and pool.hosts == ("alice@10.0.0.1", "bob@10.0.0.2")
    assert pool.options == (("key", os.path.expanduser("~/.ssh/pool_key")),)
    assert parse_infra("ssh/my-box", pools_file=str(pools)) == Infra("ssh", hosts=("box-alias",))
    for bad, message in [("local/x", "local has no regions"), ("nomad", "unknown provider 'nomad'"), ("k8s/a/b", "expected k8s, kubernetes or k8s/CONTEXT"),
                         ("aws/a/b/c", "expected aws, aws/REGION or aws/REGION/ZONE"),
                         ("slurm/a/b/c", "expected slurm, slurm/LOGIN"), ("", "expected an infra")]:
        with pytest.raises(ValueError, match=message):
            parse_infra(bad)
    with pytest.raises(ValueError, match=r"has no pool 'nosuch' \(it has: my-box, my-cluster\)"):
        parse_infra("ssh/nosuch", pools_file=str(pools))
    with pytest.raises(ValueError, match="no SSH Node Pools file"):
        parse_infra("ssh/x", pools_file=str(tmp_path / "none.yaml"))


def test_infra_in_a_task_file_and_its_errors_name_the_line(tmp_path):
    task = loads("resources:\n  infra: aws/us-west-2/us-west-2b\nrun: echo\n", source="t.yaml", cwd=str(tmp_path))
    assert (task.resources.provider, task.resources.region, task.resources.zone) == ("aws", "us-west-2", "us-west-2b")
    task = loads("resources:\n  infra: slurm/login1/debug\nrun: echo\n", source="t.yaml", cwd=str(tmp_path))
    assert task.resources.provider == "slurm"
    assert task.resources.provider_options == (("login", "login1"), ("partition", "debug"))
    with pytest.raises(TaskFileError, match=r"t.yaml:2: resources.infra: .*local has no regions"):
        loads("resources:\n  infra: local/us-east-1\nrun: echo\n", source="t.yaml", cwd=str(tmp_path))


def test_infra_on_the_command_line(tmp_path, skyhive_home):
    write(tmp_path / "t.yaml", "resources:\n  cpus: 2+\nrun: echo hi\n")
    local = sky("launch", "-y", "--infra", "local", "t.yaml", cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    assert "[node 0] hi" in local.stdout or "hi" in local.stdout.split()
    aws = sky("launch", "--infra", "aws/us-east-2", "--dryrun", "t.yaml", cwd=tmp_path)
    assert aws.returncode == 0, aws.stderr
    assert "us-east-2" in aws.stdout and "nothing was created" in aws.stdout
    home = tmp_path / "user"
    write(home / ".sky" / "ssh_node_pools.yaml", "gpus:\n  hosts: [h1, h2]\n")
    missing = sky("launch", "--infra", "ssh/other", "--dryrun", "t.yaml", cwd=tmp_path, home=home)
    assert missing.returncode == 2 and "--infra ssh/other:" in missing.stderr and "has no pool 'other'" in missing.stderr
    both = sky("launch", "--infra", "local", "--provider", "local", "t.yaml", cwd=tmp_path)
    assert both.returncode == 2 and "give one of them" in both.stderr
    bad = sky("launch", "--infra", "local/here", "t.yaml", cwd=tmp_path)
    assert bad.returncode == 2 and "--infra local/here: 'local/here': local has no regions" in bad.stderr


# ---- fractional GPUs, inline commands ---------------------------------------------------------------------


def test_fractional_gpus_ask_for_one_gpu_on_the_node():
    assert parse_accelerators("L4:0.5") == ("L4", 1)
    assert parse_accelerators({"A100": 0.25}) == ("A100", 1)
    with pytest.raises(ValueError, match="must be under 1"):
        parse_accelerators("L4:1.5")
    task = loads("resources:\n  accelerators: L4:0.5\nrun: echo\n", source="t.yaml", cwd=".")
    assert (task.resources.accelerator, task.resources.accelerator_count) == ("L4", 1)


def test_launch_an_inline_command(tmp_path, skyhive_home):
    done = sky("launch", "-y", "--num-nodes", "2", "echo", "inline-$SKYPILOT_NODE_RANK", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "[node 0] inline-0" in done.stdout and "[node 1] inline-1" in done.stdout
    failed = sky("launch", "-y", "exit 3", cwd=tmp_path)
    assert failed.returncode == 100 and "run failed on node 0: exit code 3" in failed.stderr
    missing = sky("launch", "-y", "no-such-task.yaml", cwd=tmp_path)
    assert missing.returncode == 2 and "no-such-task.yaml" in missing.stderr  # a .yaml name is a file, never a command


# ---- SkyPilot's smoke test test_multi_node_failure, and the named-pool spellings ---------------------------

FAILED_WORKER_SETUP = """\
    resources:
      cpus: 2+

    num_nodes: 3

    setup: |
      if [ "$SKYPILOT_NODE_RANK" == "1" ]; then
          exit 1
      fi
      sleep 10000

    run: |
      echo Should not get here
    """

FAILED_WORKER_RUN = """\
    resources:
      cpus: 2+

    num_nodes: 3

    run: |
      if [ "$SKYPILOT_NODE_RANK" == "1" ]; then
          until [ -e {marks}/0 ] && [ -e {marks}/2 ]; do sleep 0.1; done
          exit 1
      fi
      echo My hostname: $(hostname)
      touch {marks}/$SKYPILOT_NODE_RANK
      sleep 10000
    """


def test_multi_node_failure_as_skypilots_smoke_test(tmp_path, clean):
    marks = tmp_path / "marks"
    marks.mkdir()
    write(tmp_path / "failed_worker_setup.yaml", FAILED_WORKER_SETUP)
    write(tmp_path / "failed_worker_run.yaml", FAILED_WORKER_RUN.format(marks=marks))
    name = "t-multi-node-failure"
    launched = sky("launch", "-y", "-c", name, "--infra", "local", "--detach-setup", "failed_worker_setup.yaml",
                   cwd=tmp_path)
    assert launched.returncode == 100, launched.stdout + launched.stderr
    status = sky("logs", name, "1", "--status", cwd=tmp_path)
    assert status.returncode == 100 and "FAILED_SETUP" in status.stdout
    ran = sky("exec", name, "failed_worker_run.yaml", cwd=tmp_path)
    assert ran.returncode == 100, ran.stdout + ran.stderr
    status = sky("logs", name, "2", "--status", cwd=tmp_path)
    assert status.returncode == 100 and "Job 2: FAILED" in status.stdout and "FAILED_SETUP" not in status.stdout
    log = sky("logs", name, "2", cwd=tmp_path)
    assert sum("My hostname:" in ln for ln in log.stdout.splitlines()) == 2

    # exec NAME 'inline command' with -n; logs --status of a success, of no such job
    inline = sky("exec", name, "-n", "hello-job", "echo inline on $SKYPILOT_NODE_RANK", cwd=tmp_path)
    assert inline.returncode == 0, inline.stdout + inline.stderr
    assert "inline on 0" in inline.stdout
    queue = sky("queue", name, cwd=tmp_path).stdout.splitlines()
    assert queue[-1].split()[:3] == ["3", "hello-job", "SUCCEEDED"]
    ok = sky("logs", name, "--status", cwd=tmp_path)  # the latest job
    assert ok.returncode == 0 and "Job 3: SUCCEEDED" in ok.stdout
    assert sky("logs", name, "9", "--status", cwd=tmp_path).returncode == 102

    # logs --sync-down: each job's log lands in ~/sky_logs/sky-TIME/run.log, named as SkyPilot does
    home = tmp_path / "user"
    home.mkdir()
    synced = sky("logs", name, "--sync-down", cwd=tmp_path, home=home)
    assert synced.returncode == 0, synced.stderr
    folders = dict(ln.split(" logs: ") for ln in synced.stdout.splitlines())
    assert sorted(folders) == ["Job 1", "Job 2", "Job 3"]
    assert all(Path(d).parent == home / "sky_logs" and (Path(d) / "run.log").is_file() for d in folders.values())
    assert "My hostname:" in (Path(folders["Job 2"]) / "run.log").read_text()

    # status --refresh, cancel -y, down -y
    refreshed = sky("status", "--refresh", cwd=tmp_path)
    assert refreshed.returncode == 0 and any(ln.startswith(f"{name} ") for ln in refreshed.stdout.splitlines())
    assert sky("cancel", "-y", name, "--all", cwd=tmp_path).returncode == 0
    down = sky("down", "-y", name, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert "no named pools" in sky("status", "-r", cwd=tmp_path).stdout
