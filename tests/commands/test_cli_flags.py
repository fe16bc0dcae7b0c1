"""The task options SkyPilot users type on `skyhive launch`: each one takes effect, and a bad value is a
clear error that starts nothing (exit code 2, no pool log).

Local launches run as the real command in a subprocess; the AWS plans (`--dryrun`) run in-process against
moto in the loopback-only namespace, and create nothing there.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from skyhive.cli import main
from skyhive.runtime.events.log import read_log
from skyhive.runtime.events.state import fold
from tests.procs import wait_gone
from tests.commands.test_cli_launch import SKYHIVE, by_node, pool_logs, skyhive
from tests.clusters.test_clusters import clean  # noqa: F401 - a fixture: named pools down, nothing left


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def task(tmp_path: Path, run: str = 'echo "ran on $SKYPILOT_NODE_RANK"', **top: str) -> str:
    extra = "".join(f"{k}: {v}\n" for k, v in top.items())
    write(tmp_path / "t.yaml", f"{extra}run: |\n  {run}\n")
    return "t.yaml"


def fails_clearly(done: subprocess.CompletedProcess[str], home: str, *needles: str, code: int = 2) -> None:
    assert done.returncode == code, (done.stdout, done.stderr)
    for needle in needles:
        assert needle in done.stderr, done.stderr
    assert pool_logs(home) == []  # nothing was started


# ---- resources on Local: checked on the node, or refused by name ---------------------------------------


def test_cpus_and_memory_are_requirements_each_local_node_must_meet(tmp_path, skyhive_home):
    cores = os.cpu_count() or 1
    ok = skyhive("launch", task(tmp_path), "--num-nodes", "2", "--cpus", f"{cores}+", "--memory", "0.1+",
                 cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert by_node(ok.stdout) == {0: ["ran on 0"], 1: ["ran on 1"]}
    write(tmp_path / "s.yaml", "setup: echo SETUP-RAN\nrun: echo RUN-RAN\n")
    short = skyhive("launch", "s.yaml", "--cpus", f"{cores * 64}+", cwd=tmp_path)
    assert short.returncode != 0
    assert f"resources.cpus {cores * 64}: node 0 (" in short.stderr and f"has {cores} CPUs" in short.stderr
    assert "SETUP-RAN" not in short.stdout and "RUN-RAN" not in short.stdout  # checked before setup
    pool_id = re.search(r"as pool (\S+)", short.stderr).group(1)
    events = list(read_log(Path(skyhive_home) / "pools" / f"{pool_id}.jsonl"))
    state = fold(events)
    assert state.status == "stopped" and {n.state for n in state.nodes} == {"terminated"}  # torn down
    assert wait_gone({e.pid for e in events if e.kind == "worker_state" and e.pid}, timeout=10) == set()
    big = skyhive("launch", "s.yaml", "--memory", "100000", cwd=tmp_path)
    assert big.returncode != 0 and "resources.memory 100000 GB: node 0" in big.stderr


def test_gpus_on_local_without_them_warn_are_recorded_and_run_and_gpus_none_resets(tmp_path, skyhive_home):
    # one rule with `Pool(accelerator="A100")` in Python: Local warns, records what was asked, and runs
    write(tmp_path / "g.yaml", "resources:\n  accelerators: L4:2\nrun: echo RUN-RAN\n")
    # --provider local: with cloud credentials on this machine, no provider would rank the clouds' offers
    asked = skyhive("launch", "g.yaml", "--provider", "local", cwd=tmp_path)
    assert asked.returncode == 0, asked.stderr
    assert by_node(asked.stdout) == {0: ["RUN-RAN"]}
    warning = [line for line in asked.stderr.splitlines() if "warning:" in line and "L4:2" in line]
    assert len(warning) == 1 and "Local (this machine)" in warning[0] and "was asked for" in warning[0], asked.stderr
    pool_id = re.search(r"as pool (\S+)", asked.stderr).group(1)
    started = next(e for e in read_log(Path(skyhive_home) / "pools" / f"{pool_id}.jsonl") if e.kind == "pool_started")
    assert started.plan["accelerator"] == "L4:2" and "was asked for" in started.plan["warning"]
    dry = skyhive("launch", "g.yaml", "--dryrun", "--provider", "local", cwd=tmp_path)
    assert dry.returncode == 0 and "warning: Local (this machine): accelerator='L4:2'" in dry.stdout
    reset = skyhive("launch", "g.yaml", "--gpus", "none", cwd=tmp_path)
    assert reset.returncode == 0, reset.stderr
    assert by_node(reset.stdout) == {0: ["RUN-RAN"]} and "L4" not in reset.stderr
    override = skyhive("launch", task(tmp_path), "--gpus", "H100:8", "--provider", "local", cwd=tmp_path)
    assert override.returncode == 0 and "accelerator='H100:8' was asked for" in override.stderr  # the flag wins


@pytest.mark.parametrize("args, message", [
    (["--gpus", "L4:x"], "--gpus L4:x: expected NAME or NAME:COUNT like L4:2"),
    (["--gpus", "V100:1.5"], "--gpus V100:1.5: a fractional accelerator count must be under 1"),
    (["--cpus", "lots"], "--cpus lots: expected a CPU count like 8 or 8+"),
    (["--cpus", "0"], "--cpus 0: expected a CPU count"),
    (["--memory", "12XB"], "--memory 12XB: expected a memory size in GB like 32 or 32+"),
    (["--disk-size", "huge"], "--disk-size huge: expected a whole number of GB"),
    (["--num-nodes", "0"], "--nodes 0: need at least one node"),
    (["--env", "1X=2"], "--env 1X=2: '1X' is not a valid environment variable name"),
    (["--secret", "NOT_SET_ANYWHERE_42"], "--secret NOT_SET_ANYWHERE_42: no value given and NOT_SET_ANYWHERE_42 is "
                                          "not set here"),
    (["--secret", "1X=topsecret"], "--secret 1X=***: '1X' is not a valid environment variable name"),
    (["--env-file", "no-such.env"], "--env-file no-such.env: cannot read it"),
    (["--use-spot"], "resources.use_spot (--use-spot): the local provider cannot honour it"),
    (["--region", "us-east-1"], "resources.region (--region us-east-1): the local provider has no such option"),
    (["--instance-type", "p4d.24xlarge"], "resources.instance_type (--instance-type p4d.24xlarge): the local provider"),
    (["--image-id", "ami-1"], "resources.image_id (--image-id ami-1): the local provider"),
    (["--use-spot=yes"], "--use-spot: ignored explicit argument 'yes'"),
    (["-y=3"], "ignored explicit argument"),
])
def test_a_bad_value_is_a_clear_error_that_starts_nothing(tmp_path, skyhive_home, args, message):
    done = skyhive("launch", task(tmp_path), *args, cwd=tmp_path)
    fails_clearly(done, skyhive_home, message)
    assert "topsecret" not in done.stdout + done.stderr


def test_bad_value_from_the_task_file_names_the_file_line_and_field(tmp_path, skyhive_home):
    write(tmp_path / "t.yaml", "resources:\n  cloud: local\n  use_spot: true\nrun: echo\n")
    done = skyhive("launch", "t.yaml", cwd=tmp_path)
    fails_clearly(done, skyhive_home, "resources.use_spot (--use-spot): the local provider cannot honour it")


# ---- environment: --env-file, --env, --secret ---------------------------------------------------------


def test_env_file_env_and_secret_reach_the_task_and_the_secret_nowhere_else(tmp_path, skyhive_home):
    secret = "sk-live-7f3a9c1e0b"
    write(tmp_path / "app.env", """\
        # comment
        export LR=1e-4
        BATCH="32"
        OVERRIDDEN=from-file
        """)
    write(tmp_path / "t.yaml", """\
        envs: {OVERRIDDEN: from-task}
        run: |
          echo "LR=$LR BATCH=$BATCH OVERRIDDEN=$OVERRIDDEN"
          echo "token: $API_TOKEN"
          echo "length ${#API_TOKEN}"
        """)
    done = subprocess.run([*SKYHIVE, "launch", "t.yaml", "--env-file", "app.env", "--env", "OVERRIDDEN=from-cli",
                           "--secret", "API_TOKEN"], cwd=tmp_path, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "API_TOKEN": secret})
    assert done.returncode == 0, done.stderr
    assert by_node(done.stdout) == {0: ["LR=1e-4 BATCH=32 OVERRIDDEN=from-cli", "token: ***",
                                        f"length {len(secret)}"]}  # the task had the real value
    (log,) = pool_logs(skyhive_home)
    assert secret not in log.read_text() and secret not in done.stdout + done.stderr
    for command in (["logs", log.stem], ["events", log.stem]):
        shown = skyhive(*command, cwd=tmp_path)
        assert shown.returncode == 0 and secret not in shown.stdout + shown.stderr
    assert "token: ***" in skyhive("logs", log.stem, cwd=tmp_path).stdout
    # the dry run names the secret, never its value; nor does the task's repr
    dry = subprocess.run([*SKYHIVE, "launch", "t.yaml", "--secret", "API_TOKEN", "--dryrun"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, env={**os.environ, "API_TOKEN": secret})
    assert "secrets (redacted): API_TOKEN" in dry.stdout and secret not in dry.stdout + dry.stderr
    from skyhive.runtime.commands.taskfile import loads

    parsed = loads("run: echo\n", cwd=str(tmp_path)).with_overrides(secrets={"API_TOKEN": secret})
    assert parsed.secret_env() == {"API_TOKEN": secret} and secret not in repr(parsed)


def test_a_malformed_env_file_names_file_and_line_but_no_value(tmp_path, skyhive_home):
    write(tmp_path / "bad.env", "GOOD=1\nthis line has hunter2 and no equals sign\n")
    done = skyhive("launch", task(tmp_path), "--env-file", "bad.env", cwd=tmp_path)
    fails_clearly(done, skyhive_home, "--env-file bad.env:2: expected KEY=VALUE")
    assert "hunter2" not in done.stderr


# ---- --dryrun and -y ------------------------------------------------------------------------------------


def test_dryrun_on_local_prints_the_plan_and_starts_nothing(tmp_path, skyhive_home):
    marker = tmp_path / "ran"
    done = skyhive("launch", task(tmp_path, f"touch {marker}"), "--num-nodes", "3", "--dryrun", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "task: t.yaml on 3 nodes of provider local" in done.stdout
    assert "machines: this machine (nothing is created; no cloud cost)" in done.stdout
    assert done.stdout.rstrip().endswith("dry run: nothing was created")
    assert not marker.exists() and pool_logs(skyhive_home) == []


def _launch_on_a_terminal(args: list[str], cwd: Path, answer: bytes | None) -> tuple[int, str]:
    """Run `skyhive launch` with a pseudo-terminal as stdin (what a person at a shell has)."""
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen([*SKYHIVE, "launch", *args], cwd=cwd, stdin=terminal, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        if answer is not None:
            os.write(controller, answer)
        out, err = proc.communicate(timeout=180)
        return proc.returncode, out + err
    finally:
        os.close(controller)
        os.close(terminal)


def test_an_interactive_launch_asks_first_and_yes_skips_the_question(tmp_path, skyhive_home):
    marker = tmp_path / "ran"
    name = task(tmp_path, f"touch {marker}")
    code, text = _launch_on_a_terminal([name], tmp_path, b"n\n")
    assert code == 1 and "Proceed? [Y/n]" in text and "aborted: nothing was created" in text
    assert not marker.exists() and pool_logs(skyhive_home) == []
    code, text = _launch_on_a_terminal([name], tmp_path, b"\x04")  # Ctrl-D (end of input) is no, not the default
    assert code == 1 and "aborted: nothing was created" in text and not marker.exists()
    code, text = _launch_on_a_terminal([name, "-y"], tmp_path, None)  # nobody answers: -y must not ask
    assert code == 0, text
    assert "Proceed?" not in text and marker.exists()
    marker.unlink()
    code, text = _launch_on_a_terminal([name], tmp_path, b"\n")  # Enter takes the default: yes
    assert code == 0 and "Proceed? [Y/n]" in text and marker.exists()


# ---- the cloud: what is chosen, what it costs, and nothing created -----------------------------------------


@pytest.mark.loopback_only
def test_dryrun_on_aws_shows_machine_and_hourly_cost_and_creates_nothing(moto_ec2, tmp_path, capsys,
                                                                         skyhive_home, monkeypatch):
    from tests.infra.moto_ec2 import ec2_client

    monkeypatch.chdir(tmp_path)
    write(tmp_path / "t.yaml", "num_nodes: 2\nresources:\n  cloud: aws\n  accelerators: L4:4\nrun: nvidia-smi\n")
    client = ec2_client()
    groups_before = len(client.describe_security_groups()["SecurityGroups"])
    assert main(["launch", "t.yaml", "--dryrun"]) == 0
    out = capsys.readouterr().out
    assert "machines: 2 x g6.12xlarge in us-east-1 (48 vCPU, 192 GB, 4x L4)" in out
    assert "hourly cost: $10.12/h for the pool" in out
    # each resource flag takes effect in the plan
    assert main(["launch", "t.yaml", "--dryrun", "--gpus", "A100:8", "--use-spot", "--region", "us-west-2"]) == 0
    out = capsys.readouterr().out
    assert "p4d.24xlarge in us-west-2" in out and "/h spot" in out and "(spot prices)" in out  # priced as shown
    assert main(["launch", "t.yaml", "--dryrun", "--gpus", "none", "--cpus", "8", "--memory", "32"]) == 0
    assert "(8 vCPU, 32 GB)" in capsys.readouterr().out  # exactly 8 and 32, as SkyPilot means it
    assert main(["launch", "t.yaml", "--dryrun", "--gpus", "none", "--cpus", "8+", "--memory", "64+"]) == 0
    out = capsys.readouterr().out
    assert "(8 vCPU, 64 GB)" in out or "(16 vCPU, 64 GB)" in out
    assert main(["launch", "t.yaml", "--dryrun", "-t", "m5.large", "--gpus", "none", "--zone", "us-east-1b",
                 "--disk-size", "512", "--image-id", moto_ec2.image]) == 0
    out = capsys.readouterr().out
    assert "machines: 2 x m5.large in us-east-1" in out
    assert f"aws options: zone us-east-1b, instance_type m5.large, disk_size 512, image_id {moto_ec2.image}" in out
    # and a request nothing satisfies is an error before anything exists
    assert main(["launch", "t.yaml", "--dryrun", "--gpus", "A100:3"]) == 1
    assert "no instance type in us-east-1 has accelerator A100:3" in capsys.readouterr().err
    assert main(["launch", "t.yaml", "--dryrun", "--region", "mars-1"]) == 1
    assert "unknown region 'mars-1'" in capsys.readouterr().err
    assert main(["launch", "t.yaml", "--dryrun", "--disk-size", "4"]) == 1
    assert "disk_gb must be at least 8" in capsys.readouterr().err
    reservations = client.describe_instances()["Reservations"]
    assert [i for r in reservations for i in r["Instances"]] == []
    assert len(client.describe_security_groups()["SecurityGroups"]) == groups_before
    assert client.describe_key_pairs()["KeyPairs"] == []
    assert pool_logs(skyhive_home) == []


def test_show_gpus_lists_the_catalogue_and_filters(capsys):
    assert main(["show-gpus", "A100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["GPU", "QTY", "CLOUD", "INSTANCE_TYPE", "vCPUs", "MEMORY", "$/h", "REGION"]
    assert ["A100", "8", "aws", "p4d.24xlarge", "96", "1152GB"] in [line.split()[:6] for line in lines[1:]]
    assert ["A100", "1", "gcp", "a2-highgpu-1g", "12", "85GB"] in [line.split()[:6] for line in lines[1:]]
    assert all(line.split()[0] == "A100" for line in lines[1:])
    assert main(["show-gpus", "L4:4"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows and all(r[:2] == ["L4", "4"] for r in rows)
    assert main(["show-gpus"]) == 0
    models = {line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]}
    assert {"A100", "H100", "L4", "T4"} <= models
    assert main(["show-gpus", "L4", "--all-regions"]) == 0
    regions = {line.split()[-1] for line in capsys.readouterr().out.splitlines()[1:]}
    assert len(regions) > 3
    assert main(["show-gpus", "NOPE9000"]) == 1
    assert "no accelerator matches 'NOPE9000'" in capsys.readouterr().out
    assert main(["show-gpus", "L4:x"]) == 2
    assert "show-gpus L4:x: expected NAME or NAME:COUNT" in capsys.readouterr().err
    assert main(["show-gpus", "--cloud", "mainframe"]) == 2
    assert "no machine table for it" in capsys.readouterr().err


# ---- SKYPILOT_* variables ------------------------------------------------------------------------------


def test_skypilot_variables_and_their_skyhive_twins_on_a_two_node_local_pool(tmp_path, skyhive_home):
    dump = "python -c 'import json,os; print(json.dumps({k: v for k, v in os.environ.items() " \
           "if k.startswith((\"SKYPILOT_\", \"SKYHIVE_\"))}))'"
    write(tmp_path / "t.yaml", f"""\
        name: envs
        num_nodes: 2
        setup: |
          echo "SETUP $({dump})"
        run: |
          echo "RUN $({dump})"
        """)
    done = skyhive("launch", "t.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    nodes = by_node(done.stdout)
    (setup_line,) = [ln for ln in nodes[0] if ln.startswith("SETUP ")]
    (setup_line_1,) = [ln for ln in nodes[1] if ln.startswith("SETUP ")]  # each Local node its own home: setup on both
    setup = json.loads(setup_line[6:])
    assert json.loads(setup_line_1[6:])["SKYPILOT_SETUP_NODE_RANK"] == "1"
    runs = {n: json.loads(next(ln for ln in lines if ln.startswith("RUN "))[4:]) for n, lines in nodes.items()}
    (log,) = pool_logs(skyhive_home)
    pool_id = log.stem
    info = {"cluster_name": pool_id, "cloud": "local", "region": None, "zone": None}
    for prefix in ("SKYPILOT", "SKYHIVE"):  # every variable under both names
        assert setup[f"{prefix}_SETUP_NODE_RANK"] == "0"
        assert setup[f"{prefix}_SETUP_NODE_IPS"] == "127.0.0.1\n127.0.0.1"
        assert setup[f"{prefix}_NUM_NODES"] == "2"
        assert json.loads(setup[f"{prefix}_CLUSTER_INFO"]) == info
        for n, env in runs.items():
            assert env[f"{prefix}_NODE_RANK"] == str(n)
            assert env[f"{prefix}_NODE_IPS"] == "127.0.0.1\n127.0.0.1"
            assert env[f"{prefix}_NUM_NODES"] == "2"
            assert env[f"{prefix}_NUM_GPUS_PER_NODE"] == "0"
            assert json.loads(env[f"{prefix}_CLUSTER_INFO"]) == info
            assert env[f"{prefix}_TASK_ID"] == setup[f"{prefix}_TASK_ID"] == runs[0][f"{prefix}_TASK_ID"]
            assert pool_id in env[f"{prefix}_TASK_ID"]
    assert {e.kind for e in read_log(log)} >= {"pool_started", "pool_stopped"}


# ---- --workdir, and the named-pool flags: -c, -d/--detach-run, -i, --down, --dryrun with -c ------------


def test_workdir_flag_ships_its_directory_over_the_files_and_a_missing_one_is_a_clear_error(tmp_path, skyhive_home):
    for name, text in (("code", "from-flag"), ("other", "from-file")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "data.txt").write_text(text)
    write(tmp_path / "w.yaml", "workdir: other\nnum_nodes: 2\nrun: cat data.txt; echo\n")
    done = skyhive("launch", "w.yaml", "--workdir", "code", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert by_node(done.stdout) == {0: ["from-flag"], 1: ["from-flag"]}  # the flag wins over the file
    before = pool_logs(skyhive_home)
    missing = skyhive("launch", "w.yaml", "--workdir", "nosuch", cwd=tmp_path)
    assert missing.returncode == 2 and "--workdir: 'nosuch' is not a directory" in missing.stderr
    assert pool_logs(skyhive_home) == before  # nothing was started


@pytest.mark.parametrize("args, message", [
    (["-d"], "-d, -i and --down apply to a named pool: add -c NAME"),
    (["--detach-run"], "-d, -i and --down apply to a named pool: add -c NAME"),
    (["-i", "5"], "-d, -i and --down apply to a named pool: add -c NAME"),
    (["--down"], "-d, -i and --down apply to a named pool: add -c NAME"),
    (["-c", "p", "-i", "0"], "-i/--idle-minutes-to-autostop: 0: autostop needs a positive, finite number of"),
    (["-c", "p", "-i=-3"], "-i/--idle-minutes-to-autostop: -3: autostop needs a positive, finite number of"),
    (["-c", "p", "-i", "nan"], "-i/--idle-minutes-to-autostop: nan: autostop needs a positive, finite number"),
    (["-c", "p", "-i", "inf"], "-i/--idle-minutes-to-autostop: inf: autostop needs a positive, finite number"),
    (["-c", "p", "-i", "soon"], "argument -i/--idle-minutes-to-autostop: 'soon' is not a number of minutes"),
    (["-c", "bad/name"], "'bad/name' cannot name a pool"),
    (["-c", ""], "'' cannot name a pool: use a letter"),  # not an unnamed pool instead (issue 36, point 12)
    (["-c"], "the following arguments are required: TASK.yaml"),  # -c took the file as the name
    (["--dryrun=1"], "--dryrun: ignored explicit argument '1'"),
    (["--down=yes", "-c", "p"], "--down: ignored explicit argument 'yes'"),
])
def test_a_bad_named_pool_flag_is_a_clear_error_that_starts_nothing(tmp_path, skyhive_home, args, message):
    done = skyhive("launch", "-y", *args, task(tmp_path), cwd=tmp_path)
    assert done.returncode != 0 and message in done.stderr, (done.returncode, done.stderr)
    assert pool_logs(skyhive_home) == [] and not (Path(skyhive_home) / "clusters" / "p" / "record.json").exists()


def test_dryrun_with_c_plans_and_creates_no_named_pool(tmp_path, skyhive_home):
    marker = tmp_path / "ran"
    done = skyhive("launch", "-c", "planned", "--dryrun", task(tmp_path, f"touch {marker}"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("dry run: nothing was created")
    assert not marker.exists() and pool_logs(skyhive_home) == []
    assert skyhive("status", cwd=tmp_path).stdout.startswith("no named pools")


WAITS = """\
    name: waits
    run: |
      while [ ! -e {go} ]; do sleep 0.05; done
      echo "went on"
    """


def test_detach_run_returns_once_queued_and_exec_refuses_what_local_cannot_honour(tmp_path, clean):
    go = tmp_path / "go"
    waits = write(tmp_path / "waits.yaml", WAITS.format(go=go))
    # --detach-run (the long form of -d): the command returns although the job cannot end before `go` exists
    done = skyhive("launch", "-y", "-c", "flags", "--detach-run", str(waits), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "job 1 (waits) queued on pool flags" in done.stderr and "went on" not in done.stdout
    assert skyhive("queue", "flags", cwd=tmp_path).stdout.splitlines()[1].split()[2] in ("PENDING", "RUNNING")
    go.touch()
    followed = skyhive("logs", "flags", "1", "--follow", cwd=tmp_path)
    assert followed.returncode == 0 and "went on" in followed.stdout
    # a cloud-only option on exec is refused by name, and no job is queued (it was silently ignored)
    plain = task(tmp_path)
    for args, message in ((["--use-spot"], "resources.use_spot (--use-spot): the local provider cannot honour it"),
                          (["--region", "us-east-1"], "resources.region (--region us-east-1): the local provider"),
                          (["-t", "m5.large"], "resources.instance_type (--instance-type m5.large): the local"),
                          (["--image-id", "ami-1"], "resources.image_id (--image-id ami-1): the local provider"),
                          (["--zone", "z1"], "resources.zone (--zone z1): the local provider"),
                          (["--disk-size", "100"], "resources.disk_size (--disk-size 100): the local provider")):
        refused = skyhive("exec", "flags", *args, plain, cwd=tmp_path)
        assert refused.returncode == 2 and message in refused.stderr, (args, refused.stderr)
    assert len(skyhive("queue", "flags", cwd=tmp_path).stdout.splitlines()) == 2  # header + job 1
    # a node requirement on exec is checked on the pool's nodes before run
    short = skyhive("exec", "flags", "--cpus", f"{(os.cpu_count() or 1) * 64}+", plain, cwd=tmp_path)
    assert short.returncode != 0 and "resources.cpus" in short.stdout and "ran on" not in short.stdout


# ---- the task file's `resources` fields: the side tests/cloud/test_cloud_catalog.py and test_cli_taskfile.py leave -----


def test_resource_fields_from_the_task_file_take_effect_or_are_refused(tmp_path):
    from skyhive.errors import ProvisionError
    from skyhive.runtime.commands.plan import plan_launch
    from skyhive.runtime.commands.taskfile import TaskFileError, loads

    def plan(resources: str):
        return plan_launch(loads(f"resources: {{{resources}}}\nrun: echo\n", cwd=str(tmp_path)))

    spot = plan("cloud: aws, use_spot: true, accelerators: L4:1")  # use_spot from the file, as --use-spot
    assert spot.plan["spot"] is True and any("(spot prices)" in line for line in spot.lines)
    assert plan("cloud: aws, use_spot: false, accelerators: L4:1").plan["spot"] is False
    with pytest.raises(ProvisionError, match="unknown region 'mars-1'"):
        plan("cloud: aws, region: mars-1")
    with pytest.raises(TaskFileError, match=r"resources.image_id: expected a name, got 7"):
        plan("cloud: aws, image_id: 7")
    for field, value, flag in (("image_id", "ami-1", "--image-id ami-1"), ("disk_size", "100", "--disk-size 100"),
                               ("instance_type", "m5.large", "--instance-type m5.large"),
                               ("region", "us-east-1", "--region us-east-1")):
        with pytest.raises(TaskFileError, match=rf"resources.{field} \({flag}\): the local provider has no such option"):
            plan(f"cloud: local, {field}: {value}")
    # the "disk" is SkyPilot's disk_size: the short key is a warning that names it, never a silent ignore
    task = loads("resources:\n  disk: 100\nrun: echo\n", cwd=str(tmp_path))
    assert task.warnings == ("<task>:2: unknown key resources.disk (did you mean resources.disk_size?); ignored",)
