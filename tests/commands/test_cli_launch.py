"""`skyhive launch TASK.yaml` on the Local provider, run as the real command in a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from skyhive.runtime.events.log import read_log
from skyhive.runtime.events.state import fold
from tests.procs import Lines, wait_gone

SKYHIVE = [sys.executable, "-m", "skyhive"]


def skyhive(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SKYHIVE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def by_node(stdout: str) -> dict[int, list[str]]:
    """The `[node N] text` lines of launch's output, per node."""
    out: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        if line.startswith("[node "):
            label, _, text = line.partition("] ")
            out.setdefault(int(label[6:]), []).append(text)
    return out


def pool_logs(home: str) -> list[Path]:
    return sorted((Path(home) / "pools").glob("*.jsonl"))


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def test_env_vars_workdir_setup_on_every_node_and_overrides(tmp_path, skyhive_home):
    (tmp_path / "code" / "data").mkdir(parents=True)
    (tmp_path / "code" / "data" / "input.txt").write_text("payload-42\n")
    marks = tmp_path / "marks"
    marks.mkdir()
    write(tmp_path / "task.yaml", """\
        name: envcheck
        num_nodes: 1
        workdir: code
        envs:
          MARKS: set-on-the-command-line
          GREETING: from-file
        secrets:
          TOKEN: hunter2-in-the-file
        experimental: {}
        setup: |
          echo "setup $SKYHIVE_NODE_RANK" >> "$MARKS/setup.log"
        run: |
          echo "GREETING=$GREETING"
          for v in NODE_RANK NUM_NODES NUM_GPUS_PER_NODE TASK_ID; do
            echo "$v $(printenv SKYHIVE_$v) $(printenv SKYPILOT_$v)"
          done
          echo "IPS $(echo "$SKYHIVE_NODE_IPS" | paste -sd,) $(echo "$SKYPILOT_NODE_IPS" | paste -sd,)"
          echo "PWD $(pwd)"
          echo "DATA $(cat data/input.txt)"
          echo "TOKEN $TOKEN"
        """)
    done = skyhive("launch", "task.yaml", "--nodes", "2", "--env", f"MARKS={marks}", "--env", "GREETING=from-cli",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "task.yaml:9: experimental is not supported by skyhive yet; ignored" in done.stderr  # a warning
    nodes = by_node(done.stdout)
    assert sorted(nodes) == [0, 1]
    values = {n: dict(line.split(" ", 1) for line in lines if " " in line) for n, lines in nodes.items()}
    task_ids = set()
    for n in (0, 1):
        v = values[n]
        assert "GREETING=from-cli" in nodes[n]
        assert v["NODE_RANK"] == f"{n} {n}"
        assert v["NUM_NODES"] == "2 2"
        assert v["NUM_GPUS_PER_NODE"] == "0 0"
        assert v["IPS"] == "127.0.0.1,127.0.0.1 127.0.0.1,127.0.0.1"  # one per line, head first
        skyhive_id, skypilot_id = v["TASK_ID"].split()
        assert skyhive_id == skypilot_id
        task_ids.add(skyhive_id)
        assert v["DATA"] == "payload-42"  # the workdir reached every node
        assert v["TOKEN"] == "***"  # secrets reach the command, but not the output or the log
    assert len(task_ids) == 1
    dirs = {values[n]["PWD"] for n in (0, 1)}
    # each Local node has a home of its own with the workdir at ~/sky_workdir (a copy, not the original)
    assert len(dirs) == 2 and str(tmp_path / "code") not in dirs and all(d.endswith("/sky_workdir") for d in dirs)
    assert not any(Path(d).exists() for d in dirs)  # removed with the pool
    # as on separate machines, setup runs on every node
    assert sorted((marks / "setup.log").read_text().splitlines()) == ["setup 0", "setup 1"]
    (log,) = pool_logs(skyhive_home)
    assert "hunter2" not in log.read_text()


def test_run_failing_on_node_1_only_stops_the_others_and_says_node_1(tmp_path, skyhive_home):
    write(tmp_path / "fail.yaml", """\
        num_nodes: 2
        run: |
          if [ "$SKYHIVE_NODE_RANK" = "1" ]; then echo "node 1 gives up" >&2; exit 7; fi
          echo "node 0 keeps going"
          exec sleep 600
        """)
    done = skyhive("launch", "fail.yaml", cwd=tmp_path, timeout=120)  # node 0 would sleep 600 s if not stopped
    assert done.returncode == 100  # SkyPilot's exit code for a failed job; the node's own is in the message
    assert "run failed on node 1: exit code 7" in done.stderr
    assert "[node 1] node 1 gives up" in done.stderr
    (log,) = pool_logs(skyhive_home)
    outcomes = {(e.node, e.outcome) for e in read_log(log) if e.kind == "task_finished"}
    assert (0, "cancelled") in outcomes and (1, "ok") in outcomes


def test_sigint_stops_every_node_command_and_tears_down(tmp_path, skyhive_home):
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    write(tmp_path / "forever.yaml", """\
        num_nodes: 2
        run: |
          sleep 600 &
          echo "$! $$" > "$PIDS/node-$SKYHIVE_NODE_RANK"
          echo started
          wait
        """)
    proc = subprocess.Popen([*SKYHIVE, "launch", "forever.yaml", "--env", f"PIDS={pids_dir}"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    try:
        started: set[str] = set()
        out.wait_for(lambda line: started.add(line.strip()) or started >= {"[node 0] started", "[node 1] started"},
                     120, "the task started on both nodes")
        script_pids = {int(p) for f in pids_dir.iterdir() for p in f.read_text().split()}
        assert len(script_pids) == 4  # bash and its sleep, on each node
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        stderr = err.rest(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130, stderr
    assert "SIGINT: stopping every node's command and tearing down" in stderr
    (log,) = pool_logs(skyhive_home)
    events = list(read_log(log))
    state = fold(events)
    assert state.status == "stopped" and [n.state for n in state.nodes] == ["terminated", "terminated"]
    worker_pids = {e.pid for e in events if e.kind == "worker_state" and e.pid}
    assert len(worker_pids) == 2
    assert wait_gone(script_pids | worker_pids, timeout=10) == set()
    assert not (Path(skyhive_home) / "work" / state.pool_id).exists()


def test_pool_started_event_of_a_launch_names_its_provider(tmp_path, skyhive_home):
    write(tmp_path / "one.yaml", "run: echo hi\n")
    done = skyhive("launch", "one.yaml", "--provider", "local", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert by_node(done.stdout) == {0: ["hi"]}
    (log,) = pool_logs(skyhive_home)
    first = next(iter(read_log(log)))
    assert first.kind == "pool_started" and first.provider_config == {"provider": "local"}
    assert os.path.basename(log).startswith("launch-")


def test_a_failing_setup_skips_run(tmp_path, skyhive_home):
    write(tmp_path / "setup.yaml", """\
        num_nodes: 2
        setup: |
          if [ "$SKYHIVE_NODE_RANK" = "0" ]; then exit 4; fi
        run: echo "run should not start"
        """)
    done = skyhive("launch", "setup.yaml", cwd=tmp_path)
    assert done.returncode == 100
    assert "setup failed on node 0: exit code 4" in done.stderr
    assert "run should not start" not in done.stdout
